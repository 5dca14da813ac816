// The core:: operator library: kernels, their registration (owner "builtin"), and
// the typed entry points of ops.h.
//
// Each compute op has a Meta kernel that only checks its inputs and computes the
// result's shape and dtype, and a CPU kernel that does the same and then the work.
// View ops and factories are device-generic and registered at the backends they
// serve (views) or as CompositeExplicitAutograd (factories, which have no tensor
// argument to dispatch on and take their device from an argument).
#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>

#include "cuda/core_cuda.h"
#include "ops/core_rules.h"
#include "strata/library.h"
#include "strata/ops.h"
#include "tensor_internal.h"

namespace strata {

namespace {

using detail::shapeStr;
using detail::wrapDim;

// ---------------------------------------------------------------------------
// Type promotion (PyTorch's c10::promoteTypes and result_type, for our dtypes).

int category(ScalarType t) {
  if (t == ScalarType::Bool) return 0;
  if (isFloatingType(t)) return 2;
  return 1;
}

}  // namespace

ScalarType ops::promoteTypes(ScalarType a, ScalarType b) {
  if (a == b) return a;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if (category(a) == 2) {
    if ((a == ScalarType::Half && b == ScalarType::BFloat16) || (a == ScalarType::BFloat16 && b == ScalarType::Half)) {
      return ScalarType::Float;
    }
    return elementSize(a) >= elementSize(b) ? a : b;
  }
  // Integers: uint8 with int8 needs int16, which we do not have: int32 holds both.
  if ((a == ScalarType::Byte && b == ScalarType::Char) || (a == ScalarType::Char && b == ScalarType::Byte)) {
    return ScalarType::Int;
  }
  return elementSize(a) >= elementSize(b) ? a : b;
}

ScalarType ops::resultType(const Tensor& a, const Tensor& b) {
  // Dimensioned tensors outrank zero-dim ones within a category (PyTorch's rule).
  const bool za = a.dim() == 0;
  const bool zb = b.dim() == 0;
  if (za == zb) return promoteTypes(a.dtype(), b.dtype());
  const Tensor& dimmed = za ? b : a;
  const Tensor& zero = za ? a : b;
  if (category(zero.dtype()) > category(dimmed.dtype())) return zero.dtype();
  return dimmed.dtype();
}

ScalarType ops::resultType(const Tensor& a, const Scalar& b) {
  const int sc = b.isFloatingPoint() ? 2 : b.isIntegral() ? 1 : 0;
  if (sc <= category(a.dtype())) return a.dtype();
  return sc == 2 ? ScalarType::Float : ScalarType::Long;  // the default dtypes
}

std::vector<int64_t> ops::broadcastShapes(IntArrayRef a, IntArrayRef b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (__builtin_expect(da < 0 || db < 0, 0) && da != db && da != 1 && db != 1) {
      // Note [Symbolic sizes]: a symbol broadcasts against 1 or itself; against anything
      // else the sizes must be provably equal (a symbol is never taken to be 1).
      const std::string what = detail::concat("broadcasting shapes ", shapeStr(a), " and ", shapeStr(b),
                                              " at dimension ", i);
      STRATA_CHECK(sym::eq(da, db, what), Value, "The size of tensor a (", sym::str(da),
                   ") must match the size of tensor b (", sym::str(db), ") at non-singleton dimension ", i,
                   " (shapes ", shapeStr(a), " and ", shapeStr(b), ")");
      out[i] = sym::isSymbolic(da) ? db : da;  // provably equal: keep the concrete one
      continue;
    }
    STRATA_CHECK(da == db || da == 1 || db == 1, Value, "The size of tensor a (", da,
                 ") must match the size of tensor b (", db, ") at non-singleton dimension ", i,
                 " (shapes ", shapeStr(a), " and ", shapeStr(b), ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

TensorOptions like(const Tensor& t, ScalarType dtype) { return TensorOptions(dtype).with_device(t.device()); }

void checkSameDevice(const char* op, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.device() == b.device(), Device, op, ": expected all tensors to be on the same device, but found ",
               a.device().str(), " and ", b.device().str());
}


// t as a contiguous tensor of dtype (a copy unless it already is one).
Tensor contiguousAs(const Tensor& t, ScalarType dtype) { return t.to(dtype).contiguous(); }

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// out[i] = f(a[i], b[i]) over the broadcast shape, computed in out's dtype.
template <typename F>
Tensor binaryKernel(const char* name, const Tensor& a, const Tensor& b, ScalarType out_dtype, bool compute, F f) {
  checkSameDevice(name, a, b);
  const std::vector<int64_t> shape = ops::broadcastShapes(a.sizes(), b.sizes());
  Tensor out = empty(shape, like(a, out_dtype));
  if (!compute || out.numel() == 0) return out;
  const Tensor ca = contiguousAs(detail::broadcastTo(a, shape), out_dtype);
  const Tensor cb = contiguousAs(detail::broadcastTo(b, shape), out_dtype);
  STRATA_DISPATCH_ALL_TYPES(out_dtype, name, [&] {
    const scalar_t* pa = ca.data_ptr<scalar_t>();
    const scalar_t* pb = cb.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      po[i] = static_cast<scalar_t>(f(static_cast<acc_t<scalar_t>>(pa[i]), static_cast<acc_t<scalar_t>>(pb[i])));
    }
  });
  return out;
}

template <typename F>
Tensor unaryKernel(const char* name, const Tensor& a, ScalarType out_dtype, bool compute, F f) {
  Tensor out = empty(a.sizes(), like(a, out_dtype));
  if (!compute || out.numel() == 0) return out;
  const Tensor ca = contiguousAs(a, out_dtype);
  STRATA_DISPATCH_ALL_TYPES(out_dtype, name, [&] {
    const scalar_t* pa = ca.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) {
      po[i] = static_cast<scalar_t>(f(static_cast<acc_t<scalar_t>>(pa[i])));
    }
  });
  return out;
}

using detail::scalarTensor;

// --- add / sub / mul / div ---

// Note [Integer overflow]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Integer tensors wrap: int64 max + 1 is int64 min, 3 * 2^62 is -2^62, as PyTorch's
// integer tensors behave on every machine it ships for. This file is built with
// -fwrapv (sdk/CMakeLists.txt) so that is the defined meaning of its signed
// arithmetic, not undefined behaviour the optimizer may exploit; narrower types
// compute in int and convert back, which C++20 defines as modular. Floats converted
// to integers follow detail::floatToInt (tensor_internal.h).

template <typename T>
T applyAlpha(T b, const Scalar& alpha) {
  if constexpr (std::is_same_v<T, bool>) return b && alpha.toBool();
  else return b * alpha.to<T>();
}

// As ATen's CPU add for float16 and bfloat16: alpha is first a value of the result's
// type, and alpha * b is rounded to it before the sum (ATen computes `a + alpha * b`
// in c10::Half, each step rounded), so add(2048, 1, alpha=1.0004) is 2048 as there.
template <typename R>
float roundedTo(float v) {
  return static_cast<float>(R(v));
}

Tensor addImpl(const Tensor& a, const Tensor& b, const Scalar& alpha_in, ScalarType dtype, bool compute,
               bool negate) {
  const char* name = negate ? "core::sub" : "core::add";
  detail::checkAlpha(name, dtype, alpha_in);
  if (compute) detail::checkAlphaFits(dtype, alpha_in, negate, name);  // a meta call converts nothing
  const bool half = dtype == ScalarType::Half, bf16 = dtype == ScalarType::BFloat16;
  auto toResultType = [&](float v) { return half ? roundedTo<Half>(v) : bf16 ? roundedTo<BFloat16>(v) : v; };
  const Scalar alpha =
      half || bf16 ? Scalar(static_cast<double>(toResultType(static_cast<float>(alpha_in.toDouble())))) : alpha_in;
  return binaryKernel(name, a, b, dtype, compute, [&](auto x, auto y) {
    using T = decltype(x);
    T scaled = applyAlpha(y, alpha);
    if constexpr (std::is_same_v<T, float>) scaled = toResultType(scaled);  // float16/bfloat16 compute in float
    if constexpr (std::is_same_v<T, bool>) return static_cast<bool>(x || scaled);
    else return negate ? static_cast<T>(x - scaled) : static_cast<T>(x + scaled);
  });
}

template <bool kCompute>
Tensor add_tensor(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return addImpl(a, b, alpha, ops::resultType(a, b), kCompute, false);
}
template <bool kCompute>
Tensor add_scalar(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  const ScalarType dt = ops::resultType(a, b);
  return addImpl(a, scalarTensor(b, dt, a.device()), alpha, dt, kCompute, false);
}
template <bool kCompute>
Tensor sub_tensor(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  detail::checkSubOperands(a.dtype() == ScalarType::Bool, b.dtype() == ScalarType::Bool);
  return addImpl(a, b, alpha, ops::resultType(a, b), kCompute, true);
}
template <bool kCompute>
Tensor sub_scalar(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  detail::checkSubOperands(a.dtype() == ScalarType::Bool, b.isBoolean());
  const ScalarType dt = ops::resultType(a, b);
  return addImpl(a, scalarTensor(b, dt, a.device()), alpha, dt, kCompute, true);
}

Tensor mulImpl(const Tensor& a, const Tensor& b, ScalarType dt, bool compute) {
  return binaryKernel("core::mul", a, b, dt, compute, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_same_v<T, bool>) return static_cast<bool>(x && y);
    else return static_cast<T>(x * y);
  });
}
template <bool kCompute>
Tensor mul_tensor(const Tensor& a, const Tensor& b) {
  return mulImpl(a, b, ops::resultType(a, b), kCompute);
}
template <bool kCompute>
Tensor mul_scalar(const Tensor& a, const Scalar& b) {
  const ScalarType dt = ops::resultType(a, b);
  return mulImpl(a, scalarTensor(b, dt, a.device()), dt, kCompute);
}

Tensor divImpl(const Tensor& a, const Tensor& b, ScalarType dt, bool compute) {
  return binaryKernel("core::div", a, b, dt, compute, [](auto x, auto y) { return x / y; });
}
template <bool kCompute>
Tensor div_tensor(const Tensor& a, const Tensor& b) {
  return divImpl(a, b, detail::floatResultType(ops::resultType(a, b)), kCompute);
}
template <bool kCompute>
Tensor div_scalar(const Tensor& a, const Scalar& b) {
  const ScalarType dt = detail::floatResultType(ops::resultType(a, b));
  return divImpl(a, scalarTensor(b, dt, a.device()), dt, kCompute);
}

template <bool kCompute>
Tensor neg_kernel(const Tensor& a) {
  detail::checkNegNotBool(a.dtype());
  return unaryKernel("core::neg", a, a.dtype(), kCompute, [](auto x) { return static_cast<decltype(x)>(-x); });
}

template <bool kCompute>
Tensor sin_kernel(const Tensor& a) {
  return unaryKernel("core::sin", a, detail::floatResultType(a.dtype()), kCompute, [](auto x) { return std::sin(x); });
}
template <bool kCompute>
Tensor cos_kernel(const Tensor& a) {
  return unaryKernel("core::cos", a, detail::floatResultType(a.dtype()), kCompute, [](auto x) { return std::cos(x); });
}
template <bool kCompute>
Tensor exp_kernel(const Tensor& a) {
  return unaryKernel("core::exp", a, detail::floatResultType(a.dtype()), kCompute, [](auto x) { return std::exp(x); });
}

// --- sum ---

// Reductions accumulate in double (floating) or int64 (integral and bool).
template <typename F>
void dispatchAcc(ScalarType acc, F f) {
  if (acc == ScalarType::Double) f.template operator()<double>();
  else if (acc == ScalarType::Float) f.template operator()<float>();
  else f.template operator()<int64_t>();
}

ScalarType sumType(ScalarType t, std::optional<ScalarType> dtype) {
  if (dtype) return *dtype;
  return isFloatingType(t) ? t : ScalarType::Long;
}

template <bool kCompute>
Tensor sum_dim(const Tensor& a, std::optional<std::vector<int64_t>> dim, bool keepdim, std::optional<ScalarType> dtype) {
  const int64_t nd = a.dim();
  // One more than needed for a 0-d tensor, whose dims 0 and -1 are the same one.
  std::vector<bool> reduced(static_cast<size_t>(std::max<int64_t>(nd, 1)), false);
  if (!dim || dim->empty()) {
    std::fill(reduced.begin(), reduced.end(), true);
  } else {
    for (int64_t d : *dim) {
      const int64_t w = wrapDim(d, nd);
      STRATA_CHECK(!reduced[static_cast<size_t>(w)], Value, "core::sum: dim ", w, " appears multiple times in the list of dims");
      reduced[static_cast<size_t>(w)] = true;
    }
  }
  std::vector<int64_t> out_shape, perm, kept_shape;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[static_cast<size_t>(d)]) {
      out_shape.push_back(a.sizes()[d]);
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  const ScalarType out_dtype = sumType(a.dtype(), dtype);
  // Shapes only: a symbolic size (Note [Symbolic sizes]) reduces away or stays.
  if (!kCompute) return empty(out_shape, like(a, out_dtype));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[static_cast<size_t>(d)]) {
      perm.push_back(d);
      outer *= a.sizes()[d];
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[static_cast<size_t>(d)]) {
      perm.push_back(d);
      inner *= a.sizes()[d];
    }
  }
  // As torch.sum: with a dtype, the input is cast to it before the sum.
  const Tensor in = dtype && *dtype != a.dtype() ? a.to(*dtype) : a;
  const bool floating = isFloatingType(out_dtype) || isFloatingType(in.dtype());
  const ScalarType acc = floating ? ScalarType::Double : ScalarType::Long;
  const Tensor x = contiguousAs(nd == 0 ? in : in.permute(perm), acc);
  Tensor result = empty({outer}, like(a, acc));
  dispatchAcc(acc, [&]<typename scalar_t>() {
    const scalar_t* p = x.data_ptr<scalar_t>();
    scalar_t* r = result.data_ptr<scalar_t>();
    for (int64_t o = 0; o < outer; ++o) {
      scalar_t s = 0;
      for (int64_t i = 0; i < inner; ++i) s += p[o * inner + i];
      r[o] = s;
    }
  });
  return result.to(out_dtype).reshape(out_shape);
}
template <bool kCompute>
Tensor sum_all(const Tensor& a, std::optional<ScalarType> dtype) {
  return sum_dim<kCompute>(a, std::nullopt, false, dtype);
}

// --- matmul ---

template <bool kCompute>
Tensor matmul_kernel(const Tensor& a, const Tensor& b) {
  checkSameDevice("core::matmul", a, b);
  STRATA_CHECK(a.dim() >= 1 && b.dim() >= 1, Value, "core::matmul: both arguments to matmul need to be at least 1D, but they are ",
               a.dim(), "D and ", b.dim(), "D");
  STRATA_CHECK(a.dtype() == b.dtype(), Type, "core::matmul: expected both arguments to have the same dtype, but got ",
               toString(a.dtype()), " and ", toString(b.dtype()));
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(-1) : b;
  const int64_t n = a2.size(-2), k = a2.size(-1), k2 = b2.size(-2), m = b2.size(-1);
  STRATA_CHECK(k == k2 || ((k < 0 || k2 < 0) && sym::eq(k, k2, "core::matmul's inner dimensions")), Value,
               "core::matmul: shapes cannot be multiplied (", shapeStr(a.sizes()), " and ",
               shapeStr(b.sizes()), "): ", sym::str(n), "x", sym::str(k), " and ", sym::str(k2), "x", sym::str(m));
  const std::vector<int64_t> batch = ops::broadcastShapes(a2.sizes().subspan(0, static_cast<size_t>(a2.dim() - 2)),
                                                          b2.sizes().subspan(0, static_cast<size_t>(b2.dim() - 2)));
  std::vector<int64_t> full_shape = batch;
  full_shape.push_back(n);
  full_shape.push_back(m);
  std::vector<int64_t> out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(n);
  if (b.dim() > 1) out_shape.push_back(m);
  const ScalarType dt = a.dtype();
  if (!kCompute) return empty(out_shape, like(a, dt));
  // PyTorch's kernels (dot, mv, mm, bmm) have no bool form, and refuse only a product
  // they would compute: dot always, the others when the result has elements and the
  // inner size is not 0. Its meta kernel does not look, nor does the one above. The
  // name is the kernel PyTorch's matmul reaches for those ranks.
  if (dt == ScalarType::Bool) {
    int64_t out_numel = 1;
    for (int64_t s : out_shape) out_numel *= s;
    const bool dot = a.dim() == 1 && b.dim() == 1;
    STRATA_CHECK(!dot && (out_numel == 0 || k == 0), Type, "\"core::matmul\" not implemented for 'Bool' (as PyTorch's \"",
                 dot                              ? "dot"
                 : b.dim() == 1 || (a.dim() == 1 && b.dim() >= 3) ? "addmv_impl_cpu"
                 : a.dim() >= 3 && b.dim() >= 3   ? "bmm"
                                                  : "addmm_impl_cpu_",
                 "\"): convert the operands first, e.g. .to(int64)");
  }
  if (a.dim() == 2 && b.dim() == 2 && a.is_contiguous() && b.is_contiguous() && isFloatingType(dt)) {
    // Matrices: straight into the result, accumulating in float32 (float64 for
    // float64), as PyTorch's CPU kernels do for float32, float16 and bfloat16.
    Tensor out = empty(out_shape, like(a, dt));
    STRATA_DISPATCH_ALL_TYPES(dt, "core::matmul", [&] {
      if constexpr (std::is_same_v<scalar_t, double> || std::is_same_v<scalar_t, float> ||
                    std::is_same_v<scalar_t, Half> || std::is_same_v<scalar_t, BFloat16>) {
        using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
        const scalar_t* pa = a.data_ptr<scalar_t>();
        const scalar_t* pb = b.data_ptr<scalar_t>();
        scalar_t* po = out.data_ptr<scalar_t>();
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < m; ++j) {
            acc_t acc = 0;
            for (int64_t x = 0; x < k; ++x) acc += static_cast<acc_t>(pa[i * k + x]) * static_cast<acc_t>(pb[x * m + j]);
            po[i * m + j] = static_cast<scalar_t>(acc);
          }
        }
      }
    });
    return out;
  }
  int64_t nb = std::find(batch.begin(), batch.end(), 0) == batch.end() ? 1 : 0;
  for (int64_t s : batch) {
    if (nb == 0) break;
    STRATA_CHECK(!__builtin_mul_overflow(nb, s, &nb), Value, "matmul: the batch sizes ", detail::shapeStr(batch),
                 " hold more matrices than fit in 64 bits");
  }
  std::vector<int64_t> ashape = batch, bshape = batch;
  ashape.insert(ashape.end(), {n, k});
  bshape.insert(bshape.end(), {k, m});
  // The accumulation type of the matrix path above, so every layout gives the same bits.
  const ScalarType acc =
      dt == ScalarType::Double ? ScalarType::Double : (isFloatingType(dt) ? ScalarType::Float : ScalarType::Long);
  const Tensor ca = contiguousAs(detail::broadcastTo(a2, ashape), acc);
  const Tensor cb = contiguousAs(detail::broadcastTo(b2, bshape), acc);
  Tensor out = empty(full_shape, like(a, acc));
  dispatchAcc(acc, [&]<typename scalar_t>() {
    const scalar_t* pa = ca.data_ptr<scalar_t>();
    const scalar_t* pb = cb.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    for (int64_t bi = 0; bi < nb; ++bi) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < m; ++j) {
          scalar_t s = 0;
          for (int64_t x = 0; x < k; ++x) s += pa[(bi * n + i) * k + x] * pb[(bi * k + x) * m + j];
          po[(bi * n + i) * m + j] = s;
        }
      }
    }
  });
  return out.to(dt).reshape(out_shape);
}

// --- views and shapes (device-generic) ---

Tensor t_kernel(const Tensor& a) {
  STRATA_CHECK(a.dim() <= 2, Value, "core::t: t() expects a tensor with <= 2 dimensions, but self is ", a.dim(), "D");
  return a.dim() < 2 ? a.as_strided(a.sizes(), a.strides(), a.storage_offset()) : a.transpose(0, 1);
}
Tensor transpose_kernel(const Tensor& a, int64_t d0, int64_t d1) { return a.transpose(d0, d1); }
Tensor permute_kernel(const Tensor& a, const std::vector<int64_t>& dims) { return a.permute(dims); }
Tensor movedim_kernel(const Tensor& a, int64_t src, int64_t dst) {
  const int64_t nd = a.dim();
  const int64_t s = wrapDim(src, nd), d = wrapDim(dst, nd);
  if (nd == 0) return a.as_strided(a.sizes(), a.strides(), a.storage_offset());
  std::vector<int64_t> order;
  for (int64_t i = 0; i < nd; ++i) {
    if (i != s) order.push_back(i);
  }
  order.insert(order.begin() + d, s);
  return a.permute(order);
}
Tensor unsqueeze_kernel(const Tensor& a, int64_t dim) { return a.unsqueeze(dim); }
Tensor squeezeDims(const Tensor& a, const std::vector<bool>& drop) {
  std::vector<int64_t> sizes, strides;
  for (int64_t i = 0; i < a.dim(); ++i) {
    if (drop[static_cast<size_t>(i)]) continue;
    sizes.push_back(a.sizes()[i]);
    strides.push_back(a.strides()[i]);
  }
  return a.as_strided(sizes, strides, a.storage_offset());
}
Tensor squeeze_kernel(const Tensor& a) {
  std::vector<bool> drop(static_cast<size_t>(a.dim()));
  for (int64_t i = 0; i < a.dim(); ++i) drop[static_cast<size_t>(i)] = a.sizes()[i] == 1;
  return squeezeDims(a, drop);
}
Tensor squeeze_dim_kernel(const Tensor& a, int64_t dim) {
  const int64_t d = wrapDim(dim, a.dim());
  std::vector<bool> drop(static_cast<size_t>(a.dim()), false);
  if (a.dim() > 0 && a.sizes()[d] == 1) drop[static_cast<size_t>(d)] = true;
  return squeezeDims(a, drop);
}
Tensor select_kernel(const Tensor& a, int64_t dim, int64_t index) { return a.select(dim, index); }
Tensor narrow_kernel(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  STRATA_CHECK(a.dim() > 0, Index, "core::narrow: narrow() cannot be applied to a 0-dim tensor");
  const int64_t d = wrapDim(dim, a.dim());
  const int64_t n = a.sizes()[d];
  if (__builtin_expect(sym::isSymbolic(n) || sym::isSymbolic(start) || sym::isSymbolic(length), 0)) {
    // Note [Symbolic sizes]: the bounds are decided by the ranges, or are an error
    // saying they depend on data.
    STRATA_CHECK(sym::le(0, start, "core::narrow's start"), Index, "core::narrow: start (", sym::str(start),
                 ") must not be negative when the dimension's size (", sym::str(n), ") is symbolic");
    STRATA_CHECK(sym::le(0, length, "core::narrow's length"), Value, "core::narrow: length (", sym::str(length),
                 ") must not be negative");
    STRATA_CHECK(sym::le(sym::add(start, length), n, "core::narrow's end"), Value, "core::narrow: start (",
                 sym::str(start), ") + length (", sym::str(length), ") exceeds dimension size (", sym::str(n), ")");
    std::vector<int64_t> sizes(a.sizes().begin(), a.sizes().end());
    const std::vector<int64_t> strides(a.strides().begin(), a.strides().end());
    sizes[static_cast<size_t>(d)] = length;
    return a.as_strided(sizes, strides, sym::add(a.storage_offset(), sym::mul(start, strides[static_cast<size_t>(d)])));
  }
  STRATA_CHECK(start >= -n && start <= n, Index, "core::narrow: start (", start, ") is out of bounds for dimension ",
               d, " of size ", n);
  if (start < 0) start += n;
  STRATA_CHECK(length >= 0 && length <= n - start, Value, "core::narrow: start (", start, ") + length (", length,
               ") exceeds dimension size (", n, ")");
  return a.slice(d, start, start + length);
}
Tensor expand_kernel(const Tensor& a, const std::vector<int64_t>& size, bool /*implicit*/) {
  STRATA_CHECK(size.size() >= static_cast<size_t>(a.dim()), Value, "core::expand: the number of sizes provided (",
               size.size(), ") must be greater or equal to the number of dimensions in the tensor (", a.dim(), ")");
  const size_t lead = size.size() - static_cast<size_t>(a.dim());
  std::vector<int64_t> sizes(size.size()), strides(size.size(), 0);
  for (size_t i = 0; i < size.size(); ++i) {
    if (i < lead) {
      STRATA_CHECK(size[i] >= 0 || sym::isSymbolic(size[i]), Value, "core::expand: the expanded size of the tensor (",
                   size[i], ") isn't allowed in a leading, non-existing dimension ", i);
      sizes[i] = size[i];
      continue;
    }
    const int64_t have = a.sizes()[i - lead];
    const int64_t want = size[i] == -1 ? have : size[i];
    // Equal sizes keep the stride; a 1 broadcasts. With a symbol on either side the
    // ranges decide (Note [Symbolic sizes]): u0 against 3 is a data-dependent error.
    bool same = have == want;
    if (!same && have != 1 && (sym::isSymbolic(have) || sym::isSymbolic(want))) {
      same = sym::eq(have, want, "core::expand's size");
    }
    STRATA_CHECK(same || have == 1, Value, "core::expand: the expanded size of the tensor (", sym::str(want),
                 ") must match the existing size (", sym::str(have), ") at non-singleton dimension ", i,
                 ".  Target sizes: ", shapeStr(size), ".  Tensor sizes: ", shapeStr(a.sizes()));
    sizes[i] = want;
    strides[i] = same ? a.strides()[i - lead] : 0;
  }
  return a.as_strided(sizes, strides, a.storage_offset());
}
Tensor reshape_kernel(const Tensor& a, const std::vector<int64_t>& shape) { return a.reshape(shape); }
Tensor view_kernel(const Tensor& a, const std::vector<int64_t>& size) { return a.view(size); }
Tensor contiguous_kernel(const Tensor& a) { return a.contiguous(); }

// As ATen's cat, a 1-d tensor of size 0 (the legacy "empty" tensor) is left out of
// the shape checks and the result, whatever the others' shapes; it still takes part
// in the result's dtype.
bool legacyEmpty(const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; }

Tensor cat_kernel(const std::vector<Tensor>& ts, int64_t dim) {
  STRATA_CHECK(!ts.empty(), Value, "core::cat: expected a non-empty list of Tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    STRATA_CHECK(ts[i].dim() > 0, Value, "core::cat: zero-dimensional tensor (at position ", i,
                 ") cannot be concatenated");
  }
  auto ref = std::find_if(ts.begin(), ts.end(), [](const Tensor& t) { return !legacyEmpty(t); });
  if (ref == ts.end()) {
    // Every input left out: as ATen's cat, an empty 1-d result of the promoted dtype,
    // and dim is not looked at (its legacy_cat_wrap_dim wraps against no tensor).
    ScalarType dt = ts.front().dtype();
    for (const Tensor& t : ts) {
      checkSameDevice("core::cat", ts.front(), t);
      dt = ops::promoteTypes(dt, t.dtype());
    }
    return empty({0}, like(ts.front(), dt));
  }
  const Tensor& first = *ref;
  const int64_t nd = first.dim();
  const int64_t d = wrapDim(dim, nd);
  ScalarType dt = first.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    checkSameDevice("core::cat", first, t);
    dt = ops::promoteTypes(dt, t.dtype());
    if (legacyEmpty(t) && &t != &first) continue;
    STRATA_CHECK(t.dim() == nd, Value, "core::cat: tensors must have same number of dimensions: got ", nd, " and ",
                 t.dim(), " (tensor number ", i, ")");
    for (int64_t j = 0; j < nd; ++j) {
      const int64_t want = first.sizes()[j], got = t.sizes()[j];
      STRATA_CHECK(j == d || want == got || ((want < 0 || got < 0) && sym::eq(want, got, "core::cat's sizes")), Value,
                   "core::cat: sizes of tensors must match except in dimension ", d, ". Expected size ",
                   sym::str(want), " but got size ", sym::str(got), " for tensor number ", i, " in the list.");
    }
    total = sym::add(total, t.sizes()[d]);  // Note [Symbolic sizes]: u0 + u1
  }
  std::vector<int64_t> shape(first.sizes().begin(), first.sizes().end());
  shape[static_cast<size_t>(d)] = total;
  Tensor out = empty(shape, like(first, dt));
  if (out.is_meta()) return out;
  int64_t offset = 0;
  for (const Tensor& t : ts) {
    if (legacyEmpty(t) && &t != &first) continue;
    const int64_t n = t.sizes()[d];
    if (n > 0) detail::copyData(out.slice(d, offset, offset + n), t);  // Note [A new tensor starts at version 0]
    offset += n;
  }
  return out;
}
Tensor stack_kernel(const std::vector<Tensor>& ts, int64_t dim) {
  STRATA_CHECK(!ts.empty(), Value, "core::stack: stack expects a non-empty TensorList");
  const int64_t d = wrapDim(dim, ts.front().dim() + 1);
  std::vector<Tensor> parts;
  for (size_t i = 0; i < ts.size(); ++i) {
    STRATA_CHECK(std::equal(ts[i].sizes().begin(), ts[i].sizes().end(), ts[0].sizes().begin(), ts[0].sizes().end()),
                 Value, "core::stack: stack expects each tensor to be equal size, but got ", shapeStr(ts[0].sizes()),
                 " at entry 0 and ", shapeStr(ts[i].sizes()), " at entry ", i);
    parts.push_back(ts[i].unsqueeze(d));
  }
  return cat_kernel(parts, d);
}

// --- copies ---

Tensor clone_kernel(const Tensor& a) { return a.clone(); }
Tensor& copy_kernel(Tensor& self, const Tensor& src, bool /*non_blocking*/) {
  const std::vector<int64_t> shape = ops::broadcastShapes(self.sizes(), src.sizes());
  STRATA_CHECK(std::equal(shape.begin(), shape.end(), self.sizes().begin(), self.sizes().end()), Value,
               "core::copy_: the source of shape ", shapeStr(src.sizes()),
               " cannot be broadcast to the destination's shape ", shapeStr(self.sizes()));
  self.copy_(detail::broadcastTo(src, self.sizes()));
  return self;
}
Tensor& fill_kernel(Tensor& self, const Scalar& value) {
  self.fill_(value);
  return self;
}
Tensor& zero_kernel(Tensor& self) {
  self.zero_();
  return self;
}
Tensor to_dtype_kernel(const Tensor& a, ScalarType dtype, bool /*non_blocking*/, bool copy) {
  if (a.dtype() == dtype && !copy) return a;
  if (a.dtype() == dtype) return a.clone();
  return a.to(dtype);
}
Tensor empty_like_kernel(const Tensor& a, std::optional<ScalarType> dtype, std::optional<Device> device) {
  return empty(a.sizes(), TensorOptions(dtype.value_or(a.dtype())).with_device(device.value_or(a.device())));
}

// torch.isclose on one floating dtype T, element by element (allclose_cpu).
template <typename T>
bool allcloseIn(const Tensor& ca, const Tensor& cb, double rtol, double atol, bool equal_nan) {
  using acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* pa = ca.data_ptr<T>();
  const T* pb = cb.data_ptr<T>();
  for (int64_t i = 0, n = ca.numel(); i < n; ++i) {
    const acc x = static_cast<acc>(pa[i]), y = static_cast<acc>(pb[i]);
    if (x == y) continue;  // equal infinities too
    if (equal_nan && std::isnan(x) && std::isnan(y)) continue;
    const acc scaled = std::fabs(static_cast<acc>(static_cast<T>(static_cast<acc>(rtol) * y)));
    const acc allowed = static_cast<acc>(static_cast<T>(static_cast<acc>(atol) + scaled));
    const acc actual = std::fabs(static_cast<acc>(static_cast<T>(x - y)));
    if (!(std::isfinite(actual) && actual <= allowed)) return false;
  }
  return true;
}

bool allclose_cpu(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  checkSameDevice("core::allclose", a, b);
  // As torch.isclose: the same dtype, and tolerances that are not negative.
  STRATA_CHECK(a.dtype() == b.dtype(), Type, "core::allclose: ", toString(a.dtype()), " did not match ",
               toString(b.dtype()));
  STRATA_CHECK(rtol >= 0, Value, "core::allclose: rtol must be greater than or equal to zero, but got ", rtol);
  STRATA_CHECK(atol >= 0, Value, "core::allclose: atol must be greater than or equal to zero, but got ", atol);
  const std::vector<int64_t> shape = ops::broadcastShapes(a.sizes(), b.sizes());
  if (isFloatingType(a.dtype())) {
    // As torch.isclose, each step in the tensors' dtype (float16/bfloat16 computing in
    // float and rounding each result): equal, or NaN beside NaN with equal_nan, or a
    // finite |a - b| within atol + |rtol * b|. So inf and -inf are not close, nor are
    // 3e38 and -3e38 in float32, whose difference is inf there.
    const Tensor ca = detail::broadcastTo(a, shape).contiguous();
    const Tensor cb = detail::broadcastTo(b, shape).contiguous();
    switch (a.dtype()) {
      case ScalarType::Double: return allcloseIn<double>(ca, cb, rtol, atol, equal_nan);
      case ScalarType::Float: return allcloseIn<float>(ca, cb, rtol, atol, equal_nan);
      case ScalarType::Half: return allcloseIn<Half>(ca, cb, rtol, atol, equal_nan);
      default: return allcloseIn<BFloat16>(ca, cb, rtol, atol, equal_nan);
    }
  }
  // Integers and bools, as torch.isclose: equal exactly, else (with a tolerance) within
  // it in float32, where their difference is taken.
  const Tensor ia = contiguousAs(detail::broadcastTo(a, shape), ScalarType::Long);
  const Tensor ib = contiguousAs(detail::broadcastTo(b, shape), ScalarType::Long);
  const Tensor fa = contiguousAs(detail::broadcastTo(a, shape), ScalarType::Float);
  const Tensor fb = contiguousAs(detail::broadcastTo(b, shape), ScalarType::Float);
  const int64_t* pa = ia.data_ptr<int64_t>();
  const int64_t* pb = ib.data_ptr<int64_t>();
  const float* qa = fa.data_ptr<float>();
  const float* qb = fb.data_ptr<float>();
  for (int64_t i = 0, n = ia.numel(); i < n; ++i) {
    if (pa[i] == pb[i]) continue;
    if (rtol == 0 && atol == 0) return false;
    const float allowed = static_cast<float>(atol) + std::fabs(static_cast<float>(rtol) * qb[i]);
    const float actual = std::fabs(qa[i] - qb[i]);
    if (!(std::isfinite(actual) && actual <= allowed)) return false;
  }
  return true;
}
bool allclose_meta(const Tensor&, const Tensor&, double, double, bool) {
  STRATA_FAIL(Device, "core::allclose needs tensor data, and meta tensors have none");
}

// --- factories (CompositeExplicitAutograd: the device is an argument) ---

TensorOptions factoryOptions(std::optional<ScalarType> dtype, std::optional<Device> device, ScalarType dflt) {
  return TensorOptions(dtype.value_or(dflt)).with_device(device.value_or(kCPU));
}
Tensor empty_kernel(const std::vector<int64_t>& size, std::optional<ScalarType> dtype, std::optional<Device> device) {
  return empty(size, factoryOptions(dtype, device, ScalarType::Float));
}
Tensor zeros_kernel(const std::vector<int64_t>& size, std::optional<ScalarType> dtype, std::optional<Device> device) {
  return zeros(size, factoryOptions(dtype, device, ScalarType::Float));
}
Tensor ones_kernel(const std::vector<int64_t>& size, std::optional<ScalarType> dtype, std::optional<Device> device) {
  return ones(size, factoryOptions(dtype, device, ScalarType::Float));
}
Tensor full_kernel(const std::vector<int64_t>& size, const Scalar& value, std::optional<ScalarType> dtype,
                   std::optional<Device> device) {
  // torch.full infers the dtype from the fill value.
  const ScalarType inferred = value.isFloatingPoint() ? ScalarType::Float
                              : value.isBoolean()     ? ScalarType::Bool
                                                      : ScalarType::Long;
  return full(size, value, factoryOptions(dtype, device, inferred));
}
Tensor arange_start_kernel(const Scalar& start, const Scalar& end, const Scalar& step, std::optional<ScalarType> dtype,
                           std::optional<Device> device) {
  std::optional<TensorOptions> opts;
  if (dtype || device) {
    const bool integral = !start.isFloatingPoint() && !end.isFloatingPoint() && !step.isFloatingPoint();
    opts = factoryOptions(dtype, device, integral ? ScalarType::Long : ScalarType::Float);
  }
  return arange(start, end, step, opts);
}
Tensor arange_kernel(const Scalar& end, std::optional<ScalarType> dtype, std::optional<Device> device) {
  return arange_start_kernel(Scalar(int64_t{0}), end, Scalar(int64_t{1}), dtype, device);
}

// The default generator (torch.default_generator): one per process, seeded with
// 67280421310721 as PyTorch's CPU generator is; a lock, as PyTorch's, for threads.
struct Generator {
  std::mutex mutex;
  std::mt19937_64 engine{67280421310721ULL};
};
Generator& defaultGenerator() {
  static Generator* g = new Generator();  // leaked: ops may run in static destructors
  return *g;
}

// Uniform [0, 1): as many random mantissa bits as the dtype holds, so no value
// rounds up to 1.
Tensor rand_kernel(const std::vector<int64_t>& size, std::optional<ScalarType> dtype, std::optional<Device> device) {
  const TensorOptions opts = factoryOptions(dtype, device, ScalarType::Float);
  STRATA_CHECK(isFloatingType(opts.dtype), Type, "core::rand: \"check_uniform_bounds\" is implemented for floating "
               "dtypes only, got ", toString(opts.dtype));
  Tensor host = empty(IntArrayRef(size.data(), size.size()), TensorOptions(opts.dtype));
  if (opts.device.is_meta()) return empty(IntArrayRef(size.data(), size.size()), opts);
  const int bits = opts.dtype == ScalarType::Double   ? 53
                   : opts.dtype == ScalarType::Float  ? 24
                   : opts.dtype == ScalarType::Half   ? 11
                                                      : 8;
  const double scale = std::ldexp(1.0, -bits);
  {
    Generator& g = defaultGenerator();
    std::lock_guard<std::mutex> lock(g.mutex);
    STRATA_DISPATCH_ALL_TYPES(opts.dtype, "core::rand", [&] {
      auto* p = host.data_ptr<scalar_t>();
      for (int64_t i = 0; i < host.numel(); ++i) {
        const double u = static_cast<double>(g.engine() >> (64 - bits)) * scale;
        p[i] = static_cast<scalar_t>(u);
      }
    });
  }
  return opts.device.is_cpu() ? host : host.to(opts.device);
}
Tensor rand_like_kernel(const Tensor& a, std::optional<ScalarType> dtype, std::optional<Device> device) {
  return rand_kernel(std::vector<int64_t>(a.sizes().begin(), a.sizes().end()), dtype.value_or(a.dtype()),
                     device.value_or(a.device()));
}

// Registers f at each backend this build serves (views: metadata only), each
// registration naming the caller's line, as `strata dump` shows it.
template <typename F>
void implBackends(Library& m, const char* name, F f, std::source_location where = std::source_location::current()) {
  m.impl(name, f, DispatchKey::CPU, {}, where);
  m.impl(name, f, DispatchKey::Meta, {}, where);
#if STRATA_WITH_CUDA
  m.impl(name, f, DispatchKey::CUDA, {}, where);
#endif
}

}  // namespace

namespace detail {

void registerCoreLibrary(Library& m) {
  // Tags as PyTorch's native_functions.yaml gives them to the same ops.
  m.def("empty(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("zeros(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("ones(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("full(int[] size, Scalar fill_value, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("arange(Scalar end, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("arange.start(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("empty_like(Tensor self, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("clone(Tensor self) -> Tensor");
  m.def("copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)");
  m.def("fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)");
  m.def("zero_(Tensor(a!) self) -> Tensor(a!)");
  m.def("to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False) -> Tensor(a)");
  m.def("contiguous(Tensor(a) self) -> Tensor(a)");
  m.def("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("mul.Tensor(Tensor self, Tensor other) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("mul.Scalar(Tensor self, Scalar other) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("div.Tensor(Tensor self, Tensor other) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("div.Scalar(Tensor self, Scalar other) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("neg(Tensor self) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("sin(Tensor self) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("cos(Tensor self) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("exp(Tensor self) -> Tensor", {Tag::core, Tag::pointwise});
  m.def("sum(Tensor self, *, ScalarType? dtype=None) -> Tensor");
  m.def("sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  m.def("matmul(Tensor self, Tensor other) -> Tensor");
  m.def("t(Tensor(a) self) -> Tensor(a)");
  m.def("transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)");
  m.def("movedim.int(Tensor(a) self, int source, int destination) -> Tensor(a)");
  m.def("permute(Tensor(a) self, int[] dims) -> Tensor(a)");
  m.def("unsqueeze(Tensor(a) self, int dim) -> Tensor(a)");
  m.def("squeeze(Tensor(a) self) -> Tensor(a)");
  m.def("squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)");
  m.def("select.int(Tensor(a) self, int dim, int index) -> Tensor(a)");
  m.def("narrow(Tensor(a) self, int dim, int start, int length) -> Tensor(a)");
  m.def("expand(Tensor(a) self, int[] size, *, bool implicit=False) -> Tensor(a)");
  m.def("reshape(Tensor(a) self, int[] shape) -> Tensor(a)");
  m.def("view(Tensor(a) self, int[] size) -> Tensor(a)");
  m.def("stack(Tensor[] tensors, int dim=0) -> Tensor");
  m.def("cat(Tensor[] tensors, int dim=0) -> Tensor");
  m.def("rand(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor", {Tag::nondeterministic_seeded});
  m.def("rand_like(Tensor self, *, ScalarType? dtype=None, Device? device=None) -> Tensor", {Tag::nondeterministic_seeded});
  m.def("allclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False) -> bool", {Tag::data_dependent_output});

  // Factories: no tensor argument to dispatch on.
  m.impl("empty", &empty_kernel, DispatchKey::CompositeExplicitAutograd);
  m.impl("zeros", &zeros_kernel, DispatchKey::CompositeExplicitAutograd);
  m.impl("ones", &ones_kernel, DispatchKey::CompositeExplicitAutograd);
  m.impl("full", &full_kernel, DispatchKey::CompositeExplicitAutograd);
  m.impl("arange", &arange_kernel, DispatchKey::CompositeExplicitAutograd);
  m.impl("arange.start", &arange_start_kernel, DispatchKey::CompositeExplicitAutograd);
  m.impl("rand", &rand_kernel, DispatchKey::CompositeExplicitAutograd);
  m.impl("rand_like", &rand_like_kernel, DispatchKey::CompositeExplicitAutograd);
  // And at Meta: a factory's Meta kernel is its fake implementation (FakeTensorMode
  // runs it with device=meta, then gives the result the device asked for).
  m.impl("empty", &empty_kernel, DispatchKey::Meta);
  m.impl("zeros", &zeros_kernel, DispatchKey::Meta);
  m.impl("ones", &ones_kernel, DispatchKey::Meta);
  m.impl("full", &full_kernel, DispatchKey::Meta);
  m.impl("arange", &arange_kernel, DispatchKey::Meta);
  m.impl("arange.start", &arange_start_kernel, DispatchKey::Meta);
  m.impl("rand", &rand_kernel, DispatchKey::Meta);
  m.impl("rand_like", &rand_like_kernel, DispatchKey::Meta);

  // Device-generic: metadata, or Tensor methods that handle every device.
  implBackends(m, "empty_like", &empty_like_kernel);
  implBackends(m, "clone", &clone_kernel);
  implBackends(m, "copy_", &copy_kernel);
  implBackends(m, "fill_.Scalar", &fill_kernel);
  implBackends(m, "zero_", &zero_kernel);
  m.impl("to.dtype", &to_dtype_kernel, DispatchKey::CPU);  // CUDA: a cast kernel (core_cuda.cc)
  m.impl("to.dtype", &to_dtype_kernel, DispatchKey::Meta);
  implBackends(m, "contiguous", &contiguous_kernel);
  implBackends(m, "t", &t_kernel);
  implBackends(m, "transpose.int", &transpose_kernel);
  implBackends(m, "movedim.int", &movedim_kernel);
  implBackends(m, "permute", &permute_kernel);
  implBackends(m, "unsqueeze", &unsqueeze_kernel);
  implBackends(m, "squeeze", &squeeze_kernel);
  implBackends(m, "squeeze.dim", &squeeze_dim_kernel);
  implBackends(m, "select.int", &select_kernel);
  implBackends(m, "narrow", &narrow_kernel);
  implBackends(m, "expand", &expand_kernel);
  implBackends(m, "reshape", &reshape_kernel);
  implBackends(m, "view", &view_kernel);
  implBackends(m, "cat", &cat_kernel);
  implBackends(m, "stack", &stack_kernel);

  // Compute: CPU does the work, Meta only shapes; CUDA where built.
#define STRATA_CORE_COMPUTE(name, fn)             \
  m.impl(name, &fn<true>, DispatchKey::CPU);      \
  m.impl(name, &fn<false>, DispatchKey::Meta);
  STRATA_CORE_COMPUTE("add.Tensor", add_tensor)
  STRATA_CORE_COMPUTE("add.Scalar", add_scalar)
  STRATA_CORE_COMPUTE("sub.Tensor", sub_tensor)
  STRATA_CORE_COMPUTE("sub.Scalar", sub_scalar)
  STRATA_CORE_COMPUTE("mul.Tensor", mul_tensor)
  STRATA_CORE_COMPUTE("mul.Scalar", mul_scalar)
  STRATA_CORE_COMPUTE("div.Tensor", div_tensor)
  STRATA_CORE_COMPUTE("div.Scalar", div_scalar)
  STRATA_CORE_COMPUTE("neg", neg_kernel)
  STRATA_CORE_COMPUTE("sin", sin_kernel)
  STRATA_CORE_COMPUTE("cos", cos_kernel)
  STRATA_CORE_COMPUTE("exp", exp_kernel)
  STRATA_CORE_COMPUTE("sum", sum_all)
  STRATA_CORE_COMPUTE("sum.dim_IntList", sum_dim)
  STRATA_CORE_COMPUTE("matmul", matmul_kernel)
#undef STRATA_CORE_COMPUTE
  m.impl("allclose", &allclose_cpu, DispatchKey::CPU);
  m.impl("allclose", &allclose_meta, DispatchKey::Meta);
  cuda::registerCoreCudaKernels(m);
}

}  // namespace detail

// ---------------------------------------------------------------------------
// ops.h: typed calls through the dispatcher.

namespace {
template <typename Sig>
TypedOperatorHandle<Sig> coreOp(const char* name, const char* overload) {
  return Dispatcher::singleton().findSchemaOrThrow(std::string("core::") + name, overload).typed<Sig>();
}
}  // namespace

#define STRATA_CORE_CALL(name, overload, Sig, ...)                    \
  static const TypedOperatorHandle<Sig> op = coreOp<Sig>(name, overload); \
  return op.call(__VA_ARGS__)

using IntVec = const std::vector<int64_t>&;
using OptDtype = std::optional<ScalarType>;
using OptDevice = std::optional<Device>;

Tensor ops::empty(IntVec size, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("empty", "", Tensor(IntVec, OptDtype, OptDevice), size, dtype, device);
}
Tensor ops::zeros(IntVec size, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("zeros", "", Tensor(IntVec, OptDtype, OptDevice), size, dtype, device);
}
Tensor ops::ones(IntVec size, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("ones", "", Tensor(IntVec, OptDtype, OptDevice), size, dtype, device);
}
Tensor ops::full(IntVec size, const Scalar& v, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("full", "", Tensor(IntVec, const Scalar&, OptDtype, OptDevice), size, v, dtype, device);
}
Tensor ops::arange(const Scalar& end, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("arange", "", Tensor(const Scalar&, OptDtype, OptDevice), end, dtype, device);
}
Tensor ops::arange(const Scalar& start, const Scalar& end, const Scalar& step, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("arange", "start", Tensor(const Scalar&, const Scalar&, const Scalar&, OptDtype, OptDevice), start,
                   end, step, dtype, device);
}
Tensor ops::empty_like(const Tensor& self, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("empty_like", "", Tensor(const Tensor&, OptDtype, OptDevice), self, dtype, device);
}
Tensor ops::clone(const Tensor& self) { STRATA_CORE_CALL("clone", "", Tensor(const Tensor&), self); }
Tensor& ops::copy_(Tensor& self, const Tensor& src, bool non_blocking) {
  STRATA_CORE_CALL("copy_", "", Tensor&(Tensor&, const Tensor&, bool), self, src, non_blocking);
}
Tensor& ops::fill_(Tensor& self, const Scalar& value) {
  STRATA_CORE_CALL("fill_", "Scalar", Tensor&(Tensor&, const Scalar&), self, value);
}
Tensor& ops::zero_(Tensor& self) { STRATA_CORE_CALL("zero_", "", Tensor&(Tensor&), self); }
Tensor ops::to(const Tensor& self, ScalarType dtype, bool non_blocking, bool copy) {
  STRATA_CORE_CALL("to", "dtype", Tensor(const Tensor&, ScalarType, bool, bool), self, dtype, non_blocking, copy);
}
Tensor ops::contiguous(const Tensor& self) { STRATA_CORE_CALL("contiguous", "", Tensor(const Tensor&), self); }
Tensor ops::add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  STRATA_CORE_CALL("add", "Tensor", Tensor(const Tensor&, const Tensor&, const Scalar&), a, b, alpha);
}
Tensor ops::add(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  STRATA_CORE_CALL("add", "Scalar", Tensor(const Tensor&, const Scalar&, const Scalar&), a, b, alpha);
}
Tensor ops::sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  STRATA_CORE_CALL("sub", "Tensor", Tensor(const Tensor&, const Tensor&, const Scalar&), a, b, alpha);
}
Tensor ops::sub(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  STRATA_CORE_CALL("sub", "Scalar", Tensor(const Tensor&, const Scalar&, const Scalar&), a, b, alpha);
}
Tensor ops::mul(const Tensor& a, const Tensor& b) {
  STRATA_CORE_CALL("mul", "Tensor", Tensor(const Tensor&, const Tensor&), a, b);
}
Tensor ops::mul(const Tensor& a, const Scalar& b) {
  STRATA_CORE_CALL("mul", "Scalar", Tensor(const Tensor&, const Scalar&), a, b);
}
Tensor ops::div(const Tensor& a, const Tensor& b) {
  STRATA_CORE_CALL("div", "Tensor", Tensor(const Tensor&, const Tensor&), a, b);
}
Tensor ops::div(const Tensor& a, const Scalar& b) {
  STRATA_CORE_CALL("div", "Scalar", Tensor(const Tensor&, const Scalar&), a, b);
}
Tensor ops::neg(const Tensor& a) { STRATA_CORE_CALL("neg", "", Tensor(const Tensor&), a); }
Tensor ops::sin(const Tensor& a) { STRATA_CORE_CALL("sin", "", Tensor(const Tensor&), a); }
Tensor ops::cos(const Tensor& a) { STRATA_CORE_CALL("cos", "", Tensor(const Tensor&), a); }
Tensor ops::exp(const Tensor& a) { STRATA_CORE_CALL("exp", "", Tensor(const Tensor&), a); }
Tensor ops::sum(const Tensor& a, OptDtype dtype) {
  STRATA_CORE_CALL("sum", "", Tensor(const Tensor&, OptDtype), a, dtype);
}
Tensor ops::sum(const Tensor& a, std::optional<std::vector<int64_t>> dim, bool keepdim, OptDtype dtype) {
  STRATA_CORE_CALL("sum", "dim_IntList", Tensor(const Tensor&, std::optional<std::vector<int64_t>>, bool, OptDtype), a,
                   std::move(dim), keepdim, dtype);
}
Tensor ops::matmul(const Tensor& a, const Tensor& b) {
  STRATA_CORE_CALL("matmul", "", Tensor(const Tensor&, const Tensor&), a, b);
}
Tensor ops::t(const Tensor& a) { STRATA_CORE_CALL("t", "", Tensor(const Tensor&), a); }
Tensor ops::transpose(const Tensor& a, int64_t d0, int64_t d1) {
  STRATA_CORE_CALL("transpose", "int", Tensor(const Tensor&, int64_t, int64_t), a, d0, d1);
}
Tensor ops::movedim(const Tensor& a, int64_t s, int64_t d) {
  STRATA_CORE_CALL("movedim", "int", Tensor(const Tensor&, int64_t, int64_t), a, s, d);
}
Tensor ops::permute(const Tensor& a, const std::vector<int64_t>& dims) {
  STRATA_CORE_CALL("permute", "", Tensor(const Tensor&, IntVec), a, dims);
}
Tensor ops::unsqueeze(const Tensor& a, int64_t d) {
  STRATA_CORE_CALL("unsqueeze", "", Tensor(const Tensor&, int64_t), a, d);
}
Tensor ops::squeeze(const Tensor& a) { STRATA_CORE_CALL("squeeze", "", Tensor(const Tensor&), a); }
Tensor ops::squeeze(const Tensor& a, int64_t d) {
  STRATA_CORE_CALL("squeeze", "dim", Tensor(const Tensor&, int64_t), a, d);
}
Tensor ops::select(const Tensor& a, int64_t d, int64_t i) {
  STRATA_CORE_CALL("select", "int", Tensor(const Tensor&, int64_t, int64_t), a, d, i);
}
Tensor ops::narrow(const Tensor& a, int64_t d, int64_t start, int64_t length) {
  STRATA_CORE_CALL("narrow", "", Tensor(const Tensor&, int64_t, int64_t, int64_t), a, d, start, length);
}
Tensor ops::rand(IntVec size, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("rand", "", Tensor(IntVec, OptDtype, OptDevice), size, dtype, device);
}
Tensor ops::rand_like(const Tensor& self, OptDtype dtype, OptDevice device) {
  STRATA_CORE_CALL("rand_like", "", Tensor(const Tensor&, OptDtype, OptDevice), self, dtype, device);
}
void ops::manual_seed(uint64_t seed) {
  Generator& g = defaultGenerator();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.engine.seed(seed);
}
std::string ops::get_rng_state() {
  Generator& g = defaultGenerator();
  std::lock_guard<std::mutex> lock(g.mutex);
  std::ostringstream os;
  os << g.engine;
  return os.str();
}
void ops::set_rng_state(const std::string& state) {
  std::mt19937_64 engine;
  std::istringstream is(state);
  is >> engine;
  STRATA_CHECK(!is.fail(), Value, "set_rng_state: not a state get_rng_state() returned");
  Generator& g = defaultGenerator();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.engine = engine;
}
Tensor ops::expand(const Tensor& a, IntVec size, bool implicit) {
  STRATA_CORE_CALL("expand", "", Tensor(const Tensor&, IntVec, bool), a, size, implicit);
}
Tensor ops::reshape(const Tensor& a, IntVec shape) {
  STRATA_CORE_CALL("reshape", "", Tensor(const Tensor&, IntVec), a, shape);
}
Tensor ops::view(const Tensor& a, IntVec size) { STRATA_CORE_CALL("view", "", Tensor(const Tensor&, IntVec), a, size); }
Tensor ops::stack(const std::vector<Tensor>& ts, int64_t dim) {
  STRATA_CORE_CALL("stack", "", Tensor(const std::vector<Tensor>&, int64_t), ts, dim);
}
Tensor ops::cat(const std::vector<Tensor>& ts, int64_t dim) {
  STRATA_CORE_CALL("cat", "", Tensor(const std::vector<Tensor>&, int64_t), ts, dim);
}
bool ops::allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  STRATA_CORE_CALL("allclose", "", bool(const Tensor&, const Tensor&, double, double, bool), a, b, rtol, atol, equal_nan);
}

#undef STRATA_CORE_CALL

}  // namespace strata
