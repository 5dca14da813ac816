// CUDA kernels of the core:: elementwise ops and casts, over contiguous buffers.
// Arithmetic runs in float32, float64, int32 and int64; the host side (core_cuda.cc)
// casts float16/bfloat16 inputs to float32 and back, and the cast kernel converts
// between every dtype the SDK has.
//
// Note [Elementwise kernels at bandwidth]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The kernels move data and do almost no arithmetic, so what matters is how they
// touch memory. Each thread loads and stores 16 bytes at a time (float4-sized
// vectors) when every buffer is 16-byte aligned, which the caching allocator's
// 512-byte blocks always are at offset 0; otherwise one element at a time. The
// grid is sized to fill the device once (gridFor) and each thread walks it with a
// grid-stride loop, so a launch costs the same for 1K or 256M elements. The
// elements past the last whole vector are done one at a time by the first threads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/elementwise.h"

namespace strata::detail::cuda {

unsigned gridFor(int64_t items, int device) {
  static std::atomic<int> sm_counts[64];
  int sms = device >= 0 && device < 64 ? sm_counts[device].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
      cudaGetLastError();
      sms = 16;  // the grid-stride loop is correct at any size
    } else if (device >= 0 && device < 64) {
      sm_counts[device].store(sms, std::memory_order_relaxed);
    }
  }
  const int64_t wanted = (items + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sms) * 8;  // 8 blocks of 256 threads: 2048 threads per SM
  return static_cast<unsigned>(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
}

namespace {

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T>
constexpr int vecWidth() {
  return 16 / sizeof(T) > 0 ? static_cast<int>(16 / sizeof(T)) : 1;
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Note [Elementwise kernels at bandwidth]. F: T(T, T).
template <int N, typename T, typename F>
__global__ void binaryKernel(F f, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t nvec = n / N;
  const auto* av = reinterpret_cast<const Vec<T, N>*>(a);
  const auto* bv = reinterpret_cast<const Vec<T, N>*>(b);
  auto* ov = reinterpret_cast<Vec<T, N>*>(out);
  for (int64_t i = tid; i < nvec; i += stride) {
    const Vec<T, N> x = av[i], y = bv[i];
    Vec<T, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = f(x.v[k], y.v[k]);
    ov[i] = r;
  }
  for (int64_t i = nvec * N + tid; i < n; i += stride) out[i] = f(a[i], b[i]);
}

template <int N, typename T, typename F>
__global__ void unaryKernel(F f, const T* __restrict__ a, T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t nvec = n / N;
  const auto* av = reinterpret_cast<const Vec<T, N>*>(a);
  auto* ov = reinterpret_cast<Vec<T, N>*>(out);
  for (int64_t i = tid; i < nvec; i += stride) {
    const Vec<T, N> x = av[i];
    Vec<T, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = f(x.v[k]);
    ov[i] = r;
  }
  for (int64_t i = nvec * N + tid; i < n; i += stride) out[i] = f(a[i]);
}

template <typename T>
struct AddOp {
  T alpha;
  __device__ T operator()(T x, T y) const { return x + alpha * y; }
};
template <typename T>
struct SubOp {
  T alpha;
  __device__ T operator()(T x, T y) const { return x - alpha * y; }
};
template <typename T>
struct MulOp {
  __device__ T operator()(T x, T y) const { return x * y; }
};
template <typename T>
struct DivOp {
  __device__ T operator()(T x, T y) const { return x / y; }
};

template <typename T>
struct UnaryFn {
  UnaryOp op;
  __device__ T operator()(T x) const {
    if constexpr (std::is_same<T, float>::value) {
      switch (op) {
        case UnaryOp::Neg: return -x;
        case UnaryOp::Sin: return sinf(x);
        case UnaryOp::Cos: return cosf(x);
        case UnaryOp::Exp: return expf(x);
      }
    } else {
      switch (op) {
        case UnaryOp::Neg: return -x;
        case UnaryOp::Sin: return static_cast<T>(sin(static_cast<double>(x)));
        case UnaryOp::Cos: return static_cast<T>(cos(static_cast<double>(x)));
        case UnaryOp::Exp: return static_cast<T>(exp(static_cast<double>(x)));
      }
    }
    return x;
  }
};

template <typename T, typename F>
cudaError_t binary(F f, const void* a, const void* b, void* out, int64_t n, Launch where) {
  constexpr int N = vecWidth<T>();
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  auto* po = static_cast<T*>(out);
  if (aligned(a, 16) && aligned(b, 16) && aligned(out, 16)) {
    binaryKernel<N><<<gridFor(n / N > 0 ? n / N : 1, where.device), kThreads, 0, where.stream>>>(f, pa, pb, po, n);
  } else {
    binaryKernel<1><<<gridFor(n, where.device), kThreads, 0, where.stream>>>(f, pa, pb, po, n);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t binaryOf(BinaryOp op, const void* a, const void* b, void* out, int64_t n, double alpha, Launch where) {
  switch (op) {
    case BinaryOp::Add: return binary<T>(AddOp<T>{static_cast<T>(alpha)}, a, b, out, n, where);
    case BinaryOp::Sub: return binary<T>(SubOp<T>{static_cast<T>(alpha)}, a, b, out, n, where);
    case BinaryOp::Mul: return binary<T>(MulOp<T>{}, a, b, out, n, where);
    case BinaryOp::Div: return binary<T>(DivOp<T>{}, a, b, out, n, where);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t unaryOf(UnaryOp op, const void* a, void* out, int64_t n, Launch where) {
  constexpr int N = vecWidth<T>();
  const auto* pa = static_cast<const T*>(a);
  auto* po = static_cast<T*>(out);
  if (aligned(a, 16) && aligned(out, 16)) {
    unaryKernel<N><<<gridFor(n / N > 0 ? n / N : 1, where.device), kThreads, 0, where.stream>>>(UnaryFn<T>{op}, pa, po, n);
  } else {
    unaryKernel<1><<<gridFor(n, where.device), kThreads, 0, where.stream>>>(UnaryFn<T>{op}, pa, po, n);
  }
  return cudaGetLastError();
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
__device__ D convert(S s) {
  if constexpr (sizeof(S) == 8 && sizeof(D) == 8 && !std::is_floating_point<S>::value && !std::is_floating_point<D>::value) {
    return static_cast<D>(s);  // int64 <-> int64 without a trip through double
  } else {
    return fromDouble<D>(toDouble<S>(s));
  }
}

// Note [Elementwise kernels at bandwidth]: N elements at a time, so that the wider
// of the two types moves 16 bytes per access.
template <int N, typename S, typename D>
__global__ void castKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t nvec = n / N;
  const auto* sv = reinterpret_cast<const Vec<S, N>*>(src);
  auto* dv = reinterpret_cast<Vec<D, N>*>(dst);
  for (int64_t i = tid; i < nvec; i += stride) {
    const Vec<S, N> x = sv[i];
    Vec<D, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = convert<S, D>(x.v[k]);
    dv[i] = r;
  }
  for (int64_t i = nvec * N + tid; i < n; i += stride) dst[i] = convert<S, D>(src[i]);
}

template <typename S, typename D>
cudaError_t cast(const S* src, void* dst, int64_t n, Launch where) {
  constexpr int N = static_cast<int>(16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D)));
  auto* d = static_cast<D*>(dst);
  if (aligned(src, sizeof(S) * N) && aligned(dst, sizeof(D) * N)) {
    castKernel<N><<<gridFor(n / N > 0 ? n / N : 1, where.device), kThreads, 0, where.stream>>>(src, d, n);
  } else {
    castKernel<1><<<gridFor(n, where.device), kThreads, 0, where.stream>>>(src, d, n);
  }
  return cudaGetLastError();
}

template <typename S>
cudaError_t castFrom(const S* src, void* dst, DType to, int64_t n, Launch where) {
  switch (to) {
    case DType::U8: return cast<S, uint8_t>(src, dst, n, where);
    case DType::I8: return cast<S, int8_t>(src, dst, n, where);
    case DType::I32: return cast<S, int32_t>(src, dst, n, where);
    case DType::I64: return cast<S, int64_t>(src, dst, n, where);
    case DType::F16: return cast<S, __half>(src, dst, n, where);
    case DType::F32: return cast<S, float>(src, dst, n, where);
    case DType::F64: return cast<S, double>(src, dst, n, where);
    case DType::Bool: return cast<S, bool>(src, dst, n, where);
    case DType::BF16: return cast<S, __nv_bfloat16>(src, dst, n, where);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launchBinary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, int64_t n, double alpha,
                         Launch where) {
  switch (dtype) {
    case DType::F32: return binaryOf<float>(op, a, b, out, n, alpha, where);
    case DType::F64: return binaryOf<double>(op, a, b, out, n, alpha, where);
    case DType::I32: return binaryOf<int32_t>(op, a, b, out, n, alpha, where);
    case DType::I64: return binaryOf<int64_t>(op, a, b, out, n, alpha, where);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchUnary(UnaryOp op, DType dtype, const void* a, void* out, int64_t n, Launch where) {
  switch (dtype) {
    case DType::F32: return unaryOf<float>(op, a, out, n, where);
    case DType::F64: return unaryOf<double>(op, a, out, n, where);
    case DType::I32: return unaryOf<int32_t>(op, a, out, n, where);
    case DType::I64: return unaryOf<int64_t>(op, a, out, n, where);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchCast(DType from, const void* src, DType to, void* dst, int64_t n, Launch where) {
  switch (from) {
    case DType::U8: return castFrom(static_cast<const uint8_t*>(src), dst, to, n, where);
    case DType::I8: return castFrom(static_cast<const int8_t*>(src), dst, to, n, where);
    case DType::I32: return castFrom(static_cast<const int32_t*>(src), dst, to, n, where);
    case DType::I64: return castFrom(static_cast<const int64_t*>(src), dst, to, n, where);
    case DType::F16: return castFrom(static_cast<const __half*>(src), dst, to, n, where);
    case DType::F32: return castFrom(static_cast<const float*>(src), dst, to, n, where);
    case DType::F64: return castFrom(static_cast<const double*>(src), dst, to, n, where);
    case DType::Bool: return castFrom(static_cast<const bool*>(src), dst, to, n, where);
    case DType::BF16: return castFrom(static_cast<const __nv_bfloat16*>(src), dst, to, n, where);
  }
  return cudaErrorInvalidValue;
}

}  // namespace strata::detail::cuda
