// PyTorch's <c10/cuda/CUDAException.h>, as Strata's compatibility shim (strata/torch_compat.h).
#pragma once

#include "strata/torch_compat.h"
#include "strata/torch_compat/cuda.h"
