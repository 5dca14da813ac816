// Dispatch modes: the C++ form of PyTorch's TorchDispatchMode and
// torch.library.register_torch_dispatch.
//
//   struct MyMode : strata::modes::DispatchMode {
//     Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) override {
//       return strata::modes::call(op, std::move(args));  // the layer below
//     }
//   };
//   {
//     strata::modes::ModeGuard guard(std::make_shared<MyMode>());  // `with MyMode():`
//     strata::ops::add(x, y);  // reaches MyMode::dispatch
//   }
//
//   struct Counter : strata::modes::BoxedDispatchMode {  // in place: for hot paths
//     void dispatch_boxed(const OperatorHandle& op, Stack& stack) override {
//       ++calls;
//       op.callBoxed(stack);  // the layer below; its results replace the arguments
//     }
//     uint64_t calls = 0;
//   };
//
//   auto rule = strata::modes::register_torch_dispatch<MyMode>("mylib::foo",
//       [](MyMode& mode, const OperatorHandle& op, const TensorTypes& types, Stack args) -> Stack { ... });
//
// Note [The mode stack]
// ~~~~~~~~~~~~~~~~~~~~~
// Each thread has a stack of modes. The Mode key is in the thread's TLS included set
// exactly while its stack is non-empty: pushing the first mode adds it, popping the
// last removes it. So an op called with no mode active never reaches the Mode key and
// pays nothing for the layer (Note [Computing the key set of a call]).
//
// What runs at the Mode key is one boxed fallback for every operator (owner
// "builtin", registered by modes::initialize(), which any use of the stack calls), so
// operators need nothing registered to work under modes. The fallback
//   1. takes the top mode off the stack (PyTorch's _pop_mode_temporarily),
//   2. looks up the operator's torch_dispatch rule for the mode's exact type (Note
//      [Operator rules]); runs it if there is one, else the mode's dispatch() (or,
//      for a BoxedDispatchMode, its dispatch_boxed() on the fallback's own stack),
//   3. puts the mode back on top when the handler returns or throws.
// While a handler runs, the keys above Mode (autograd, autocast, vmap) are in the
// TLS excluded set, as in PyTorch where __torch_dispatch__ runs below autograd. So a
// handler that calls the op again (modes::call) reaches the next mode down, then the
// kernels below the Mode key, never the layers above again. A mode pushed from inside
// a handler sits on top of the remaining stack for the handler's duration.
//
// The fallback checks what a handler returns against the op's schema (the number of
// results) and fails with the mode's and the op's names when it does not fit.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "strata/device.h"
#include "strata/dispatcher.h"
#include "strata/ivalue.h"
#include "strata/library.h"
#include "strata/modes/export.h"
#include "strata/scalar_type.h"

namespace strata::modes {

// The "types" a handler receives (PyTorch passes the tensor subclasses of the
// arguments): the distinct (device type, dtype, requires_grad) of the tensor
// arguments, in order of first appearance, and the union of their dispatch keys.
// Holds at most kMax distinct entries (then `truncated`); never allocates.
// An aggregate: {device, dtype, requires_grad}.
struct STRATA_MODES_API TensorType {
  DeviceType device;
  ScalarType dtype;
  bool requires_grad;
  bool operator==(const TensorType&) const = default;
  std::string str() const;  // "cpu:float32", "cuda:float16:requires_grad"
};

class STRATA_MODES_API TensorTypes {
 public:
  static constexpr size_t kMax = 8;
  TensorTypes() = default;
  // The types of the Tensor, Tensor? and Tensor[] values on a stack.
  static TensorTypes of(const Stack& args);

  DispatchKeySet keys() const { return keys_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const TensorType& operator[](size_t i) const { return types_[i]; }
  const TensorType* begin() const { return types_.data(); }
  const TensorType* end() const { return types_.data() + n_; }
  bool truncated() const { return truncated_; }
  std::string str() const;  // "(cpu:float32, cpu:int64)"

  void add(const Tensor& t);

 private:
  std::array<TensorType, kMax> types_;  // [0, n_) are set; the rest is never read
  uint8_t n_ = 0;
  bool truncated_ = false;
  DispatchKeySet keys_;
};

// A dispatch mode: every op called while it is the top of this thread's mode stack
// reaches dispatch() (unless the op has a torch_dispatch rule for the mode's type).
class STRATA_MODES_API DispatchMode {
 public:
  DispatchMode() = default;
  DispatchMode(const DispatchMode&) = delete;
  DispatchMode& operator=(const DispatchMode&) = delete;
  virtual ~DispatchMode();

  // PyTorch's __torch_dispatch__(func, types, args): runs `op` on the boxed arguments
  // (checked against its schema, defaults filled in) and returns its results, one
  // value per schema return. This mode is off the stack while it runs: see Note [The
  // mode stack]. call(op, args) runs the op below.
  virtual Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) = 0;

  // For messages, dumps and the CLI; the demangled type name unless overridden.
  virtual std::string name() const;
  // What the mode found, for people (`strata call --mode` prints it); "" for nothing.
  virtual std::string summary() const { return {}; }
};

// A mode that works on the fallback's stack in place: the C++ form for modes on a hot
// path, which need neither the argument types nor a Stack of their own (a pass-through,
// a counter, a timer). dispatch_boxed gets the checked arguments, defaults filled in,
// on `stack` and leaves the op's results there; op.callBoxed(stack) runs the layer
// below in place. Everything else is as for DispatchMode (Note [The mode stack]): the mode
// is off the stack while it runs, a torch_dispatch rule for its type runs instead of
// it, and its results are checked against the schema. It skips what the by-value form
// costs per call: the TensorTypes of the arguments and two moves of the Stack.
// Mind the one trap of working in place: a handler that returns without touching the
// stack leaves the arguments as the results, which the check accepts where their
// types fit (foo(Tensor x) -> Tensor then returns x); the by-value form would have
// returned nothing and failed.
class STRATA_MODES_API BoxedDispatchMode : public DispatchMode {
 public:
  virtual void dispatch_boxed(const OperatorHandle& op, Stack& stack) = 0;
  // The by-value form, for callers that hold a DispatchMode&: runs dispatch_boxed.
  // The fallback never calls it for this class: override dispatch_boxed, not this.
  Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) override;
};

// Runs op on args through the dispatcher (what a handler calls for "the layer
// below") and returns its results.
STRATA_MODES_API Stack call(const OperatorHandle& op, Stack args);

// --- The mode stack of this thread. ---
STRATA_MODES_API void push_mode(std::shared_ptr<DispatchMode> mode);
// Removes and returns the top mode. Error(Value) when the stack is empty.
STRATA_MODES_API std::shared_ptr<DispatchMode> pop_mode();
STRATA_MODES_API size_t mode_stack_size();
// Bottom first.
STRATA_MODES_API std::vector<std::shared_ptr<DispatchMode>> mode_stack();
// The top mode, or null.
STRATA_MODES_API std::shared_ptr<DispatchMode> current_mode();

// Pushes a mode for a scope: the C++ form of `with MyMode():`. The destructor pops
// it; it must still be on top then (scopes nest), else the stack is left alone and
// the mismatch is reported to stderr.
class STRATA_MODES_API ModeGuard {
 public:
  explicit ModeGuard(std::shared_ptr<DispatchMode> mode);
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;
  ~ModeGuard();
  DispatchMode& mode() const { return *mode_; }
  template <typename M>
  M& as() const {
    return static_cast<M&>(*mode_);
  }

 private:
  std::shared_ptr<DispatchMode> mode_;
};

// Registers the Mode-key fallback, the built-in mode types, the core:: ops' autocast
// rules (autocast.h), the vmap fallback and the core:: ops' batching rules (vmap.h),
// once per process.
// Every function here calls it; a host calls it at startup so `dump` shows the
// fallback before any mode is pushed.
STRATA_MODES_API void initialize();

// --- register_torch_dispatch: see Note [Operator rules] and Note [The mode stack]. ---

// The type-erased rule, as stored. ModeT is checked by the lookup (exact type).
using TorchDispatchRule = std::function<Stack(DispatchMode& mode, const OperatorHandle& op, const TensorTypes& types,
                                              Stack args)>;

namespace detail {
STRATA_MODES_API RegistrationHandleRAII registerTorchDispatch(std::string_view op, const std::type_info& mode_type,
                                                              TorchDispatchRule rule, std::source_location where);
}  // namespace detail

// Gives `op` ("ns::name" or "ns::name.overload") a rule under ModeT: while a ModeT
// (exactly that type, not a subclass) is the mode handling a call of op, fn runs
// instead of ModeT::dispatch. fn: Stack(ModeT&, const OperatorHandle&, const
// TensorTypes&, Stack args). A second rule for the same (op, ModeT) is Error(Value);
// an unknown op is Error(NotImplemented). The rule is owned (RegistrationOwnerGuard)
// and lasts as long as the returned handle, or as lib when one is given.
template <typename ModeT, typename F>
RegistrationHandleRAII register_torch_dispatch(std::string_view op, F&& fn,
                                               std::source_location where = std::source_location::current()) {
  static_assert(std::is_base_of_v<DispatchMode, ModeT>, "register_torch_dispatch: ModeT must derive from DispatchMode");
  static_assert(std::is_invocable_r_v<Stack, F&, ModeT&, const OperatorHandle&, const TensorTypes&, Stack>,
                "register_torch_dispatch: fn must be Stack(ModeT&, const OperatorHandle&, const TensorTypes&, Stack)");
  return detail::registerTorchDispatch(
      op, typeid(ModeT),
      [f = std::forward<F>(fn)](DispatchMode& mode, const OperatorHandle& h, const TensorTypes& types,
                                Stack args) mutable -> Stack { return f(static_cast<ModeT&>(mode), h, types, std::move(args)); },
      where);
}
template <typename ModeT, typename F>
void register_torch_dispatch(std::string_view op, F&& fn, Library& lib,
                             std::source_location where = std::source_location::current()) {
  lib.keep(register_torch_dispatch<ModeT>(op, std::forward<F>(fn), where));
}

// --- Named mode types: what a bundle brings and `strata call --mode NAME` pushes. ---
using ModeFactory = std::function<std::shared_ptr<DispatchMode>()>;

struct ModeTypeInfo {
  std::string name;
  std::string description;
  std::string owner;
  std::string debug;
};

// Registers a mode type under `name` ([A-Za-z0-9_.-]+). A name already taken is
// Error(Value) naming both registrations. Lasts as long as the handle (or lib).
STRATA_MODES_API RegistrationHandleRAII register_mode_type(std::string name, std::string description, ModeFactory factory,
                                                           std::source_location where = std::source_location::current());
STRATA_MODES_API void register_mode_type(std::string name, std::string description, ModeFactory factory, Library& lib,
                                         std::source_location where = std::source_location::current());
// A new mode of the named type. Error(Value) listing the known names when unknown.
STRATA_MODES_API std::shared_ptr<DispatchMode> make_mode(std::string_view name);
// Every registered mode type, by name.
STRATA_MODES_API std::vector<ModeTypeInfo> mode_types();

// --- Pass-through mode: calls the op below and returns (the unit of the benchmark's
// mode stacks). ---
class STRATA_MODES_API PassthroughMode final : public BoxedDispatchMode {
 public:
  void dispatch_boxed(const OperatorHandle& op, Stack& stack) override;
  // Kept as its own exported symbol: bundles built for SDK ABI 3.3 call it directly
  // (the class is final), and must still load.
  Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) override;
  std::string name() const override { return "passthrough"; }
  uint64_t calls() const { return calls_; }

 private:
  uint64_t calls_ = 0;
};

}  // namespace strata::modes
