// Copies, conversions and fills: the one place data crosses dtypes and devices.
// CUDA transfers stage through host memory (a copy of the span a tensor covers),
// so every layout works without per-layout kernels. They run on the current stream
// of the tensor's device, and a copy to the host waits for that stream only
// (strata/cuda.h).
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "cast_kernels.h"
#include "cuda/cuda_backend.h"
#include "strata/tensor.h"
#include "strata/ops.h"
#include "tensor_internal.h"

namespace strata {

namespace {

using detail::cuda::CopyKind;

// The float32 <-> float16 / bfloat16 casts of contiguous tensors (autocast's casts),
// in vectorized loops (cast_kernels.h). False for any other pair of dtypes.
bool castContiguous(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  const ScalarType from = src.dtype(), to = dst.dtype();
  if (from == ScalarType::Float && to == ScalarType::Half) {
    detail::castFloatToHalf(src.data_ptr<float>(), static_cast<uint16_t*>(dst.data_ptr()), n);
  } else if (from == ScalarType::Float && to == ScalarType::BFloat16) {
    detail::castFloatToBFloat16(src.data_ptr<float>(), static_cast<uint16_t*>(dst.data_ptr()), n);
  } else if (from == ScalarType::Half && to == ScalarType::Float) {
    detail::castHalfToFloat(static_cast<const uint16_t*>(src.data_ptr()), dst.data_ptr<float>(), n);
  } else if (from == ScalarType::BFloat16 && to == ScalarType::Float) {
    detail::castBFloat16ToFloat(static_cast<const uint16_t*>(src.data_ptr()), dst.data_ptr<float>(), n);
  } else {
    return false;
  }
  return true;
}

// Strided, converting copy between two CPU tensors of equal sizes.
void copyCpu(const Tensor& dst, const Tensor& src) {
  char* d = static_cast<char*>(dst.data_ptr());
  const char* s = static_cast<const char*>(src.data_ptr());
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    if (dst.nbytes() != 0) detail::copyBytes(d, s, dst.nbytes());
    return;
  }
  if (dst.is_contiguous() && src.is_contiguous() && castContiguous(dst, src)) return;
  STRATA_DISPATCH_ALL_TYPES(dst.dtype(), "copy_", [&] {
    using dst_t = scalar_t;
    auto* dp = reinterpret_cast<dst_t*>(d);
    STRATA_DISPATCH_ALL_TYPES(src.dtype(), "copy_", [&] {
      const auto* sp = reinterpret_cast<const scalar_t*>(s);
      detail::forEachOffset(dst.sizes(), dst.strides(), src.strides(), [&](int64_t od, int64_t os) {
        dp[od] = detail::convertElement<dst_t>(sp[os]);
      });
    });
  });
}

// The first element and the number of elements a tensor's layout reaches in its
// storage.
struct Span {
  int64_t first;
  int64_t count;
};
Span spanOf(const Tensor& t) {
  if (t.numel() == 0) return {t.storage_offset(), 0};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.sizes()[d] - 1) * t.strides()[d];
  return {t.storage_offset(), last + 1};
}

// A CPU tensor with t's sizes and strides over a host copy of the span t covers
// on its CUDA device (read_back: copy the device data in; else leave it
// uninitialized for the caller to fill).
Tensor hostMirror(const Tensor& t, bool read_back) {
  const Span span = spanOf(t);
  const size_t es = t.element_size();
  Storage host = allocateStorage(static_cast<size_t>(span.count) * es, kCPU);
  if (read_back && span.count > 0) {
    const char* dev = static_cast<const char*>(t.storage()->data()) + span.first * static_cast<int64_t>(es);
    detail::cuda::memcpy(host->data(), dev, span.count * es, CopyKind::DeviceToHost, t.device().index);
  }
  return Tensor(make_intrusive<TensorImpl>(std::move(host), t.dtype(),
                                           std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                                           std::vector<int64_t>(t.strides().begin(), t.strides().end()), 0));
}

void writeBack(const Tensor& device_dst, const Tensor& mirror) {
  const Span span = spanOf(device_dst);
  const size_t es = device_dst.element_size();
  char* dev = static_cast<char*>(device_dst.storage()->data()) + span.first * static_cast<int64_t>(es);
  detail::cuda::memcpy(dev, mirror.storage()->data(), span.count * es, CopyKind::HostToDevice, device_dst.device().index);
}

bool sameDevice(Device have, Device want) {
  return have.type == want.type && (want.index < 0 || have.index == want.index);
}

}  // namespace

namespace detail {

// Note [A new tensor starts at version 0]: the writes that fill a tensor nobody has
// seen yet (clone, to, cat, full, ones) are not writes to a tensor anyone saved, so
// they do not bump its version counter, and a fresh result reads _version() == 0, as
// PyTorch's does. Only copy_ and fill_ on an existing tensor bump it.
void copyData(const Tensor& dst, const Tensor& src) {
  if (dst.is_meta()) return;  // a meta tensor has no data to write
  STRATA_CHECK(!src.is_meta(), Device,
               "cannot copy out of a meta tensor into a ", dst.device().str(), " tensor: meta tensors have no data");
  if (dst.numel() == 0) return;
  if (dst.is_cpu() && src.is_cpu()) {
    copyCpu(dst, src);
    return;
  }
  STRATA_CHECK((dst.is_cpu() || dst.is_cuda()) && (src.is_cpu() || src.is_cuda()), Device, "copy_ from ",
               src.device().str(), " to ", dst.device().str(), " is not supported");
  if (dst.is_cuda() && src.is_cuda() && dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    detail::cuda::memcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes(), CopyKind::DeviceToDevice, dst.device().index,
                         src.device().index);
    return;
  }
  const Tensor host_src = src.is_cpu() ? src : hostMirror(src, /*read_back=*/true);
  if (dst.is_cpu()) {
    copyCpu(dst, host_src);
    return;
  }
  const Tensor mirror = hostMirror(dst, /*read_back=*/!dst.is_contiguous());
  copyCpu(mirror, host_src);
  writeBack(dst, mirror);
}

// Note [A fill value must fit the dtype]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// fill_ and full take their value as PyTorch's c10::checked_convert does: a value
// outside the dtype's range is an error ("value cannot be converted to type uint8_t
// without overflow"), not a wrapped or saturated number. The ranges are c10's
// `overflows`: an integer into uint8 may be negative down to -255 (it wraps, two's
// complement, so -1 is 255); a float into an integer type must be finite, not NaN and
// within [min, max] before truncation (-1.0 and 255.5 into uint8 are refused);
// a float into a float type may be infinite or NaN but no larger than the type's
// largest finite value (float16 65504, bfloat16 ~3.39e38); nothing converts into bool
// with an overflow. Checked once per call, before any element is written, and for an
// empty tensor too (PyTorch converts the value before looking at the elements); a meta
// tensor has no data and takes any value, as PyTorch's meta fill_. A number given to
// a binary op (add(t, 300) on uint8) is not checked: PyTorch wraps an integer one as a
// C++ cast does (uint8 + 300 is 44), and so does Strata (detail::scalarTensor). add's
// and sub's alpha is checked as a fill value is (sub's negated first: ATen's sub is add
// with -alpha), as PyTorch converts it with the same check (checkAlphaFits).
template <typename T>
bool overflows(const Scalar& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return false;
  } else {
    if (v.isBoolean()) return false;
    if constexpr (std::is_integral_v<T>) {
      constexpr auto lo = std::numeric_limits<T>::min();
      constexpr auto hi = std::numeric_limits<T>::max();
      if (v.isIntegral()) {
        const int64_t i = v.toLong();
        if constexpr (std::is_unsigned_v<T>) {
          return i > static_cast<int64_t>(hi) || (i < 0 && -static_cast<uint64_t>(i) > static_cast<uint64_t>(hi));
        } else {
          return i < static_cast<int64_t>(lo) || i > static_cast<int64_t>(hi);
        }
      }
      const double d = v.toDouble();
      return std::isnan(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi);
    } else {
      double hi;
      if constexpr (std::is_same_v<T, Half>) hi = 65504.0;
      else if constexpr (std::is_same_v<T, BFloat16>) hi = 3.3895313892515355e38;
      else hi = static_cast<double>(std::numeric_limits<T>::max());
      const double d = v.toDouble();
      if (std::isinf(d) || std::isnan(d)) return false;
      return d < -hi || d > hi;
    }
  }
}

// A value as Python's repr writes it (300, -1.0, 255.9, 1e+300, nan): the shortest
// form that reads back the same.
std::string pythonRepr(const Scalar& v) {
  if (!v.isFloatingPoint()) {
    std::ostringstream os;
    os << v;
    return os.str();
  }
  const double d = v.toDouble();
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[400];  // fixed notation of a double below 1e16 fits
  const double a = std::fabs(d);
  const bool fixed = a == 0 || (a >= 1e-4 && a < 1e16);  // where Python's repr writes no exponent
  const auto r = std::to_chars(buf, buf + sizeof buf, d, fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string out(buf, r.ptr);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

void checkScalarFits(ScalarType dtype, const Scalar& value, const char* op, const char* what) {
  STRATA_DISPATCH_ALL_TYPES(dtype, op, [&] {
    STRATA_CHECK(!overflows<scalar_t>(value), Value, op, ": ", what, " ", pythonRepr(value), " cannot be converted to ",
                 toString(dtype), " without overflow (", toString(dtype), " holds ",
                 std::is_same_v<scalar_t, uint8_t> ? "0..255; an integer down to -255 wraps" :
                 std::is_same_v<scalar_t, int8_t> ? "-128..127" :
                 std::is_same_v<scalar_t, int32_t> ? "-2147483648..2147483647" :
                 std::is_same_v<scalar_t, int64_t> ? "a 64-bit integer" :
                 std::is_same_v<scalar_t, Half> ? "at most 65504 in magnitude" :
                 std::is_same_v<scalar_t, BFloat16> ? "at most ~3.39e38 in magnitude" :
                 "at most ~3.40e38 in magnitude", ")");
  });
}

void checkFillValue(const Tensor& t, const Scalar& value, const char* op) {
  checkScalarFits(t.dtype(), value, op, "value");
}

void checkAlphaFits(ScalarType dtype, const Scalar& alpha, bool negate, const char* op) {
  if (!negate || alpha.isBoolean()) {
    checkScalarFits(dtype, alpha, op, "alpha");
  } else if (alpha.isIntegral()) {
    // Two's complement negation: INT64_MIN stays itself, as in ATen.
    const int64_t n = static_cast<int64_t>(0 - static_cast<uint64_t>(alpha.toLong()));
    checkScalarFits(dtype, Scalar(n), op, "alpha, negated,");
  } else {
    checkScalarFits(dtype, Scalar(-alpha.toDouble()), op, "alpha, negated,");
  }
}

void fillData(const Tensor& t, const Scalar& value, const char* op) {
  if (t.is_meta()) return;
  if (op != nullptr) checkFillValue(t, value, op);  // Note [A fill value must fit the dtype]
  if (t.numel() == 0) return;
  if (t.is_cuda() && t.is_contiguous()) {
    STRATA_DISPATCH_ALL_TYPES(t.dtype(), "fill_", [&] {
      const scalar_t v = value.to<scalar_t>();
      detail::cuda::fill(t.data_ptr(), &v, sizeof(scalar_t), static_cast<size_t>(t.numel()), t.device().index);
    });
    return;
  }
  if (t.is_cuda()) {
    const Tensor mirror = hostMirror(t, /*read_back=*/true);
    fillData(mirror, value, nullptr);  // checked above
    writeBack(t, mirror);
    return;
  }
  STRATA_CHECK(t.is_cpu(), Device, "fill_ is not supported on ", t.device().str());
  STRATA_DISPATCH_ALL_TYPES(t.dtype(), "fill_", [&] {
    const scalar_t v = value.to<scalar_t>();
    auto* p = static_cast<scalar_t*>(t.data_ptr());
    detail::forEachOffset(t.sizes(), t.strides(), t.strides(), [&](int64_t o, int64_t) { p[o] = v; });
  });
}

}  // namespace detail

const Tensor& Tensor::copy_(const Tensor& src) const {
  STRATA_CHECK(defined() && src.defined(), Value, "copy_: both tensors must be defined");
  if (viaOps() || src.viaOps()) {
    Tensor self = *this;
    ops::copy_(self, src);
    return *this;
  }
  STRATA_CHECK(std::equal(sizes().begin(), sizes().end(), src.sizes().begin(), src.sizes().end()), Value,
               "copy_: destination sizes ", detail::shapeStr(sizes()), " differ from source sizes ",
               detail::shapeStr(src.sizes()));
  if (src.unsafeGetTensorImpl() == unsafeGetTensorImpl()) {
    // Itself: nothing to move, and PyTorch's copy_ returns before its checks. The
    // write is still counted, as ADInplaceOrView counts it.
    storage()->bump_version();
    return *this;
  }
  if (!is_meta() && numel() > 1) {
    // As ATen's assert_no_internal_overlap: a destination whose elements share memory
    // (a stride 0 over more than one element, as expand makes) would keep whichever
    // write came last. fill_ and zero_ write one value, and PyTorch allows them.
    for (size_t d = 0; d < sizes().size(); ++d) {
      STRATA_CHECK(strides()[d] != 0 || sizes()[d] <= 1, Value,
                   "copy_: unsupported operation: more than one element of the written-to tensor (sizes ",
                   detail::shapeStr(sizes()), ", strides ", detail::shapeStr(strides()),
                   ") refers to a single memory location. Please clone() the tensor before performing the operation.");
    }
  }
  storage()->bump_version();  // Note [Version counters] in modes/autograd.h; a meta tensor's too
  if (is_meta()) return *this;  // a meta tensor has no data to write
  detail::copyData(*this, src);
  return *this;
}

const Tensor& Tensor::fill_(const Scalar& value) const {
  if (viaOps()) {
    // Through the op, so that each layer sees it: autograd refuses a leaf that
    // requires grad (unless grad mode is off, as when initializing parameters under
    // no_grad) and records a non-leaf's write (FillBackward2: the gradient to what it
    // held is zero); vmap and fake tensors write their own way.
    Tensor self = *this;
    ops::fill_(self, value);
    return *this;
  }
  // Before the counter moves: a value refused writes nothing. An empty tensor's value
  // is checked too, a meta tensor's not (Note [A fill value must fit the dtype]).
  if (!is_meta()) detail::checkFillValue(*this, value, "fill_");
  // An empty or meta tensor's counter moves too, as PyTorch's does: the write happened.
  storage()->bump_version();  // Note [Version counters] in modes/autograd.h
  detail::fillData(*this, value, nullptr);  // nothing for a meta tensor
  return *this;
}

const Tensor& Tensor::zero_() const {
  if (viaOps()) {  // as fill_, through core::zero_ (ZeroBackward0)
    Tensor self = *this;
    ops::zero_(self);
    return *this;
  }
  storage()->bump_version();  // as fill_'s, an empty or meta tensor's included
  detail::fillData(*this, Scalar(int64_t{0}), nullptr);  // zero fits every dtype
  return *this;
}

Tensor Tensor::contiguous() const {
  // Already contiguous: the tensor itself, a leaf that requires grad included (as
  // PyTorch's, which records nothing then).
  if (wrapper() == nullptr && is_contiguous()) return *this;
  if (viaOps()) return ops::contiguous(*this);
  return clone();
}

Tensor Tensor::clone() const {
  if (viaOps()) return ops::clone(*this);
  Tensor out = empty(sizes(), TensorOptions(dtype()).with_device(device()));
  detail::copyData(out, *this);  // Note [A new tensor starts at version 0]
  return out;
}

Tensor Tensor::to(Device device, ScalarType dtype) const {
  // Nothing to change: the tensor itself, as PyTorch's to() (no copy, nothing recorded).
  if (wrapper() == nullptr && sameDevice(this->device(), device) && dtype == this->dtype()) return *this;
  if (viaOps()) {
    if (!sameDevice(this->device(), device)) {
      if (wrapper() != nullptr) throwWrapper("to(Device)");
      STRATA_FAIL(Value, "to(", device.str(), ") of a tensor that requires grad: Strata's autograd does not "
                  "differentiate a device move; detach() first, or move the leaf before it requires grad");
    }
    return ops::to(*this, dtype);
  }
  Tensor out = empty(sizes(), TensorOptions(dtype).with_device(device));
  detail::copyData(out, *this);  // Note [A new tensor starts at version 0]
  return out;
}
Tensor Tensor::to(Device device) const { return to(device, dtype()); }
Tensor Tensor::to(ScalarType dtype) const { return to(device(), dtype); }

Scalar Tensor::item() const {
  if (__builtin_expect(wrapper() != nullptr, 0)) throwWrapper("item()");
  STRATA_CHECK(numel() == 1, Value, "item(): a tensor with ", numel(),
               " elements cannot be converted to a Scalar");
  const Tensor host = to(kCPU);
  return STRATA_DISPATCH_ALL_TYPES(dtype(), "item", [&]() -> Scalar {
    const scalar_t v = *static_cast<const scalar_t*>(host.data_ptr());
    if constexpr (std::is_same_v<scalar_t, bool>) return Scalar(v);
    else if constexpr (std::is_integral_v<scalar_t>) return Scalar(static_cast<int64_t>(v));
    else if constexpr (std::is_same_v<scalar_t, double>) return Scalar(v);  // exact, as PyTorch's item()
    else return Scalar(static_cast<double>(static_cast<float>(v)));  // float16/bfloat16 through float
  });
}

bool Tensor::equal(const Tensor& other) const {
  if (__builtin_expect(wrapper() != nullptr, 0)) throwWrapper("equal()");
  if (__builtin_expect(other.wrapper() != nullptr, 0)) other.throwWrapper("equal()");
  if (!std::equal(sizes().begin(), sizes().end(), other.sizes().begin(), other.sizes().end()) ||
      dtype() != other.dtype()) {
    return false;
  }
  const Tensor a = to(kCPU);
  const Tensor b = other.to(kCPU);
  bool same = true;
  STRATA_DISPATCH_ALL_TYPES(dtype(), "equal", [&] {
    const auto* pa = static_cast<const scalar_t*>(a.data_ptr());
    const auto* pb = static_cast<const scalar_t*>(b.data_ptr());
    detail::forEachOffset(a.sizes(), a.strides(), b.strides(), [&](int64_t oa, int64_t ob) {
      if constexpr (std::is_same_v<scalar_t, Half> || std::is_same_v<scalar_t, BFloat16>) {
        same = same && static_cast<float>(pa[oa]) == static_cast<float>(pb[ob]);
      } else {
        same = same && pa[oa] == pb[ob];
      }
    });
  });
  return same;
}

}  // namespace strata
