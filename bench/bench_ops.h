// The ops every dispatch scenario calls: bench::ident(Tensor x) -> Tensor and
// bench::muladd(Tensor a, Tensor b, float c) -> Tensor, whose CPU kernels return an
// input, so a scenario measures the dispatcher, not arithmetic. The same ops as
// ../shared/anchors/libtorch_dispatch and libtorch_bench.cc.
#pragma once

#include "strata/strata.h"

namespace strata::bench {

using IdentSig = Tensor(const Tensor&);
using MulAddSig = Tensor(const Tensor&, const Tensor&, double);

Tensor ident_cpu(const Tensor& x);
const TypedOperatorHandle<IdentSig>& identOp();
const TypedOperatorHandle<MulAddSig>& muladdOp();

}  // namespace strata::bench
