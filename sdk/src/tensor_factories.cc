#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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
  Storage storage = allocateStorage(nbytes, options.device);
  // A bool is one byte that C++ lets hold only 0 or 1: uninitialized memory would make
  // every read of it undefined. Bool tensors start False (PyTorch leaves them garbage).
  if (options.dtype == ScalarType::Bool && options.device.is_cpu() && nbytes != 0) {
    std::memset(storage->data(), 0, nbytes);
  }
  Tensor t(make_intrusive<TensorImpl>(std::move(storage), options.dtype, sizes, strides, 0));
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
    STRATA_CHECK(!__builtin_mul_overflow(acc, std::max<int64_t>(sizes[i - 1], 1), &acc), Value, "empty(): sizes ",
                 detail::shapeStr(sizes), " hold more elements than fit in 64 bits");
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
  detail::fillData(t, Scalar(int64_t{0}), nullptr);  // zero fits every dtype
  return t;
}

Tensor ones(IntArrayRef sizes, TensorOptions options) { return full(sizes, Scalar(int64_t{1}), options); }

Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions options) {
  Tensor t = empty(sizes, options);
  detail::fillData(t, value, "full");  // Note [A new tensor starts at version 0]
  return t;
}

namespace detail {
Tensor scalarTensor(const Scalar& s, ScalarType dtype, Device device) {
  Tensor t = empty(IntArrayRef(), TensorOptions(dtype).with_device(device));
  fillData(t, s, nullptr);  // unchecked: Note [A fill value must fit the dtype]
  return t;
}
}  // namespace detail

Tensor arange(const Scalar& end, std::optional<TensorOptions> options) {
  return arange(Scalar(int64_t{0}), end, Scalar(int64_t{1}), options);
}

namespace {

// arange's values, element by element (left out of the fuzzers' coverage: see
// STRATA_ELEMENT_LOOP). Integers: start + i * step lies within [start, end], so it
// fits in 64 bits even where i * step alone does not; computed modulo 2^64, the sum
// is exact.
template <typename T>
STRATA_ELEMENT_LOOP void fillArange(T* p, int64_t n, int64_t start, int64_t step) {
  uint64_t v = static_cast<uint64_t>(start);
  for (int64_t i = 0; i < n; ++i, v += static_cast<uint64_t>(step)) {
    p[i] = detail::convertElement<T>(static_cast<int64_t>(v));
  }
}
template <typename T>
STRATA_ELEMENT_LOOP void fillArange(T* p, int64_t n, double start, double step) {
  for (int64_t i = 0; i < n; ++i) p[i] = detail::convertElement<T>(start + static_cast<double>(i) * step);
}

}  // namespace

Tensor arange(const Scalar& start_in, const Scalar& end_in, const Scalar& step_in,
              std::optional<TensorOptions> options) {
  const double s_in = start_in.toDouble(), e_in = end_in.toDouble();
  STRATA_CHECK(std::isfinite(s_in) && std::isfinite(e_in), Value, "arange(): unsupported range ", s_in, " -> ", e_in);
  STRATA_CHECK(!options || options->dtype != ScalarType::Bool, Type, "arange(): not implemented for 'Bool'");
  // As ATen: an integral dtype takes the bounds and step as integers (truncated), so
  // arange(0, 2.5, 0.5, dtype=int64) has a step of 0; ATen counts them as integers
  // for int64 and as the given doubles for the narrower integer types.
  const bool int_dtype = options && !isFloatingType(options->dtype);  // Bool refused above
  auto asInt = [&](const Scalar& v) { return int_dtype && v.isFloatingPoint() ? Scalar(v.toLong()) : v; };
  const Scalar start = asInt(start_in), end = asInt(end_in), step = asInt(step_in);
  const double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  STRATA_CHECK(st != 0, Value, "arange(): step must be nonzero");
  const bool integral = !start.isFloatingPoint() && !end.isFloatingPoint() && !step.isFloatingPoint();
  const bool count_given = int_dtype && options->dtype != ScalarType::Long &&
                           (start_in.isFloatingPoint() || end_in.isFloatingPoint() || step_in.isFloatingPoint());
  // Integers compare exactly: as doubles, 2^63 - 1 and 2^63 - 2 are one number.
  const bool consistent = integral ? (step.toLong() > 0 && end.toLong() >= start.toLong()) ||
                                         (step.toLong() < 0 && end.toLong() <= start.toLong())
                                   : (st > 0 && e >= s) || (st < 0 && e <= s);
  STRATA_CHECK(consistent, Value, "arange(): upper bound and larger bound inconsistent with step sign");
  TensorOptions opts = options.value_or(TensorOptions(integral ? ScalarType::Long : ScalarType::Float));
  // The count in 128 bits (integers) or checked before it becomes an int64 (floats):
  // arange(-2^63, 2^63 - 1) or a step of 1e-300 has more elements than int64 counts.
  int64_t n = 0;
  if (count_given) {
    const double count = std::ceil((e_in - s_in) / step_in.toDouble());
    STRATA_CHECK(count < 0x1p63, Value, "arange(): the range ", s_in, " -> ", e_in, " by ", step_in.toDouble(),
                 " holds more elements than fit in 64 bits");
    n = static_cast<int64_t>(std::max(count, 0.0));
  } else if (integral) {
    __extension__ const __int128 a = start.toLong(), b = end.toLong(), c = step.toLong();
    __extension__ const __int128 count = c > 0 ? (b - a + c - 1) / c : (a - b - c - 1) / -c;
    STRATA_CHECK(count <= std::numeric_limits<int64_t>::max(), Value, "arange(): the range ", s, " -> ", e,
                 " by ", st, " holds more elements than fit in 64 bits");
    n = static_cast<int64_t>(count);
  } else {
    const double count = std::ceil((e - s) / st);
    STRATA_CHECK(count < 0x1p63, Value, "arange(): the range ", s, " -> ", e, " by ", st,
                 " holds more elements than fit in 64 bits");
    n = static_cast<int64_t>(count);
  }
  Tensor host = empty({n}, TensorOptions(opts.dtype));
  const int64_t first = integral ? start.toLong() : 0, by = integral ? step.toLong() : 0;
  STRATA_DISPATCH_ALL_TYPES(opts.dtype, "arange", [&] {
    auto* p = static_cast<scalar_t*>(host.data_ptr());
    if (integral) fillArange(p, n, first, by);
    else fillArange(p, n, s, st);
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
    STRATA_CHECK(!__builtin_mul_overflow(n, s, &n), Value, "from_vector(): sizes ", shapeStr(shape),
                 " hold more elements than fit in 64 bits");
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
