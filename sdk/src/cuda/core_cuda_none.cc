// An SDK built without CUDA has no CUDA kernels to register.
#include "cuda/core_cuda.h"

namespace strata::cuda {
void registerCoreCudaKernels(Library&) {}
}  // namespace strata::cuda
