// Zero-copy exchange with other frameworks through DLPack (dlpack/dlpack.h).
//
// Ownership, both ways, follows the DLPack contract:
//  - toDLPack(t) returns a DLManagedTensor that keeps t's storage alive. The caller
//    (the consumer) owns it and must call its deleter exactly once; the memory
//    stays valid until then, even after every strata Tensor is gone.
//  - fromDLPack(m) takes ownership of m on success: the returned Tensor, its copies
//    and its views share m's memory, and m->deleter(m) runs exactly once, when the
//    last of them dies. On failure (an Error is thrown) nothing is taken: the
//    caller still owns m and must release it.
#pragma once

#include <dlpack/dlpack.h>

#include "strata/export.h"
#include "strata/tensor.h"

namespace strata {

// DLPack < 0.8 has no bool code; 6 is the value later versions give kDLBool.
inline constexpr uint8_t kDLBoolCode = 6;

// REQUIRES: t is defined and not on the meta device (Error(Device) otherwise).
STRATA_API DLManagedTensor* toDLPack(const Tensor& t);

// Throws Error(Value) for a null tensor, vectorized lanes, negative strides or
// sizes, or a misaligned byte_offset; Error(Type) for a dtype strata lacks;
// Error(Device) for a device strata lacks.
STRATA_API Tensor fromDLPack(DLManagedTensor* managed);

// The DLPack dtype for a ScalarType and back.
STRATA_API DLDataType toDLDataType(ScalarType t);
STRATA_API ScalarType fromDLDataType(DLDataType t);

}  // namespace strata
