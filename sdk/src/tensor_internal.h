// Internal helpers shared by the tensor sources.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/tensor.h"

// An element loop (one pass over a tensor's elements) that the fuzz build leaves out
// of libFuzzer's coverage instrumentation: comparisons traced per element made one
// arange of 716 M elements take 19 s under the fuzzer, with nothing to learn from.
// Not inlined: inlined, the loop would be instrumented as part of its caller.
#if defined(__clang__)
#define STRATA_ELEMENT_LOOP __attribute__((no_sanitize("coverage"), noinline))
#else
#define STRATA_ELEMENT_LOOP
#endif

namespace strata::detail {

// Wraps a possibly negative dim into [0, ndim); a 0-d tensor accepts -1 and 0.
// Throws Error(Index) in PyTorch's words when out of range.
int64_t wrapDim(int64_t dim, int64_t ndim);

// "[2, 3]"
std::string shapeStr(IntArrayRef sizes);

// Calls f(offset_a, offset_b) for every multi-index of sizes in row-major order,
// with each offset the dot product of the index and that tensor's strides.
template <typename F>
void forEachOffset(IntArrayRef sizes, IntArrayRef strides_a, IntArrayRef strides_b, F&& f) {
  const size_t nd = sizes.size();
  for (int64_t s : sizes) {
    if (s == 0) return;
  }
  if (nd == 0) {  // a 0-d tensor: one element at offset 0
    f(int64_t{0}, int64_t{0});
    return;
  }
  std::vector<int64_t> index(nd, 0);
  int64_t off_a = 0;
  int64_t off_b = 0;
  while (true) {
    f(off_a, off_b);
    // Increment the multi-index like an odometer, innermost dim first.
    size_t d = nd;
    while (d > 0) {
      --d;
      if (++index[d] < sizes[d]) {
        off_a += strides_a[d];
        off_b += strides_b[d];
        break;
      }
      off_a -= strides_a[d] * (sizes[d] - 1);
      off_b -= strides_b[d] * (sizes[d] - 1);
      index[d] = 0;
      if (d == 0) return;  // wrapped past the outermost dim: done
    }
  }
}

// Bytes a tensor of these sizes/strides needs in its storage past storage_offset:
// (1 + the largest element offset) * element size, 0 when it has no elements.
// Throws Error(Value) on negative sizes or strides and on overflow.
// Returns kSymbolicBytes when a size or stride is symbolic (Note [Symbolic sizes]).
inline constexpr size_t kSymbolicBytes = ~size_t{0};
size_t requiredStorageBytes(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset,
                            size_t element_size);

// A view of t broadcast to shape (stride 0 in the broadcast and the new leading
// dims). REQUIRES: t's sizes broadcast to shape (ops::broadcastShapes checks it).
inline Tensor broadcastTo(const Tensor& t, IntArrayRef shape) {
  // Already that shape: the tensor itself (no view to make; copy_ sees its own source).
  if (std::equal(shape.begin(), shape.end(), t.sizes().begin(), t.sizes().end())) return t;
  const size_t n = shape.size();
  const size_t lead = n - static_cast<size_t>(t.dim());
  std::vector<int64_t> strides(n, 0);
  for (size_t i = 0; i < static_cast<size_t>(t.dim()); ++i) {
    strides[lead + i] = t.sizes()[i] == 1 && shape[lead + i] != 1 ? 0 : t.strides()[i];
  }
  return t.as_strided(shape, strides);
}

// The data of copy_ and fill_ without the version bump, for a tensor being made
// (Note [A new tensor starts at version 0] in tensor_copy.cc). Plain tensors only;
// copyData REQUIRES equal sizes.
void copyData(const Tensor& dst, const Tensor& src);
// op names the caller in an error (Note [A fill value must fit the dtype] in
// tensor_copy.cc); nullptr converts unchecked, for a number given to a binary op.
void fillData(const Tensor& t, const Scalar& value, const char* op);
// Error(Value) naming op when value does not fit t's dtype.
void checkFillValue(const Tensor& t, const Scalar& value, const char* op);
// Error(Value) naming op and what ("value", "alpha") when value does not fit dtype.
void checkScalarFits(ScalarType dtype, const Scalar& value, const char* op, const char* what);
// add's alpha (sub's negated) against the result dtype, as ATen converts it.
void checkAlphaFits(ScalarType dtype, const Scalar& alpha, bool negate, const char* op);
// A 0-dim tensor holding s, converted as a C++ cast (unchecked): the other operand of
// add(t, 300) and the like.
Tensor scalarTensor(const Scalar& s, ScalarType dtype, Device device);

// Converts one element between C++ element types (Half/BFloat16 through float).
template <typename D, typename S>
inline D convertElement(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    return convertElement<D, float>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    return D(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    return floatToInt<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

}  // namespace strata::detail
