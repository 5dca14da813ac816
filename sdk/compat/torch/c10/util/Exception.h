// PyTorch's <c10/util/Exception.h>, as Strata's compatibility shim (strata/torch_compat.h).
#pragma once

#include "strata/torch_compat/exception.h"
