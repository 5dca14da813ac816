// Internal: the input rules the core:: elementwise ops share across backends (CPU
// and Meta in core_ops.cc, CUDA in core_cuda.cc), so every device refuses the same
// inputs with the same words, PyTorch's.
#pragma once

#include "strata/error.h"
#include "strata/scalar.h"
#include "strata/scalar_type.h"

namespace strata::detail {

// The dtype of true division and of sin/cos/exp: integral and bool give float32.
inline ScalarType floatResultType(ScalarType t) { return isFloatingType(t) ? t : ScalarType::Float; }

// add/sub's alpha for a result of dtype.
inline void checkAlpha(const char* op, ScalarType dtype, const Scalar& alpha) {
  STRATA_CHECK(isFloatingType(dtype) || !alpha.isFloatingPoint(), Type, op,
               ": for integral input tensors, argument alpha must not be a floating point number");
  STRATA_CHECK(dtype != ScalarType::Bool || alpha.isBoolean() || alpha.toLong() == 0 || alpha.toLong() == 1, Type, op,
               ": boolean alpha only supported for Boolean results");
}

inline void checkSubNotBool(ScalarType dtype) {
  STRATA_CHECK(dtype != ScalarType::Bool, Type, "core::sub: subtraction, the `-` operator, with two bool tensors is "
               "not supported; use logical operations instead");
}

inline void checkNegNotBool(ScalarType dtype) {
  STRATA_CHECK(dtype != ScalarType::Bool, Type,
               "core::neg: negation, the `-` operator, on a bool tensor is not supported; use logical_not instead");
}

}  // namespace strata::detail
