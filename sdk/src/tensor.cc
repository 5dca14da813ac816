#include "strata/tensor.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>
#include <sstream>

#include "strata/ops.h"
#include "tensor_internal.h"

namespace strata {

namespace detail {

int64_t wrapDim(int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor behaves like 1-d here
  STRATA_CHECK(dim >= -n && dim < n, Index, "dimension out of range (expected to be in range of [",
               -n, ", ", n - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

std::string shapeStr(IntArrayRef sizes) {
  for (int64_t v : sizes) {
    if (v < 0 && sym::isSymbolic(v)) return sym::shapeStr(sizes);
  }
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sizes[i]);
  }
  return s + "]";
}

size_t requiredStorageBytes(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset,
                            size_t element_size) {
  STRATA_CHECK(sizes.size() == strides.size(), Value, "sizes ", shapeStr(sizes), " and strides ",
               shapeStr(strides), " have different lengths");
  // Note [Symbolic sizes]: a tensor without data may have them; the caller decides.
  // The concrete values beside a symbolic one are still checked.
  bool symbolic = sym::isSymbolic(storage_offset);
  STRATA_CHECK(symbolic || storage_offset >= 0, Value, "storage offset must be non-negative, got ", storage_offset);
  int64_t last = 0;
  bool empty = false;  // a 0 size: no bytes, once every size is checked
  for (size_t d = 0; d < sizes.size(); ++d) {
    const bool sym_size = sizes[d] < 0 && sym::isSymbolic(sizes[d]);
    const bool sym_stride = strides[d] < 0 && sym::isSymbolic(strides[d]);
    STRATA_CHECK(sym_size || sizes[d] >= 0, Value, "negative size ", sizes[d], " in ", shapeStr(sizes));
    STRATA_CHECK(sym_stride || strides[d] >= 0, Value, "negative stride ", strides[d], " in ", shapeStr(strides),
                 " is not supported");
    symbolic = symbolic || sym_size || sym_stride;
    empty = empty || sizes[d] == 0;
    if (symbolic || empty) continue;
    int64_t span = 0;
    STRATA_CHECK(!__builtin_mul_overflow(sizes[d] - 1, strides[d], &span) &&
                     !__builtin_add_overflow(last, span, &last),
                 Value, "sizes ", shapeStr(sizes), " with strides ", shapeStr(strides), " overflow");
  }
  if (symbolic) return kSymbolicBytes;
  if (empty) return 0;
  int64_t elems = 0;
  int64_t bytes = 0;
  STRATA_CHECK(!__builtin_add_overflow(last + 1, storage_offset, &elems) &&
                   !__builtin_mul_overflow(elems, static_cast<int64_t>(element_size), &bytes),
               Value, "sizes ", shapeStr(sizes), " need more bytes than fit in 64 bits");
  return static_cast<size_t>(bytes);
}

}  // namespace detail

namespace {

// The product of concrete sizes. The storage check bounds the bytes a tensor spans,
// not its element count: an expanded view (stride 0) of one element may claim
// [2^40, 2^40], whose count does not fit in 64 bits, as PyTorch also refuses.
int64_t checkedNumel(const DimVector& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s == 0) return 0;
  }
  for (int64_t s : sizes) {
    STRATA_CHECK(!__builtin_mul_overflow(n, s, &n), Value, "sizes ", detail::shapeStr(sizes),
                 " hold more elements than fit in 64 bits");
  }
  return n;
}

// Symbolic: with symbolic sizes (Note [Symbolic sizes]) the strides multiply as
// expressions, and a symbol is taken to be neither 0 nor 1, as PyTorch's
// size-oblivious checks do. Concrete tensors use the plain multiply.
template <bool Symbolic>
bool computeContiguous(IntArrayRef sizes, IntArrayRef strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i > 0; --i) {
    const size_t d = i - 1;
    if (sizes[d] == 0) return true;
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected = Symbolic ? sym::mul(expected, sizes[d]) : expected * sizes[d];
  }
  return true;
}

DispatchKeySet computeKeySet(Device device, bool requires_grad) {
  DispatchKeySet ks(backendKey(device.type));
  if (requires_grad) ks = ks.add(autogradKey(device.type));
  return ks;
}

// A wrapper's element count and contiguity (Note [Wrapper tensors]): its sizes may be
// symbolic; concrete ones are counted as checkedNumel does, in one pass.
struct WrapperCounts {
  int64_t numel;
  bool contiguous;
};
[[noreturn, gnu::cold, gnu::noinline]] void throwTooManyElements(IntArrayRef sizes) {
  STRATA_FAIL(Value, "sizes ", detail::shapeStr(sizes), " hold more elements than fit in 64 bits");
}
[[gnu::always_inline]] inline WrapperCounts wrapperCounts(IntArrayRef sizes, IntArrayRef strides) {
  bool negative = false;
  bool empty = false;
  bool overflow = false;
  int64_t numel = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    negative = negative || sizes[d] < 0 || strides[d] < 0;
    empty = empty || sizes[d] == 0;
    overflow = __builtin_mul_overflow(numel, sizes[d], &numel) || overflow;
  }
  if (__builtin_expect(negative, 0) && (sym::anySymbolic(sizes) || sym::anySymbolic(strides))) {
    return {sym::product(sizes), computeContiguous<true>(sizes, strides)};
  }
  if (__builtin_expect(overflow && !empty, 0)) throwTooManyElements(sizes);
  return {empty ? 0 : numel, computeContiguous<false>(sizes, strides)};
}

}  // namespace

std::vector<int64_t> contiguousStrides(IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i > 0; --i) {
    strides[i - 1] = acc;
    const int64_t s = sizes[i - 1];
    if (__builtin_expect(s < 0 || acc < 0, 0)) {  // Note [Symbolic sizes]
      acc = sym::mul(acc, sym::isSymbolic(s) ? s : std::max<int64_t>(s, 1));
    } else {
      // An overflow would turn negative and read as a symbol: refuse it here.
      STRATA_CHECK(!__builtin_mul_overflow(acc, std::max<int64_t>(s, 1), &acc), Value, "sizes ",
                   detail::shapeStr(sizes), " hold more elements than fit in 64 bits");
    }
  }
  return strides;
}

TensorImpl::TensorImpl(Storage storage, ScalarType dtype, IntArrayRef sizes, IntArrayRef strides,
                       int64_t storage_offset)
    : storage_(std::move(storage)),
      sizes_(sizes),
      strides_(strides),
      storage_offset_(storage_offset),
      dtype_(dtype) {
  STRATA_INTERNAL_ASSERT(storage_, "a TensorImpl needs a storage");
  const size_t needed = detail::requiredStorageBytes(sizes_, strides_, storage_offset_, elementSize(dtype_));
  if (__builtin_expect(needed == detail::kSymbolicBytes, 0)) {
    // Note [Symbolic sizes]: only a tensor without data may have them.
    STRATA_CHECK(storage_->device().is_meta(), Value, "sizes ", detail::shapeStr(sizes_),
                 " are symbolic, which only a tensor without data (meta, fake) may have; this one is on ",
                 storage_->device().str());
    numel_ = sym::product(sizes_);
    is_contiguous_ = computeContiguous<true>(sizes_, strides_);
    key_set_ = computeKeySet(storage_->device(), false);
    return;
  }
  STRATA_CHECK(needed <= storage_->nbytes(), Value, "sizes ", detail::shapeStr(sizes_), ", strides ",
               detail::shapeStr(strides_), " and offset ", storage_offset_, " need ", needed,
               " bytes but the storage has ", storage_->nbytes());
  numel_ = checkedNumel(sizes_);
  is_contiguous_ = computeContiguous<false>(sizes_, strides_);
  key_set_ = computeKeySet(storage_->device(), false);
}

TensorImpl::TensorImpl(Storage storage, ScalarType dtype, IntArrayRef sizes, IntArrayRef strides,
                       int64_t storage_offset, DispatchKeySet layer_keys, intrusive_ptr<TensorWrapper> wrapper)
    : storage_(std::move(storage)),
      wrapper_(std::move(wrapper)),
      sizes_(sizes),
      strides_(strides),
      storage_offset_(storage_offset),
      dtype_(dtype),
      layer_keys_(layer_keys) {
  // No bounds check: a wrapper reaches no data through its storage (Note [Wrapper
  // tensors]); its sizes are the logical ones, which a batch of 0 leaves unbacked.
  STRATA_INTERNAL_ASSERT(storage_ && wrapper_, "a wrapper tensor needs a storage and its TensorWrapper");
  STRATA_INTERNAL_ASSERT(sizes_.size() == strides_.size(), "a wrapper's sizes and strides differ in length");
  const WrapperCounts counts = wrapperCounts(sizes_, strides_);
  numel_ = counts.numel;
  is_contiguous_ = counts.contiguous;
  key_set_ = computeKeySet(storage_->device(), false) | layer_keys;
}

namespace {
[[noreturn]] void refuseWrapperReuse(const char* method) {
  STRATA_FAIL(Internal, "TensorImpl::", method, ": only a wrapper tensor held by one handle on the thread that made "
              "it, without autograd metadata, may be reused (Note [Reusing wrapper tensors])");
}
}  // namespace

void TensorImpl::release_wrapper() {
  if (__builtin_expect(!reusable_wrapper(), 0)) refuseWrapperReuse("release_wrapper");
  storage_.reset();
}

void TensorImpl::reset_wrapper(Storage storage, ScalarType dtype, IntArrayRef sizes, IntArrayRef strides,
                               int64_t storage_offset) {
  // Note [Reusing wrapper tensors]
  if (__builtin_expect(!reusable_wrapper(), 0)) refuseWrapperReuse("reset_wrapper");
  STRATA_CHECK(storage, Internal, "TensorImpl::reset_wrapper: a wrapper tensor needs a storage");
  STRATA_CHECK(sizes.size() == strides.size(), Internal, "TensorImpl::reset_wrapper: sizes ",
               detail::shapeStr(sizes), " and strides ", detail::shapeStr(strides), " differ in length");
  const WrapperCounts counts = wrapperCounts(sizes, strides);  // may throw: before anything changes
  // sizes or strides may view this impl's own: then, as with more dims than a
  // DimVector keeps in place (whose memory may throw), both are made before either
  // changes; otherwise they are written in place.
  // (Its own dims are in this object, or on the heap when it has more than kInline.)
  const auto inThis = [this](IntArrayRef v) {
    const auto p = reinterpret_cast<uintptr_t>(v.data());
    return p >= reinterpret_cast<uintptr_t>(this) && p < reinterpret_cast<uintptr_t>(this + 1);
  };
  if (__builtin_expect(sizes.size() > DimVector::kInline || sizes_.size() > DimVector::kInline || inThis(sizes) ||
                           inThis(strides),
                       0)) {
    DimVector new_sizes(sizes);
    DimVector new_strides(strides);
    sizes_ = std::move(new_sizes);
    strides_ = std::move(new_strides);
  } else {
    sizes_.assignInPlace(sizes);
    strides_.assignInPlace(strides);
  }
  storage_ = std::move(storage);
  storage_offset_ = storage_offset;
  dtype_ = dtype;
  numel_ = counts.numel;
  is_contiguous_ = counts.contiguous;
  requires_grad_ = false;
  key_set_ = computeKeySet(storage_->device(), false) | layer_keys_;
}

namespace {
// reset_wrapper_hiding_dim's general path (symbolic dims, a count that overflows,
// dims on the heap): reset_wrapper with copies of the dims kept.
[[gnu::noinline, gnu::cold]] void resetWrapperWithoutDim(TensorImpl& impl, const Tensor& value, size_t skip) {
  std::vector<int64_t> sizes, strides;
  for (size_t d = 0; d < value.sizes().size(); ++d) {
    if (d == skip) continue;
    sizes.push_back(value.sizes()[d]);
    strides.push_back(value.strides()[d]);
  }
  impl.reset_wrapper(value.storage(), value.dtype(), sizes, strides, value.storage_offset());
}
}  // namespace

void TensorImpl::reset_wrapper_hiding_dim(const Tensor& value, int64_t hidden) {
  // Note [Reusing wrapper tensors]
  if (__builtin_expect(!reusable_wrapper(), 0)) refuseWrapperReuse("reset_wrapper_hiding_dim");
  const TensorImpl* v = value.unsafeGetTensorImpl();
  STRATA_CHECK(v != nullptr && v != this, Internal,
               "TensorImpl::reset_wrapper_hiding_dim: the value must be a defined tensor other than the wrapper");
  STRATA_CHECK(v->storage_, Internal,
               "TensorImpl::reset_wrapper_hiding_dim: the value has no storage (a spent wrapper holds none)");
  const size_t n = v->sizes_.size();
  STRATA_CHECK(hidden >= 0 && static_cast<size_t>(hidden) < n, Index, "TensorImpl::reset_wrapper_hiding_dim: dim ",
               hidden, " is out of range for a tensor of dimensionality ", n);
  const IntArrayRef sizes = v->sizes_, strides = v->strides_;
  const auto skip = static_cast<size_t>(hidden);
  if (hidden == 0 && v->is_contiguous_ && v->numel_ > 0 && n - 1 <= DimVector::kInline &&
      sizes_.size() <= DimVector::kInline) {
    // The usual batched tensor: a contiguous value without its outermost dim. Its
    // count is concrete and not 0, so every size is concrete and not 0; the dims kept
    // are contiguous as they were, and they count numel / sizes[0].
    bool symbolic_stride = false;
    for (size_t d = 1; d < n; ++d) symbolic_stride = symbolic_stride || strides[d] < 0;
    if (__builtin_expect(!symbolic_stride, 1)) {
      sizes_.assignInPlaceWithout(sizes, 0);
      strides_.assignInPlaceWithout(strides, 0);
      storage_ = v->storage_;
      storage_offset_ = v->storage_offset_;
      dtype_ = v->dtype_;
      numel_ = v->numel_ / sizes[0];
      is_contiguous_ = true;
      requires_grad_ = false;
      key_set_ = computeKeySet(storage_->device(), false) | layer_keys_;
      return;
    }
  }
  // The count and contiguity of the dims kept, in one pass from the innermost (as
  // computeContiguous reads them). The value is a valid tensor, so what is left to
  // look for is a symbolic dim, and an overflow once its hidden dim (of size 0) no
  // longer makes the count 0.
  int64_t numel = 1;
  uint64_t expected = 1;  // wraps where numel overflows: then unusual
  bool contiguous = true;
  bool decided = false;  // computeContiguous would have returned
  bool empty = false;
  bool unusual = false;  // a symbolic size or stride, or an overflowing count
  for (size_t i = n; i > 0; --i) {
    const size_t d = i - 1;
    if (d == skip) continue;
    const int64_t s = sizes[d];
    unusual = unusual || s < 0 || strides[d] < 0 || __builtin_mul_overflow(numel, s, &numel);
    empty = empty || s == 0;
    if (!decided && s != 1) {
      if (s == 0 || static_cast<uint64_t>(strides[d]) != expected) {
        decided = true;
        contiguous = s == 0;
      }
      expected *= static_cast<uint64_t>(s);
    }
  }
  if (__builtin_expect(unusual || n - 1 > DimVector::kInline || sizes_.size() > DimVector::kInline, 0)) {
    resetWrapperWithoutDim(*this, value, skip);
    return;
  }
  sizes_.assignInPlaceWithout(sizes, skip);
  strides_.assignInPlaceWithout(strides, skip);
  storage_ = v->storage_;
  storage_offset_ = v->storage_offset_;
  dtype_ = v->dtype_;
  numel_ = empty ? 0 : numel;
  is_contiguous_ = contiguous;
  requires_grad_ = false;
  key_set_ = computeKeySet(storage_->device(), false) | layer_keys_;
}

TensorWrapper::~TensorWrapper() = default;
AutogradMetaInterface::~AutogradMetaInterface() = default;
AutogradHooks::~AutogradHooks() = default;

namespace {
std::atomic<const AutogradHooks*> g_autograd_hooks{nullptr};
}  // namespace

void setAutogradHooks(const AutogradHooks* hooks) { g_autograd_hooks.store(hooks, std::memory_order_release); }
const AutogradHooks* autogradHooks() { return g_autograd_hooks.load(std::memory_order_acquire); }

void TensorImpl::set_requires_grad(bool r) {
  STRATA_CHECK(!r || isFloatingType(dtype_), Type,
               "only tensors of floating point dtype can require gradients, got ", toString(dtype_));
  requires_grad_ = r;
  key_set_ = computeKeySet(storage_->device(), r) | layer_keys_;
}

void Tensor::throwWrapper(const char* method) const {
  STRATA_FAIL(Value, method, " needs a tensor's data, and ", wrapper()->what(),
              " has none of its own (Note [Wrapper tensors]): call the core:: op (strata/ops.h), which its layer "
              "handles");
}

void Tensor::throwUndefined() {
  STRATA_FAIL(Value, "the tensor is undefined (default-constructed); it has no sizes, dtype or data");
}

int64_t Tensor::size(int64_t dim) const {
  STRATA_CHECK(this->dim() > 0, Index, "size(", dim, "): a 0-d tensor has no dimensions");
  return sizes()[detail::wrapDim(dim, this->dim())];
}

int64_t Tensor::stride(int64_t dim) const {
  STRATA_CHECK(this->dim() > 0, Index, "stride(", dim, "): a 0-d tensor has no dimensions");
  return strides()[detail::wrapDim(dim, this->dim())];
}

const Tensor& Tensor::set_requires_grad(bool r) const {
  impl();  // throws on an undefined tensor
  if (!r && !is_leaf()) {
    STRATA_FAIL(Value, "you can only change requires_grad flags of leaf variables (this tensor was made by ",
                grad_fn_name(), "). If you want to use a computed variable in a subgraph that doesn't require "
                "differentiation use var_no_grad = var.detach()");
  }
  impl_->set_requires_grad(r);
  if (r) {
    if (const AutogradHooks* h = autogradHooks()) h->onRequiresGrad(*impl_);
  }
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMetaInterface* m = impl().autograd_meta();
  return m != nullptr ? m->grad() : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  AutogradMetaInterface* m = impl().autograd_meta();
  if (grad.defined()) {
    STRATA_CHECK(std::equal(grad.sizes().begin(), grad.sizes().end(), sizes().begin(), sizes().end()), Value,
                 "assigned grad has data of a different size: the tensor has sizes ", detail::shapeStr(sizes()),
                 ", the grad ", detail::shapeStr(grad.sizes()));
    STRATA_CHECK(grad.dtype() == dtype(), Value, "assigned grad has data of a different type: the tensor is ",
                 toString(dtype()), ", the grad ", toString(grad.dtype()));
    STRATA_CHECK(grad.device() == device(), Value, "assigned grad has data on a different device: the "
                 "tensor is on ", device().str(), ", the grad on ", grad.device().str());
  }
  if (m == nullptr) {
    STRATA_CHECK(!grad.defined(), NotImplemented, "set_grad: this tensor has no autograd metadata and no autograd "
                 "layer gave it any; link strata::modes and make the tensor require grad first");
    return;
  }
  m->set_grad(grad);
}

bool Tensor::is_leaf() const {
  const AutogradMetaInterface* m = impl().autograd_meta();
  return m == nullptr || m->is_leaf();
}

std::string Tensor::grad_fn_name() const {
  const AutogradMetaInterface* m = impl().autograd_meta();
  return m != nullptr ? m->grad_fn_name() : std::string();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  impl();
  const AutogradHooks* h = autogradHooks();
  STRATA_CHECK(h != nullptr, NotImplemented, "backward(): no autograd layer is linked into this program; link "
               "strata::modes (strata/modes/autograd.h)");
  h->backward(*this, gradient, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl& t = impl();
  if (t.wrapper() != nullptr) throwWrapper("detach()");
  return Tensor(make_intrusive<TensorImpl>(storage(), dtype(), sizes(), strides(), storage_offset()));
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = impl();
  if (__builtin_expect(t.wrapper() != nullptr, 0)) throwWrapper("data_ptr()");
  STRATA_CHECK(!t.device().is_meta(), Device,
               "cannot access the data of a tensor on the meta device: meta tensors carry "
               "sizes and dtype only (sizes ", detail::shapeStr(t.sizes()), ", dtype ",
               toString(t.dtype()), ")");
  char* base = static_cast<char*>(t.storage()->data());
  if (base == nullptr) return nullptr;  // no elements were ever allocated
  return base + t.storage_offset() * static_cast<int64_t>(elementSize(t.dtype()));
}

// --- Views -------------------------------------------------------------------

Tensor Tensor::as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset) const {
  if (__builtin_expect(viaOps(), 0)) {
    if (wrapper() != nullptr) throwWrapper("as_strided()");
    STRATA_FAIL(Value, "as_strided() of a tensor that requires grad: Strata's autograd has no formula for an "
                "arbitrary strided view; use the view ops (view, transpose, select, narrow, permute, ...), or "
                "detach() the tensor first");
  }
  // A view does not inherit requires_grad: below autograd it is plain data, and the
  // autograd layer marks the views it records (Note [Autograd metadata]).
  return Tensor(make_intrusive<TensorImpl>(storage(), dtype(), sizes, strides, offset.value_or(storage_offset())));
}

namespace {
// The shape with its -1 inferred from numel. With symbolic sizes (Note [Symbolic
// sizes]) the -1 is inferred when the known sizes divide numel term by term; what
// the ranges cannot decide is a data-dependent error.
std::vector<int64_t> inferSize(IntArrayRef sizes, int64_t numel) {
  std::vector<int64_t> out(sizes.begin(), sizes.end());
  std::optional<size_t> infer;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      STRATA_CHECK(!infer, Value, "only one dimension can be inferred in ", detail::shapeStr(sizes));
      infer = i;
    } else {
      STRATA_CHECK(out[i] >= 0 || sym::isSymbolic(out[i]), Value, "invalid shape dimension ", out[i], " in ",
                   detail::shapeStr(sizes));
      known = sym::mul(known, out[i]);
    }
  }
  const bool symbolic = sym::isSymbolic(known) || sym::isSymbolic(numel);
  auto what = [&] { return "the view/reshape of a tensor of " + sym::str(numel) + " elements to " + detail::shapeStr(sizes); };
  if (!infer) {
    STRATA_CHECK(known == numel || (symbolic && sym::eq(known, numel, what())), Value, "shape ",
                 detail::shapeStr(sizes), " is invalid for input of size ", sym::str(numel));
    return out;
  }
  if (auto x = sym::divExact(numel, known)) {
    out[*infer] = *x;
    return out;
  }
  STRATA_CHECK(symbolic, Value, "shape ", detail::shapeStr(sizes), " is invalid for input of size ", numel);
  STRATA_FAIL(Value, "data-dependent: cannot infer the -1 in ", detail::shapeStr(sizes), " for ", what(), " (",
              sym::rangesStr(sizes), "); give every size explicitly");
}

// The strides that show a tensor of sizes `old_sizes` and strides `old_strides` as
// `shape` without moving an element, or nullopt when there are none: ATen's
// computeStride. Each run of old dims that is contiguous within itself (a "chunk")
// must be split or merged by the new dims on its own; dims of size 1 go anywhere.
// A tensor of symbolic sizes is viewable only when it is contiguous.
std::optional<std::vector<int64_t>> viewStrides(IntArrayRef old_sizes, IntArrayRef old_strides, bool contiguous,
                                                const std::vector<int64_t>& shape) {
  const auto n_new = static_cast<int64_t>(shape.size());
  if (old_sizes.empty()) return std::vector<int64_t>(shape.size(), 1);
  if (sym::anySymbolic({old_sizes.begin(), old_sizes.end()}) || sym::anySymbolic({old_strides.begin(), old_strides.end()}) ||
      sym::anySymbolic(shape)) {
    if (!contiguous) return std::nullopt;
    return contiguousStrides(shape);
  }
  int64_t numel = 1;
  for (int64_t s : old_sizes) numel *= s;
  std::vector<int64_t> out(shape.size());
  if (numel == 0) {
    if (std::equal(old_sizes.begin(), old_sizes.end(), shape.begin(), shape.end())) {
      return std::vector<int64_t>(old_strides.begin(), old_strides.end());
    }
    // Contiguous strides (a size 0 or 1 counted as 1), as ATen's; sizes that hold no
    // element may still multiply past 64 bits ([0, 7, 2^63 - 1]): refused, as
    // PyTorch's "Stride calculation overflowed".
    for (int64_t d = n_new - 1; d >= 0; --d) {
      if (d == n_new - 1) {
        out[d] = 1;
      } else {
        STRATA_CHECK(!__builtin_mul_overflow(std::max<int64_t>(shape[d + 1], 1), out[d + 1], &out[d]), Value,
                     "view size ", detail::shapeStr(shape), " of an empty tensor: its strides overflow 64 bits");
      }
    }
    return out;
  }
  int64_t view_d = n_new - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (auto tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    // The chunk ends here: the dim before is not laid out right after this run.
    if (tensor_d == 0 ||
        (old_sizes[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}
}  // namespace

Tensor Tensor::view(IntArrayRef sizes) const {
  if (viaOps()) return ops::view(*this, {sizes.begin(), sizes.end()});
  std::vector<int64_t> shape = inferSize(sizes, numel());
  std::optional<std::vector<int64_t>> strides = viewStrides(this->sizes(), this->strides(), is_contiguous(), shape);
  STRATA_CHECK(strides.has_value(), Value, "view size ", detail::shapeStr(shape),
               " is not compatible with the tensor's sizes ", detail::shapeStr(this->sizes()), " and strides ",
               detail::shapeStr(this->strides()),
               " (at least one dimension spans across two contiguous subspaces); use reshape() instead");
  return as_strided(shape, *strides);
}

Tensor Tensor::reshape(IntArrayRef sizes) const {
  if (viaOps()) return ops::reshape(*this, {sizes.begin(), sizes.end()});
  std::vector<int64_t> shape = inferSize(sizes, numel());
  if (auto strides = viewStrides(this->sizes(), this->strides(), is_contiguous(), shape)) {
    return as_strided(shape, *strides);
  }
  return contiguous().view(shape);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (viaOps()) return ops::transpose(*this, dim0, dim1);
  std::vector<int64_t> perm(static_cast<size_t>(dim()));
  std::iota(perm.begin(), perm.end(), 0);
  const int64_t d0 = detail::wrapDim(dim0, dim()), d1 = detail::wrapDim(dim1, dim());  // checked for a 0-d one too
  if (dim() == 0) return *this;
  std::swap(perm[d0], perm[d1]);
  return permute(perm);
}

Tensor Tensor::permute(IntArrayRef dims) const {
  if (viaOps()) return ops::permute(*this, std::vector<int64_t>(dims.begin(), dims.end()));
  STRATA_CHECK(static_cast<int64_t>(dims.size()) == dim(), Value, "permute(", detail::shapeStr(dims),
               "): the number of dims does not match the tensor's ", dim());
  std::vector<int64_t> sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = detail::wrapDim(dims[i], dim());
    STRATA_CHECK(!seen[d], Value, "permute(", detail::shapeStr(dims), "): dim ", d, " repeats");
    seen[d] = true;
    sizes[i] = this->sizes()[d];
    strides[i] = this->strides()[d];
  }
  return as_strided(sizes, strides);
}

namespace {
[[noreturn]] void throwRoutedSliceStep(const Tensor& t) {
  if (t.wrapper() != nullptr) {
    STRATA_FAIL(Value, "slice() with a step needs a tensor's data, and ", t.wrapper()->what(),
                " has none of its own; use narrow() (core::narrow), which its layer handles");
  }
  STRATA_FAIL(Value, "slice() with a step of a tensor that requires grad: Strata's autograd differentiates "
              "narrow() (step 1) but not a strided slice; detach() the tensor first or use narrow()");
}
}  // namespace

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  STRATA_CHECK(this->dim() > 0, Index, "slice() cannot be applied to a 0-d tensor");
  const int64_t d = detail::wrapDim(dim, this->dim());
  STRATA_CHECK(step > 0, Value, "slice step must be positive, got ", step);
  const int64_t n = sizes()[d];
  if (__builtin_expect(n < 0, 0)) {  // Note [Symbolic sizes]: bounds the range decides
    STRATA_CHECK(start >= 0 && end >= start, Value, "slice(", start, ", ", end, ") of the symbolic dim ", sym::str(n),
                 " needs 0 <= start <= end");
    // An end past every value the range allows (x[k:]) is the end; else ask the range.
    const sym::Range nr = sym::range(n);
    if ((nr.max != sym::kInf && end >= nr.max) || end == std::numeric_limits<int64_t>::max() ||
        !sym::le(end, n, "slice()'s end bound")) {
      end = n;
    }
    STRATA_CHECK(sym::le(start, end, "slice()'s start bound"), Value, "slice start ", start, " is past the end");
    if (viaOps()) {
      if (step != 1) throwRoutedSliceStep(*this);
      return ops::narrow(*this, d, start, sym::sub(end, start));
    }
    STRATA_CHECK(step == 1, Value, "slice() with a step over the symbolic dim ", sym::str(n), " is not supported");
    std::vector<int64_t> sz(this->sizes().begin(), this->sizes().end());
    std::vector<int64_t> st(this->strides().begin(), this->strides().end());
    sz[d] = sym::sub(end, start);
    return as_strided(sz, st, sym::add(storage_offset(), sym::mul(start, st[d])));
  }
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  if (viaOps()) {
    if (step != 1) throwRoutedSliceStep(*this);
    return ops::narrow(*this, d, start, end - start);
  }
  std::vector<int64_t> sizes(this->sizes().begin(), this->sizes().end());
  std::vector<int64_t> strides(this->strides().begin(), this->strides().end());
  sizes[d] = (end - start + step - 1) / step;
  // A symbolic stride or offset (Note [Symbolic sizes]) takes the symbolic arithmetic.
  strides[d] = sym::mul(strides[d], step);
  const int64_t offset = sizes[d] == 0 ? storage_offset() : sym::add(storage_offset(), sym::mul(start, this->strides()[d]));
  return as_strided(sizes, strides, offset);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  if (viaOps()) return ops::select(*this, dim, index);
  STRATA_CHECK(this->dim() > 0, Index, "select() cannot be applied to a 0-d tensor");
  const int64_t d = detail::wrapDim(dim, this->dim());
  const int64_t n = sizes()[d];
  if (__builtin_expect(n < 0, 0)) {  // Note [Symbolic sizes]
    STRATA_CHECK(index >= 0 && sym::lt(index, n, "select()'s index bound"), Index, "select(): index ", index,
                 " out of range for tensor of size ", detail::shapeStr(sizes()), " at dimension ", d);
    std::vector<int64_t> sz(this->sizes().begin(), this->sizes().end());
    std::vector<int64_t> st(this->strides().begin(), this->strides().end());
    const int64_t offset = sym::add(storage_offset(), sym::mul(index, st[d]));
    sz.erase(sz.begin() + d);
    st.erase(st.begin() + d);
    return as_strided(sz, st, offset);
  }
  STRATA_CHECK(index >= -n && index < n, Index, "select(): index ", index,
               " out of range for tensor of size ", detail::shapeStr(sizes()), " at dimension ", d);
  if (index < 0) index += n;
  std::vector<int64_t> sizes(this->sizes().begin(), this->sizes().end());
  std::vector<int64_t> strides(this->strides().begin(), this->strides().end());
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return as_strided(sizes, strides, sym::add(storage_offset(), sym::mul(index, this->strides()[d])));
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  if (viaOps()) return ops::unsqueeze(*this, dim);
  const int64_t d = detail::wrapDim(dim, this->dim() + 1);
  std::vector<int64_t> sizes(this->sizes().begin(), this->sizes().end());
  std::vector<int64_t> strides(this->strides().begin(), this->strides().end());
  const int64_t stride = d < this->dim() ? sym::mul(sizes[d], strides[d]) : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return as_strided(sizes, strides);
}

}  // namespace strata
