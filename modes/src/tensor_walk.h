// Walking the tensors of a boxed value, as the layers that look at arguments do.
#pragma once

#include <utility>
#include <vector>

#include "strata/ivalue.h"
#include "strata/schema.h"
#include "strata/tensor.h"

namespace strata::modes::detail {

// Whether a schema type holds tensors: Tensor, Tensor?, Tensor[], Tensor?[].
inline bool isTensorLike(const Type& t) { return t.str().starts_with("Tensor"); }

// Each tensor of one value: a Tensor, a Tensor[], or a generic list holding tensors
// (a Tensor?[], whose Nones are passed as undefined tensors so that positions line
// up, and lists nested in it).
template <typename F>
void forEachTensor(const IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const Tensor& t : v.toTensorList()) f(t);
  } else if (v.isGenericList()) {
    for (const IValue& e : v.toList()) {
      if (e.isNone()) f(Tensor());
      else forEachTensor(e, f);
    }
  }
}

// The value with each tensor replaced by g(tensor) (lists rebuilt); others as they are.
template <typename G>
IValue mapTensors(const IValue& v, G&& g) {
  if (v.isTensor()) return IValue(g(v.toTensor()));
  if (v.isTensorList()) {
    std::vector<Tensor> ts;
    for (const Tensor& t : v.toTensorList()) ts.push_back(g(t));
    return IValue(std::move(ts));
  }
  if (v.isGenericList()) {
    std::vector<IValue> es;
    for (const IValue& e : v.toList()) es.push_back(mapTensors(e, g));
    return IValue(std::move(es));
  }
  return v;
}

}  // namespace strata::modes::detail
