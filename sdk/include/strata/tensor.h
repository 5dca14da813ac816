// Tensors: the values operators take and return.
//
// A Tensor is a handle (one pointer) to a ref-counted TensorImpl that holds sizes,
// strides, a storage offset, a dtype and a shared Storage; its device is the
// storage's. Copying a Tensor shares the impl; views (as_strided, view, transpose,
// slice, ...) make a new impl over the same storage. A default-constructed Tensor
// is undefined: every accessor but defined() throws on it.
//
// Each tensor carries its dispatch key set: the backend key of its device, plus
// the matching autograd key when it requires grad, plus a layer's key for a wrapper
// tensor (Note [Wrapper tensors]). See Note [Dispatch key order].
//
// Thread safety: handles may be copied and destroyed from any thread; reading a
// tensor's metadata concurrently is safe; writing one tensor's data or metadata
// while another thread reads it is a data race, as in PyTorch.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "strata/device.h"
#include "strata/dispatch_key.h"
#include "strata/error.h"
#include "strata/export.h"
#include "strata/intrusive_ptr.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/scalar.h"
#include "strata/scalar_type.h"
#include "strata/storage.h"
#include "strata/sym_int.h"

namespace strata {

// A read-only view of sizes or strides (or any list argument).
template <typename T>
using ArrayRef = std::span<const T>;
using IntArrayRef = ArrayRef<int64_t>;

class Tensor;

// Note [Wrapper tensors]
// ~~~~~~~~~~~~~~~~~~~~~~
// A layer may make a tensor that stands for another one: vmap's batched tensor is a
// value with a batch dim and a level, seen from inside the vmap as the value without
// its batch dim. Such a *wrapper* is a TensorImpl with the logical sizes, strides and
// dtype, the value's storage (so is_alias_of holds), a TensorWrapper that holds
// what the layer needs, and the layer's key in its key set, so every op that takes
// it reaches the layer first (vmap's Batched key is the highest of all).
// A wrapper has no data of its own. Tensor's data methods (data_ptr, item,
// equal, to_vector, permute, slice with a step, as_strided, to(Device)) throw
// Error(Value) naming the method and the wrapper; the methods that have a core::
// op (transpose, select, unsqueeze, reshape, view, slice, contiguous, clone,
// to(dtype), copy_, fill_, zero_) call it, so the layer sees them as it sees any op. Plain
// tensors pay one predictable branch in those methods and nothing elsewhere.
//
// Note [Reusing wrapper tensors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A layer may make wrappers on every call (vmap: each input, each rule's output) and
// drop them when the call returns. Making one is two objects from the pools, two
// owner stamps and the metadata; freeing it is as much again, most of what a vmapped
// call costs. So the layer may keep a spent wrapper to reuse: when a wrapper it made
// is held by one handle alone, on the thread that made it (unique_here() on the impl
// and on its TensorWrapper, no autograd metadata), nothing else can see it, and
// TensorImpl::release_wrapper drops its storage (a spent wrapper never holds the data
// it last wrapped, so keeping it costs a few hundred bytes, not a tensor) and
// reset_wrapper points it at new metadata, as a fresh one would have
// (reset_wrapper_hiding_dim: a value's metadata less one dim, vmap's case). The spares are
// per thread, bounded, and freed when the thread exits. While a thread is detached
// (Note [Biased reference counts]) no object is unique_here(), so nothing is reused.
class STRATA_API TensorWrapper : public intrusive_ptr_target {
 public:
  STRATA_POOLED_OBJECT  // Note [Small object pools]: every wrapper tensor makes one
  ~TensorWrapper() override;
  // What the wrapper is, for messages: "a batched tensor (vmap level 3)".
  virtual std::string what() const = 0;
  // Its printed form: "BatchedTensor(lvl=3, bdim=0, value=tensor([...]))".
  virtual std::string str() const = 0;
};

// What the autograd layer (strata/modes/autograd.h) keeps on a tensor: its grad, and
// for a result of a differentiable op, the graph node that made it. The SDK only
// holds it (Note [Autograd metadata] in modes/autograd.h); a tensor that never took
// part in autograd has none.
class STRATA_API AutogradMetaInterface {
 public:
  virtual ~AutogradMetaInterface();
  // No grad_fn: made by the user, not by a differentiable op.
  virtual bool is_leaf() const = 0;
  virtual Tensor grad() const = 0;
  virtual void set_grad(const Tensor& grad) = 0;
  // "MulBackward0"-like name of the node that made the tensor; "" for a leaf.
  virtual std::string grad_fn_name() const = 0;
};

class TensorImpl;

// How the SDK reaches the autograd layer, which lives above it: the layer installs
// its hooks when its library loads. Null when no autograd layer is linked.
class STRATA_API AutogradHooks {
 public:
  virtual ~AutogradHooks();
  // A tensor was just marked requires_grad: the layer makes sure its kernels are
  // registered before the tensor reaches an op, and gives the tensor its metadata now,
  // so threads that later share the tensor only ever read it (Note [Autograd metadata]).
  virtual void onRequiresGrad(TensorImpl& impl) const = 0;
  virtual void backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph) const = 0;
};
STRATA_API void setAutogradHooks(const AutogradHooks* hooks);
STRATA_API const AutogradHooks* autogradHooks();

// A tensor's sizes or strides: up to kInline dims in place, more on the heap, so
// making a tensor of up to 5 dims allocates nothing for them.
class STRATA_API DimVector {
 public:
  static constexpr size_t kInline = 5;
  DimVector() = default;
  explicit DimVector(IntArrayRef v) : n_(v.size()) {
    int64_t* p = inline_;
    if (n_ > kInline) {
      heap_.reset(new int64_t[n_]);
      p = heap_.get();
    }
    for (size_t i = 0; i < n_; ++i) p[i] = v[i];
  }
  // REQUIRES: v.size() <= kInline (so nothing is allocated), v not aliasing *this.
  void assignInPlace(IntArrayRef v) noexcept {
    heap_.reset();
    n_ = v.size();
    for (size_t i = 0; i < n_; ++i) inline_[i] = v[i];
  }
  // v without its element `skip`. REQUIRES: v.size() - 1 <= kInline, skip < v.size(),
  // v not aliasing *this.
  void assignInPlaceWithout(IntArrayRef v, size_t skip) noexcept {
    heap_.reset();
    n_ = v.size() - 1;
    for (size_t i = 0; i < skip; ++i) inline_[i] = v[i];
    for (size_t i = skip; i < n_; ++i) inline_[i] = v[i + 1];
  }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  size_t size() const { return n_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + n_; }
  int64_t operator[](size_t i) const { return data()[i]; }
  operator IntArrayRef() const { return IntArrayRef(data(), n_); }  // NOLINT

 private:
  std::unique_ptr<int64_t[]> heap_;
  size_t n_ = 0;
  int64_t inline_[kInline] = {};
};

class STRATA_API TensorImpl final : public intrusive_ptr_target {
 public:
  STRATA_POOLED_OBJECT  // Note [Small object pools]
  // REQUIRES: sizes.size() == strides.size(); every size >= 0; the elements the
  // sizes and strides reach lie inside storage (checked; throws strata::Error).
  TensorImpl(Storage storage, ScalarType dtype, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);
  // A wrapper tensor (Note [Wrapper tensors]): layer_keys join the key set.
  TensorImpl(Storage storage, ScalarType dtype, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset,
             DispatchKeySet layer_keys, intrusive_ptr<TensorWrapper> wrapper);

  IntArrayRef sizes() const { return sizes_; }
  IntArrayRef strides() const { return strides_; }
  int64_t storage_offset() const { return storage_offset_; }
  int64_t numel() const { return numel_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  ScalarType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  const Storage& storage() const { return storage_; }
  DispatchKeySet key_set() const { return key_set_; }
  bool requires_grad() const { return requires_grad_; }
  bool is_contiguous() const { return is_contiguous_; }
  // The layer's data of a wrapper tensor; null for a plain tensor.
  TensorWrapper* wrapper() const { return wrapper_.get(); }
  // For a layer that reuses its wrapper tensors (Note [Reusing wrapper tensors]).
  // Each REQUIRES a wrapper tensor without autograd metadata that no handle but the
  // caller's holds (unique_here()), whose TensorWrapper no other impl holds, and
  // reset_wrapper a storage and as many strides as sizes; each throws Error(Internal),
  // changing nothing, otherwise.
  // Whether it is such a wrapper, so that both would succeed.
  bool reusable_wrapper() const noexcept {
    return wrapper_ && !autograd_meta_ && unique_here() && wrapper_->unique_here();
  }
  // Spends it: drops its storage (nothing may read it until reset_wrapper).
  void release_wrapper();
  // Points it at new metadata, as a wrapper made with them would be (sizes whose
  // count overflows: Error(Value), as there). sizes and strides may be views of this
  // impl's own.
  void reset_wrapper(Storage storage, ScalarType dtype, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);
  // reset_wrapper with value's storage, dtype and offset, and value's sizes and
  // strides without dim `hidden`: a vmap batched tensor's metadata (its value's, the
  // batch dim hidden), made in one pass from a tensor already known to be valid.
  // value must be defined, not this tensor, and not spent (Error(Internal)); hidden
  // in [0, value.dim()) (Error(Index)).
  void reset_wrapper_hiding_dim(const Tensor& value, int64_t hidden);

  // Sets the flag and the autograd key; no other check (Tensor::set_requires_grad
  // has the user-facing ones).
  void set_requires_grad(bool r);
  // Note [Autograd metadata]. Null until the autograd layer gives the tensor some.
  AutogradMetaInterface* autograd_meta() const { return autograd_meta_.get(); }
  void set_autograd_meta(std::unique_ptr<AutogradMetaInterface> meta) { autograd_meta_ = std::move(meta); }

 private:
  Storage storage_;
  intrusive_ptr<TensorWrapper> wrapper_;
  DimVector sizes_;
  DimVector strides_;
  int64_t storage_offset_;
  int64_t numel_;
  ScalarType dtype_;
  bool requires_grad_ = false;
  bool is_contiguous_;
  // Invariant: key_set_ == {backendKey(device())} | (requires_grad_ ? {autogradKey} : {})
  // | layer_keys_.
  DispatchKeySet key_set_;
  DispatchKeySet layer_keys_;
  std::unique_ptr<AutogradMetaInterface> autograd_meta_;
};

struct TensorOptions {
  ScalarType dtype = ScalarType::Float;
  Device device = kCPU;
  bool requires_grad = false;

  TensorOptions() = default;
  TensorOptions(ScalarType t) : dtype(t) {}  // NOLINT: options(kInt64) reads well
  TensorOptions(Device d) : device(d) {}     // NOLINT
  TensorOptions(DeviceType d) : device(d) {}  // NOLINT
  TensorOptions with_dtype(ScalarType t) const { auto o = *this; o.dtype = t; return o; }
  TensorOptions with_device(Device d) const { auto o = *this; o.device = d; return o; }
  TensorOptions with_requires_grad(bool r) const { auto o = *this; o.requires_grad = r; return o; }
};

class STRATA_API Tensor {
 public:
  Tensor() = default;
  explicit Tensor(intrusive_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* unsafeGetTensorImpl() const { return impl_.get(); }
  const intrusive_ptr<TensorImpl>& getIntrusivePtr() const { return impl_; }

  // --- Metadata. Each throws strata::Error(Value) on an undefined tensor. ---
  IntArrayRef sizes() const { return impl().sizes(); }
  IntArrayRef strides() const { return impl().strides(); }
  // dim may be negative (counts from the end); throws Error(Index) when out of range.
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  // The same as SymInts, whose arithmetic keeps a symbolic size symbolic (Note
  // [Symbolic sizes]); a fake implementation computing sizes from its inputs' uses these.
  SymInt sym_size(int64_t dim) const { return SymInt(size(dim)); }
  SymInt sym_numel() const { return SymInt(numel()); }
  int64_t dim() const { return impl().dim(); }
  int64_t numel() const { return impl().numel(); }
  int64_t storage_offset() const { return impl().storage_offset(); }
  ScalarType dtype() const { return impl().dtype(); }
  ScalarType scalar_type() const { return impl().dtype(); }
  size_t element_size() const { return elementSize(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  Device device() const { return impl().device(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_meta() const { return device().is_meta(); }
  bool is_contiguous() const { return impl().is_contiguous(); }
  DispatchKeySet key_set() const { return impl().key_set(); }
  // Note [Wrapper tensors]. Null for a plain tensor.
  TensorWrapper* wrapper() const { return impl().wrapper(); }
  bool requires_grad() const { return impl().requires_grad(); }
  // Sets requires_grad and with it the autograd key; only floating dtypes may
  // require grad (Error(Type) otherwise), and only a leaf's flag may be cleared
  // (Error(Value): a computed tensor needs detach()). Returns *this.
  const Tensor& set_requires_grad(bool r) const;
  const Tensor& requires_grad_(bool r = true) const { return set_requires_grad(r); }

  // --- Autograd (the layer is strata/modes/autograd.h). ---
  // The gradient backward() accumulated into this leaf; undefined when none.
  Tensor grad() const;
  // Replaces (or, with an undefined tensor, clears) the accumulated gradient, as
  // `x.grad = None` does. Error(Value) when its sizes differ from the tensor's.
  void set_grad(const Tensor& grad) const;
  // True unless the tensor is the result of a differentiable op that recorded it.
  bool is_leaf() const;
  // The name of the node that made it ("MulBackward0"-like), "" for a leaf.
  std::string grad_fn_name() const;
  // torch.Tensor.backward: backward({*this}, {gradient}). gradient may be undefined
  // only for a one-element tensor. Error(NotImplemented) when no autograd layer is
  // linked (strata::modes).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  // The same data, outside autograd: shares storage (and so the version counter),
  // does not require grad, has no grad_fn.
  Tensor detach() const;
  // The storage's version counter (Note [Version counters] in modes/autograd.h).
  uint32_t _version() const { return storage()->version(); }
  const Storage& storage() const { return impl().storage(); }
  // True when both share one storage.
  bool is_alias_of(const Tensor& other) const { return storage().get() == other.storage().get(); }

  // --- Data. ---
  // Pointer to the first element. Throws Error(Device) on a meta tensor, which
  // has no data, and Error(Type) from the typed form when T is not the dtype.
  void* data_ptr() const;
  template <typename T>
  T* data_ptr() const {
    STRATA_CHECK(CppTypeToScalarType<std::remove_const_t<T>>::value == dtype(), Type,
                 "data_ptr<", toString(CppTypeToScalarType<std::remove_const_t<T>>::value),
                 ">() called on a tensor of dtype ", toString(dtype()));
    return static_cast<T*>(data_ptr());
  }
  // The single element of a one-element tensor on any device with data.
  Scalar item() const;
  // The elements in row-major order, copied to the host. T must be the dtype.
  template <typename T>
  std::vector<T> to_vector() const {
    const Tensor c = (requires_grad() ? detach() : *this).to(kCPU).contiguous();
    const T* p = c.data_ptr<T>();
    return std::vector<T>(p, p + c.numel());
  }

  // --- Views: share storage with *this. ---
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides,
                    std::optional<int64_t> storage_offset = std::nullopt) const;
  Tensor as_strided(std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides,
                    std::optional<int64_t> storage_offset = std::nullopt) const {
    return as_strided(IntArrayRef(sizes.begin(), sizes.size()), IntArrayRef(strides.begin(), strides.size()),
                      storage_offset);
  }
  // sizes may hold one -1 to infer. As torch.Tensor.view: the new shape must split
  // or merge only dims laid out contiguously with each other (any contiguous tensor
  // qualifies; t() of a matrix viewed as its own transposed shape does too);
  // Error(Value) else: use reshape.
  Tensor view(IntArrayRef sizes) const;
  Tensor view(std::initializer_list<int64_t> sizes) const { return view(IntArrayRef(sizes.begin(), sizes.size())); }
  // A view when possible, otherwise a contiguous copy.
  Tensor reshape(IntArrayRef sizes) const;
  Tensor reshape(std::initializer_list<int64_t> sizes) const { return reshape(IntArrayRef(sizes.begin(), sizes.size())); }
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor permute(std::initializer_list<int64_t> dims) const { return permute(IntArrayRef(dims.begin(), dims.size())); }
  // Elements start, start+step, ... < end along dim; start/end clamp like Python.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;

  // --- Copies. ---
  // *this if contiguous, else a contiguous copy on the same device.
  Tensor contiguous() const;
  // A contiguous copy on the same device.
  Tensor clone() const;
  // Copies src into *this, converting dtype and crossing devices.
  // REQUIRES: same sizes. A meta destination accepts any source (it has no data);
  // a meta source into a non-meta destination is Error(Device).
  const Tensor& copy_(const Tensor& src) const;
  // The core::fill_.Scalar and core::zero_ ops (a plain tensor's write is direct).
  const Tensor& fill_(const Scalar& value) const;
  const Tensor& zero_() const;
  // *this when nothing changes, else a converted copy.
  Tensor to(Device device) const;
  Tensor to(ScalarType dtype) const;
  Tensor to(Device device, ScalarType dtype) const;

  // Same sizes, dtype and values (any devices with data; NaN != NaN).
  bool equal(const Tensor& other) const;

  // "tensor([[1., 2.], [3., 4.]])", with dtype/device when not float32/cpu.
  std::string str() const;

 private:
  const TensorImpl& impl() const {
    if (__builtin_expect(!impl_, 0)) throwUndefined();
    return *impl_;
  }
  [[noreturn]] static void throwUndefined();
  [[noreturn]] void throwWrapper(const char* method) const;
  // Whether a method that has a core:: op must call it rather than compute here: a
  // wrapper (Note [Wrapper tensors]), or a tensor whose autograd key is live, so
  // autograd records the method as it records the op (Note [Autograd metadata]).
  // Plain tensors pay one load and branch.
  bool viaOps() const {
    const TensorImpl& t = impl();
    return __builtin_expect(t.wrapper() != nullptr ||
                                (t.key_set().raw() & kAutogradKeys.raw() & ~detail::tls_local_dispatch_key_set.excluded) != 0,
                            0);
  }
  intrusive_ptr<TensorImpl> impl_;
};

STRATA_API std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- Factories. Each throws strata::Error on a negative size or an unavailable
// device. ---
STRATA_API Tensor empty(IntArrayRef sizes, TensorOptions options = {});
STRATA_API Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions options = {});
STRATA_API Tensor zeros(IntArrayRef sizes, TensorOptions options = {});
STRATA_API Tensor ones(IntArrayRef sizes, TensorOptions options = {});
STRATA_API Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions options = {});
// [0, end), [start, end) by step. The dtype defaults to int64 when every bound is
// integral and float32 otherwise, as torch.arange does.
STRATA_API Tensor arange(const Scalar& end, std::optional<TensorOptions> options = std::nullopt);
STRATA_API Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = Scalar(int64_t{1}),
                         std::optional<TensorOptions> options = std::nullopt);

inline Tensor empty(std::initializer_list<int64_t> s, TensorOptions o = {}) { return empty(IntArrayRef(s.begin(), s.size()), o); }
inline Tensor zeros(std::initializer_list<int64_t> s, TensorOptions o = {}) { return zeros(IntArrayRef(s.begin(), s.size()), o); }
inline Tensor ones(std::initializer_list<int64_t> s, TensorOptions o = {}) { return ones(IntArrayRef(s.begin(), s.size()), o); }
inline Tensor full(std::initializer_list<int64_t> s, const Scalar& v, TensorOptions o = {}) { return full(IntArrayRef(s.begin(), s.size()), v, o); }

// A tensor holding a copy of values, shaped sizes (default: 1-d), dtype from T,
// placed on options.device (options.dtype is ignored: the data decides it).
// Throws Error(Value) when sizes do not multiply to values.size().
template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<std::vector<int64_t>> sizes = std::nullopt,
                   TensorOptions options = {});

namespace detail {
STRATA_API Tensor fromHostBuffer(const void* data, size_t count, ScalarType dtype,
                                 std::optional<std::vector<int64_t>> sizes, TensorOptions options);
}  // namespace detail

template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<std::vector<int64_t>> sizes,
                   TensorOptions options) {
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> packs bits: widen to one byte per element first.
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return detail::fromHostBuffer(bytes.data(), bytes.size(), ScalarType::Bool, std::move(sizes), options);
  } else {
    return detail::fromHostBuffer(values.data(), values.size(), CppTypeToScalarType<T>::value,
                                  std::move(sizes), options);
  }
}

// Contiguous strides for sizes (row-major).
STRATA_API std::vector<int64_t> contiguousStrides(IntArrayRef sizes);

}  // namespace strata
