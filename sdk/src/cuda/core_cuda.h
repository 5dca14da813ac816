// CUDA kernels of the core:: library (elementwise ops and casts), registered when
// the SDK is built with CUDA; a no-op otherwise.
#pragma once

#include "strata/library.h"

namespace strata::cuda {
void registerCoreCudaKernels(Library& m);
}  // namespace strata::cuda
