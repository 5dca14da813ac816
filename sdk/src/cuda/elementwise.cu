// CUDA kernels of the core:: elementwise ops and casts, over contiguous buffers.
// Arithmetic runs in float32, float64, int32 and int64; the host side (core_cuda.cc)
// casts float16/bfloat16 inputs to float32 and back, and the cast kernel converts
// between every dtype the SDK has.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/elementwise.h"

namespace strata::detail::cuda {
namespace {

constexpr unsigned kThreads = 256;
unsigned blocksFor(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 65535 ? (wanted > 0 ? wanted : 1) : 65535);
}

#define STRATA_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void binaryKernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n, T alpha) {
  STRATA_GRID_LOOP(i, n) {
    const T x = a[i], y = b[i];
    switch (op) {
      case BinaryOp::Add: out[i] = x + alpha * y; break;
      case BinaryOp::Sub: out[i] = x - alpha * y; break;
      case BinaryOp::Mul: out[i] = x * y; break;
      case BinaryOp::Div: out[i] = x / y; break;
    }
  }
}

template <typename T>
__device__ T applyUnary(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Sin: return static_cast<T>(sin(static_cast<double>(x)));
    case UnaryOp::Cos: return static_cast<T>(cos(static_cast<double>(x)));
    case UnaryOp::Exp: return static_cast<T>(exp(static_cast<double>(x)));
  }
  return x;
}
template <>
__device__ float applyUnary<float>(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Sin: return sinf(x);
    case UnaryOp::Cos: return cosf(x);
    case UnaryOp::Exp: return expf(x);
  }
  return x;
}

template <typename T>
__global__ void unaryKernel(UnaryOp op, const T* a, T* out, int64_t n) {
  STRATA_GRID_LOOP(i, n) { out[i] = applyUnary<T>(op, a[i]); }
}

// Every dtype to and from float/double/int64 for the cast kernel.
template <typename T>
__device__ double toDouble(T v) { return static_cast<double>(v); }
template <>
__device__ double toDouble<__half>(__half v) { return static_cast<double>(__half2float(v)); }
template <>
__device__ double toDouble<__nv_bfloat16>(__nv_bfloat16 v) { return static_cast<double>(__bfloat162float(v)); }
template <typename T>
__device__ T fromDouble(double v) { return static_cast<T>(v); }
template <>
__device__ bool fromDouble<bool>(double v) { return v != 0; }
template <>
__device__ __half fromDouble<__half>(double v) { return __float2half_rn(static_cast<float>(v)); }
template <>
__device__ __nv_bfloat16 fromDouble<__nv_bfloat16>(double v) { return __float2bfloat16_rn(static_cast<float>(v)); }

template <typename S, typename D>
__global__ void castKernel(const S* src, D* dst, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    if constexpr (sizeof(S) == 8 && sizeof(D) == 8 && !std::is_floating_point<S>::value && !std::is_floating_point<D>::value) {
      dst[i] = static_cast<D>(src[i]);  // int64 <-> int64 without a trip through double
    } else {
      dst[i] = fromDouble<D>(toDouble<S>(src[i]));
    }
  }
}

template <typename S>
cudaError_t castFrom(const S* src, void* dst, DType to, int64_t n) {
  const unsigned b = blocksFor(n);
  switch (to) {
    case DType::U8: castKernel<<<b, kThreads>>>(src, static_cast<uint8_t*>(dst), n); break;
    case DType::I8: castKernel<<<b, kThreads>>>(src, static_cast<int8_t*>(dst), n); break;
    case DType::I32: castKernel<<<b, kThreads>>>(src, static_cast<int32_t*>(dst), n); break;
    case DType::I64: castKernel<<<b, kThreads>>>(src, static_cast<int64_t*>(dst), n); break;
    case DType::F16: castKernel<<<b, kThreads>>>(src, static_cast<__half*>(dst), n); break;
    case DType::F32: castKernel<<<b, kThreads>>>(src, static_cast<float*>(dst), n); break;
    case DType::F64: castKernel<<<b, kThreads>>>(src, static_cast<double*>(dst), n); break;
    case DType::Bool: castKernel<<<b, kThreads>>>(src, static_cast<bool*>(dst), n); break;
    case DType::BF16: castKernel<<<b, kThreads>>>(src, static_cast<__nv_bfloat16*>(dst), n); break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launchBinary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, int64_t n, double alpha) {
  const unsigned g = blocksFor(n);
  switch (dtype) {
    case DType::F32:
      binaryKernel<<<g, kThreads>>>(op, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(out), n, static_cast<float>(alpha));
      break;
    case DType::F64:
      binaryKernel<<<g, kThreads>>>(op, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(out), n, alpha);
      break;
    case DType::I32:
      binaryKernel<<<g, kThreads>>>(op, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), static_cast<int32_t*>(out), n, static_cast<int32_t>(alpha));
      break;
    case DType::I64:
      binaryKernel<<<g, kThreads>>>(op, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), static_cast<int64_t*>(out), n, static_cast<int64_t>(alpha));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launchUnary(UnaryOp op, DType dtype, const void* a, void* out, int64_t n) {
  const unsigned g = blocksFor(n);
  switch (dtype) {
    case DType::F32: unaryKernel<<<g, kThreads>>>(op, static_cast<const float*>(a), static_cast<float*>(out), n); break;
    case DType::F64: unaryKernel<<<g, kThreads>>>(op, static_cast<const double*>(a), static_cast<double*>(out), n); break;
    case DType::I32: unaryKernel<<<g, kThreads>>>(op, static_cast<const int32_t*>(a), static_cast<int32_t*>(out), n); break;
    case DType::I64: unaryKernel<<<g, kThreads>>>(op, static_cast<const int64_t*>(a), static_cast<int64_t*>(out), n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launchCast(DType from, const void* src, DType to, void* dst, int64_t n) {
  switch (from) {
    case DType::U8: return castFrom(static_cast<const uint8_t*>(src), dst, to, n);
    case DType::I8: return castFrom(static_cast<const int8_t*>(src), dst, to, n);
    case DType::I32: return castFrom(static_cast<const int32_t*>(src), dst, to, n);
    case DType::I64: return castFrom(static_cast<const int64_t*>(src), dst, to, n);
    case DType::F16: return castFrom(static_cast<const __half*>(src), dst, to, n);
    case DType::F32: return castFrom(static_cast<const float*>(src), dst, to, n);
    case DType::F64: return castFrom(static_cast<const double*>(src), dst, to, n);
    case DType::Bool: return castFrom(static_cast<const bool*>(src), dst, to, n);
    case DType::BF16: return castFrom(static_cast<const __nv_bfloat16*>(src), dst, to, n);
  }
  return cudaErrorInvalidValue;
}

}  // namespace strata::detail::cuda
