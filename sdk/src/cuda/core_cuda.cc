// CUDA kernels of the core:: library: the elementwise ops and casts. Same C++
// signatures, promotion and errors as the CPU kernels in core_ops.cc; the work runs
// in elementwise.cu on contiguous buffers (broadcast inputs are materialized first).
#include "cuda/core_cuda.h"

#include <cuda_runtime.h>

#include <string_view>

#include "cuda/cuda_backend.h"
#include "cuda/elementwise.h"
#include "ops/core_rules.h"
#include "strata/ops.h"
#include "tensor_internal.h"

namespace strata::cuda {

namespace {

using detail::cuda::BinaryOp;
using detail::cuda::DType;
using detail::cuda::UnaryOp;

DType dtypeOf(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: return DType::U8;
    case ScalarType::Char: return DType::I8;
    case ScalarType::Int: return DType::I32;
    case ScalarType::Long: return DType::I64;
    case ScalarType::Half: return DType::F16;
    case ScalarType::Float: return DType::F32;
    case ScalarType::Double: return DType::F64;
    case ScalarType::Bool: return DType::Bool;
    case ScalarType::BFloat16: return DType::BF16;
  }
  STRATA_FAIL(Type, "CUDA: unsupported dtype code ", static_cast<int>(t));
}

// Launches are asynchronous on the current stream of the tensors' device, as in
// PyTorch: what follows on that stream is ordered after the kernel, and a copy to the
// host waits for it. A launch error is reported here; an error while the kernel runs
// surfaces at the next call that synchronizes (CUDA_LAUNCH_BLOCKING=1 reports it at
// the launch instead).
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  STRATA_FAIL(Device, "CUDA kernel ", what, " failed: ", cudaGetErrorString(e));
}

// The launch of a kernel on t's device: its current stream there. The device is
// made current for the launch when it is not (a kernel runs where it is launched).
class OnDevice {
 public:
  explicit OnDevice(const Tensor& t) : device_(t.device().index) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (device_ != prev_) check(cudaSetDevice(device_), "cudaSetDevice");
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  ~OnDevice() {
    if (device_ != prev_) cudaSetDevice(prev_);
  }
  detail::cuda::Launch launch() const {
    return {static_cast<cudaStream_t>(detail::cuda::currentStream(device_)), device_};
  }

 private:
  int device_;
  int prev_ = 0;
};

// The dtype the arithmetic runs in: the kernels have float32/64 and int32/64.
ScalarType computeType(ScalarType t) {
  if (t == ScalarType::Half || t == ScalarType::BFloat16) return ScalarType::Float;
  if (t == ScalarType::Bool || t == ScalarType::Byte || t == ScalarType::Char) return ScalarType::Long;
  return t;
}

// A contiguous copy of a contiguous device tensor in dtype.
Tensor cast(const Tensor& src, ScalarType dtype) {
  if (src.dtype() == dtype) return src;
  Tensor out = empty(src.sizes(), TensorOptions(dtype).with_device(src.device()));
  if (out.numel() > 0) {
    const OnDevice on(out);
    check(detail::cuda::launchCast(dtypeOf(src.dtype()), src.data_ptr(), dtypeOf(dtype), out.data_ptr(), out.numel(),
                                   on.launch()),
          "cast");
  }
  return out;
}


Tensor binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, ScalarType out_dtype, double alpha) {
  STRATA_CHECK(a.device() == b.device(), Device, name, ": expected all tensors to be on the same device, but found ",
               a.device().str(), " and ", b.device().str());
  const std::vector<int64_t> shape = ops::broadcastShapes(a.sizes(), b.sizes());
  const ScalarType ct = computeType(out_dtype);
  const Tensor ca = cast(detail::broadcastTo(a, shape).contiguous(), ct);
  const Tensor cb = cast(detail::broadcastTo(b, shape).contiguous(), ct);
  Tensor out = empty(shape, TensorOptions(ct).with_device(a.device()));
  if (out.numel() > 0) {
    const OnDevice on(out);
    check(detail::cuda::launchBinary(op, dtypeOf(ct), ca.data_ptr(), cb.data_ptr(), out.data_ptr(), out.numel(), alpha,
                                     on.launch()),
          name);
  }
  return cast(out, out_dtype);
}

Tensor unary(UnaryOp op, const char* name, const Tensor& a, ScalarType out_dtype) {
  const ScalarType ct = computeType(out_dtype);
  const Tensor ca = cast(a.contiguous(), ct);
  Tensor out = empty(a.sizes(), TensorOptions(ct).with_device(a.device()));
  if (out.numel() > 0) {
    const OnDevice on(out);
    check(detail::cuda::launchUnary(op, dtypeOf(ct), ca.data_ptr(), out.data_ptr(), out.numel(), on.launch()), name);
  }
  return cast(out, out_dtype);
}

Tensor scalarOn(const Scalar& s, ScalarType dt, const Tensor& like) {
  return detail::scalarTensor(s, dt, like.device());
}
double alphaOf(const char* op, ScalarType dt, const Scalar& alpha) {
  detail::checkAlpha(op, dt, alpha);
  // PyTorch's CUDA kernels take alpha in the compute type (float for float16 and
  // bfloat16), its CPU kernels in the result's: each checks against its own.
  const ScalarType compute = dt == ScalarType::Half || dt == ScalarType::BFloat16 ? ScalarType::Float : dt;
  detail::checkAlphaFits(compute, alpha, std::string_view(op) == "core::sub", op);
  return alpha.toDouble();
}

Tensor add_tensor(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  const ScalarType dt = ops::resultType(a, b);
  return binary(BinaryOp::Add, "core::add", a, b, dt, alphaOf("core::add", dt, alpha));
}
Tensor add_scalar(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  const ScalarType dt = ops::resultType(a, b);
  return binary(BinaryOp::Add, "core::add", a, scalarOn(b, dt, a), dt, alphaOf("core::add", dt, alpha));
}
Tensor sub_tensor(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  detail::checkSubOperands(a.dtype() == ScalarType::Bool, b.dtype() == ScalarType::Bool);
  const ScalarType dt = ops::resultType(a, b);
  return binary(BinaryOp::Sub, "core::sub", a, b, dt, alphaOf("core::sub", dt, alpha));
}
Tensor sub_scalar(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  detail::checkSubOperands(a.dtype() == ScalarType::Bool, b.isBoolean());
  const ScalarType dt = ops::resultType(a, b);
  return binary(BinaryOp::Sub, "core::sub", a, scalarOn(b, dt, a), dt, alphaOf("core::sub", dt, alpha));
}
Tensor mul_tensor(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Mul, "core::mul", a, b, ops::resultType(a, b), 1);
}
Tensor mul_scalar(const Tensor& a, const Scalar& b) {
  const ScalarType dt = ops::resultType(a, b);
  return binary(BinaryOp::Mul, "core::mul", a, scalarOn(b, dt, a), dt, 1);
}
Tensor div_tensor(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Div, "core::div", a, b, detail::floatResultType(ops::resultType(a, b)), 1);
}
Tensor div_scalar(const Tensor& a, const Scalar& b) {
  const ScalarType dt = detail::floatResultType(ops::resultType(a, b));
  return binary(BinaryOp::Div, "core::div", a, scalarOn(b, dt, a), dt, 1);
}
Tensor neg(const Tensor& a) {
  detail::checkNegNotBool(a.dtype());
  return unary(UnaryOp::Neg, "core::neg", a, a.dtype());
}
Tensor sin(const Tensor& a) { return unary(UnaryOp::Sin, "core::sin", a, detail::floatResultType(a.dtype())); }
Tensor cos(const Tensor& a) { return unary(UnaryOp::Cos, "core::cos", a, detail::floatResultType(a.dtype())); }
Tensor exp(const Tensor& a) { return unary(UnaryOp::Exp, "core::exp", a, detail::floatResultType(a.dtype())); }
Tensor to_dtype(const Tensor& a, ScalarType dtype, bool /*non_blocking*/, bool copy) {
  if (a.dtype() == dtype && !copy) return a;
  if (a.dtype() == dtype) return a.clone();
  return cast(a.contiguous(), dtype);
}

}  // namespace

void registerCoreCudaKernels(Library& m) {
  constexpr DispatchKey k = DispatchKey::CUDA;
  m.impl("add.Tensor", &add_tensor, k);
  m.impl("add.Scalar", &add_scalar, k);
  m.impl("sub.Tensor", &sub_tensor, k);
  m.impl("sub.Scalar", &sub_scalar, k);
  m.impl("mul.Tensor", &mul_tensor, k);
  m.impl("mul.Scalar", &mul_scalar, k);
  m.impl("div.Tensor", &div_tensor, k);
  m.impl("div.Scalar", &div_scalar, k);
  m.impl("neg", &neg, k);
  m.impl("sin", &sin, k);
  m.impl("cos", &cos, k);
  m.impl("exp", &exp, k);
  m.impl("to.dtype", &to_dtype, k);
}

}  // namespace strata::cuda
