// The vmap layer: levels, batched tensors, the Batched kernels (rules and the
// for-loop fallback) and vmap()'s call machinery. See Note [vmap levels].
#include "strata/modes/vmap.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <typeinfo>

#include "registered_at.h"
#include "tensor_walk.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/log_mode.h"
#include "strata/ops.h"
#include "vmap_internal.h"

namespace strata::modes {

namespace {

// --- Levels ------------------------------------------------------------------

struct Level {
  uint64_t id;
  int64_t batch_size;
  Randomness randomness;
};

constexpr size_t kMaxSpareBatched = 16;

// A stack of at most kMaxSpareBatched tensors, in place: pushing and popping are a
// move and a count (a std::vector's push_back was an out-of-line call per spent tensor).
class SpareTensors {
 public:
  bool empty() const { return n_ == 0; }
  bool full() const { return n_ == kMaxSpareBatched; }
  size_t size() const { return n_; }
  const Tensor& back() const { return slots_[n_ - 1]; }
  Tensor take() { return std::move(slots_[--n_]); }
  void push(Tensor&& t) { slots_[n_++] = std::move(t); }  // REQUIRES: !full()

 private:
  std::array<Tensor, kMaxSpareBatched> slots_;
  size_t n_ = 0;
};

struct VmapTls {
  std::vector<Level> visible;   // the level stack; the top is the current level
  std::vector<uint64_t> alive;  // every level whose vmap is running on this thread
  std::vector<InDims> spare_in_dims;  // a rule's in_dims, kept with their capacity
  // Spent batched tensors, for makeBatched to reuse (Note [Reusing wrapper tensors] in
  // strata/tensor.h).
  SpareTensors spare_batched;
  // The batched inputs of the running vmaps (by level, innermost last), released for
  // reuse when their chunk ends.
  std::vector<std::pair<uint64_t, Tensor>> call_inputs;
  // This thread's block of level ids: [next_level, level_end).
  uint64_t next_level = 0;
  uint64_t level_end = 0;
};
constexpr size_t kMaxCallInputs = 16;

// Level ids are unique in the process (not per thread), so a batched tensor that
// reaches another thread is never taken for one of that thread's levels.
std::atomic<uint64_t> g_next_level{1};
constexpr uint64_t kLevelBlock = 1024;

// This thread's state, made on its first vmap. The pointer is initial-exec TLS (one
// %fs-relative load, no __tls_get_addr call per access); the owner frees it when the
// thread exits, and clears the pointer first.
__thread VmapTls* t_vmap __attribute__((tls_model("initial-exec"))) = nullptr;

struct StateOwner {
  std::unique_ptr<VmapTls> state;
  ~StateOwner() { t_vmap = nullptr; }
};

VmapTls& makeState() {
  thread_local StateOwner owner;
  owner.state = std::make_unique<VmapTls>();
  owner.state->visible.reserve(8);
  owner.state->alive.reserve(8);
  owner.state->spare_in_dims.reserve(8);  // returned in a destructor: no allocation there
  owner.state->call_inputs.reserve(kMaxCallInputs);
  t_vmap = owner.state.get();
  return *t_vmap;
}

inline VmapTls& state() { return __builtin_expect(t_vmap != nullptr, 1) ? *t_vmap : makeState(); }
// Whether a level is visible, without making the state.
inline bool anyVisible() { return t_vmap != nullptr && !t_vmap->visible.empty(); }

// Batched is in the TLS included set exactly while a level is visible.
inline void syncBatchedKey() {
  uint64_t& included = strata::detail::tls_local_dispatch_key_set.included;
  const uint64_t bit = DispatchKeySet(DispatchKey::Batched).raw();
  if (!anyVisible()) included &= ~bit;
  else included |= bit;
}

bool isVisible(uint64_t id) {
  for (const Level& l : state().visible) {
    if (l.id == id) return true;
  }
  return false;
}
bool isAlive(uint64_t id) {
  const VmapTls& s = state();
  return std::find(s.alive.begin(), s.alive.end(), id) != s.alive.end();
}

// Takes the current level off the stack for a scope (Note [vmap levels], 2 and 3).
class LevelPop {
 public:
  LevelPop() : level_(state().visible.back()) {
    state().visible.pop_back();
    syncBatchedKey();
  }
  ~LevelPop() {
    state().visible.push_back(level_);
    syncBatchedKey();
  }
  LevelPop(const LevelPop&) = delete;
  LevelPop& operator=(const LevelPop&) = delete;

 private:
  Level level_;
};

}  // namespace

// --- Batched tensors ---------------------------------------------------------

namespace detail {

BatchedWrapper::BatchedWrapper(Tensor v, int64_t b, uint64_t l) : value(std::move(v)), bdim(b), level(l) {}
std::string BatchedWrapper::what() const { return "a batched tensor (vmap level " + std::to_string(level) + ")"; }
std::string BatchedWrapper::str() const {
  return "BatchedTensor(lvl=" + std::to_string(level) + ", bdim=" + std::to_string(bdim) + ", value=" + value.str() +
         ")";
}

Tensor makeBatched(Tensor value, int64_t bdim, uint64_t level) {
  const size_t n = static_cast<size_t>(value.dim());
  STRATA_INTERNAL_ASSERT(bdim >= 0 && static_cast<size_t>(bdim) < n, "makeBatched: bdim out of range");
  // Note [Reusing wrapper tensors]: a spent one of this thread's, held by nothing else.
  // It was reusable_wrapper() when spent; of that only its owner can change since (the
  // thread detached: its objects are then nobody's to reuse), which unique_here() reads.
  if (t_vmap != nullptr && !t_vmap->spare_batched.empty() &&
      t_vmap->spare_batched.back().unsafeGetTensorImpl()->unique_here()) {
    Tensor t = t_vmap->spare_batched.take();
    TensorImpl* impl = t.unsafeGetTensorImpl();
    impl->reset_wrapper_hiding_dim(value, bdim);  // the logical sizes: the value's without the batch dim
    auto* w = static_cast<BatchedWrapper*>(impl->wrapper());
    w->value = std::move(value);
    w->bdim = bdim;
    w->level = level;
    return t;
  }
  // The logical sizes and strides: the value's without the batch dim (in place for
  // the usual ranks: no allocation).
  int64_t small[2 * DimVector::kInline];
  std::unique_ptr<int64_t[]> large;
  int64_t* sizes = small;
  if (n - 1 > DimVector::kInline) {
    large.reset(new int64_t[2 * (n - 1)]);
    sizes = large.get();
  }
  int64_t* strides = sizes + (n - 1);
  size_t k = 0;
  for (size_t d = 0; d < n; ++d) {
    if (d == static_cast<size_t>(bdim)) continue;
    sizes[k] = value.sizes()[d];
    strides[k] = value.strides()[d];
    ++k;
  }
  Storage storage = value.storage();
  const ScalarType dtype = value.dtype();
  const int64_t offset = value.storage_offset();
  auto wrapper = make_intrusive<BatchedWrapper>(std::move(value), bdim, level);
  return Tensor(make_intrusive<TensorImpl>(std::move(storage), dtype, IntArrayRef(sizes, n - 1),
                                           IntArrayRef(strides, n - 1), offset, DispatchKeySet(DispatchKey::Batched),
                                           std::move(wrapper)));
}

void releaseBatched(Tensor&& t) noexcept {
  Tensor spent = std::move(t);
  if (t_vmap == nullptr || t_vmap->spare_batched.full()) return;
  TensorImpl* impl = spent.unsafeGetTensorImpl();
  if (impl == nullptr || !impl->reusable_wrapper()) return;
  TensorWrapper* w = impl->wrapper();
  if (typeid(*w) != typeid(BatchedWrapper)) return;
  // Let go of what it wrapped now: a spent tensor holds nobody's data.
  static_cast<BatchedWrapper*>(w)->value = Tensor();
  impl->release_wrapper();
  // Dropping those ran their owners' deleters, which may have spent tensors too.
  if (t_vmap == nullptr || t_vmap->spare_batched.full()) return;
  t_vmap->spare_batched.push(std::move(spent));
}

}  // namespace detail

using detail::batchedOf;
using detail::makeBatched;

bool is_batched(const Tensor& t) { return batchedOf(t) != nullptr; }
std::optional<uint64_t> maybe_get_level(const Tensor& t) {
  const auto* b = batchedOf(t);
  return b ? std::optional<uint64_t>(b->level) : std::nullopt;
}
Dim maybe_get_bdim(const Tensor& t) {
  const auto* b = batchedOf(t);
  return b ? Dim(b->bdim) : std::nullopt;
}
Tensor get_unwrapped(const Tensor& t) {
  const auto* b = batchedOf(t);
  STRATA_CHECK(b != nullptr, Value, "get_unwrapped: the tensor is not a batched tensor");
  return b->value;
}
size_t vmap_depth() { return t_vmap != nullptr ? t_vmap->alive.size() : 0; }
size_t vmap_spare_batched_tensors() { return t_vmap != nullptr ? t_vmap->spare_batched.size() : 0; }

Tensor move_bdim_to_front(const Tensor& t, Dim bdim, int64_t batch_size) {
  if (bdim) return *bdim == 0 ? t : ops::movedim(t, *bdim, 0);
  std::vector<int64_t> size(static_cast<size_t>(t.dim()) + 1, -1);
  size[0] = batch_size;
  return ops::expand(ops::unsqueeze(t, 0), size);
}

const char* toString(Randomness r) {
  switch (r) {
    case Randomness::error: return "error";
    case Randomness::different: return "different";
    case Randomness::same: return "same";
  }
  return "unknown";
}

Randomness parseRandomness(std::string_view name) {
  for (Randomness r : {Randomness::error, Randomness::different, Randomness::same}) {
    if (name == toString(r)) return r;
  }
  STRATA_FAIL(Value, "Only allowed values for randomness are 'error', 'different', or 'same'. Got ", name);
}

std::string DimEntry::str() const {
  auto one = [](const Dim& d) { return d ? std::to_string(*d) : std::string("None"); };
  if (!is_list) return one(dim);
  std::string s = "[";
  for (size_t i = 0; i < elements.size(); ++i) s += (i ? ", " : "") + one(elements[i]);
  return s + "]";
}

std::string Dims::str() const {
  if (!is_tuple_) return all_.str();
  std::string s = "(";
  for (size_t i = 0; i < per_.size(); ++i) s += (i ? ", " : "") + per_[i].str();
  return s + (per_.size() == 1 ? ",)" : ")");
}

// --- The fallback's switch and its warnings --------------------------------

namespace {

std::atomic<bool> g_fallback_enabled{true};

struct Warned {
  std::mutex mu;
  std::set<std::string> ops;
};
Warned& warned() {
  static Warned* w = new Warned();  // leaked: ops may run in static destructors
  return *w;
}

thread_local bool tls_quiet_fallback = false;

void warnOnce(const OperatorHandle& op, int64_t batch_size) {
  if (tls_quiet_fallback) return;  // not remembered either: a real fallback later still warns
  Warned& w = warned();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    if (!w.ops.insert(op.name()).second) return;
  }
  warn("vmap: no batching rule for " + op.name() + "; running a slow for-loop fallback, " +
       std::to_string(batch_size) + " calls");
}

}  // namespace

detail::QuietVmapFallback::QuietVmapFallback() : was(tls_quiet_fallback) { tls_quiet_fallback = true; }
detail::QuietVmapFallback::~QuietVmapFallback() { tls_quiet_fallback = was; }

void set_vmap_fallback_enabled(bool enabled) { g_fallback_enabled.store(enabled, std::memory_order_relaxed); }
bool is_vmap_fallback_enabled() { return g_fallback_enabled.load(std::memory_order_relaxed); }
void reset_vmap_fallback_warnings() {
  Warned& w = warned();
  std::lock_guard<std::mutex> lock(w.mu);
  w.ops.clear();
}

// --- The Batched kernel --------------------------------------------------------

namespace {

std::string dimsStr(const std::vector<Dim>& dims) { return Dims(std::vector<DimEntry>(dims.begin(), dims.end())).str(); }

// A batched tensor whose level is not the current one nor visible below it.
[[noreturn]] void badLevel(const OperatorHandle& op, const detail::BatchedWrapper& b, const Level* cur) {
  if (!isAlive(b.level)) {
    STRATA_FAIL(Value, "vmap: ", op.name(), " got a batched tensor of vmap level ", b.level,
                ", whose vmap has returned (or runs on another thread): a batched tensor must not escape its vmap "
                "(return it from the vmapped function, which unwraps it)");
  }
  STRATA_FAIL(Value, "vmap: ", op.name(), " got a batched tensor of vmap level ", b.level, " while ",
              cur ? "level " + std::to_string(cur->id) + " is the current one" : std::string("no level is current"),
              ": it reached a batching rule of its own level (or of an inner one) by a way other than the rule's "
              "arguments; a rule must not capture batched tensors");
}

// Whether t is batched at the current level; throws for a level that may not be seen.
[[gnu::always_inline]] inline const detail::BatchedWrapper* atLevel(const OperatorHandle& op, const Tensor& t,
                                                                     const Level* cur) {
  const detail::BatchedWrapper* b = batchedOf(t);
  if (b == nullptr) return nullptr;
  if (cur != nullptr && b->level == cur->id) return b;
  if (cur != nullptr && b->level < cur->id && isVisible(b->level)) return nullptr;  // an outer level's: plain here
  badLevel(op, *b, cur);
}

// Applies f(tensor) to every tensor among the op's arguments on the stack.
template <typename F>
void forEachArgTensor(const IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const Tensor& t : v.toTensorList()) f(t);
  } else if (v.isGenericList()) {
    for (const IValue& e : v.toList()) forEachArgTensor(e, f);
  }
}

bool anyAtLevel(const OperatorHandle& op, const Stack& stack, size_t base, const Level* cur) {
  bool any = false;
  for (size_t i = base; i < stack.size(); ++i) {
    forEachArgTensor(stack[i], [&](const Tensor& t) { any = atLevel(op, t, cur) != nullptr || any; });
  }
  return any;
}

// The value of t at the level, with its batch dim at 0 (unbatched: expanded).
Tensor frontOf(const OperatorHandle& op, const Tensor& t, const Level& level) {
  const detail::BatchedWrapper* b = atLevel(op, t, &level);
  return b ? move_bdim_to_front(b->value, b->bdim, level.batch_size)
           : move_bdim_to_front(t, std::nullopt, level.batch_size);
}

// Unwraps the arguments batched at `level` for a rule: in_dims per argument.
// Returns whether any argument is batched at the level (with none, args are as they
// were: nothing is unwrapped).
bool unwrapForRule(const OperatorHandle& op, Stack& args, const Level& level, InDims& in_dims) {
  in_dims.assign(args.size(), std::nullopt);
  bool batched = false;
  for (size_t i = 0; i < args.size(); ++i) {
    IValue& v = args[i];
    if (v.isTensor()) {
      if (const auto* b = atLevel(op, v.toTensor(), &level)) {
        in_dims[i] = b->bdim;
        v = IValue(b->value);
        batched = true;
      }
    } else if (v.isTensorList() || v.isGenericList()) {
      bool any = false;
      forEachArgTensor(v, [&](const Tensor& t) { any = atLevel(op, t, &level) != nullptr || any; });
      if (!any) continue;
      batched = true;
      in_dims[i] = 0;
      if (v.isTensorList()) {
        std::vector<Tensor> out;
        for (const Tensor& t : v.toTensorList()) out.push_back(frontOf(op, t, level));
        v = IValue(std::move(out));
      } else {
        std::vector<IValue> out;
        for (const IValue& e : v.toList()) out.push_back(e.isTensor() ? IValue(frontOf(op, e.toTensor(), level)) : e);
        v = IValue(std::move(out));
      }
    }
  }
  return batched;
}

// A rule's in_dims, from the thread's spares (a rule calls ops, whose rules need
// their own): one allocation per nesting depth, not per call.
class InDimsLease {
 public:
  InDimsLease() {
    std::vector<InDims>& spare = state().spare_in_dims;
    if (!spare.empty()) {
      dims_ = std::move(spare.back());
      spare.pop_back();
    }
  }
  ~InDimsLease() {
    if (t_vmap != nullptr && t_vmap->spare_in_dims.size() < 8) t_vmap->spare_in_dims.push_back(std::move(dims_));
  }
  InDimsLease(const InDimsLease&) = delete;
  InDimsLease& operator=(const InDimsLease&) = delete;
  InDims& operator*() { return dims_; }

 private:
  InDims dims_;
};

// The argument a `Tensor(a!)` return aliases, or -1.
int writtenArgumentOf(const FunctionSchema& schema, size_t ret) {
  const Argument& r = schema.returns()[ret];
  if (!r.alias_info || !r.alias_info->is_write) return -1;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const Argument& a = schema.arguments()[i];
    if (a.is_write() && a.alias_info->before_sets == r.alias_info->before_sets) return static_cast<int>(i);
  }
  return -1;
}

// Output j of a rule, wrapped at the level with out_dim d; checked first.
Tensor wrapRuleOutput(const OperatorHandle& op, Tensor t, Dim d, size_t j, uint64_t level) {
  if (const auto* b = batchedOf(t); b != nullptr && b->level >= level) {
    STRATA_FAIL(Value, "vmap: the batching rule for ", op.name(), " returned (output ", j,
                ") a batched tensor of vmap level ", b->level,
                "; a rule returns the values of its level, which vmap wraps");
  }
  if (!d) return t;
  const int64_t k = t.dim();
  STRATA_CHECK(*d >= -k && *d < k, Value, "vmap: the batching rule for ", op.name(), " returned out_dim ", *d,
               " for output ", j, ", a tensor of dimensionality ", k, ", so expected -", k, " <= out_dim < ", k);
  return makeBatched(std::move(t), *d < 0 ? *d + k : *d, level);
}

// Wraps what a rule returned at the level and pushes it; checks it first.
void pushRuleOutputs(const OperatorHandle& op, VmapResult& result, const Stack& original_args, Stack& stack,
                     const Level& level) {
  const FunctionSchema& schema = op.schema();
  const size_t n = schema.returns().size();
  STRATA_CHECK(result.outputs.size() == n, Value, "vmap: the batching rule for ", op.name(), " returned ",
               result.outputs.size(), " output", result.outputs.size() == 1 ? "" : "s", ", but the op has ", n,
               " (", schema.str(), ")");
  STRATA_CHECK(result.out_dims.size() == n || (result.out_dims.size() == 1 && n > 0), Value,
               "vmap: the batching rule for ", op.name(), " returned ", result.out_dims.size(),
               " out_dims for ", n, " output", n == 1 ? "" : "s", ": give one per output (or one for all)");
  auto wrapOne = [&](Tensor t, Dim d, size_t j) -> Tensor { return wrapRuleOutput(op, std::move(t), d, j, level.id); };
  for (size_t j = 0; j < n; ++j) {
    const Dim d = result.out_dims.size() == 1 ? result.out_dims[0] : result.out_dims[j];
    IValue& v = result.outputs[j];
    if (const int w = writtenArgumentOf(schema, j); w >= 0 && v.isTensor()) {
      // An in-place op returns its (batched) self, as the caller holds it.
      stack.push_back(original_args[static_cast<size_t>(w)]);
      continue;
    }
    if (v.isTensor()) {
      stack.push_back(wrapOne(std::move(v).toTensor(), d, j));
    } else if (v.isTensorList()) {
      std::vector<Tensor> out;
      for (const Tensor& t : v.toTensorList()) out.push_back(wrapOne(t, d, j));
      stack.push_back(IValue(std::move(out)));
    } else {
      STRATA_CHECK(!d, Value, "vmap: the batching rule for ", op.name(), " returned out_dim ", *d, " for output ",
                   j, ", which is not a tensor (", v.typeName(), "); its out_dim must be None");
      stack.push_back(std::move(v));
    }
  }
}

// Whether the op writes its arguments, from its schema, once per rule.
bool isMutable(const OperatorHandle& op, const detail::RuleData& rule) {
  int8_t m = rule.is_mutable.load(std::memory_order_relaxed);
  if (__builtin_expect(m < 0, 0)) {
    m = op.schema().is_mutable() ? 1 : 0;
    rule.is_mutable.store(m, std::memory_order_relaxed);
  }
  return m != 0;
}

// The rule's path through the Batched kernel. Returns false, with the stack as it was,
// when no argument is batched at the level and the rule does not run unbatched:
// the op is then not this level's (Note [vmap levels], 2).
bool runRule(const OperatorHandle& op, Stack& stack, size_t base, const Level& level, const detail::RuleData& rule) {
  // The rule works on the caller's stack when the arguments are all of it (the
  // usual case: no values moved), else on a stack of their own.
  Stack own;
  if (base != 0) {
    own.assign(std::make_move_iterator(stack.begin() + static_cast<std::ptrdiff_t>(base)),
               std::make_move_iterator(stack.end()));
    stack.resize(base);
  }
  Stack& args = base == 0 ? stack : own;
  Stack original;
  if (isMutable(op, rule)) original = args;
  InDimsLease lease;
  InDims& in_dims = *lease;
  std::optional<LevelPop> pop;
  pop.emplace();
  if (!unwrapForRule(op, args, level, in_dims) && !rule.runs_unbatched) {
    // Nothing was unwrapped: the arguments are as they came.
    pop.reset();
    if (base != 0) stack.insert(stack.end(), std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
    return false;
  }
  const bool observed = dispatch_observed();
  std::string note;
  if (observed) {
    note = "vmap level " + std::to_string(level.id) + ", batch size " + std::to_string(level.batch_size) +
           ": batching rule with in_dims " + dimsStr(in_dims);
  }
  VmapResult result = rule.fn(VmapInfo{level.batch_size, level.randomness}, in_dims, args);
  if (observed) note_dispatch_step(note + ", out_dims " + dimsStr(result.out_dims));
  if (base == 0) stack.clear();  // the arguments (what the rule left of them) make way for the results
  pushRuleOutputs(op, result, original, stack, level);
  return true;
}

bool returnsAliasInput(const FunctionSchema& schema) {
  for (const Argument& r : schema.returns()) {
    if (r.alias_info && !r.alias_info->is_write) return true;
  }
  return false;
}

bool allReturnsTensors(const FunctionSchema& schema) {
  for (const Argument& r : schema.returns()) {
    if (r.type->kind() != TypeKind::Tensor) return false;
  }
  return true;
}

// Batch element i of an argument: each tensor batched at the level sliced at i.
IValue sliceArg(const OperatorHandle& op, const IValue& v, const Level& level, int64_t i) {
  auto one = [&](const Tensor& t) -> Tensor {
    const auto* b = atLevel(op, t, &level);
    if (b == nullptr) return t;
    return b->value.wrapper() == nullptr ? b->value.select(b->bdim, i) : ops::select(b->value, b->bdim, i);
  };
  return detail::mapTensors(v, one);
}

// Note [Random ops without a batching rule]
// An op tagged nondeterministic_seeded (strata/tag.h) draws from the generator, so
// vmap's randomness decides what the fallback does with it: "error" refuses it;
// "different" runs it once per batch element even when no argument is batched (each
// element draws its own values); "same" gives every element the draws of the first
// (the default generator's state is rewound before each call, so an op that draws
// from strata's generator gets the same values for each slice) and, with nothing
// batched, runs once, its result shared. An op without the tag is taken to be
// deterministic, as PyTorch's fallback does.
void runFallback(const OperatorHandle& op, Stack& stack, size_t base, const Level& level, bool random) {
  const FunctionSchema& schema = op.schema();
  if (!is_vmap_fallback_enabled()) {
    STRATA_FAIL(NotImplemented, "Batching rule not implemented for ", op.name(),
                ". We could not generate a fallback (the vmap for-loop fallback is off: "
                "set_vmap_fallback_enabled(true) turns it on, or register_vmap gives the op a rule).");
  }
  STRATA_CHECK(allReturnsTensors(schema), NotImplemented, "Batching rule not implemented for ", op.name(),
               ". We could not generate a fallback: the for-loop fallback stacks tensor results, and ", schema.str(),
               " returns something else.");
  const bool mutates = schema.is_mutable();
  STRATA_CHECK(mutates || !returnsAliasInput(schema), NotImplemented, "Batching rule not implemented for ",
               op.name(), "; the fallback path doesn't work on out= or view ops (", schema.str(), ").");
  Stack args(std::make_move_iterator(stack.begin() + static_cast<std::ptrdiff_t>(base)),
             std::make_move_iterator(stack.end()));
  stack.resize(base);
  if (mutates) {
    // In place: every result must be a written argument (the loop returns those),
    // checked before anything is written.
    for (size_t j = 0; j < schema.returns().size(); ++j) {
      STRATA_CHECK(writtenArgumentOf(schema, j) >= 0, NotImplemented, "Batching rule not implemented for ",
                   op.name(), ". We could not generate a fallback: it writes its arguments and its output ", j,
                   " is not one of them (", schema.str(), ").");
    }
    // Every written argument must be batched at this level, or the results of the
    // batch elements would all land in one place.
    for (size_t i = 0; i < args.size(); ++i) {
      if (!schema.arguments()[i].is_write()) continue;
      bool batched = false;
      forEachArgTensor(args[i], [&](const Tensor& t) { batched = atLevel(op, t, &level) != nullptr || batched; });
      STRATA_CHECK(batched, Value, "vmap: ", op.name(), "(", schema.arguments()[i].name,
                   ", *extra_args) is not possible because there exists a Tensor `other` in extra_args that has more "
                   "elements than `", schema.arguments()[i].name, "`. This happened due to `other` being vmapped over "
                   "but `", schema.arguments()[i].name, "` not being vmapped over in a vmap. Please try to use "
                   "out-of-place operators instead of ", op.name(), ".");
    }
  }
  warnOnce(op, level.batch_size);
  if (dispatch_observed()) {
    note_dispatch_step("vmap level " + std::to_string(level.id) + ": no batching rule for " + op.name() +
                       "; for-loop fallback, " + std::to_string(level.batch_size) + " calls" +
                       (mutates ? " writing each slice in place" : ", results stacked at dim 0"));
  }
  const size_t nret = schema.returns().size();
  std::vector<std::vector<Tensor>> results(nret);  // per output, per batch element
  std::vector<Tensor> stacked(nret);
  {
    LevelPop pop;
    const std::string rng = random && level.randomness == Randomness::same ? ops::get_rng_state() : std::string();
    for (int64_t i = 0; i < level.batch_size; ++i) {
      if (!rng.empty() && i > 0) ops::set_rng_state(rng);
      Stack slice;
      slice.reserve(args.size());
      for (const IValue& v : args) slice.push_back(sliceArg(op, v, level, i));
      op.callBoxed(slice);
      if (mutates) continue;
      for (size_t j = 0; j < nret; ++j) results[j].push_back(slice[j].toTensor());
    }
    if (!mutates) {
      for (size_t j = 0; j < nret; ++j) {
        // A batch of 0 has no element to take the result's shape from.
        STRATA_CHECK(!results[j].empty(), NotImplemented, "vmap: the for-loop fallback for ", op.name(),
                     " cannot run a batch of size 0");
        stacked[j] = ops::stack(results[j], 0);
      }
    }
  }
  for (size_t j = 0; j < nret; ++j) {
    if (mutates) {
      stack.push_back(args[static_cast<size_t>(writtenArgumentOf(schema, j))]);
    } else {
      stack.push_back(makeBatched(stacked[j], 0, level.id));
    }
  }
}

}  // namespace

namespace detail {

void batchedKernel(const OperatorHandle& op, Stack& stack, const RuleData* rule) {
  const size_t nargs = op.schema().arguments().size();
  const size_t base = stack.size() - nargs;
  const Level* cur = anyVisible() ? &t_vmap->visible.back() : nullptr;
  if (rule != nullptr && cur != nullptr) {
    // The rule looks at each argument once, unwrapping as it goes (atLevel throws for
    // a level that may not be seen, as anyAtLevel below does).
    const Level level = *cur;
    if (runRule(op, stack, base, level, *rule)) return;
    rule = nullptr;  // not this level's op: the same path as without a rule
  }
  const bool any = anyAtLevel(op, stack, base, cur);  // throws for a level that may not be seen
  if (cur == nullptr) {
    // Reached through the Batched key of a tensor whose level is gone: anyAtLevel threw.
    // Only a caller that included Batched by hand gets here: run below the layer.
    ExcludeDispatchKeyGuard no_batched(DispatchKey::Batched);
    op.callBoxed(stack);
    return;
  }
  // Note [Random ops without a batching rule]
  const bool random = op.hasTag(Tag::nondeterministic_seeded);
  if (random && cur->randomness == Randomness::error) {
    STRATA_FAIL(Value, "vmap: called random operation (", op.name(), ", tagged nondeterministic_seeded) while in "
                "randomness error mode. Please either use the 'same' or 'different' randomness flags on vmap or "
                "perform the randomness operation out of vmap");
  }
  if (!any && random && cur->randomness == Randomness::different) {
    const Level level = *cur;
    runFallback(op, stack, base, level, random);
    return;
  }
  if (!any) {
    // Not this level's op: the next level down sees it (Note [vmap levels], 2).
    if (dispatch_observed()) {
      note_dispatch_step("vmap level " + std::to_string(cur->id) + ": no argument is batched at this level; "
                         "passed to the level below");
    }
    LevelPop pop;
    op.callBoxed(stack);
    return;
  }
  const Level level = *cur;
  runFallback(op, stack, base, level, random);
}

void runBatchedKernel(const OperatorHandle& op, Stack& stack, const RuleData& rule) { batchedKernel(op, stack, &rule); }

// The typed path of a rule (register_vmap<Sig>): runRule's steps, with the values
// the caller passed instead of a stack. What it does not take (--explain's notes, an
// op not of this level, a rule that runs unbatched) is left to the boxed path.
bool TypedRuleFrame::enter(const OperatorHandle& op, const Tensor* const* tensors, const Tensor** values, Dim* bdims,
                           size_t n) {
  if (!anyVisible() || dispatch_observed()) return false;
  const Level& cur = t_vmap->visible.back();
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    values[i] = tensors[i];
    bdims[i] = std::nullopt;
    if (tensors[i] == nullptr) continue;
    if (const BatchedWrapper* b = atLevel(op, *tensors[i], &cur)) {
      values[i] = &b->value;
      bdims[i] = b->bdim;
      any = true;
    }
  }
  if (!any) return false;
  level_ = cur.id;
  batch_size_ = cur.batch_size;
  randomness_ = cur.randomness;
  t_vmap->visible.pop_back();
  syncBatchedKey();
  entered_ = true;
  return true;
}

Tensor TypedRuleFrame::wrap(const OperatorHandle& op, Tensor&& out, Dim d, size_t j) const {
  return wrapRuleOutput(op, std::move(out), d, j, level_);
}

void TypedRuleFrame::leave() noexcept {
  // The level came off this stack in enter(): its slot is still reserved.
  t_vmap->visible.push_back(Level{level_, batch_size_, randomness_});
  syncBatchedKey();
  entered_ = false;
}

}  // namespace detail

// --- register_vmap -------------------------------------------------------------

namespace detail {

RegistrationHandleRAII addVmapRule(std::string_view op_text, VmapRule rule, bool runs_unbatched, bool allow_override,
                                   const std::string& debug, const char* api) {
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration(std::string(api) + "(" + std::string(op_text) + ") (" + debug +
                                                    ")");
  }
  STRATA_CHECK(rule != nullptr, Value, api, "(", op_text, "): the rule is empty");
  const OperatorName name = parseOperatorName(op_text);
  Dispatcher& d = Dispatcher::singleton();
  auto handle = d.findSchema(name);
  STRATA_CHECK(handle.has_value(), NotImplemented, api, "(", op_text, "): no operator named ", name.str(),
               " has a schema; define it first (Library::def)");
  if (!allow_override) {
    refuseSecondRule(name, DispatchKey::Batched, std::string(api) + "(" + std::string(op_text) + ")",
                     "a batching rule", debug);
  }
  auto data = std::make_shared<const RuleData>(std::move(rule), runs_unbatched);
  return d.registerImpl(name, DispatchKey::Batched,
                        KernelFunction::makeFromBoxedFunctor(
                            [data](const OperatorHandle& op, DispatchKeySet, Stack& stack) {
                              batchedKernel(op, stack, data.get());
                            }),
                        {RegistrationOwnerGuard::current(), "vmap batching rule; " + debug, allow_override});
}

RegistrationHandleRAII addTypedVmapRule(std::string_view op_text, VmapRule boxed, TypedKernelMaker make,
                                        bool allow_override, std::source_location where) {
  initialize();
  const std::string debug = registeredAt(where);
  const char* api = "register_vmap<Sig>";
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration(std::string(api) + "(" + std::string(op_text) + ") (" + debug +
                                                    ")");
  }
  STRATA_INTERNAL_ASSERT(boxed != nullptr && make != nullptr, "addTypedVmapRule: register_vmap<Sig> checks the rule");
  const OperatorName name = parseOperatorName(op_text);
  Dispatcher& d = Dispatcher::singleton();
  auto handle = d.findSchema(name);
  STRATA_CHECK(handle.has_value(), NotImplemented, api, "(", op_text, "): no operator named ", name.str(),
               " has a schema; define it first (Library::def)");
  // An op that writes its arguments returns its (batched) self under vmap, which the
  // boxed path does (pushRuleOutputs) and the typed form's fresh outputs cannot.
  STRATA_CHECK(!handle->schema().is_mutable(), Schema, api, "(", op_text, "): ", name.str(),
               " writes its arguments (", handle->schema().str(), "); a typed rule is for ops that do not: give it a "
               "rule in the boxed form (register_vmap with a VmapRule)");
  if (!allow_override) {
    refuseSecondRule(name, DispatchKey::Batched, std::string(api) + "(" + std::string(op_text) + ")",
                     "a batching rule", debug);
  }
  auto data = std::make_shared<const RuleData>(std::move(boxed), false);
  return d.registerImpl(name, DispatchKey::Batched, make(*handle, std::move(data)),
                        {RegistrationOwnerGuard::current(), "vmap batching rule (typed); " + debug, allow_override});
}

RegistrationHandleRAII registerVmapFallback() {
  RegistrationOwnerGuard owner("builtin");
  return Dispatcher::singleton().registerFallback(
      DispatchKey::Batched,
      KernelFunction::makeFromBoxedFunctor(
          [](const OperatorHandle& op, DispatchKeySet, Stack& stack) { batchedKernel(op, stack, nullptr); }),
      {"builtin", "vmap for-loop fallback (slices, calls the op per batch element, stacks); " +
                      modes::detail::registeredAt(std::source_location::current()),
       false});
}

}  // namespace detail

RegistrationHandleRAII register_vmap(std::string_view op, VmapRule rule, bool allow_override,
                                     std::source_location where) {
  initialize();
  return detail::addVmapRule(op, std::move(rule), false, allow_override, detail::registeredAt(where),
                             "register_vmap");
}

void register_vmap(std::string_view op, VmapRule rule, Library& lib, bool allow_override,
                   std::source_location where) {
  lib.keep(register_vmap(op, std::move(rule), allow_override, where));
}

// --- vmap()'s call machinery ---------------------------------------------------

namespace detail {

std::string VmapCall::prefix() const { return "vmap(fn, in_dims=" + in_dims_.str() + ", ...)(<inputs>): "; }

VmapCall::VmapCall(const Dims& in_dims, const Dims& out_dims, Randomness randomness,
                   std::optional<int64_t> chunk_size, size_t num_args)
    : in_dims_(in_dims), out_dims_(out_dims), randomness_(randomness), chunk_size_(chunk_size) {
  initialize();
  STRATA_CHECK(num_args > 0, Value,
               "vmap(fn)(<inputs>): got no inputs. Maybe you forgot to add inputs, or you are trying to vmap over a "
               "function with no inputs. The latter is unsupported.");
  if (in_dims.is_tuple()) {
    STRATA_CHECK(in_dims.entries().size() == num_args, Value, prefix(),
                 "in_dims is not compatible with the structure of `inputs`. in_dims has ", in_dims.entries().size(),
                 " entr", in_dims.entries().size() == 1 ? "y" : "ies", " but inputs has ", num_args, " argument",
                 num_args == 1 ? "" : "s", ".");
  }
}

VmapCall::~VmapCall() { exitChunk(); }

namespace {

const DimEntry& entryFor(const Dims& dims, size_t arg) { return dims.is_tuple() ? dims.entries()[arg] : dims.all(); }

// Pushes a new level of this thread (Note [vmap levels]) and returns its id.
[[gnu::always_inline]] inline uint64_t pushThreadLevel(int64_t batch_size, Randomness randomness) {
  VmapTls& s = state();
  if (__builtin_expect(s.next_level == s.level_end, 0)) {
    // A block of ids at a time: no atomic per vmap call. Blocks are taken in increasing
    // order, so a thread's levels still increase (atLevel reads an older id as outer).
    s.next_level = g_next_level.fetch_add(kLevelBlock, std::memory_order_relaxed);
    s.level_end = s.next_level + kLevelBlock;
  }
  const uint64_t level = s.next_level++;
  s.visible.push_back(Level{level, batch_size, randomness});
  s.alive.push_back(level);
  syncBatchedKey();
  return level;
}

// Pops the level pushThreadLevel gave: it is on top of the stack (a rule has put
// back what it took). The inputs its call tracked are released for reuse (and any an
// inner vmap left, which cannot happen but must not stay held).
[[gnu::always_inline]] inline void popThreadLevel(uint64_t level) noexcept {
  VmapTls& s = *t_vmap;
  while (!s.call_inputs.empty() && s.call_inputs.back().first >= level) {
    Tensor t = std::move(s.call_inputs.back().second);
    s.call_inputs.pop_back();
    releaseBatched(std::move(t));
  }
  for (size_t i = s.visible.size(); i > 0; --i) {
    if (s.visible[i - 1].id == level) {
      s.visible.erase(s.visible.begin() + static_cast<std::ptrdiff_t>(i - 1));
      break;
    }
  }
  for (size_t i = s.alive.size(); i > 0; --i) {
    if (s.alive[i - 1] == level) {
      s.alive.erase(s.alive.begin() + static_cast<std::ptrdiff_t>(i - 1));
      break;
    }
  }
  syncBatchedKey();
}

// The usual result of a one-chunk call: batched at its level with its batch dim
// already where out_dims puts it, so the value is the result (out is spent). Null
// for anything else, which VmapCall::collectOutputs handles.
[[gnu::always_inline]] inline std::optional<Tensor> valueAtOutDim(const Dims& out_dims, Tensor& out, uint64_t level) {
  if (out_dims.is_tuple() || out_dims.all().is_list || !out_dims.all().dim) return std::nullopt;
  const BatchedWrapper* b = batchedOf(out);
  if (b == nullptr || b->level != level) return std::nullopt;
  const int64_t rank = out.dim() + 1;
  const int64_t d = *out_dims.all().dim;
  if (d < -rank || d >= rank || b->bdim != (d < 0 ? d + rank : d)) return std::nullopt;
  Tensor result = b->value;
  releaseBatched(std::move(out));
  return result;
}

// The in_dim of one tensor input, normalized; the message names where it is.
Dim checkInDim(const std::string& prefix, size_t arg, std::optional<size_t> element, const Dim& d, const Tensor& t) {
  STRATA_CHECK(t.defined(), Value, prefix, "argument ", arg, element ? ", element " + std::to_string(*element) : "",
               " is an undefined tensor");
  if (!d) return d;
  const int64_t n = t.dim();
  STRATA_CHECK(*d >= -n && *d < n, Value, prefix, "Got in_dim=", *d, " for some input (argument ", arg,
               element ? ", element " + std::to_string(*element) : "", "), but that input is a Tensor of "
               "dimensionality ", n, " so expected in_dim to satisfy -", n, " <= in_dim < ", n, ".");
  return *d < 0 ? *d + n : *d;
}

}  // namespace

void VmapCall::addTensor(size_t arg, const Tensor& t) {
  const DimEntry& e = entryFor(in_dims_, arg);
  if (e.is_list) {
    STRATA_FAIL(Value, prefix(), "in_dims is not compatible with the structure of `inputs`: in_dim ", e.str(),
                " is a list, but argument ", arg, " is a Tensor.");
  }
  // Cheap checks first; the message (a string) is built only on failure.
  const int64_t n = t.defined() ? t.dim() : -1;
  Dim d = e.dim;
  if (!t.defined() || (d && (*d < -n || *d >= n))) d = checkInDim(prefix(), arg, std::nullopt, e.dim, t);
  if (d && *d < 0) *d += n;
  tensors_.emplace_back(d, d ? t.sizes()[static_cast<size_t>(*d)] : 0);
}

void VmapCall::addList(size_t arg, const std::vector<Tensor>& ts) {
  const DimEntry& e = entryFor(in_dims_, arg);
  if (e.is_list && e.elements.size() != ts.size()) {
    STRATA_FAIL(Value, prefix(), "in_dims is not compatible with the structure of `inputs`: in_dim ", e.str(),
                " has ", e.elements.size(), " entries, but argument ", arg, " is a list of ", ts.size(), " tensors.");
  }
  for (size_t k = 0; k < ts.size(); ++k) {
    const Dim d = checkInDim(prefix(), arg, k, e.is_list ? e.elements[k] : e.dim, ts[k]);
    tensors_.emplace_back(d, d ? ts[k].sizes()[static_cast<size_t>(*d)] : 0);
  }
}

void VmapCall::addOther(size_t arg, const std::type_info& type) {
  const DimEntry& e = entryFor(in_dims_, arg);
  STRATA_CHECK(!e.is_list && !e.dim, Value, prefix(), "Got in_dim=", e.str(), " for an input (argument ", arg,
               ") but the input is of type ", demangle(type),
               ". We cannot vmap over non-Tensor arguments, please use None as the respective in_dim");
}

void VmapCall::start() {
  bool any = false;
  bool differ = false;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!tensors_[i].dim) continue;
    if (any && tensors_[i].size != batch_size_) differ = true;
    if (!any) batch_size_ = tensors_[i].size;
    any = true;
  }
  STRATA_CHECK(any, Value, "vmap: Expected at least one Tensor to vmap over (in_dims=", in_dims_.str(),
               " maps none of the inputs)");
  if (differ) {
    std::string list = "[";
    bool first = true;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (!tensors_[i].dim) continue;
      list += (first ? "" : ", ") + std::to_string(tensors_[i].size);
      first = false;
    }
    STRATA_FAIL(Value, "vmap: Expected all tensors to have the same size in the mapped dimension, got sizes ", list,
                "] for the mapped dimension");
  }
  step_ = chunk_size_ ? std::min<int64_t>(*chunk_size_, std::max<int64_t>(batch_size_, 1)) : batch_size_;
  if (step_ <= 0) step_ = 1;
  // randomness "same": every chunk starts from the same generator state, as
  // torch.vmap's chunked path restores it, so the batch shares one draw.
  if (randomness_ == Randomness::same && numChunks() > 1) rng_state_ = ops::get_rng_state();
}

size_t VmapCall::numChunks() const {
  if (batch_size_ <= step_) return 1;
  return static_cast<size_t>((batch_size_ + step_ - 1) / step_);
}

void VmapCall::enterChunk(size_t chunk) {
  if (chunk > 0 && !rng_state_.empty()) ops::set_rng_state(rng_state_);
  chunk_ = chunk;
  cursor_ = 0;
  const int64_t start = static_cast<int64_t>(chunk) * step_;
  level_ = pushThreadLevel(std::min(step_, batch_size_ - start), randomness_);
  in_chunk_ = true;
}

void VmapCall::exitChunk() {
  if (!in_chunk_) return;
  in_chunk_ = false;
  popThreadLevel(level_);
}

Tensor VmapCall::input(const Tensor& t) {
  const Dim d = tensors_[cursor_++].dim;
  if (!d) return t;
  Tensor piece = t;
  if (numChunks() > 1) {
    const int64_t start = static_cast<int64_t>(chunk_) * step_, length = std::min(step_, batch_size_ - start);
    piece = t.wrapper() == nullptr ? t.slice(*d, start, start + length) : ops::narrow(t, *d, start, length);
  }
  Tensor batched = makeBatched(std::move(piece), *d, level_);
  std::vector<std::pair<uint64_t, Tensor>>& in = state().call_inputs;
  if (in.size() < kMaxCallInputs) in.emplace_back(level_, batched);  // reserved: no allocation
  return batched;
}

void VmapCall::enterTensors(const Tensor* const* inputs, Tensor* wrapped, size_t n) {
  STRATA_INTERNAL_ASSERT(!chunk_size_, "VmapCall::enterTensors: a call with a chunk_size takes the general path");
  for (size_t i = 0; i < n; ++i) addTensor(i, *inputs[i]);
  start();
  enterChunk(0);
  // One chunk: each mapped input is wrapped whole (input() without the slicing); the
  // caller spends the wrapped ones (exitTensors), so they are not tracked here.
  for (size_t i = 0; i < n; ++i) {
    const Dim d = tensors_[i].dim;
    wrapped[i] = d ? makeBatched(*inputs[i], *d, level_) : *inputs[i];
  }
}

void VmapCall::exitTensors(Tensor* wrapped, size_t n) {
  for (size_t i = n; i > 0; --i) {
    if (tensors_[i - 1].dim) releaseBatched(std::move(wrapped[i - 1]));
  }
  exitChunk();
}

Tensor VmapCall::finishTensor(Tensor out) {
  if (std::optional<Tensor> value = valueAtOutDim(out_dims_, out, level_)) return std::move(*value);
  Leaves leaves;
  leaves.emplace_back(size_t{0}, &out, &typeid(Tensor));
  collectOutputs(1, true, leaves);
  finish(leaves);
  return out;
}

// --- VmapTensorsCall: the usual call, lean. -------------------------------------

void VmapTensorsCall::startGeneral(VmapCall& call) const {
  for (size_t i = 0; i < n_; ++i) call.addTensor(i, *inputs_[i]);
  call.start();
}

void VmapTensorsCall::unusualInputs() const {
  VmapCall call(in_dims_, out_dims_, randomness_, std::nullopt, n_);
  startGeneral(call);
  STRATA_INTERNAL_ASSERT(false, "vmap: an input the short path refused passed VmapCall's checks");
}

void VmapTensorsCall::enter(Tensor* wrapped) {
  initialize();
  // VmapCall::addTensor and start's checks, with nothing recorded: the first input
  // that is not usual (or sizes that differ) hands the whole check to a VmapCall.
  STRATA_INTERNAL_ASSERT(n_ <= kMaxInputs, "VmapTensorsCall: more than 64 inputs take the general path");
  int64_t dims[kMaxInputs];
  int64_t batch = 0;  // a symbolic size is negative: seen says whether there is one
  bool seen = false;
  if (in_dims_.is_tuple() && in_dims_.entries().size() != n_) unusualInputs();
  for (size_t i = 0; i < n_; ++i) {
    const DimEntry& e = entryFor(in_dims_, i);
    const Tensor& t = *inputs_[i];
    if (e.is_list || !t.defined()) unusualInputs();
    if (!e.dim) continue;
    const int64_t rank = t.dim();
    const int64_t d = *e.dim < 0 ? *e.dim + rank : *e.dim;
    if (d < 0 || d >= rank) unusualInputs();
    const int64_t size = t.sizes()[static_cast<size_t>(d)];
    if (seen && size != batch) unusualInputs();
    batch = size;
    seen = true;
    dims[i] = d;
    mapped_ |= uint64_t{1} << i;
  }
  if (!seen) unusualInputs();  // nothing mapped
  level_ = pushThreadLevel(batch, randomness_);  // VmapCall::enterChunk(0)
  entered_ = true;
  for (size_t i = 0; i < n_; ++i) {
    wrapped[i] = (mapped_ >> i) & 1 ? makeBatched(*inputs_[i], dims[i], level_) : *inputs_[i];
  }
}

void VmapTensorsCall::exit(Tensor* wrapped) noexcept {
  for (size_t i = n_; i > 0; --i) {
    if ((mapped_ >> (i - 1)) & 1) releaseBatched(std::move(wrapped[i - 1]));
  }
  popLevel();
}

void VmapTensorsCall::popLevel() noexcept {
  entered_ = false;
  popThreadLevel(level_);
}

Tensor VmapTensorsCall::finish(Tensor out) {
  if (std::optional<Tensor> value = valueAtOutDim(out_dims_, out, level_)) return std::move(*value);
  // Anything else: VmapCall's checks and moves, as of its one chunk at this level.
  VmapCall call(in_dims_, out_dims_, randomness_, std::nullopt, n_);
  startGeneral(call);
  call.level_ = level_;
  VmapCall::Leaves leaves;
  leaves.emplace_back(size_t{0}, &out, &typeid(Tensor));
  call.collectOutputs(1, true, leaves);
  call.finish(leaves);
  return out;
}

std::vector<Tensor> VmapCall::inputList(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(input(t));
  return out;
}

void VmapCall::collectOutputs(size_t num_outputs, bool single_tensor, Leaves& leaves) {
  const Dims& od = out_dims_;
  auto where = [&] { return "vmap(fn, ..., out_dims=" + od.str() + ")(<inputs>): "; };
  if (od.is_tuple() && od.entries().size() != num_outputs) {
    STRATA_FAIL(Value, where(), "out_dims is not compatible with the structure of `outputs`. out_dims has ",
                od.entries().size(), " entr", od.entries().size() == 1 ? "y" : "ies", " but outputs has ", num_outputs,
                " output", num_outputs == 1 ? "" : "s", single_tensor ? " (one Tensor)." : ".");
  }
  const bool first_chunk = results_.empty();
  if (first_chunk) {
    for (size_t i = 0; i < leaves.size(); ++i) results_.emplace_back();
  }
  STRATA_CHECK(results_.size() == leaves.size(), Value, "vmap(fn, ...): fn returned ", leaves.size(),
               " values in one chunk and ", results_.size(), " in another");
  const int64_t batch = std::min(step_, batch_size_ - static_cast<int64_t>(chunk_) * step_);
  const bool chunked = numChunks() > 1;
  size_t element = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Leaf& leaf = leaves[i];
    element = (i > 0 && leaves[i - 1].output == leaf.output) ? element + 1 : 0;
    const DimEntry& e = od.is_tuple() ? od.entries()[leaf.output] : od.all();
    Dim d = e.dim;
    if (e.is_list) {
      // A list out_dim belongs to a list output, one dim per element.
      size_t count = 0;
      for (size_t k = 0; k < leaves.size(); ++k) count += leaves[k].output == leaf.output ? 1 : 0;
      const bool list_output = leaf.list || count != 1;
      STRATA_CHECK(list_output && count == e.elements.size(), Value, where(), "out_dims is not compatible with the "
                   "structure of `outputs`: out_dim ", e.str(), " has ", e.elements.size(), " entries for output ",
                   leaf.output, ", which is ", list_output ? "a list of " + std::to_string(count) : std::string("a Tensor"),
                   ".");
      d = e.elements[element];
    }
    if (leaf.tensor == nullptr) {
      STRATA_CHECK(!d, Value, "vmap(fn, ...): `fn` must only return Tensors, got type ", demangle(*leaf.type),
                   " (output ", leaf.output, "). Did you mean to set out_dims= to None for output?");
      continue;
    }
    const Tensor& t = *leaf.tensor;
    STRATA_CHECK(t.defined(), Value, "vmap(fn, ...): `fn` returned an undefined tensor (output ", leaf.output, ")");
    const BatchedWrapper* b = batchedOf(t);
    if (b != nullptr && b->level != level_ && !isVisible(b->level)) {
      STRATA_FAIL(Value, "vmap(fn, ...): `fn` returned (output ", leaf.output, ") a batched tensor of vmap level ",
                  b->level, ", which is not this vmap's level (", level_, ") nor an outer one: it escaped its own "
                  "vmap");
    }
    const bool mine = b != nullptr && b->level == level_;
    LeafOut& r = results_[i];
    Tensor out;
    if (!d) {
      // Batched at any level, as PyTorch's is_batchedtensor: PyTorch refuses an
      // outer level's batched tensor here too.
      STRATA_CHECK(b == nullptr, Value, "vmap(fn, ...): `fn` can not return a BatchedTensor when out_dim is None (output ",
                   leaf.output, mine ? ")" : ", batched by an outer vmap)");
      out = t;
    } else {
      const int64_t rank = t.dim() + 1;
      STRATA_CHECK(*d >= -rank && *d < rank, Index, where(), "Dimension out of range (expected to be in range of [",
                   -rank, ", ", rank - 1, "], but got ", *d, ") for output ", leaf.output, " of dimensionality ",
                   rank - 1, " plus the batch dim");
      const int64_t o = *d < 0 ? *d + rank : *d;
      r.dim = o;
      if (mine) {
        out = b->bdim == o ? b->value : ops::movedim(b->value, b->bdim, o);
      } else {
        // Not batched at this level: the same value for every batch element.
        std::vector<int64_t> size(static_cast<size_t>(rank), -1);
        size[static_cast<size_t>(o)] = batch;
        out = ops::expand(ops::unsqueeze(t, o), size);
      }
    }
    if (!chunked) {
      r.first = std::move(out);
    } else {
      if (first_chunk) r.first = out;
      r.chunks.push_back(std::move(out));
    }
  }
}

void VmapCall::finish(Leaves& leaves) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].tensor == nullptr) continue;
    LeafOut& r = results_[i];
    Tensor spent = std::move(*leaves[i].tensor);  // the batched output, when fn returned one
    *leaves[i].tensor = r.chunks.size() > 1 && r.dim ? ops::cat(r.chunks, *r.dim) : std::move(r.first);
    releaseBatched(std::move(spent));
  }
}

}  // namespace detail

}  // namespace strata::modes
