// strata/torch_compat.h: build PyTorch C++/CUDA extension sources against Strata
// with only their #include lines changed. Opt in with the CMake target
// strata::torch_compat, which puts this folder on the include path: then
// <torch/extension.h>, <torch/library.h>, <torch/all.h>, <torch/torch.h>,
// <ATen/ATen.h>, <ATen/Operators.h>, <ATen/core/Tensor.h>, <c10/util/Exception.h>,
// <c10/util/irange.h> and, for CUDA
// sources, <c10/cuda/CUDAStream.h>, <c10/cuda/CUDAGuard.h>,
// <c10/cuda/CUDAException.h> and <ATen/cuda/CUDAContext.h> are the shim's.
//
// Covered (the subset PyTorch's custom C++/CUDA ops tutorial and extensions like it use):
//   - TORCH_LIBRARY, TORCH_LIBRARY_FRAGMENT, TORCH_LIBRARY_IMPL with PyTorch's key
//     names; m.def (schema, tags, or a kernel), m.impl (a function, lambda, functor,
//     TORCH_FN, torch::dispatch(key, f), torch::CppFunction::makeFallthrough()),
//     m.fallback. In a bundle they run in the load transaction (strata/torch_compat/library.h).
//   - TORCH_CHECK (and _VALUE, _TYPE, _INDEX, _NOT_IMPLEMENTED), TORCH_INTERNAL_ASSERT,
//     TORCH_WARN, c10::Error (= strata::Error), c10::str.
//   - at::Tensor: a strata::Tensor with ATen's sizes(), strides(), dtype(),
//     scalar_type(), device() (.type(), .index()), options(), numel(), dim(),
//     is_contiguous(), contiguous(), data_ptr<T>(), const_data_ptr<T>(),
//     mutable_data_ptr<T>(), item<T>(), views, to(), copy_, fill_, zero_, + - * /.
//   - at::TensorOptions (dtype, device, requires_grad), at::kFloat and the other dtype
//     constants, at::DeviceType, at::kCPU/kCUDA, c10::Device, c10::ArrayRef /
//     IntArrayRef, c10::irange, torch::empty / zeros / ones / full / rand and their
//     _like forms, AT_DISPATCH_FLOATING_TYPES(_AND_HALF), AT_DISPATCH_INTEGRAL_TYPES,
//     AT_DISPATCH_ALL_TYPES.
//   - CUDA: c10::cuda / at::cuda getCurrentCUDAStream (Strata's current stream,
//     strata/cuda.h), CUDAStream, CUDAGuard, OptionalCUDAGuard,
//     getCurrentDeviceProperties, C10_CUDA_CHECK, C10_CUDA_KERNEL_LAUNCH_CHECK.
//
// Not covered: ATen's operator library beyond the factories and arithmetic above
// (at::sigmoid, at::matmul, ...: use strata::ops), TensorAccessor and
// packed_accessor, sparse and quantized tensors, layouts other than strided, memory
// formats, other stream state (stream pools, setCurrentCUDAStream, CUDAStreamGuard),
// boxed kernels with PyTorch's `torch::jit::Stack*` signature (use Strata's
// `Stack&`), Python bindings (PYBIND11_MODULE, Python.h), torch::autograd::Function,
// and dispatch keys Strata does not have (BackendSelect, ADInplaceOrView,
// Functionalize, XLA, MPS, ...: a compile error naming
// torch::detail::strata_supports_dispatch_key). A .cu file including the shim is
// compiled as C++20 (strata::torch_compat asks nvcc for it), which needs nvcc 12 or newer.
#pragma once

#include "strata/torch_compat/exception.h"
#include "strata/torch_compat/library.h"
#include "strata/torch_compat/tensor.h"
