// vmap: torch.vmap for C++ callables, and torch.library.register_vmap.
//
//   auto batched_dot = strata::modes::vmap([](const Tensor& a, const Tensor& b) {
//     return ops::sum(ops::mul(a, b));
//   });
//   Tensor d = batched_dot(x, y);                    // x, y: [B, n] -> d: [B]
//   auto f = modes::vmap(g, {0, std::nullopt});      // map x over dim 0, pass y as it is
//   auto rule = modes::register_vmap("mylib::numpy_mul", [](const VmapInfo& info,
//       const InDims& in_dims, Stack& args) -> VmapResult { ... });
//
// Note [vmap levels]
// ~~~~~~~~~~~~~~~~~~
// Each call of a vmapped function pushes a *level* (an id unique on its thread, a
// batch size and a randomness mode) on this thread's level stack, wraps each mapped
// input as a *batched tensor* (Note [Wrapper tensors]: a value, its batch dim and
// the level; its sizes are the value's without the batch dim), calls the function,
// pops the level and unwraps the outputs, moving each batch dim to its out_dim.
// While the stack is not empty the Batched key is in the TLS included set, so every
// op inside a vmap reaches the layer (a random op must, even with no tensor); with
// no vmap running, nothing reaches it (Note [Computing the key set of a call]).
//
// The Batched kernel of an op (its rule, or the for-loop fallback) works on the
// *current* level, the top of the stack:
//   1. Arguments batched at the current level are unwrapped: the rule gets the value
//      and in_dims[i] = its batch dim. A tensor batched at an outer level (one still
//      on the stack below the top) is passed as it is, with in_dims[i] = None: to
//      this level it is a plain tensor, as in functorch.
//   2. With no argument batched at the current level, the op does not belong to this
//      level: the level is taken off the stack and the op called again, so the next
//      level down (or the layers below Batched) sees it.
//   3. Otherwise the level is taken off the stack while the rule runs, so the ops the
//      rule calls on the values are seen by the outer levels only (and, with no outer
//      level, run with the Batched key excluded); what the rule returns is wrapped at
//      the current level with its out_dims, and the level goes back on the stack.
// Levels nest strictly: a wrapper's value is plain or batched at an outer level, never
// at an inner one. A batched tensor whose level is no longer on the stack (it escaped
// its vmap, or it was smuggled into a rule of its own level) is an error naming its
// level and the op, never a silent wrong answer.
//
// Rules are boxed kernels at the Batched key (owner, debug string, RAII handle;
// `strata dump` lists them, `strata kernel disable OP batched` turns one off and the
// op falls back to the loop). The for-loop fallback, registered for every op, slices
// each batched argument, calls the op once per batch element and stacks the results;
// it warns once per op, and set_vmap_fallback_enabled(false) makes it an error.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "strata/dispatcher.h"
#include "strata/ivalue.h"
#include "strata/library.h"
#include "strata/modes/export.h"
#include "strata/tensor.h"

namespace strata::modes {

// torch.vmap's randomness: what a random op inside the vmap does.
//   error     - raises (the default),
//   different - each batch element draws its own values,
//   same      - one draw, shared by every batch element.
enum class Randomness : uint8_t { error, different, same };
STRATA_MODES_API const char* toString(Randomness r);
// "error", "different", "same"; Error(Value) with PyTorch's message otherwise.
STRATA_MODES_API Randomness parseRandomness(std::string_view name);

// A batch dim: an int, or None (nullopt) for "not mapped" / "not batched".
using Dim = std::optional<int64_t>;

// One entry of in_dims / out_dims: one Dim, or for a std::vector<Tensor> argument
// one Dim per element.
struct STRATA_MODES_API DimEntry {
  DimEntry(int d) : dim(d) {}                      // NOLINT
  DimEntry(int64_t d) : dim(d) {}                  // NOLINT
  DimEntry(std::nullopt_t) {}                      // NOLINT
  DimEntry(Dim d) : dim(d) {}                      // NOLINT
  DimEntry(std::vector<Dim> per_element) : elements(std::move(per_element)), is_list(true) {}  // NOLINT
  Dim dim;
  std::vector<Dim> elements;
  bool is_list = false;
  std::string str() const;
};

// in_dims / out_dims: one entry broadcast to every argument (output), or one per
// argument (output), as torch.vmap takes an int or a tuple.
class STRATA_MODES_API Dims {
 public:
  Dims(int d) : all_(DimEntry(d)) {}          // NOLINT: vmap(f, 0)
  Dims(int64_t d) : all_(DimEntry(d)) {}      // NOLINT
  Dims(std::nullopt_t) : all_(DimEntry(std::nullopt)) {}  // NOLINT: vmap(f, 0, std::nullopt)
  Dims(std::initializer_list<DimEntry> per) : per_(per), is_tuple_(true) {}  // NOLINT: vmap(f, {0, std::nullopt})
  Dims(std::vector<DimEntry> per) : per_(std::move(per)), is_tuple_(true) {}  // NOLINT
  bool is_tuple() const { return is_tuple_; }
  const std::vector<DimEntry>& entries() const { return per_; }
  const DimEntry& all() const { return all_; }
  // "0", "None", "(0, None)", "(0, [0, None])": as PyTorch prints in_dims.
  std::string str() const;

 private:
  DimEntry all_{std::nullopt};
  std::vector<DimEntry> per_;
  bool is_tuple_ = false;
};

// --- Batched tensors (for rule authors and tests). ---
STRATA_MODES_API bool is_batched(const Tensor& t);
// The level / batch dim of a batched tensor's outermost wrapper; nullopt for a plain one.
STRATA_MODES_API std::optional<uint64_t> maybe_get_level(const Tensor& t);
STRATA_MODES_API Dim maybe_get_bdim(const Tensor& t);
// The value a batched tensor wraps (one level down); Error(Value) for a plain tensor.
STRATA_MODES_API Tensor get_unwrapped(const Tensor& t);
// How many vmaps are running on this thread (the level stack's depth, rules included).
STRATA_MODES_API size_t vmap_depth();
// How many spent batched tensors this thread keeps for its next vmaps to reuse (Note
// [Reusing wrapper tensors] in strata/tensor.h), at most 16; for tests and diagnostics.
STRATA_MODES_API size_t vmap_spare_batched_tensors();

// t with its batch dim at 0: moved there, or (bdim None) a new dim of batch_size made
// by expand (a view). functorch's moveBatchDimToFront + ensureHasBdim, for rules.
STRATA_MODES_API Tensor move_bdim_to_front(const Tensor& t, Dim bdim, int64_t batch_size);

// PyTorch's torch._C._functorch._set_vmap_fallback_enabled: with false, an op that
// has no batching rule fails under vmap instead of running the for-loop fallback.
STRATA_MODES_API void set_vmap_fallback_enabled(bool enabled);
STRATA_MODES_API bool is_vmap_fallback_enabled();
// Forgets which ops the fallback has warned about (so tests can see the warning).
STRATA_MODES_API void reset_vmap_fallback_warnings();

// --- register_vmap. ---
struct VmapInfo {
  int64_t batch_size = 0;
  Randomness randomness = Randomness::error;
};
// One Dim per argument of the op's schema: the batch dim of a Tensor argument batched
// at this level, else None. A Tensor[] / Tensor?[] argument with any element batched
// is given with every element batched at dim 0 (the others expanded, a view) and
// in_dims[i] = 0.
using InDims = std::vector<Dim>;
// The rule's results: one IValue per return of the schema, and the batch dim of each
// (None: that output is not batched). One out_dim for several outputs applies to all.
struct VmapResult {
  Stack outputs;
  std::vector<Dim> out_dims;
};
using VmapRule = std::function<VmapResult(const VmapInfo& info, const InDims& in_dims, Stack& args)>;

// torch.library.register_vmap: `op` is "ns::name[.overload]" with a schema. A second
// rule for the op is Error(Value) naming the op and the owner of the first, unless
// allow_override. The rule lasts as long as the handle (or lib).
STRATA_MODES_API RegistrationHandleRAII register_vmap(std::string_view op, VmapRule rule, bool allow_override = false,
                                                      std::source_location where = std::source_location::current());
STRATA_MODES_API void register_vmap(std::string_view op, VmapRule rule, Library& lib, bool allow_override = false,
                                    std::source_location where = std::source_location::current());

// --- Typed batching rules: functorch's C++ form of a rule. ---
//
//   using Sig = Tensor(const Tensor&, const Tensor&, double);
//   modes::register_vmap<Sig>("extension_cpp::mymuladd",
//       [](const VmapInfo& info, const Tensor& a, Dim a_bdim, const Tensor& b, Dim b_bdim, double c) {
//         const Tensor a0 = move_bdim_to_front(a, a_bdim, info.batch_size);
//         const Tensor b0 = move_bdim_to_front(b, b_bdim, info.batch_size);
//         return std::make_tuple(mymuladd(a0, b0, c), 0);
//       }, lib);
//
// Sig is the op's C++ signature, as in TypedOperatorHandle<Sig> (checked against the
// schema when the rule is registered: Error(Schema) names the difference). The rule
// takes the VmapInfo, then the op's arguments in order, each Tensor (or
// std::optional<Tensor>) followed by its batch dim at this level (None: not batched
// here), and returns every output followed by its out_dim: std::tuple<Tensor, Dim>
// for an op that returns a Tensor, std::tuple<Tensor, Dim, Tensor, Dim> for
// std::tuple<Tensor, Tensor>; an out_dim may be an int or std::nullopt.
// It is one registration with the boxed form's contract (the same owner, RAII handle,
// dump line, store record and switch, the same checks and errors), and a call made
// with the op's C++ signature reaches it without boxing anything, as functorch's C++
// rules are reached. Ops that take a Tensor[] or write their arguments use the boxed
// form.
template <typename Sig, typename F>
RegistrationHandleRAII register_vmap(std::string_view op, F rule, bool allow_override = false,
                                     std::source_location where = std::source_location::current());
template <typename Sig, typename F>
void register_vmap(std::string_view op, F rule, Library& lib, bool allow_override = false,
                   std::source_location where = std::source_location::current()) {
  lib.keep(register_vmap<Sig>(op, std::move(rule), allow_override, where));
}

// The core:: ops that have a builtin batching rule, and those that use the fallback
// (with why), as the tests and `strata dump` see them.
STRATA_MODES_API std::vector<std::string> core_ops_with_batching_rules();

// ---------------------------------------------------------------------------
// vmap(fn, in_dims, out_dims, randomness, chunk_size): the call machinery. fn takes
// Tensors, std::vector<Tensor>s and any other values (passed through: their in_dim
// must be None) and returns a Tensor, a std::vector<Tensor>, or a std::tuple /
// std::pair of those, nested tuples and std::optional<Tensor> included: the
// outputs are flattened as a pytree (other values in a tuple need out_dim None).

namespace detail {

// A vector that keeps its first N elements inline: a vmap call allocates nothing for
// its bookkeeping (bench vmap/muladd_rule/B). The inline slots stay raw until used:
// zeroing them (value-initialized arrays) cost two `rep stos` per call, and elements
// are built in place (a brace-initialized temporary copied in stalled on store
// forwarding).
template <typename T, size_t N>
class SmallVec {
 public:
  SmallVec() = default;
  SmallVec(const SmallVec&) = delete;
  SmallVec& operator=(const SmallVec&) = delete;
  ~SmallVec() {
    for (size_t i = 0; i < std::min(n_, N); ++i) slot(i)->~T();
  }
  template <typename... A>
  T& emplace_back(A&&... a) {
    T* p = n_ < N ? ::new (static_cast<void*>(slot(n_))) T{std::forward<A>(a)...}
                  : &heap_.emplace_back(T{std::forward<A>(a)...});
    ++n_;
    return *p;
  }
  void push_back(T v) { emplace_back(std::move(v)); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return i < N ? *slot(i) : heap_[i - N]; }
  const T& operator[](size_t i) const { return i < N ? *slot(i) : heap_[i - N]; }

 private:
  T* slot(size_t i) { return std::launder(reinterpret_cast<T*>(inline_ + i * sizeof(T))); }
  const T* slot(size_t i) const { return std::launder(reinterpret_cast<const T*>(inline_ + i * sizeof(T))); }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  std::vector<T> heap_;
  size_t n_ = 0;
};

// One vmapped call: checks in_dims and the inputs, runs the chunks, unwraps outputs.
// in_dims and out_dims must outlive it.
class STRATA_MODES_API VmapCall {
 public:
  VmapCall(const Dims& in_dims, const Dims& out_dims, Randomness randomness, std::optional<int64_t> chunk_size,
           size_t num_args);
  ~VmapCall();
  VmapCall(const VmapCall&) = delete;
  VmapCall& operator=(const VmapCall&) = delete;

  // Pass 1, in argument order.
  void addTensor(size_t arg, const Tensor& t);
  void addList(size_t arg, const std::vector<Tensor>& ts);
  void addOther(size_t arg, const std::type_info& type);
  // Checks in_dims against the inputs and finds the batch size (Error(Value) with
  // PyTorch's messages).
  void start();
  size_t numChunks() const;

  // Pass 2, per chunk: pushes the chunk's level, wraps the inputs (in the order they
  // were added).
  void enterChunk(size_t chunk);
  Tensor input(const Tensor& t);
  std::vector<Tensor> inputList(const std::vector<Tensor>& ts);
  // Pops the level (also done by the destructor on an exception).
  void exitChunk();

  // Pass 3, per chunk, after exitChunk: the outputs in order. `output` is the index of
  // the top-level output the leaf belongs to; tensor is null for a non-tensor leaf.
  struct Leaf {
    size_t output = 0;
    Tensor* tensor = nullptr;
    const std::type_info* type = nullptr;
    bool list = false;  // an element of a std::vector<Tensor> output, or of a tuple in one
  };
  using Leaves = SmallVec<Leaf, 4>;
  void collectOutputs(size_t num_outputs, bool single_tensor, Leaves& leaves);
  // After the last chunk: writes the (concatenated) results into leaves (the first
  // chunk's outputs).
  void finish(Leaves& leaves);

  // The usual call in three steps, with what passes 1 to 3 do: every argument a
  // Tensor, no chunk_size, one Tensor returned. enterTensors checks the n inputs,
  // enters the chunk and wraps inputs[i] into wrapped[i]; exitTensors spends the
  // wrapped inputs (when nothing else holds them) and exits the chunk; finishTensor
  // returns fn's result unwrapped. What bundles built for SDK ABI 4.2 call (their
  // vmap() inlined these three); ABI 4.3's vmap() takes VmapTensorsCall instead.
  void enterTensors(const Tensor* const* inputs, Tensor* wrapped, size_t n);
  void exitTensors(Tensor* wrapped, size_t n);
  Tensor finishTensor(Tensor out);

  friend class VmapTensorsCall;  // hands it its unusual inputs and results

  struct TensorIn {
    Dim dim;           // normalized, >= 0
    int64_t size = 0;  // of the mapped dim
  };
  struct LeafOut {
    Tensor first;                 // chunk 0's result
    std::vector<Tensor> chunks;   // every chunk's, when there are several
    Dim dim;                      // the normalized out_dim
  };

 private:
  std::string prefix() const;

  const Dims& in_dims_;
  const Dims& out_dims_;
  Randomness randomness_;
  std::optional<int64_t> chunk_size_;
  SmallVec<TensorIn, 8> tensors_;
  size_t cursor_ = 0;  // the next tensor input() wraps
  int64_t batch_size_ = 0;
  int64_t step_ = 0;  // the chunk length
  size_t chunk_ = 0;
  bool in_chunk_ = false;
  uint64_t level_ = 0;
  std::string rng_state_;  // randomness "same" over chunks: each chunk draws the same
  SmallVec<LeafOut, 4> results_;
};

// vmap's usual call, lean: every argument a Tensor (at most 64), one Tensor returned,
// no chunk_size. It does what VmapCall's enterTensors / exitTensors / finishTensor
// do without VmapCall's bookkeeping for lists, chunks and several outputs; anything
// else (an input error to report, a result to move or expand) it hands to a
// VmapCall, so results and errors are the same on both paths. inputs, in_dims and
// out_dims must outlive it.
class STRATA_MODES_API VmapTensorsCall {
 public:
  static constexpr size_t kMaxInputs = 64;
  VmapTensorsCall(const Dims& in_dims, const Dims& out_dims, Randomness randomness, const Tensor* const* inputs,
                  size_t n) noexcept
      : in_dims_(in_dims), out_dims_(out_dims), inputs_(inputs), n_(n), randomness_(randomness) {}
  ~VmapTensorsCall() {
    if (entered_) popLevel();
  }
  VmapTensorsCall(const VmapTensorsCall&) = delete;
  VmapTensorsCall& operator=(const VmapTensorsCall&) = delete;

  // Checks the inputs against in_dims, pushes the level and wraps inputs[i] into
  // wrapped[i] (Error(Value) with PyTorch's messages, as VmapCall gives them).
  void enter(Tensor* wrapped);
  // Spends the wrapped inputs (when nothing else holds them) and pops the level.
  void exit(Tensor* wrapped) noexcept;
  // fn's result, unwrapped and its batch dim moved to out_dims.
  Tensor finish(Tensor out);

 private:
  void popLevel() noexcept;
  void startGeneral(VmapCall& call) const;  // VmapCall's checks of the same inputs
  void unusualInputs() const;               // throws VmapCall's error

  const Dims& in_dims_;
  const Dims& out_dims_;
  const Tensor* const* inputs_;
  size_t n_;
  uint64_t mapped_ = 0;  // bit i: input i is mapped
  uint64_t level_ = 0;
  Randomness randomness_;
  bool entered_ = false;
};

template <typename T>
struct IsTupleLike : std::false_type {};
template <typename... Ts>
struct IsTupleLike<std::tuple<Ts...>> : std::true_type {};
template <typename A, typename B>
struct IsTupleLike<std::pair<A, B>> : std::true_type {};

template <typename T>
void declareArg(VmapCall& call, size_t i, const T& a) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) call.addTensor(i, a);
  else if constexpr (std::is_same_v<D, std::vector<Tensor>>) call.addList(i, a);
  else call.addOther(i, typeid(D));
}

template <typename T>
decltype(auto) wrapArg(VmapCall& call, const T& a) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) return call.input(a);
  else if constexpr (std::is_same_v<D, std::vector<Tensor>>) return call.inputList(a);
  else return (a);
}

// An output's tensors, flattened as PyTorch flattens a pytree: a tuple or pair
// nested in an output and an optional tensor are walked too (their leaves share the
// output's out_dim, or take one each from a list out_dim), so no batched tensor is
// handed back unwrapped. Anything else is a non-tensor leaf.
template <typename T>
void leavesOf(T& v, size_t output, VmapCall::Leaves& leaves, bool nested = false) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    leaves.emplace_back(output, &v, &typeid(Tensor), nested);
  } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
    for (Tensor& t : v) leaves.emplace_back(output, &t, &typeid(Tensor), true);
  } else if constexpr (std::is_same_v<D, std::optional<Tensor>>) {
    // nullopt is PyTorch's None: a node with no leaves, returned as it is.
    if (v.has_value()) leaves.emplace_back(output, &*v, &typeid(Tensor), nested);
  } else if constexpr (IsTupleLike<D>::value) {
    std::apply([&](auto&... e) { (leavesOf(e, output, leaves, true), ...); }, v);
  } else {
    leaves.emplace_back(output, nullptr, &typeid(D), nested);
  }
}

// The leaves of a result; returns the number of top-level outputs.
template <typename R>
size_t outputLeaves(R& r, VmapCall::Leaves& leaves) {
  if constexpr (IsTupleLike<R>::value) {
    size_t n = 0;
    std::apply([&](auto&... e) { (leavesOf(e, n++, leaves), ...); }, r);
    return n;
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    for (size_t i = 0; i < r.size(); ++i) leaves.emplace_back(i, &r[i], &typeid(Tensor));
    return r.size();
  } else {
    leavesOf(r, 0, leaves);
    return 1;
  }
}

template <typename F, typename Tuple, size_t... I>
auto invokeWrapped(const F& fn, VmapCall& call, const Tuple& args, std::index_sequence<I...>) {
  // Wrap every argument first (in order), then call.
  auto wrapped = std::tuple<decltype(wrapArg(call, std::get<I>(args)))...>{wrapArg(call, std::get<I>(args))...};
  return std::apply(fn, wrapped);
}

// --- Typed batching rules (register_vmap<Sig>) ---------------------------------

struct RuleData;  // the rule a Batched kernel runs (vmap_internal.h)

template <typename T>
inline constexpr bool kTypedTensor = std::is_same_v<std::remove_cvref_t<T>, Tensor>;
template <typename T>
inline constexpr bool kTypedOptionalTensor = std::is_same_v<std::remove_cvref_t<T>, std::optional<Tensor>>;
// An argument the rule gets with a batch dim.
template <typename T>
inline constexpr bool kTypedMapped = kTypedTensor<T> || kTypedOptionalTensor<T>;
// Whether a value of type T holds tensors: Tensor, and optionals, vectors and spans
// (ArrayRef) of what holds them.
template <typename T>
struct HoldsTensor : std::is_same<T, Tensor> {};
template <typename T>
struct HoldsTensor<std::optional<T>> : HoldsTensor<T> {};
template <typename T>
struct HoldsTensor<std::vector<T>> : HoldsTensor<T> {};
template <typename T, size_t Extent>
struct HoldsTensor<std::span<const T, Extent>> : HoldsTensor<T> {};
// An argument holding tensors that the typed form cannot give a batch dim to (a
// Tensor[] and the like): the op takes the boxed form.
template <typename T>
inline constexpr bool kTypedList = HoldsTensor<std::remove_cvref_t<T>>::value && !kTypedMapped<T>;

template <typename R>
struct TypedReturns : std::false_type {};
template <>
struct TypedReturns<Tensor> : std::true_type {
  static constexpr size_t n = 1;
};
template <typename... T>
struct TypedReturns<std::tuple<T...>> : std::bool_constant<(std::is_same_v<T, Tensor> && ...)> {
  static constexpr size_t n = sizeof...(T);
};

// The Batched kernel's typed path, out of line: the level taken off while the rule
// runs, and its outputs wrapped, exactly as the boxed path does (Note [vmap levels]).
class STRATA_MODES_API TypedRuleFrame {
 public:
  TypedRuleFrame() = default;
  ~TypedRuleFrame() {
    if (entered_) leave();
  }
  TypedRuleFrame(const TypedRuleFrame&) = delete;
  TypedRuleFrame& operator=(const TypedRuleFrame&) = delete;

  // When the typed path applies (a level is current, the dispatch is not observed by
  // --explain or a trace, and some tensor is batched at the level): sets values[i] to
  // the value tensors[i] wraps at the level (or tensors[i] itself; null stays null) and
  // bdims[i] to its batch dim (or None), takes the level off the stack and returns
  // true. Otherwise returns false and changes nothing: the boxed path runs the call.
  // A tensor of a level that may not be seen here throws, as on the boxed path.
  bool enter(const OperatorHandle& op, const Tensor* const* tensors, const Tensor** values, Dim* bdims, size_t n);
  VmapInfo info() const { return VmapInfo{batch_size_, randomness_}; }
  // Output j of the rule wrapped at the level with out_dim d, checked as the boxed
  // path checks it (Error(Value) naming the op).
  Tensor wrap(const OperatorHandle& op, Tensor&& out, Dim d, size_t j) const;

 private:
  void leave() noexcept;  // puts the level back
  uint64_t level_ = 0;
  int64_t batch_size_ = 0;
  Randomness randomness_ = Randomness::error;
  bool entered_ = false;
};

// The Batched kernel's boxed path with `rule` (the rule, or the level below).
STRATA_MODES_API void runBatchedKernel(const OperatorHandle& op, Stack& stack, const RuleData& rule);

using TypedKernelMaker = std::function<KernelFunction(const OperatorHandle&, std::shared_ptr<const RuleData>)>;
STRATA_MODES_API RegistrationHandleRAII addTypedVmapRule(std::string_view op, VmapRule boxed, TypedKernelMaker make,
                                                         bool allow_override, std::source_location where);

// Which of the op's arguments are mapped, and each one's slot among them.
template <typename... A>
struct TypedArgs {
  static constexpr size_t kMapped = (size_t{0} + ... + size_t{kTypedMapped<A>});
  static constexpr size_t slot(size_t i) {
    constexpr bool mapped[] = {kTypedMapped<A>..., false};
    size_t n = 0;
    for (size_t j = 0; j < i; ++j) n += mapped[j] ? 1 : 0;
    return n;
  }
};

// Argument I of the op as the rule takes it: a mapped one with its batch dim.
template <size_t Slot, typename A, typename V>
auto typedRuleArg(V&& arg, const Tensor* const* values, const Dim* bdims) {
  if constexpr (kTypedTensor<A>) {
    return std::tuple<const Tensor&, Dim>(*values[Slot], bdims[Slot]);
  } else if constexpr (kTypedOptionalTensor<A>) {
    return std::tuple<std::optional<Tensor>, Dim>(
        values[Slot] != nullptr ? std::optional<Tensor>(*values[Slot]) : std::nullopt, bdims[Slot]);
  } else {
    return std::forward_as_tuple(arg);
  }
}

// The rule's outputs, checked for form at compile time.
template <typename R, typename Out>
constexpr void checkTypedRuleResult() {
  static_assert(requires { std::tuple_size<Out>::value; } && std::tuple_size_v<Out> == 2 * TypedReturns<R>::n,
                "register_vmap<Sig>: the rule returns a std::tuple of each output followed by its out_dim: "
                "std::tuple<Tensor, Dim> for an op that returns a Tensor");
  [&]<size_t... J>(std::index_sequence<J...>) {
    static_assert((std::is_same_v<std::remove_cvref_t<std::tuple_element_t<2 * J, Out>>, Tensor> && ...),
                  "register_vmap<Sig>: each output the rule returns is a Tensor");
    static_assert((std::is_constructible_v<Dim, std::tuple_element_t<2 * J + 1, Out>> && ...),
                  "register_vmap<Sig>: each output is followed by its out_dim (an int, Dim or std::nullopt)");
  }(std::make_index_sequence<TypedReturns<R>::n>{});
}

template <typename Sig, typename F>
struct TypedBatchedKernel;

template <typename R, typename... A, typename F>
struct TypedBatchedKernel<R(A...), F> {
  F rule;
  OperatorHandle op;
  std::shared_ptr<const RuleData> boxed;

  R operator()(DispatchKeySet, A... args) const {
    using Args = TypedArgs<A...>;
    constexpr size_t kN = Args::kMapped;
    const Tensor* tensors[kN + 1];
    const Tensor* values[kN + 1];
    Dim bdims[kN + 1];
    [&]<size_t... I>(std::index_sequence<I...>) {
      (collect<Args::slot(I), A>(args, tensors), ...);
    }(std::index_sequence_for<A...>{});
    TypedRuleFrame frame;
    if (__builtin_expect(frame.enter(op, tensors, values, bdims, kN), 1)) {
      auto out = [&]<size_t... I>(std::index_sequence<I...>) {
        return std::apply(rule, std::tuple_cat(std::tuple<VmapInfo>(frame.info()),
                                               typedRuleArg<Args::slot(I), A>(args, values, bdims)...));
      }(std::index_sequence_for<A...>{});
      using Out = decltype(out);
      checkTypedRuleResult<R, Out>();
      if constexpr (std::is_same_v<R, Tensor>) {
        return frame.wrap(op, std::move(std::get<0>(out)), Dim(std::get<1>(out)), 0);
      } else {
        return [&]<size_t... J>(std::index_sequence<J...>) {
          // Braces: the outputs are wrapped (and checked) in order, as the boxed path does.
          return R{frame.wrap(op, std::move(std::get<2 * J>(out)), Dim(std::get<2 * J + 1>(out)), J)...};
        }(std::make_index_sequence<TypedReturns<R>::n>{});
      }
    }
    return boxedCall(args...);
  }

 private:
  template <size_t Slot, typename T>
  static void collect(const std::remove_cvref_t<T>& arg, const Tensor** tensors) {
    if constexpr (kTypedTensor<T>) tensors[Slot] = &arg;
    else if constexpr (kTypedOptionalTensor<T>) tensors[Slot] = arg.has_value() ? &*arg : nullptr;
  }

  // Everything the typed path does not take (--explain, the level below, errors):
  // the boxed path, with the rule's boxed form.
  __attribute__((noinline)) R boxedCall(const std::remove_cvref_t<A>&... args) const {
    Stack stack(std::in_place, strata::detail::boxing::boxArg(args)...);
    runBatchedKernel(op, stack, *boxed);
    constexpr size_t n = TypedReturns<R>::n;
    if (stack.size() != n) strata::detail::boxing::throwWrongReturnCount(op, stack.size(), n);
    if constexpr (std::is_same_v<R, Tensor>) {
      return std::move(stack[0]).toTensor();
    } else {
      return [&]<size_t... J>(std::index_sequence<J...>) {
        return R(std::move(stack[J]).toTensor()...);
      }(std::make_index_sequence<n>{});
    }
  }
};

// The boxed form of a typed rule: what the boxed path (and --explain) runs.
template <typename R, typename... A, typename F>
VmapRule boxedFormOf(std::type_identity<R(A...)>, F rule) {
  return [rule = std::move(rule)](const VmapInfo& info, const InDims& in_dims, Stack& args) -> VmapResult {
    auto out = [&]<size_t... I>(std::index_sequence<I...>) {
      auto arg = [&]<size_t Index, typename T>() {
        if constexpr (kTypedTensor<T>) {
          return std::tuple<const Tensor&, Dim>(args[Index].toTensor(), in_dims[Index]);
        } else if constexpr (kTypedOptionalTensor<T>) {
          return std::tuple<std::optional<Tensor>, Dim>(args[Index].to<std::optional<Tensor>>(), in_dims[Index]);
        } else {
          return std::tuple<decltype(strata::detail::boxing::unboxArg<T>(args[Index]))>(
              strata::detail::boxing::unboxArg<T>(args[Index]));
        }
      };
      return std::apply(rule, std::tuple_cat(std::tuple<VmapInfo>(info), arg.template operator()<I, A>()...));
    }(std::index_sequence_for<A...>{});
    VmapResult result;
    [&]<size_t... J>(std::index_sequence<J...>) {
      (result.outputs.push_back(IValue(std::move(std::get<2 * J>(out)))), ...);
      result.out_dims = {Dim(std::get<2 * J + 1>(out))...};
    }(std::make_index_sequence<TypedReturns<R>::n>{});
    return result;
  };
}

}  // namespace detail

template <typename F>
class Vmapped {
 public:
  Vmapped(F fn, Dims in_dims, Dims out_dims, Randomness randomness, std::optional<int64_t> chunk_size)
      : fn_(std::move(fn)),
        in_dims_(std::move(in_dims)),
        out_dims_(std::move(out_dims)),
        randomness_(randomness),
        chunk_size_(chunk_size) {}

  template <typename... Args>
  auto operator()(const Args&... args) const {
    if constexpr (sizeof...(Args) > 0 && sizeof...(Args) <= detail::VmapTensorsCall::kMaxInputs &&
                  (std::is_same_v<Args, Tensor> && ...)) {
      using Wrapped = std::array<Tensor, sizeof...(Args)>;
      if constexpr (std::is_same_v<std::decay_t<decltype(std::apply(fn_, std::declval<Wrapped&>()))>, Tensor>) {
        if (!chunk_size_) return callTensors(args...);
      }
    }
    return callGeneral(args...);
  }

 private:
  // Every argument a Tensor, one Tensor returned, one chunk: the steps of callGeneral
  // with nothing to walk through.
  template <typename... Args>
  Tensor callTensors(const Args&... args) const {
    const Tensor* inputs[] = {&args...};
    detail::VmapTensorsCall call(in_dims_, out_dims_, randomness_, inputs, sizeof...(Args));
    Tensor out;
    {
      std::array<Tensor, sizeof...(Args)> wrapped;
      call.enter(wrapped.data());
      out = std::apply(fn_, wrapped);
      call.exit(wrapped.data());
    }
    return call.finish(std::move(out));
  }

  template <typename... Args>
  auto callGeneral(const Args&... args) const {
    detail::VmapCall call(in_dims_, out_dims_, randomness_, chunk_size_, sizeof...(Args));
    {
      size_t i = 0;
      (detail::declareArg(call, i++, args), ...);
    }
    call.start();
    const auto refs = std::forward_as_tuple(args...);
    using R = std::decay_t<decltype(detail::invokeWrapped(fn_, call, refs, std::index_sequence_for<Args...>{}))>;
    std::optional<R> first;
    detail::VmapCall::Leaves first_leaves;
    for (size_t c = 0; c < call.numChunks(); ++c) {
      call.enterChunk(c);
      R out = detail::invokeWrapped(fn_, call, refs, std::index_sequence_for<Args...>{});
      call.exitChunk();
      detail::VmapCall::Leaves leaves;
      const size_t n = detail::outputLeaves(out, leaves);
      call.collectOutputs(n, std::is_same_v<R, Tensor>, leaves);
      if (c == 0) first.emplace(std::move(out));
    }
    detail::outputLeaves(*first, first_leaves);
    call.finish(first_leaves);
    return std::move(*first);
  }

  F fn_;
  Dims in_dims_;
  Dims out_dims_;
  Randomness randomness_;
  std::optional<int64_t> chunk_size_;
};

template <typename Sig, typename F>
RegistrationHandleRAII register_vmap(std::string_view op, F rule, bool allow_override, std::source_location where) {
  static_assert(std::is_function_v<Sig>, "register_vmap<Sig>: Sig is the op's C++ function type, e.g. "
                                          "Tensor(const Tensor&, const Tensor&, double)");
  return [&]<typename R, typename... A>(std::type_identity<R(A...)>) {
    static_assert(detail::TypedReturns<R>::value,
                  "register_vmap<Sig>: a typed rule is for an op that returns a Tensor or a std::tuple of Tensors; "
                  "use the boxed form (VmapRule) for other ops");
    static_assert(!(std::is_same_v<A, Tensor&> || ...),
                  "register_vmap<Sig>: an op that writes its arguments (Tensor&) uses the boxed form (VmapRule)");
    static_assert(!(detail::kTypedList<A> || ...),
                  "register_vmap<Sig>: an op that takes a Tensor[] (or another list of tensors) uses the boxed "
                  "form (VmapRule)");
    static_assert(std::is_copy_constructible_v<F>, "register_vmap<Sig>: the rule must be copyable");
    if constexpr (requires { rule == nullptr; }) {  // a function pointer or std::function
      STRATA_CHECK(!(rule == nullptr), Value, "register_vmap<Sig>(", op, "): the rule is empty");
    }
    VmapRule boxed = detail::boxedFormOf(std::type_identity<Sig>{}, rule);
    detail::TypedKernelMaker make = [rule](const OperatorHandle& h, std::shared_ptr<const detail::RuleData> data) {
      return KernelFunction::makeFromUnboxedFunctor(detail::TypedBatchedKernel<Sig, F>{rule, h, std::move(data)});
    };
    return detail::addTypedVmapRule(op, std::move(boxed), std::move(make), allow_override, where);
  }(std::type_identity<Sig>{});
}

// torch.vmap(fn, in_dims=0, out_dims=0, randomness="error", chunk_size=None). Checks
// randomness and chunk_size here (Error(Value) with PyTorch's messages); in_dims and
// out_dims are checked against each call's inputs and outputs.
template <typename F>
Vmapped<std::decay_t<F>> vmap(F&& fn, Dims in_dims = 0, Dims out_dims = 0, std::string_view randomness = "error",
                              std::optional<int64_t> chunk_size = std::nullopt) {
  const Randomness r = parseRandomness(randomness);
  if (chunk_size) {
    STRATA_CHECK(*chunk_size > 0, Value, "vmap: chunk_size should be None or greater than 0. (got ", *chunk_size,
                 ")");
  }
  return Vmapped<std::decay_t<F>>(std::forward<F>(fn), std::move(in_dims), std::move(out_dims), r, chunk_size);
}

}  // namespace strata::modes
