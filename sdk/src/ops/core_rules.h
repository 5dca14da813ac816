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
// As ATen's alpha_check: a bool alpha only for a Bool result; a floating alpha only
// for a floating result (a Bool result takes an integral alpha, as PyTorch's does).
inline void checkAlpha(const char* op, ScalarType dtype, const Scalar& alpha) {
  STRATA_CHECK(!alpha.isBoolean() || dtype == ScalarType::Bool, Type, op,
               ": boolean alpha only supported for Boolean results");
  STRATA_CHECK(isFloatingType(dtype) || !alpha.isFloatingPoint(), Type, op,
               ": for integral input tensors, argument alpha must not be a floating point number");
}

// As ATen's sub_check: either operand bool is refused, whatever the result type.
inline void checkSubOperands(bool self_is_bool, bool other_is_bool) {
  STRATA_CHECK(!self_is_bool || !other_is_bool, Type, "core::sub: subtraction, the `-` operator, with two bool "
               "tensors is not supported; use logical_xor() instead");
  STRATA_CHECK(!self_is_bool && !other_is_bool, Type, "core::sub: subtraction, the `-` operator, with a bool tensor "
               "is not supported; to invert a mask, use logical_not() instead");
}

inline void checkNegNotBool(ScalarType dtype) {
  STRATA_CHECK(dtype != ScalarType::Bool, Type,
               "core::neg: negation, the `-` operator, on a bool tensor is not supported; use logical_not instead");
}

}  // namespace strata::detail
