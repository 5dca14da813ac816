#include <algorithm>
#include <cmath>
#include <cstring>

#include "strata/tensor.h"
#include "tensor_internal.h"

namespace strata {

Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions options) {
  size_t nbytes = detail::requiredStorageBytes(sizes, strides, 0, elementSize(options.dtype));
  if (__builtin_expect(nbytes == detail::kSymbolicBytes, 0)) {
    STRATA_CHECK(options.device.is_meta(), Value, "cannot allocate a tensor of symbolic sizes ",
                 detail::shapeStr(sizes), " on ", options.device.str(),
                 ": its size depends on data no kernel has computed (Note [Symbolic sizes])");
    nbytes = 0;  // a meta storage has no memory anyway
  }
  Tensor t(make_intrusive<TensorImpl>(allocateStorage(nbytes, options.device), options.dtype, sizes, strides, 0));
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor empty(IntArrayRef sizes, TensorOptions options) {
  bool symbolic = false;
  for (int64_t s : sizes) {
    if (__builtin_expect(s < 0, 0) && sym::isSymbolic(s)) {
      symbolic = true;
      continue;
    }
    STRATA_CHECK(s >= 0, Value, "empty(): negative size ", s, " in ", detail::shapeStr(sizes));
  }
  if (__builtin_expect(symbolic, 0)) {
    const std::vector<int64_t> st = contiguousStrides(sizes);
    return empty_strided(sizes, st, options);
  }
  // Contiguous strides, in place for the usual ranks (no allocation).
  int64_t small[DimVector::kInline];
  std::vector<int64_t> large;
  int64_t* strides = small;
  if (sizes.size() > DimVector::kInline) {
    large.resize(sizes.size());
    strides = large.data();
  }
  int64_t acc = 1;
  for (size_t i = sizes.size(); i > 0; --i) {
    strides[i - 1] = acc;
    acc *= std::max<int64_t>(sizes[i - 1], 1);
  }
  return empty_strided(sizes, IntArrayRef(strides, sizes.size()), options);
}

Tensor zeros(IntArrayRef sizes, TensorOptions options) {
  Tensor t = empty(sizes, options);
  if (t.is_cpu()) {
    // Zero is all-zero bits in every dtype we have.
    if (t.nbytes() != 0) std::memset(t.data_ptr(), 0, t.nbytes());
    return t;
  }
  t.zero_();
  return t;
}

Tensor ones(IntArrayRef sizes, TensorOptions options) { return full(sizes, Scalar(int64_t{1}), options); }

Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions options) {
  Tensor t = empty(sizes, options);
  t.fill_(value);
  return t;
}

Tensor arange(const Scalar& end, std::optional<TensorOptions> options) {
  return arange(Scalar(int64_t{0}), end, Scalar(int64_t{1}), options);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, std::optional<TensorOptions> options) {
  const double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  STRATA_CHECK(std::isfinite(s) && std::isfinite(e), Value, "arange(): unsupported range ", s, " -> ", e);
  STRATA_CHECK(st != 0, Value, "arange(): step must be nonzero");
  STRATA_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), Value,
               "arange(): upper bound and larger bound inconsistent with step sign");
  const bool integral = !start.isFloatingPoint() && !end.isFloatingPoint() && !step.isFloatingPoint();
  TensorOptions opts = options.value_or(TensorOptions(integral ? ScalarType::Long : ScalarType::Float));
  int64_t n = 0;
  if (integral) {
    const int64_t a = start.toLong(), b = end.toLong(), c = step.toLong();
    n = c > 0 ? (b - a + c - 1) / c : (a - b + (-c) - 1) / (-c);
  } else {
    n = static_cast<int64_t>(std::ceil((e - s) / st));
  }
  Tensor host = empty({n}, TensorOptions(opts.dtype));
  STRATA_DISPATCH_ALL_TYPES(opts.dtype, "arange", [&] {
    auto* p = static_cast<scalar_t*>(host.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      if (integral) p[i] = detail::convertElement<scalar_t>(start.toLong() + i * step.toLong());
      else p[i] = detail::convertElement<scalar_t>(s + static_cast<double>(i) * st);
    }
  });
  Tensor out = host.to(opts.device);
  if (opts.requires_grad) out.set_requires_grad(true);
  return out;
}

namespace detail {
Tensor fromHostBuffer(const void* data, size_t count, ScalarType dtype,
                      std::optional<std::vector<int64_t>> sizes, TensorOptions options) {
  std::vector<int64_t> shape = sizes.value_or(std::vector<int64_t>{static_cast<int64_t>(count)});
  int64_t n = 1;
  for (int64_t s : shape) {
    STRATA_CHECK(s >= 0, Value, "from_vector(): negative size ", s, " in ", shapeStr(shape));
    n *= s;
  }
  STRATA_CHECK(n == static_cast<int64_t>(count), Value, "from_vector(): sizes ", shapeStr(shape),
               " hold ", n, " elements but ", count, " values were given");
  Tensor host = empty(shape, TensorOptions(dtype));
  if (host.nbytes() != 0) std::memcpy(host.data_ptr(), data, host.nbytes());
  Tensor out = host.to(options.device);
  if (options.requires_grad) out.set_requires_grad(true);
  return out;
}
}  // namespace detail

}  // namespace strata
