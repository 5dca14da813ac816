// What the vmap tests share: random inputs and a comparison of results.
#pragma once

#include <algorithm>
#include <vector>

#include "strata/ops.h"
#include "strata/tensor.h"

namespace strata::vmaptest {

inline Tensor rnd(std::vector<int64_t> shape, ScalarType dt = ScalarType::Float) { return ops::rand(shape, dt); }

// Same shape, dtype and values (to float tolerance).
inline bool same(const Tensor& a, const Tensor& b) {
  return a.sizes().size() == b.sizes().size() && std::equal(a.sizes().begin(), a.sizes().end(), b.sizes().begin()) &&
         a.dtype() == b.dtype() && ops::allclose(a, b, 1e-5, 1e-6);
}

}  // namespace strata::vmaptest
