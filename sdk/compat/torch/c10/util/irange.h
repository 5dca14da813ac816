// PyTorch's <c10/util/irange.h>, as Strata's compatibility shim (strata/torch_compat.h).
#pragma once

#include "strata/torch_compat/tensor.h"
