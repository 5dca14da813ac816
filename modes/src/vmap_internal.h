// What the vmap layer's files share: batched tensors and the Batched kernel.
#pragma once

#include <atomic>
#include <string>
#include <typeinfo>

#include "strata/modes/vmap.h"

namespace strata::modes::detail {

// A batched tensor's TensorWrapper (Note [Wrapper tensors], Note [vmap levels]).
class BatchedWrapper final : public TensorWrapper {
 public:
  BatchedWrapper(Tensor v, int64_t b, uint64_t l);
  std::string what() const override;
  std::string str() const override;

  // Set when made, and again only when a spent one is reused (Note [Reusing wrapper
  // tensors]): read them as constants.
  Tensor value;  // plain, or batched at an outer level
  int64_t bdim;  // 0 <= bdim < value.dim()
  uint64_t level;
};

// The wrapper of a tensor batched at any level; null for any other tensor. Inline:
// every Batched kernel and vmap call asks it of each tensor.
inline const BatchedWrapper* batchedOf(const Tensor& t) {
  if (!t.defined()) return nullptr;
  const TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->key_set().has(DispatchKey::Batched)) return nullptr;
  const TensorWrapper* w = impl->wrapper();
  if (w == nullptr || typeid(*w) != typeid(BatchedWrapper)) return nullptr;
  return static_cast<const BatchedWrapper*>(w);
}
// value seen without its dim bdim, batched at level (a spent batched tensor of this
// thread's reused when there is one).
Tensor makeBatched(Tensor value, int64_t bdim, uint64_t level);
// Keeps t for makeBatched to reuse when it is a batched tensor that nothing else holds
// (Note [Reusing wrapper tensors] in strata/tensor.h); otherwise just drops it.
void releaseBatched(Tensor&& t) noexcept;

struct RuleData {
  RuleData(VmapRule f, bool unbatched) : fn(std::move(f)), runs_unbatched(unbatched) {}
  VmapRule fn;
  // Run even when no argument is batched at the level (random ops: randomness decides).
  bool runs_unbatched = false;
  // Whether the op's schema writes an argument: -1 until first asked.
  mutable std::atomic<int8_t> is_mutable{-1};
};

// The Batched kernel of every op: its rule (null: the for-loop fallback).
void batchedKernel(const OperatorHandle& op, Stack& stack, const RuleData* rule);

RegistrationHandleRAII addVmapRule(std::string_view op, VmapRule rule, bool runs_unbatched, bool allow_override,
                                   const std::string& debug, const char* api);
RegistrationHandleRAII registerVmapFallback();
// The core:: ops' rules (batching_rules.cc), owner "builtin".
void registerCoreBatchingRules(std::vector<RegistrationHandleRAII>& keep);

// While one lives, this thread's for-loop fallback runs without its "no batching
// rule" warning: opcheck's test_vmap switches an op's rule off on purpose to compare
// it with the loop, and the op does have a rule.
struct QuietVmapFallback {
  QuietVmapFallback();
  ~QuietVmapFallback();
  QuietVmapFallback(const QuietVmapFallback&) = delete;
  QuietVmapFallback& operator=(const QuietVmapFallback&) = delete;
  bool was;
};

}  // namespace strata::modes::detail
