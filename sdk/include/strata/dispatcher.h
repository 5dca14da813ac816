// The dispatcher: operators by name, their dispatch tables, and the calls through them.
//
//   auto op = Dispatcher::singleton().findSchemaOrThrow("mylib::muladd", "");
//   Tensor r = op.typed<Tensor(const Tensor&, const Tensor&, double)>().call(a, b, 2.0);
//   Stack s{a, b, 2.0};  op.callBoxed(s);  // s == {r}
//
// Registration is done through Library (library.h); this header is the calling side,
// the introspection (dump, explain, trace) and the kernel toggles.
//
// Note [Computing the key set of a call]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The keys of a call are
//     ((union of the key sets of its Tensor, Tensor? and Tensor[] arguments)
//       | TLS included) - TLS excluded) & the operator's non-fallthrough keys
// and the kernel that runs is the table slot of the highest key in that set (Note
// [Dispatch key order]). Masking with the non-fallthrough keys is what makes a
// fallthrough cost nothing: a key whose slot is a fallthrough is never chosen. An
// empty set (an op with no tensor arguments and nothing included) selects slot 0,
// which holds the op's composite kernel, if any.
//
// Note [Redispatch masks]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A kernel receives the key set it was chosen from. To call the layer beneath it,
// it redispatches with the keys at and above its own removed:
//     op.redispatch(ks & keysBelow(DispatchKey::AutogradCPU), args...)
// A redispatch does not add the TLS sets again (the caller's set already holds
// them), but it is masked by the operator's non-fallthrough keys, so a kernel may
// redispatch a different operator than its own. A boxed fallback, which serves
// every key it is registered for, uses keysBelow(ks.highestPriorityKey()).
//
// Note [Operator rules]
// ~~~~~~~~~~~~~~~~~~~~~
// The layers above the backends keep per-operator rules that are not kernels: a
// torch_dispatch rule for one op under one mode type (register_torch_dispatch in
// modes/), later autocast and vmap rules. The dispatcher stores them for those
// layers so they are registrations like any other: each has an owner and a debug
// string, comes back as a RegistrationHandleRAII that removes it, shows in dump(), and
// goes with its bundle. A rule is keyed by (kind, target type); the target is a C++
// type, compared exactly (typeid equality, which holds across shared libraries), and
// the payload is the layer's own (type-erased) callable. A second rule for the same
// (op, kind, target) is refused. Lookups (OperatorHandle::findRule) take no lock: an
// op's rules are an immutable set behind an atomic pointer, replaced whole on every
// change, the old set retired like a kernel (Note [Publishing dispatch table slots]).
//
// Thread safety: calls take no lock and, for unboxed kernels, allocate nothing. Each
// table slot is an atomic pointer to an immutable kernel, republished whenever a
// registration, deregistration or toggle changes what the slot should hold. The
// mutators are serialized by one mutex. See Note [Publishing dispatch table slots]
// in dispatcher.cc for how kernels are kept alive.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "strata/call_section.h"
#include "strata/dispatch_key.h"
#include "strata/error.h"
#include "strata/export.h"
#include "strata/ivalue.h"
#include "strata/kernel_function.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/schema.h"
#include "strata/tag.h"

namespace strata {

class OperatorEntry;  // the dispatcher's record of one operator (internal)
struct Explanation;
template <typename Sig>
class TypedOperatorHandle;

namespace detail {

// The part of an operator the call path reads, lock-free. See Note [Computing the key
// set of a call].
struct OperatorCore {
  std::atomic<uint64_t> non_fallthrough{~uint64_t{0}};
  std::array<std::atomic<const KernelFunction*>, kNumRuntimeKeySlots> table{};

  const KernelFunction& lookup(DispatchKeySet ks) const {
    // Bit 0 is never a key: `| 1` maps the empty set to slot 0 without a branch.
    const unsigned index = 63u - static_cast<unsigned>(std::countl_zero(ks.raw() | 1u));
    return *table[index].load(std::memory_order_acquire);
  }
  DispatchKeySet mask() const { return DispatchKeySet::fromRaw(non_fallthrough.load(std::memory_order_relaxed)); }
  // Whether the operator has any rule (Note [Operator rules]): lets a layer that
  // looks one up on every call skip the lookup for the many ops that have none. Last,
  // so the fields above keep their offsets for bundles built before it.
  std::atomic<bool> has_rules{false};
};

// Non-zero while a dispatch trace or an explain() is observing calls (any thread).
extern STRATA_API std::atomic<int> g_dispatch_observers;

inline DispatchKeySet keysOf(const Tensor& t) {
  const TensorImpl* impl = t.unsafeGetTensorImpl();
  return impl != nullptr ? impl->key_set() : DispatchKeySet();
}
inline DispatchKeySet keysOf(const std::optional<Tensor>& t) { return t ? keysOf(*t) : DispatchKeySet(); }
inline DispatchKeySet keysOf(ArrayRef<Tensor> ts) {
  DispatchKeySet ks;
  for (const Tensor& t : ts) ks = ks | keysOf(t);
  return ks;
}
inline DispatchKeySet keysOf(const std::vector<Tensor>& ts) { return keysOf(ArrayRef<Tensor>(ts)); }
inline DispatchKeySet keysOf(const std::vector<std::optional<Tensor>>& ts) {
  DispatchKeySet ks;
  for (const auto& t : ts) ks = ks | keysOf(t);
  return ks;
}
template <typename T>
DispatchKeySet keysOf(const T&) {
  return {};
}
// Note [Dispatching on a Device argument]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An op with no tensor argument has nothing to dispatch on, unless it takes a Device
// (a factory: `bar(Device device) -> Tensor`): then, as PyTorch's BackendSelect does,
// the call dispatches on the backend key of that device (the given Device and
// Device? arguments; none given: the empty set, whose slot holds the composite
// kernel). Tensor arguments, when there are any, decide alone. Only signatures with
// a Device parameter compile the check.
inline DispatchKeySet deviceKeysOf(const Device& d) { return DispatchKeySet(backendKey(d.type)); }
inline DispatchKeySet deviceKeysOf(const std::optional<Device>& d) { return d ? deviceKeysOf(*d) : DispatchKeySet(); }
template <typename T>
DispatchKeySet deviceKeysOf(const T&) {
  return {};
}
template <typename T>
inline constexpr bool kIsDeviceParam =
    std::is_same_v<std::remove_cvref_t<T>, Device> || std::is_same_v<std::remove_cvref_t<T>, std::optional<Device>>;

template <typename T>
inline constexpr bool kIsTensorLikeParam =
    std::is_same_v<std::remove_cvref_t<T>, Tensor> || std::is_same_v<std::remove_cvref_t<T>, std::optional<Tensor>> ||
    std::is_same_v<std::remove_cvref_t<T>, std::vector<Tensor>> || std::is_same_v<std::remove_cvref_t<T>, ArrayRef<Tensor>> ||
    std::is_same_v<std::remove_cvref_t<T>, std::vector<std::optional<Tensor>>>;

template <typename... Args>
DispatchKeySet argumentKeys(const Args&... args) {
  DispatchKeySet ks = (DispatchKeySet() | ... | keysOf(args));
  // As the boxed path: only a signature with no tensor-like parameter at all.
  if constexpr ((kIsDeviceParam<Args> || ...) && !(kIsTensorLikeParam<Args> || ...)) {
    if (ks.empty()) ks = (DispatchKeySet() | ... | deviceKeysOf(args));
  }
  return ks;
}

inline DispatchKeySet computeCallKeys(DispatchKeySet arg_keys, DispatchKeySet mask) {
  const RawLocalDispatchKeySet& tls = tls_local_dispatch_key_set;
  return DispatchKeySet::fromRaw(((arg_keys.raw() | tls.included) & ~tls.excluded) & mask.raw());
}

// Trace/explain hooks, on the slow path only (g_dispatch_observers != 0).
STRATA_API void traceEnter(const OperatorHandle& op, DispatchKeySet ks, bool redispatch, bool boxed);
STRATA_API void traceExit();

struct TraceScope {
  TraceScope(const OperatorHandle& op, DispatchKeySet ks, bool redispatch, bool boxed) {
    traceEnter(op, ks, redispatch, boxed);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  ~TraceScope() { traceExit(); }
};

}  // namespace detail

// A handle to a registered operator. Cheap to copy; stays valid for the life of the
// process (an operator whose last registration is gone is "removed": its calls fail
// with an error naming it, and a later def() of the same name revives it).
class STRATA_API OperatorHandle {
 public:
  const OperatorName& operator_name() const;
  // "ns::name.overload".
  std::string name() const { return operator_name().str(); }
  bool hasSchema() const;
  // Throws Error(NotImplemented) when the operator has kernels but no def() yet.
  const FunctionSchema& schema() const;
  // The tags and alias analysis kind its def() gave (strata/tag.h); none and
  // FROM_SCHEMA for an operator with no def.
  TagSet tags() const;
  bool hasTag(Tag tag) const { return tags().has(tag); }
  AliasAnalysisKind aliasAnalysis() const;

  // Checks the arguments on the stack against the schema (filling defaults; see
  // Note [Boxed argument checks]), computes the key set and calls the kernel. On
  // return the stack holds the results.
  void callBoxed(Stack& stack) const;
  void callBoxed(Stack* stack) const { callBoxed(*stack); }
  // Calls the kernel for `ks` (masked by the non-fallthrough keys; TLS is not
  // consulted). The arguments are trusted: no checks. See Note [Redispatch masks].
  void redispatchBoxed(DispatchKeySet ks, Stack& stack) const;
  void redispatchBoxed(DispatchKeySet ks, Stack* stack) const { redispatchBoxed(ks, *stack); }

  // A typed handle for unboxed calls. Checks Sig against the schema (and against the
  // C++ signature of the unboxed kernels registered): Error(Schema) naming both.
  template <typename Sig>
  TypedOperatorHandle<Sig> typed() const;

  // The payload of the rule (kind, target) for this operator, or null. Lock-free; the
  // payload stays alive while this thread is inside a call or holds a CallScope
  // (Note [Grace periods]), also when the rule is removed meanwhile. See Note
  // [Operator rules].
  const void* findRule(std::string_view kind, const std::type_info& target) const;
  // False when the operator has no rule of any kind, so findRule would return null.
  // Inline and lock-free: for layers that look up a rule on every call.
  bool hasRules() const { return core_->has_rules.load(std::memory_order_acquire); }

  // What the table slot of runtime key k holds now: its source ("kernel", "default
  // kernel", "composite implicit kernel", "autograd kernel", "backend fallback",
  // "fallthrough", "missing"), the key the kernel was registered at, and the kernel
  // (null when missing; valid as findRule's payload is). Takes the
  // dispatcher's lock: for layers deciding how to run an op, not for the call path.
  struct SlotSource {
    const char* source = "missing";
    DispatchKey registered_at = DispatchKey::Undefined;
    const KernelFunction* kernel = nullptr;
  };
  SlotSource slotSource(DispatchKey k) const;

  // The operator's non-fallthrough keys.
  DispatchKeySet nonFallthroughKeys() const { return core_->mask(); }
  // The kernel a key set selects (the slot of its highest key after masking); valid
  // as findRule's payload is.
  const KernelFunction& lookup(DispatchKeySet ks) const { return core_->lookup(ks & core_->mask()); }

  bool operator==(const OperatorHandle& o) const { return entry_ == o.entry_; }

 protected:
  OperatorHandle(OperatorEntry* entry, detail::OperatorCore* core) : entry_(entry), core_(core) {}
  void checkTypedSignature(const CppSignature& sig, const FunctionSchema& inferred) const;

  OperatorEntry* entry_;
  detail::OperatorCore* core_;

  friend class Dispatcher;
  friend class OperatorEntry;
  friend class KernelHandle;
  friend STRATA_API Explanation explain(const OperatorHandle& op, Stack stack);
  friend STRATA_API Explanation explain(const OperatorHandle& op, Stack stack, std::exception_ptr* failure);
};

template <typename Return, typename... Args>
class TypedOperatorHandle<Return(Args...)> final : public OperatorHandle {
 public:
  // Dispatches on the arguments' keys and the TLS sets. See Note [Computing the key
  // set of a call]. No lock, no allocation (for an unboxed kernel).
  __attribute__((always_inline)) Return call(Args... args) const {
    const detail::CallSection section;  // Note [Grace periods]
    const DispatchKeySet ks = detail::computeCallKeys(detail::argumentKeys(args...), core_->mask());
    const KernelFunction& kernel = core_->lookup(ks);
    if constexpr (kWrites != 0) {
      // Signatures with no Tensor& pay nothing here: the branch is compiled out.
      return writingCall(kernel, ks, std::forward<Args>(args)...);
    } else {
      if (__builtin_expect(detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0, 0)) {
        return observedCall(kernel, ks, false, std::forward<Args>(args)...);
      }
      return kernel.template call<Return, Args...>(*this, ks, std::forward<Args>(args)...);
    }
  }
  // Calls the kernel for ks. See Note [Redispatch masks].
  __attribute__((always_inline)) Return redispatch(DispatchKeySet ks, Args... args) const {
    const detail::CallSection section;
    ks = ks & core_->mask();
    const KernelFunction& kernel = core_->lookup(ks);
    if (__builtin_expect(detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0, 0)) {
      return observedCall(kernel, ks, true, std::forward<Args>(args)...);
    }
    return kernel.template call<Return, Args...>(*this, ks, std::forward<Args>(args)...);
  }

 private:
  explicit TypedOperatorHandle(const OperatorHandle& op) : OperatorHandle(op) {}
  // The Tensor& arguments, infer_schema's reading of a written tensor (Tensor(a!)); the
  // call reads the schema for which of them it writes. A written tensor taken as
  // const Tensor& (or a Tensor(a!)? or Tensor(a!)[], which have no mutable C++ form)
  // is counted by callBoxed and the autograd layer, not here.
  static constexpr size_t kWrites = (size_t{std::is_same_v<Args, Tensor&>} + ... + 0);
  // A call of an op that may write an argument: Note [One write, one bump] in
  // sdk/src/dispatch/dispatcher.cc.
  __attribute__((noinline)) Return writingCall(const KernelFunction& kernel, DispatchKeySet ks, Args... args) const {
    const std::vector<Argument>& declared = schema().arguments();
    std::array<Tensor, kWrites> written;
    std::array<uint32_t, kWrites> before{};
    size_t i = 0, position = 0;
    (([&] {
       if constexpr (std::is_same_v<Args, Tensor&>) {
         if (position < declared.size() && declared[position].is_write() && args.defined() &&
             args.wrapper() == nullptr) {
           written[i] = args;
           before[i] = args._version();
         }
         ++i;
       }
       ++position;
     }()), ...);
    const auto bump = [&] {
      for (size_t k = 0; k < kWrites; ++k) {
        if (written[k].defined() && written[k]._version() == before[k]) written[k].storage()->bump_version();
      }
    };
    const bool observed = detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0;
    if constexpr (std::is_void_v<Return>) {
      if (observed) observedCall(kernel, ks, false, std::forward<Args>(args)...);
      else kernel.template call<Return, Args...>(*this, ks, std::forward<Args>(args)...);
      bump();
    } else {
      Return r = observed ? observedCall(kernel, ks, false, std::forward<Args>(args)...)
                          : kernel.template call<Return, Args...>(*this, ks, std::forward<Args>(args)...);
      bump();
      return r;
    }
  }
  __attribute__((noinline)) Return observedCall(const KernelFunction& kernel, DispatchKeySet ks, bool redispatch,
                                                Args... args) const {
    detail::TraceScope scope(*this, ks, redispatch, false);
    return kernel.template call<Return, Args...>(*this, ks, std::forward<Args>(args)...);
  }
  friend class OperatorHandle;
};

template <typename Sig>
TypedOperatorHandle<Sig> OperatorHandle::typed() const {
  checkTypedSignature(CppSignature::make<Sig>(), infer_schema<Sig>());
  return TypedOperatorHandle<Sig>(*this);
}

// One registration as the dispatcher records it (for dump, the CLI and the store).
struct RegistrationInfo {
  enum class What : uint8_t { Def, Impl, Fallback };
  What what = What::Impl;
  std::string op;          // "ns::name.overload"; "" for a fallback
  DispatchKey key = DispatchKey::Undefined;  // runtime or alias key; Undefined for a def
  std::string kind;        // "def", "unboxed", "boxed", "fallthrough"
  std::string owner;       // "builtin", a bundle "name@version", ...
  std::string debug;       // "registered at file.cc:12"
  bool enabled = true;     // false when set_kernel_enabled(op, key, false) is in force
  bool active = true;      // false when a newer registration at the same key shadows it
};

// One rule as the dispatcher records it. See Note [Operator rules].
struct RuleInfo {
  std::string op;
  std::string kind;    // "torch_dispatch", ...
  std::string target;  // the target type, demangled ("MyMode")
  std::string owner;
  std::string debug;
};

// What one slot of an operator's table holds, and why (PyTorch's dump table).
struct SlotInfo {
  DispatchKey key = DispatchKey::Undefined;  // Undefined: the slot of the empty key set
  // "kernel", "default kernel" (CompositeExplicitAutograd), "composite implicit kernel",
  // "autograd kernel", "backend fallback", "fallthrough", "missing"
  std::string source;
  DispatchKey registered_at = DispatchKey::Undefined;  // the key the kernel was registered at
  std::string kind;   // as RegistrationInfo::kind; "" when missing
  std::string owner;
  std::string debug;
};

// Who registers: the owner recorded on every registration made while it is set on
// this thread (the host sets a bundle's name@version while the bundle registers).
// Default "user"; the core library registers as "builtin".
class STRATA_API RegistrationOwnerGuard {
 public:
  explicit RegistrationOwnerGuard(std::string owner);
  RegistrationOwnerGuard(const RegistrationOwnerGuard&) = delete;
  RegistrationOwnerGuard& operator=(const RegistrationOwnerGuard&) = delete;
  ~RegistrationOwnerGuard();
  static const std::string& current();

 private:
  std::string saved_;
};


// Removes a registration when it dies. Move-only.
// [[nodiscard]]: a handle dropped undoes its registration at once, which is never
// what a caller meant (STRATA_API written out: GCC takes no [[...]] after __attribute__).
class [[nodiscard("a registration lasts as long as its handle: keep it (BundleRegistrar::keep, a member), or it is undone at once"), gnu::visibility("default")]] RegistrationHandleRAII {
 public:
  RegistrationHandleRAII() = default;
  explicit RegistrationHandleRAII(std::function<void()> on_destroy) : on_destroy_(std::move(on_destroy)) {}
  RegistrationHandleRAII(RegistrationHandleRAII&& o) noexcept : on_destroy_(std::exchange(o.on_destroy_, nullptr)) {}
  RegistrationHandleRAII& operator=(RegistrationHandleRAII&& o) noexcept {
    if (this != &o) {
      reset();
      on_destroy_ = std::exchange(o.on_destroy_, nullptr);
    }
    return *this;
  }
  RegistrationHandleRAII(const RegistrationHandleRAII&) = delete;
  RegistrationHandleRAII& operator=(const RegistrationHandleRAII&) = delete;
  ~RegistrationHandleRAII() { reset(); }
  void reset() {
    if (on_destroy_) std::exchange(on_destroy_, nullptr)();
  }
  bool active() const { return static_cast<bool>(on_destroy_); }

 private:
  std::function<void()> on_destroy_;
};

namespace detail {
// True while a host loads a bundle's library on this thread (one thread_local load):
// the registrations its static initializers make are then refused (Note [Static
// registrations in bundles] in strata/plugin.h). A registration function checks it
// first and, when true, returns refuseStaticRegistration(what it would register):
// `what` is recorded for the host, and the handle returned is empty.
STRATA_API bool capturingStaticRegistrations();
STRATA_API RegistrationHandleRAII refuseStaticRegistration(std::string what);
// A bundle's registrations were dropped: the typed signatures only its typed<>()
// calls kept are let go (Note [Who keeps a typed signature]). BundleRegistrar calls it.
void releaseTypedSignatures(const std::string& owner);
// Before that bundle registers again (its library stayed mapped, and its statics may
// hold typed handles): those signatures again, or Error(Schema) when one no longer holds.
STRATA_API void refixTypedSignatures(const std::string& owner);
// Whether this thread holds a RegistrationBatch: the host, which waits for a thread
// that may open one, must not wait from inside one. For the host, not bundles (no
// SDK ABI minor), as the functions above.
STRATA_API bool registrationBatchHeldByThisThread();
// While alive, notes each def of `owner` removed on this thread: for the host, which
// tells a bundle that defined an op in registerAll and dropped it before returning (a
// custom_op or a Library it did not keep). They nest: each alive one of the owner
// notes it. For the host.
class STRATA_API DroppedDefs {
 public:
  explicit DroppedDefs(std::string owner);
  ~DroppedDefs();
  DroppedDefs(const DroppedDefs&) = delete;
  DroppedDefs& operator=(const DroppedDefs&) = delete;
  // "ns::name.overload" of each, in the order they went.
  const std::vector<std::string>& names() const { return names_; }
  // The dispatcher's: a def of `owner` named `op` was removed on this thread.
  static void note(const std::string& owner, const std::string& op);

 private:
  std::string owner_;
  std::vector<std::string> names_;
  DroppedDefs* outer_;
};
// Lifts the capture on this thread while alive: for the lazy initializers of Strata's
// own layers (builtin fallbacks), which may first run inside a bundle's load.
class STRATA_API SuspendStaticCapture {
 public:
  SuspendStaticCapture();
  SuspendStaticCapture(const SuspendStaticCapture&) = delete;
  SuspendStaticCapture& operator=(const SuspendStaticCapture&) = delete;
  ~SuspendStaticCapture();

 private:
  void* saved_;
};
}  // namespace detail

struct KernelRecord;

// A safe handle to a computed kernel (get_kernel): holds no strong reference, so it
// does not keep a deregistered kernel alive; calling it after its registration is
// gone throws Error(NotImplemented) naming the op, key and owner.
class STRATA_API KernelHandle {
 public:
  bool valid() const;
  const std::string& op() const { return op_; }
  DispatchKey key() const { return key_; }
  const std::string& owner() const { return owner_; }
  const std::string& debug() const { return debug_; }
  const std::string& source() const { return source_; }

  // Calls the kernel itself (not the dispatcher) with the arguments on the stack.
  void callBoxed(Stack& stack) const;
  void callBoxed(DispatchKeySet ks, Stack& stack) const;
  template <typename Return, typename... Args>
  Return call(Args... args) const {
    std::shared_ptr<KernelRecord> keep = lock();
    return kernelOf(*keep).template call<Return, Args...>(*op_handle_, DispatchKeySet(key_),
                                                           std::forward<Args>(args)...);
  }

 private:
  friend class Dispatcher;
  std::shared_ptr<KernelRecord> lock() const;
  static const KernelFunction& kernelOf(const KernelRecord& r);
  std::weak_ptr<KernelRecord> record_;
  std::optional<OperatorHandle> op_handle_;
  std::string op_;
  DispatchKey key_ = DispatchKey::Undefined;
  std::string owner_, debug_, source_;
};

// What explain() saw: why each layer ran.
struct STRATA_API Explanation {
  struct ArgumentKeys {
    std::string name;   // the schema's argument name
    DispatchKeySet keys;
  };
  struct Step {
    int depth = 0;          // nesting: 0 for the call itself, 1 for what its kernel called, ...
    std::string op;         // "ns::name.overload"
    bool redispatch = false;
    bool boxed = false;
    DispatchKeySet keys;    // the set the kernel was chosen from
    SlotInfo slot;          // the key chosen, the kernel and its owner
    // What the kernel said it did (note_dispatch_step), e.g. an autocast rule's casts.
    std::vector<std::string> notes;
  };
  std::string op;
  std::vector<ArgumentKeys> arguments;
  DispatchKeySet tls_included, tls_excluded, non_fallthrough, final_keys;
  std::vector<Step> steps;
  Stack results;
  // A multi-line account, for people.
  std::string str() const;
};

class STRATA_API Dispatcher {
 public:
  // The process-wide dispatcher, with the builtin fallbacks and the core:: library
  // registered on first use.
  static Dispatcher& singleton();

  // An operator that has a schema (def). nullopt otherwise.
  std::optional<OperatorHandle> findSchema(const OperatorName& name);
  // An operator with a schema or at least one kernel.
  std::optional<OperatorHandle> findOp(const OperatorName& name);
  // "ns::name" and overload; throws Error(NotImplemented) naming it when absent.
  OperatorHandle findSchemaOrThrow(std::string_view name, std::string_view overload_name);
  // "ns::name.overload" in one string.
  OperatorHandle findSchemaOrThrow(std::string_view qualified_name);
  // Every live operator's name, sorted.
  std::vector<OperatorName> operatorNames();

  // --- Registration (what Library calls). Each returns the handle that undoes it. ---
  struct RegisterOptions {
    std::string owner;
    std::string debug;
    bool allow_override = false;
  };
  // Error(Schema) when the schema has alias annotations and alias_analysis is not
  // FROM_SCHEMA (the annotations would be ignored).
  RegistrationHandleRAII registerDef(FunctionSchema schema, RegisterOptions options, TagSet tags = {},
                                     AliasAnalysisKind alias_analysis = AliasAnalysisKind::FROM_SCHEMA);
  // key: a runtime or alias key.
  RegistrationHandleRAII registerImpl(const OperatorName& op, DispatchKey key, KernelFunction kernel,
                                      RegisterOptions options);
  // key: a runtime key; kernel: boxed or fallthrough.
  RegistrationHandleRAII registerFallback(DispatchKey key, KernelFunction kernel, RegisterOptions options);
  // A rule for an existing operator (Note [Operator rules]). Error(Value) when the op
  // already has a rule of this kind for this target; Error(NotImplemented) when there
  // is no such operator.
  RegistrationHandleRAII registerRule(const OperatorName& op, std::string kind, const std::type_info& target,
                                      std::shared_ptr<const void> payload, RegisterOptions options);
  // The single DEF library of a namespace (Library checks it).
  RegistrationHandleRAII registerLibrary(const std::string& ns, std::string debug);

  // --- Kernel toggles: see set_kernel_enabled below. ---
  // Returns the previous state.
  bool setKernelEnabled(const OperatorName& op, DispatchKey key, bool enabled);
  bool isKernelEnabled(const OperatorName& op, DispatchKey key);

  // --- Introspection. ---
  std::vector<RegistrationInfo> registrations(const OperatorName& op);
  std::vector<RegistrationInfo> fallbacks();
  std::vector<RuleInfo> rules(const OperatorName& op);
  // Everything one owner registered (defs, kernels, fallbacks, rules), in one pass.
  struct Owned {
    std::vector<RegistrationInfo> registrations;
    std::vector<RuleInfo> rules;
  };
  Owned ownedBy(const std::string& owner);
  // One entry per runtime key plus the empty-set slot (key Undefined).
  std::vector<SlotInfo> computedTable(const OperatorName& op);
  // The table, registrations and enable state, as text.
  std::string dump(const OperatorName& op);
  KernelHandle getKernel(const OperatorName& op, DispatchKey key);

  // Frees the deregistered kernels and removed rules whose grace period has ended:
  // every thread that was inside a call when they were unpublished has left it
  // (Note [Grace periods]). Never waits; safe at any time. Removals call it on their
  // own, and a serving host at each poll; call it to free sooner. Returns how many
  // were freed. When no other thread is inside a call, that is all of them.
  size_t reclaimRetiredKernels();
  // Retired and not yet freed.
  size_t numRetiredKernels();

  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;
  ~Dispatcher();

 private:
  Dispatcher();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend class OperatorHandle;
  friend class OperatorEntry;
  friend class KernelHandle;
  friend class RegistrationBatch;
  friend void detail::releaseTypedSignatures(const std::string& owner);
  friend void detail::refixTypedSignatures(const std::string& owner);
  friend bool detail::registrationBatchHeldByThisThread();
};

// Note [Registration batches]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// While a RegistrationBatch is open on a thread, the registrations and removals
// that thread makes are checked and recorded at once (errors are thrown at the call
// that causes them) but no dispatch table is republished: calls on other threads
// keep seeing the tables as they were. When the batch ends, every table it touched
// is recomputed and published under one hold of the dispatcher's lock. Schemas and
// rules go with the tables: a def the batch removes keeps its schema up for other
// threads until the end (so an op removed and defined again, as a bundle's next
// version does, is never missing in between; the batch's own thread no longer finds
// it, so nothing is hung on an op about to go), a rule set changes at the end too, and a def that puts
// up a different schema publishes its op's table at once, before the schema, so no
// kernel of the old schema is ever called with the new one's arguments. The host
// loads a bundle inside a batch, and on failure removes what the bundle registered
// before the batch ends, so calls see the bundle all at once or not at all (Note
// [The load transaction] in host/); it swaps versions inside one (Note [A swap
// without a gap] in host/plugin_host.cc). One thread at a time may hold a batch (another
// thread's batch waits for it to end, as for a lock); batches nest on that thread.
// A child forked while another thread held one gets it ended, with what it had
// staged published: a fork in the middle of a host's version swap may see an op
// answer "no kernel" there. A registration another thread makes meanwhile on an op the
// batch touched republishes that op's table as it then stands, staged kernels
// included: batches keep calls from seeing a half-loaded bundle, they do not isolate
// two registering threads (the host registers from one thread).
class STRATA_API RegistrationBatch {
 public:
  RegistrationBatch();
  RegistrationBatch(const RegistrationBatch&) = delete;
  RegistrationBatch& operator=(const RegistrationBatch&) = delete;
  ~RegistrationBatch();

 private:
  Dispatcher* d_;
};

// --- The torch.library-style functions. `op` is "ns::name" or "ns::name.overload";
// `device_or_key` a device type ("cpu", "cuda", "meta", "privateuse1"), "default", or a
// key name (parseDispatchKey). ---

// Turns the kernels registered at (op, key) off or on. The state is kept per (op, key)
// even before any kernel is registered there: a kernel registered while disabled stays
// disabled. A disabled kernel is taken out of the table computation (the slot falls to
// what precedence gives next, e.g. the "default" kernel); calls never check a flag.
// Returns the previous state.
STRATA_API bool set_kernel_enabled(std::string_view op, std::string_view device_or_key, bool enabled);
STRATA_API bool is_kernel_enabled(std::string_view op, std::string_view device_or_key);

// set_kernel_enabled for a scope; restores the previous state.
class STRATA_API KernelEnabledScope {
 public:
  KernelEnabledScope(std::string_view op, std::string_view device_or_key, bool enabled);
  KernelEnabledScope(const KernelEnabledScope&) = delete;
  KernelEnabledScope& operator=(const KernelEnabledScope&) = delete;
  ~KernelEnabledScope();

 private:
  OperatorName op_;
  DispatchKey key_;
  bool previous_;
};

// The kernel the table computes for (op, key): for a runtime key, its slot; for an
// alias key, the newest kernel registered at it. Throws when there is none.
STRATA_API KernelHandle get_kernel(std::string_view op, std::string_view device_or_key);

STRATA_API std::string dump(std::string_view op);

// Runs op on the stack (boxed) and says why each layer ran: the keys each argument
// contributed, the TLS sets, the final set, the key and kernel chosen (with owner),
// and every dispatch that followed on this thread during the call.
STRATA_API Explanation explain(const OperatorHandle& op, Stack stack);
// The same, for when the call may fail: an exception from the arguments' check or
// from any layer is caught into *failure, and the explanation holds every step up to
// the failure (the last step is where it failed; results are empty). strata call
// --explain prints it, since a failing call is when the explanation matters most.
STRATA_API Explanation explain(const OperatorHandle& op, Stack stack, std::exception_ptr* failure);

namespace detail {
STRATA_API bool dispatchObservedOnThisThread();
}  // namespace detail
// True while the dispatch trace, or an explain() on this thread, observes this
// thread's calls: a layer checks it before it spends time describing what it does.
// One relaxed load while nothing observes any thread.
inline bool dispatch_observed() {
  return detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0 && detail::dispatchObservedOnThisThread();
}
// Attaches a note to the dispatch step of the kernel running on this thread: explain()
// prints it under that step (each line of a multi-line note indented to the step) and
// the trace logs it. A layer's kernel says here what it did and why (an autocast
// rule: each argument it cast, from which dtype to which). Does nothing while no
// trace or explain() observes this thread.
STRATA_API void note_dispatch_step(std::string note);

// Logs every dispatch step (op, key set, key, kernel, owner) to the trace sink while on.
// Also on when the environment has STRATA_DISPATCH_TRACE=1 at startup.
STRATA_API void set_dispatch_trace(bool on);
STRATA_API bool dispatch_trace_enabled();
// Where trace lines go; default: stderr. nullptr restores the default.
STRATA_API void set_dispatch_trace_sink(std::function<void(std::string_view)> sink);

// Parses "ns::name" / "ns::name.overload" into an OperatorName (Error(Value) if bad).
STRATA_API OperatorName parseOperatorName(std::string_view op);

// A C++ type's readable name ("mylib::MyMode"), for messages and dumps.
STRATA_API std::string demangle(const std::type_info& type);

}  // namespace strata
