// Whether CUDA can be used in this process.
#pragma once

#include <string>

#include "strata/export.h"

namespace strata::cuda {

// True when this SDK was compiled with the CUDA backend (STRATA_WITH_CUDA).
STRATA_API bool is_built();
// True when built with CUDA and at least one device answers. Never throws.
STRATA_API bool is_available();
// Number of visible devices; 0 when unavailable. Never throws.
STRATA_API int device_count();
// Why is_available() is false ("" when it is true), e.g. "strata was built
// without CUDA" or the CUDA runtime's own reason.
STRATA_API std::string unavailable_reason();

}  // namespace strata::cuda
