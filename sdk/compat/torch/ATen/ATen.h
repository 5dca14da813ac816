// PyTorch's <ATen/ATen.h>, as Strata's compatibility shim (strata/torch_compat.h).
#pragma once

#include "strata/torch_compat.h"
