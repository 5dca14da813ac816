// The muladd tutorial's kernels, shared by the bundle's versions.
#pragma once

#include <strata/plugin.h>

namespace extension_cpp {
// Registers the ops and their CPU, Meta (and CUDA) kernels. with_mysub: version 1.1.0,
// which adds mysub and mymuladd's autocast rules.
void registerMulAdd(strata::BundleRegistrar& r, bool with_mysub);
}  // namespace extension_cpp
