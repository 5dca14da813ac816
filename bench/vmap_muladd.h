// The vmap scenarios' op and rule, shared by bench/vmap_bench.cc and the callgrind
// driver bench/dispatch_count.cc, so both measure the same work: a*b+c into a new
// tensor, as a kernel does, and a register_vmap rule that moves the batch dims to
// the front and makes one call for the batch (as muladd 1.1.0's).
#pragma once

#include "strata/modes/vmap.h"
#include "strata/strata.h"

namespace strata::bench {

using VmSig = Tensor(const Tensor&, const Tensor&, double);

inline Tensor muladd_vm_cpu(const Tensor& a, const Tensor& b, double c) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = empty(a.sizes(), ScalarType::Float);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const auto cf = static_cast<float>(c);
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] * pb[i] + cf;
  return out;
}

// The batching rule of `op` (a muladd-shaped op).
inline modes::VmapRule muladdVmapRule(TypedOperatorHandle<VmSig> op) {
  return [op](const modes::VmapInfo& info, const modes::InDims& in_dims, Stack& args) -> modes::VmapResult {
    const Tensor a = modes::move_bdim_to_front(args[0].toTensor(), in_dims[0], info.batch_size);
    const Tensor b = modes::move_bdim_to_front(args[1].toTensor(), in_dims[1], info.batch_size);
    return {{op.call(a, b, args[2].toDouble())}, {0}};
  };
}

// The same rule in the typed form (register_vmap<VmSig>): reached without boxing.
inline auto muladdTypedVmapRule(TypedOperatorHandle<VmSig> op) {
  return [op](const modes::VmapInfo& info, const Tensor& a, modes::Dim a_bdim, const Tensor& b, modes::Dim b_bdim,
              double c) {
    return std::make_tuple(op.call(modes::move_bdim_to_front(a, a_bdim, info.batch_size),
                                   modes::move_bdim_to_front(b, b_bdim, info.batch_size), c),
                           0);
  };
}

}  // namespace strata::bench
