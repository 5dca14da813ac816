// PyTorch's <c10/cuda/CUDAGuard.h>, as Strata's compatibility shim (strata/torch_compat.h).
#pragma once

#include "strata/torch_compat.h"
#include "strata/torch_compat/cuda.h"
