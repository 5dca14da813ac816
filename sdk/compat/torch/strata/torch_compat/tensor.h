// at::Tensor, c10::ArrayRef, c10::Device, at::TensorOptions, the dtype and device
// constants and the factories, for PyTorch extension sources built against Strata
// (strata/torch_compat.h says what the shim covers).
//
// at::Tensor *is* a strata::Tensor: a subclass with no data of its own (same size,
// same handle), so every at::Tensor passes where a strata::Tensor is expected, and
// every strata::Tensor converts to an at::Tensor. It adds or re-types the methods
// whose PyTorch spelling differs from Strata's: sizes() and strides() return a
// c10::IntArrayRef (comparable with ==), device() a c10::Device (with type() and
// index()), options() an at::TensorOptions, and the methods that return a tensor
// return an at::Tensor. The factories (torch::empty, empty_like, ...) call the
// core:: ops, so they dispatch as torch::empty does: fake tensors under
// FakeTensorMode, meta tensors on meta.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/device.h"
#include "strata/dispatch_key.h"
#include "strata/ops.h"
#include "strata/scalar.h"
#include "strata/scalar_type.h"
#include "strata/tag.h"
#include "strata/tensor.h"
#include "strata/torch_compat/exception.h"

namespace c10 {

using DeviceType = strata::DeviceType;
using DeviceIndex = int8_t;
using ScalarType = strata::ScalarType;
using Scalar = strata::Scalar;
using Half = strata::Half;
using BFloat16 = strata::BFloat16;
using DispatchKey = strata::DispatchKey;
using DispatchKeySet = strata::DispatchKeySet;
using AliasAnalysisKind = strata::AliasAnalysisKind;
template <typename T>
using optional = std::optional<T>;
inline constexpr std::nullopt_t nullopt = std::nullopt;
using string_view = std::string_view;

inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;
inline constexpr DeviceType kMeta = DeviceType::Meta;
inline constexpr DeviceType kPrivateUse1 = DeviceType::PrivateUse1;

inline constexpr ScalarType kByte = ScalarType::Byte;
inline constexpr ScalarType kChar = ScalarType::Char;
inline constexpr ScalarType kInt = ScalarType::Int;
inline constexpr ScalarType kLong = ScalarType::Long;
inline constexpr ScalarType kHalf = ScalarType::Half;
inline constexpr ScalarType kFloat = ScalarType::Float;
inline constexpr ScalarType kDouble = ScalarType::Double;
inline constexpr ScalarType kBool = ScalarType::Bool;
inline constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
inline constexpr ScalarType kUInt8 = ScalarType::Byte;
inline constexpr ScalarType kInt8 = ScalarType::Char;
inline constexpr ScalarType kInt32 = ScalarType::Int;
inline constexpr ScalarType kInt64 = ScalarType::Long;
inline constexpr ScalarType kFloat16 = ScalarType::Half;
inline constexpr ScalarType kFloat32 = ScalarType::Float;
inline constexpr ScalarType kFloat64 = ScalarType::Double;

using strata::elementSize;
using strata::isFloatingType;
using strata::toString;

// A non-owning view of contiguous elements, as c10::ArrayRef: a std::span (so it
// passes wherever Strata takes a span) that compares with == and has vec().
// Like c10's, one made from a braced list refers to the list, which lives until the
// end of the full expression.
template <typename T>
class ArrayRef : public std::span<const T> {
  using Base = std::span<const T>;

 public:
  constexpr ArrayRef() = default;
  constexpr ArrayRef(std::span<const T> s) : Base(s) {}                           // NOLINT
  constexpr ArrayRef(const T* data, size_t length) : Base(data, length) {}
  constexpr ArrayRef(const T* begin, const T* end) : Base(begin, end) {}
  ArrayRef(const std::vector<T>& v) : Base(v.data(), v.size()) {}                 // NOLINT
  constexpr ArrayRef(std::initializer_list<T> l) : Base(l.begin(), l.size()) {}   // NOLINT
  constexpr ArrayRef(const T& one) : Base(&one, 1) {}                             // NOLINT

  std::vector<T> vec() const { return std::vector<T>(this->begin(), this->end()); }
  bool equals(ArrayRef other) const { return std::equal(this->begin(), this->end(), other.begin(), other.end()); }
  ArrayRef slice(size_t n, size_t m) const { return ArrayRef(this->subspan(n, m)); }
  ArrayRef slice(size_t n) const { return ArrayRef(this->subspan(n)); }
  const T& at(size_t i) const {
    TORCH_CHECK_INDEX(i < this->size(), "ArrayRef: index ", i, " out of range for length ", this->size());
    return (*this)[i];
  }
  operator std::vector<T>() const { return vec(); }  // NOLINT: as c10's

  friend bool operator==(ArrayRef a, ArrayRef b) { return a.equals(b); }
  // "[2, 3]", as c10 prints sizes.
  friend std::ostream& operator<<(std::ostream& os, ArrayRef a) {
    os << "[";
    for (size_t i = 0; i < a.size(); ++i) os << (i ? ", " : "") << a[i];
    return os << "]";
  }
};
using IntArrayRef = ArrayRef<int64_t>;

// A device type and index, as c10::Device: type() and index() are methods here
// (strata::Device has them as fields). Converts to and from strata::Device.
class Device {
 public:
  constexpr Device(DeviceType type, DeviceIndex index = -1) : d_(type, index) {}  // NOLINT
  constexpr Device(strata::Device d) : d_(d) {}                                   // NOLINT
  // "cpu", "cuda", "cuda:1", "meta"; Error(Value) naming the string otherwise.
  explicit Device(const std::string& spec) : d_(std::string_view(spec)) {}
  explicit Device(const char* spec) : d_(std::string_view(spec)) {}

  constexpr DeviceType type() const noexcept { return d_.type; }
  constexpr DeviceIndex index() const noexcept { return d_.index; }
  constexpr bool has_index() const noexcept { return d_.index >= 0; }
  constexpr bool is_cpu() const noexcept { return d_.type == DeviceType::CPU; }
  constexpr bool is_cuda() const noexcept { return d_.type == DeviceType::CUDA; }
  constexpr bool is_meta() const noexcept { return d_.type == DeviceType::Meta; }
  std::string str() const { return d_.str(); }
  constexpr operator strata::Device() const { return d_; }  // NOLINT

  friend constexpr bool operator==(const Device& a, const Device& b) { return a.d_ == b.d_; }
  // Exact overloads, so that comparing with a strata::Device or a DeviceType (both
  // convert either way) is not ambiguous.
  friend constexpr bool operator==(const Device& a, const strata::Device& b) { return a.d_ == b; }
  friend constexpr bool operator==(const Device& a, DeviceType b) { return a.d_ == strata::Device(b); }
  friend std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.d_; }

 private:
  strata::Device d_;
};

// Iterates [begin, end), as c10::irange.
template <typename I>
class IntegerRange {
 public:
  struct iterator {
    I v;
    I operator*() const { return v; }
    iterator& operator++() { ++v; return *this; }
    bool operator==(const iterator&) const = default;
  };
  constexpr IntegerRange(I begin, I end) : b_(begin), e_(end < begin ? begin : end) {}
  iterator begin() const { return {b_}; }
  iterator end() const { return {e_}; }

 private:
  I b_, e_;
};
template <typename I>
IntegerRange<I> irange(I end) { return IntegerRange<I>(I{0}, end); }
template <typename I, typename J>
IntegerRange<std::common_type_t<I, J>> irange(I begin, J end) {
  return IntegerRange<std::common_type_t<I, J>>(begin, end);
}

}  // namespace c10

namespace at {

using namespace c10;  // NOLINT: at::kFloat, at::DeviceType, at::Device... as in ATen

enum class Layout : int8_t { Strided = 0 };
inline constexpr Layout kStrided = Layout::Strided;
using Tag = strata::Tag;

class Tensor;
using TensorList = ArrayRef<Tensor>;

// What a new tensor is made with, as at::TensorOptions: each field is optional, and
// a factory fills the unset ones (float32, cpu, no grad; *_like: the source's).
// Builder methods return a changed copy: TensorOptions().dtype(kFloat).device(kCUDA).
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(ScalarType t) : dtype_(t) {}       // NOLINT: empty({3}, kInt)
  TensorOptions(Device d) : device_(d) {}          // NOLINT
  TensorOptions(DeviceType t) : device_(Device(t)) {}  // NOLINT
  TensorOptions(strata::Device d) : device_(Device(d)) {}  // NOLINT
  TensorOptions(Layout) {}                          // NOLINT: strided is the only layout

  TensorOptions dtype(std::optional<ScalarType> t) const { auto o = *this; o.dtype_ = t; return o; }
  template <typename T>
  TensorOptions dtype() const { return dtype(strata::CppTypeToScalarType<T>::value); }
  TensorOptions device(std::optional<Device> d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions device(DeviceType t, DeviceIndex index = -1) const { return device(Device(t, index)); }
  TensorOptions device_index(DeviceIndex index) const { return device(Device(DeviceType::CUDA, index)); }
  TensorOptions requires_grad(std::optional<bool> r) const { auto o = *this; o.requires_grad_ = r; return o; }
  TensorOptions layout(std::optional<Layout>) const { return *this; }

  ScalarType dtype() const { return dtype_.value_or(ScalarType::Float); }
  Device device() const { return device_.value_or(Device(DeviceType::CPU)); }
  DeviceIndex device_index() const { return device().index(); }
  bool requires_grad() const { return requires_grad_.value_or(false); }
  Layout layout() const { return Layout::Strided; }
  bool has_dtype() const { return dtype_.has_value(); }
  bool has_device() const { return device_.has_value(); }
  bool has_requires_grad() const { return requires_grad_.has_value(); }
  std::optional<ScalarType> dtype_opt() const { return dtype_; }
  std::optional<Device> device_opt() const { return device_; }

  // Unset fields taken from `other` (what a *_like factory does with its source's).
  TensorOptions merged_into(const TensorOptions& other) const {
    TensorOptions o = other;
    if (dtype_) o.dtype_ = dtype_;
    if (device_) o.device_ = device_;
    if (requires_grad_) o.requires_grad_ = requires_grad_;
    return o;
  }
  operator strata::TensorOptions() const {  // NOLINT
    return strata::TensorOptions().with_dtype(dtype()).with_device(device()).with_requires_grad(requires_grad());
  }

 private:
  std::optional<ScalarType> dtype_;
  std::optional<Device> device_;
  std::optional<bool> requires_grad_;
};
inline TensorOptions dtype(ScalarType t) { return TensorOptions().dtype(t); }
template <typename T>
TensorOptions dtype() { return TensorOptions().dtype<T>(); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }
inline TensorOptions device(DeviceType t, DeviceIndex index = -1) { return TensorOptions().device(t, index); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }
inline TensorOptions layout(Layout l) { return TensorOptions(l); }

class Tensor : public strata::Tensor {
 public:
  Tensor() = default;
  Tensor(const strata::Tensor& t) : strata::Tensor(t) {}                  // NOLINT
  Tensor(strata::Tensor&& t) noexcept : strata::Tensor(std::move(t)) {}   // NOLINT

  // --- Metadata, as ATen spells it. ---
  IntArrayRef sizes() const { return strata::Tensor::sizes(); }
  IntArrayRef strides() const { return strata::Tensor::strides(); }
  Device device() const { return strata::Tensor::device(); }
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }
  int64_t ndimension() const { return dim(); }
  DeviceIndex get_device() const { return is_cuda() ? device().index() : DeviceIndex{-1}; }
  Layout layout() const { return Layout::Strided; }
  bool is_floating_point() const { return isFloatingType(dtype()); }
  bool is_same(const Tensor& other) const { return unsafeGetTensorImpl() == other.unsafeGetTensorImpl(); }
  template <typename T>
  const T* const_data_ptr() const { return data_ptr<T>(); }
  template <typename T>
  T* mutable_data_ptr() const { return data_ptr<T>(); }
  // The one element, as a Scalar or converted to T (a.item<float>()).
  Scalar item() const { return strata::Tensor::item(); }
  template <typename T>
  T item() const { return strata::Tensor::item().to<T>(); }

  // --- Methods that make a tensor, returning at::Tensor. ---
  Tensor contiguous() const { return strata::Tensor::contiguous(); }
  Tensor clone() const { return strata::Tensor::clone(); }
  Tensor detach() const { return strata::Tensor::detach(); }
  Tensor view(IntArrayRef sizes) const { return strata::Tensor::view(sizes); }
  Tensor reshape(IntArrayRef sizes) const { return strata::Tensor::reshape(sizes); }
  Tensor transpose(int64_t dim0, int64_t dim1) const { return strata::Tensor::transpose(dim0, dim1); }
  Tensor permute(IntArrayRef dims) const { return strata::Tensor::permute(dims); }
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt,
               int64_t step = 1) const {
    return strata::Tensor::slice(dim, start.value_or(0), end.value_or(INT64_MAX), step);
  }
  Tensor select(int64_t dim, int64_t index) const { return strata::Tensor::select(dim, index); }
  Tensor unsqueeze(int64_t dim) const { return strata::Tensor::unsqueeze(dim); }
  Tensor to(Device device) const { return strata::Tensor::to(strata::Device(device)); }
  Tensor to(DeviceType device) const { return to(Device(device)); }
  Tensor to(ScalarType dtype) const { return strata::Tensor::to(dtype); }
  Tensor to(Device device, ScalarType dtype) const { return strata::Tensor::to(strata::Device(device), dtype); }
  Tensor to(const TensorOptions& options) const {
    return strata::Tensor::to(strata::Device(options.merged_into(this->options()).device()),
                              options.merged_into(this->options()).dtype());
  }
  Tensor cpu() const { return to(Device(DeviceType::CPU)); }
  Tensor cuda() const { return to(Device(DeviceType::CUDA)); }
  const Tensor& copy_(const Tensor& src) const { strata::Tensor::copy_(src); return *this; }
  const Tensor& fill_(const Scalar& value) const { strata::Tensor::fill_(value); return *this; }
  const Tensor& zero_() const { strata::Tensor::zero_(); return *this; }

  // --- Arithmetic through the core:: ops (broadcasting, type promotion). ---
  friend Tensor operator+(const Tensor& a, const Tensor& b) { return strata::ops::add(a, b); }
  friend Tensor operator+(const Tensor& a, const Scalar& b) { return strata::ops::add(a, b); }
  friend Tensor operator-(const Tensor& a, const Tensor& b) { return strata::ops::sub(a, b); }
  friend Tensor operator-(const Tensor& a, const Scalar& b) { return strata::ops::sub(a, b); }
  friend Tensor operator*(const Tensor& a, const Tensor& b) { return strata::ops::mul(a, b); }
  friend Tensor operator*(const Tensor& a, const Scalar& b) { return strata::ops::mul(a, b); }
  friend Tensor operator/(const Tensor& a, const Tensor& b) { return strata::ops::div(a, b); }
  friend Tensor operator/(const Tensor& a, const Scalar& b) { return strata::ops::div(a, b); }
  friend Tensor operator-(const Tensor& a) { return strata::ops::neg(a); }
};
static_assert(sizeof(Tensor) == sizeof(strata::Tensor), "at::Tensor must stay a strata::Tensor handle, nothing more");

namespace detail {
inline std::vector<int64_t> vec(IntArrayRef s) { return s.vec(); }
inline Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad()) t.set_requires_grad(true);
  return t;
}
}  // namespace detail

// --- Factories (torch::empty, ...), through the core:: ops. ---
inline Tensor empty(IntArrayRef size, const TensorOptions& o = {}) {
  return detail::finish(strata::ops::empty(detail::vec(size), o.dtype(), strata::Device(o.device())), o);
}
inline Tensor zeros(IntArrayRef size, const TensorOptions& o = {}) {
  return detail::finish(strata::ops::zeros(detail::vec(size), o.dtype(), strata::Device(o.device())), o);
}
inline Tensor ones(IntArrayRef size, const TensorOptions& o = {}) {
  return detail::finish(strata::ops::ones(detail::vec(size), o.dtype(), strata::Device(o.device())), o);
}
inline Tensor full(IntArrayRef size, const Scalar& value, const TensorOptions& o = {}) {
  return detail::finish(strata::ops::full(detail::vec(size), value, o.dtype(), strata::Device(o.device())), o);
}
// Uniform on [0, 1) (torch::rand; there is no randn).
inline Tensor rand(IntArrayRef size, const TensorOptions& o = {}) {
  return detail::finish(strata::ops::rand(detail::vec(size), o.dtype(), strata::Device(o.device())), o);
}
inline Tensor empty_like(const Tensor& self, const TensorOptions& o = {}) {
  const TensorOptions m = o.merged_into(self.options());
  return detail::finish(strata::ops::empty_like(self, m.dtype(), strata::Device(m.device())), m);
}
inline Tensor zeros_like(const Tensor& self, const TensorOptions& o = {}) {
  const TensorOptions m = o.merged_into(self.options());
  return zeros(self.sizes(), m);
}
inline Tensor ones_like(const Tensor& self, const TensorOptions& o = {}) {
  const TensorOptions m = o.merged_into(self.options());
  return ones(self.sizes(), m);
}
inline Tensor full_like(const Tensor& self, const Scalar& value, const TensorOptions& o = {}) {
  const TensorOptions m = o.merged_into(self.options());
  return full(self.sizes(), value, m);
}
inline Tensor rand_like(const Tensor& self, const TensorOptions& o = {}) {
  const TensorOptions m = o.merged_into(self.options());
  return rand(self.sizes(), m);
}
inline std::optional<Device> device_of(const Tensor& t) {
  return t.defined() ? std::optional<Device>(t.device()) : std::nullopt;
}

}  // namespace at

namespace torch {
using namespace at;  // NOLINT: torch::Tensor, torch::empty, torch::kFloat32... as in libtorch
}  // namespace torch

// AT_DISPATCH_*(TYPE, NAME, [&] { ... scalar_t ... }): runs the lambda with scalar_t
// bound to the C++ type of TYPE, for the dtypes each macro names; any other dtype is
// Error(NotImplemented) "NAME" not implemented for 'DTYPE'.
#define AT_PRIVATE_CASE_TYPE_(enum_name, cpp, ...) \
  case ::strata::ScalarType::enum_name: {          \
    using scalar_t = cpp;                          \
    return __VA_ARGS__();                          \
  }
#define AT_PRIVATE_DISPATCH_(TYPE, NAME, CASES)                                                          \
  [&] {                                                                                                  \
    const ::strata::ScalarType at_dispatch_type_ = (TYPE);                                               \
    switch (at_dispatch_type_) {                                                                         \
      CASES                                                                                              \
      default:                                                                                           \
        break;                                                                                           \
    }                                                                                                    \
    ::strata::detail::throwError(::strata::ErrorKind::NotImplemented,                                    \
                                 ::c10::str("\"", NAME, "\" not implemented for '", at_dispatch_type_, "'")); \
  }()
#define AT_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...)                     \
  AT_PRIVATE_DISPATCH_(TYPE, NAME,                                      \
                       AT_PRIVATE_CASE_TYPE_(Float, float, __VA_ARGS__) \
                       AT_PRIVATE_CASE_TYPE_(Double, double, __VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND_HALF(TYPE, NAME, ...)                    \
  AT_PRIVATE_DISPATCH_(TYPE, NAME,                                              \
                       AT_PRIVATE_CASE_TYPE_(Float, float, __VA_ARGS__)         \
                       AT_PRIVATE_CASE_TYPE_(Double, double, __VA_ARGS__)       \
                       AT_PRIVATE_CASE_TYPE_(Half, ::strata::Half, __VA_ARGS__))
#define AT_DISPATCH_INTEGRAL_TYPES(TYPE, NAME, ...)                       \
  AT_PRIVATE_DISPATCH_(TYPE, NAME,                                        \
                       AT_PRIVATE_CASE_TYPE_(Byte, uint8_t, __VA_ARGS__)  \
                       AT_PRIVATE_CASE_TYPE_(Char, int8_t, __VA_ARGS__)   \
                       AT_PRIVATE_CASE_TYPE_(Int, int32_t, __VA_ARGS__)   \
                       AT_PRIVATE_CASE_TYPE_(Long, int64_t, __VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES(TYPE, NAME, ...)                             \
  AT_PRIVATE_DISPATCH_(TYPE, NAME,                                         \
                       AT_PRIVATE_CASE_TYPE_(Byte, uint8_t, __VA_ARGS__)   \
                       AT_PRIVATE_CASE_TYPE_(Char, int8_t, __VA_ARGS__)    \
                       AT_PRIVATE_CASE_TYPE_(Int, int32_t, __VA_ARGS__)    \
                       AT_PRIVATE_CASE_TYPE_(Long, int64_t, __VA_ARGS__)   \
                       AT_PRIVATE_CASE_TYPE_(Float, float, __VA_ARGS__)    \
                       AT_PRIVATE_CASE_TYPE_(Double, double, __VA_ARGS__))
