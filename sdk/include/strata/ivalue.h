// IValue: the boxed value of the boxed calling convention, and Stack, the argument
// stack boxed kernels read their arguments from and push their results onto.
//
// An IValue is 16 bytes: a tag plus a payload that is either held inline (int,
// double, bool, ScalarType, Device) or a reference to a ref-counted object
// (Tensor, string, lists). Copies share that object; every list and string is
// immutable once boxed, so sharing is invisible.
//
// Accessors are checked: asking an IValue for a type it does not hold throws
// strata::Error(Type) naming both ("expected Tensor, got int").
//
// Thread safety: like a Tensor handle; an IValue may be copied across threads.
#pragma once

#include <algorithm>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/device.h"
#include "strata/export.h"
#include "strata/intrusive_ptr.h"
#include "strata/scalar.h"
#include "strata/scalar_type.h"
#include "strata/tensor.h"

namespace strata {

class IValue;

namespace ivalue {
// Heap payloads. Not part of the API beyond these names.
template <typename T>
struct ListImpl final : intrusive_ptr_target {
  explicit ListImpl(std::vector<T> v) : elements(std::move(v)) {}
  const std::vector<T> elements;
};
struct StringImpl final : intrusive_ptr_target {
  explicit StringImpl(std::string s) : str(std::move(s)) {}
  const std::string str;
};
struct ComplexImpl final : intrusive_ptr_target {
  explicit ComplexImpl(std::complex<double> v) : value(v) {}
  const std::complex<double> value;
};
}  // namespace ivalue

class STRATA_API IValue {
 public:
  enum class Tag : uint8_t {
    None,
    Tensor,
    Int,
    Double,
    Bool,
    String,
    IntList,
    DoubleList,
    BoolList,
    TensorList,
    GenericList,  // a list of IValues (str[], Tensor?[], nested lists, ...)
    ScalarType,
    Device,
    Complex,
  };

  IValue() noexcept : tag_(Tag::None) { payload_.u.i = 0; }
  IValue(std::nullopt_t) noexcept : IValue() {}  // NOLINT
  IValue(Tensor t) noexcept : tag_(Tag::Tensor) { new (&payload_.tensor) Tensor(std::move(t)); }  // NOLINT
  IValue(std::optional<Tensor> t) : IValue(t ? IValue(std::move(*t)) : IValue()) {}  // NOLINT
  IValue(int64_t v) noexcept : tag_(Tag::Int) { payload_.u.i = v; }  // NOLINT
  IValue(int32_t v) noexcept : IValue(static_cast<int64_t>(v)) {}  // NOLINT
  IValue(double v) noexcept : tag_(Tag::Double) { payload_.u.d = v; }  // NOLINT
  IValue(bool v) noexcept : tag_(Tag::Bool) { payload_.u.i = v; }  // NOLINT
  IValue(const char* s) : IValue(std::string(s)) {}  // NOLINT
  IValue(std::string_view s) : IValue(std::string(s)) {}  // NOLINT
  IValue(std::string s);  // NOLINT
  IValue(std::vector<int64_t> v);  // NOLINT
  IValue(std::vector<double> v);  // NOLINT
  IValue(std::vector<bool> v);  // NOLINT
  IValue(std::vector<Tensor> v);  // NOLINT
  IValue(std::vector<IValue> v);  // NOLINT: a generic list
  IValue(ScalarType t) noexcept : tag_(Tag::ScalarType) { payload_.u.i = static_cast<int64_t>(t); }  // NOLINT
  IValue(Device d) noexcept : tag_(Tag::Device) { payload_.u.device = d; }  // NOLINT
  IValue(std::complex<double> v);  // NOLINT
  // A Scalar boxes as the int, double or bool it holds.
  IValue(const Scalar& s) noexcept;  // NOLINT
  IValue(ArrayRef<int64_t> v) : IValue(std::vector<int64_t>(v.begin(), v.end())) {}  // NOLINT
  IValue(ArrayRef<double> v) : IValue(std::vector<double>(v.begin(), v.end())) {}  // NOLINT
  IValue(ArrayRef<Tensor> v) : IValue(std::vector<Tensor>(v.begin(), v.end())) {}  // NOLINT
  template <typename T>
  IValue(std::optional<T> v) : IValue(v ? IValue(std::move(*v)) : IValue()) {}  // NOLINT
  // Other integer and floating vectors widen to int[] and float[]; any other
  // list (str[], Tensor?[], int[][], ...) boxes as a generic list.
  template <typename T>
  IValue(std::vector<T> v) : IValue(boxList(std::move(v))) {}  // NOLINT

  IValue(const IValue& o) noexcept : tag_(o.tag_) {
    if (tag_ == Tag::Tensor) {
      new (&payload_.tensor) Tensor(o.payload_.tensor);
    } else {
      payload_.u = o.payload_.u;
      if (isHeapRef()) intrusive_incref(payload_.u.p);
    }
  }
  IValue(IValue&& o) noexcept { moveFrom(o); }
  IValue& operator=(const IValue& o) noexcept {
    if (this != &o) *this = IValue(o);
    return *this;
  }
  IValue& operator=(IValue&& o) noexcept {
    if (this != &o) {
      destroy();
      moveFrom(o);
    }
    return *this;
  }
  ~IValue() { destroy(); }
  void swap(IValue& o) noexcept {
    IValue tmp(std::move(o));
    o = std::move(*this);
    *this = std::move(tmp);
  }

  Tag tag() const { return tag_; }
  // The schema-language name of what this holds: "int", "Tensor", "float[]", ...
  const char* typeName() const;
  static const char* tagName(Tag t);

  bool isNone() const { return tag_ == Tag::None; }
  bool isTensor() const { return tag_ == Tag::Tensor; }
  bool isInt() const { return tag_ == Tag::Int; }
  bool isDouble() const { return tag_ == Tag::Double; }
  bool isBool() const { return tag_ == Tag::Bool; }
  bool isString() const { return tag_ == Tag::String; }
  bool isIntList() const { return tag_ == Tag::IntList; }
  bool isDoubleList() const { return tag_ == Tag::DoubleList; }
  bool isBoolList() const { return tag_ == Tag::BoolList; }
  bool isTensorList() const { return tag_ == Tag::TensorList; }
  bool isGenericList() const { return tag_ == Tag::GenericList; }
  bool isList() const {
    return tag_ == Tag::IntList || tag_ == Tag::DoubleList || tag_ == Tag::BoolList ||
           tag_ == Tag::TensorList || tag_ == Tag::GenericList;
  }
  bool isScalarType() const { return tag_ == Tag::ScalarType; }
  bool isDevice() const { return tag_ == Tag::Device; }
  bool isComplex() const { return tag_ == Tag::Complex; }
  // int, double or bool: what a schema `Scalar` accepts.
  bool isScalar() const { return tag_ == Tag::Int || tag_ == Tag::Double || tag_ == Tag::Bool; }

  // Checked accessors. Each throws Error(Type) naming the expected and actual type.
  // By reference: unboxing costs no refcount traffic. Valid while this IValue
  // lives and holds the tensor.
  const Tensor& toTensor() const& {
    if (__builtin_expect(tag_ != Tag::Tensor, 0)) throwWrongType(Tag::Tensor);
    return payload_.tensor;
  }
  // Moves the tensor out, leaving None.
  Tensor toTensor() && {
    if (__builtin_expect(tag_ != Tag::Tensor, 0)) throwWrongType(Tag::Tensor);
    Tensor t = std::move(payload_.tensor);
    destroy();
    return t;
  }
  // None -> nullopt, Tensor -> the tensor.
  std::optional<Tensor> toOptionalTensor() const;
  int64_t toInt() const {
    if (__builtin_expect(tag_ != Tag::Int, 0)) throwWrongType(Tag::Int);
    return payload_.u.i;
  }
  double toDouble() const {
    if (__builtin_expect(tag_ != Tag::Double, 0)) throwWrongType(Tag::Double);
    return payload_.u.d;
  }
  bool toBool() const {
    if (__builtin_expect(tag_ != Tag::Bool, 0)) throwWrongType(Tag::Bool);
    return payload_.u.i != 0;
  }
  const std::string& toStringRef() const;
  std::string_view toStringView() const { return toStringRef(); }
  const std::vector<int64_t>& toIntList() const;
  const std::vector<double>& toDoubleList() const;
  const std::vector<bool>& toBoolList() const;
  const std::vector<Tensor>& toTensorList() const;
  const std::vector<IValue>& toList() const;  // the generic list
  // A ScalarType, or an int holding a valid ScalarType code (how schemas box dtypes).
  ScalarType toScalarType() const;
  Device toDevice() const;
  std::complex<double> toComplex() const;
  Scalar toScalar() const;

  // The C++ value of type T (the types infer_schema maps), checked as above.
  template <typename T>
  T to() const;

  // Deep equality for values and lists; tensors compare by identity (same impl).
  friend STRATA_API bool operator==(const IValue& a, const IValue& b);
  friend bool operator!=(const IValue& a, const IValue& b) { return !(a == b); }

  // Python-like rendering: None, 1, 1.5, True, "str", [1, 2], float32, cpu, tensor(...).
  std::string repr() const;

 private:
  template <typename T>
  static IValue boxList(std::vector<T> v) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      return IValue(std::vector<int64_t>(v.begin(), v.end()));
    } else if constexpr (std::is_floating_point_v<T>) {
      return IValue(std::vector<double>(v.begin(), v.end()));
    } else {
      std::vector<IValue> out;
      out.reserve(v.size());
      for (T& x : v) out.emplace_back(std::move(x));
      return IValue(std::move(out));
    }
  }
  // True for the tags whose payload is u.p, one reference on a heap object.
  bool isHeapRef() const { return tag_ == Tag::String || tag_ == Tag::Complex || isList(); }
  void destroy() noexcept {
    if (tag_ == Tag::Tensor) payload_.tensor.~Tensor();
    else if (isHeapRef()) intrusive_decref(payload_.u.p);
    tag_ = Tag::None;
    payload_.u.i = 0;
  }
  // REQUIRES: *this holds nothing (being constructed, or just destroyed).
  void moveFrom(IValue& o) noexcept {
    tag_ = o.tag_;
    if (tag_ == Tag::Tensor) {
      new (&payload_.tensor) Tensor(std::move(o.payload_.tensor));
      o.payload_.tensor.~Tensor();
    } else {
      payload_.u = o.payload_.u;  // a heap reference moves with the bits
    }
    o.tag_ = Tag::None;
    o.payload_.u.i = 0;
  }
  [[noreturn]] void throwWrongType(Tag expected) const;

  Tag tag_;
  // Invariant: `tensor` is the live member iff tag_ == Tag::Tensor; otherwise `u`
  // is, and u.p holds one reference when isHeapRef().
  union Payload {
    union Trivial {
      int64_t i;
      double d;
      Device device;
      intrusive_ptr_target* p;
    } u;
    Tensor tensor;
    Payload() : u{0} {}
    ~Payload() {}
  } payload_;
};

namespace detail {
// IValue -> C++ value for IValue::to<T>(); one specialization per supported type.
template <typename T>
struct IValueTo {
  static_assert(sizeof(T) == 0, "IValue::to<T>(): T is not a type an IValue can hold");
};
#define STRATA_IVALUE_TO(T, expr)                 \
  template <>                                     \
  struct IValueTo<T> {                            \
    static T get(const IValue& v) { return expr; } \
  };
STRATA_IVALUE_TO(IValue, v)
STRATA_IVALUE_TO(Tensor, v.toTensor())
STRATA_IVALUE_TO(int64_t, v.toInt())
STRATA_IVALUE_TO(double, v.toDouble())
STRATA_IVALUE_TO(bool, v.toBool())
STRATA_IVALUE_TO(std::string, v.toStringRef())
STRATA_IVALUE_TO(std::string_view, v.toStringView())
STRATA_IVALUE_TO(std::vector<int64_t>, v.toIntList())
STRATA_IVALUE_TO(std::vector<double>, v.toDoubleList())
STRATA_IVALUE_TO(std::vector<bool>, v.toBoolList())
STRATA_IVALUE_TO(std::vector<Tensor>, v.toTensorList())
STRATA_IVALUE_TO(ArrayRef<int64_t>, ArrayRef<int64_t>(v.toIntList()))
STRATA_IVALUE_TO(ArrayRef<double>, ArrayRef<double>(v.toDoubleList()))
STRATA_IVALUE_TO(ArrayRef<Tensor>, ArrayRef<Tensor>(v.toTensorList()))
STRATA_IVALUE_TO(ScalarType, v.toScalarType())
STRATA_IVALUE_TO(Device, v.toDevice())
STRATA_IVALUE_TO(Scalar, v.toScalar())
STRATA_IVALUE_TO(std::complex<double>, v.toComplex())
#undef STRATA_IVALUE_TO
// Lists of other element types arrive as generic lists.
template <typename T>
struct IValueTo<std::vector<T>> {
  static std::vector<T> get(const IValue& v) {
    std::vector<T> out;
    out.reserve(v.toList().size());
    for (const IValue& e : v.toList()) out.push_back(IValueTo<T>::get(e));
    return out;
  }
};
template <typename T>
struct IValueTo<std::optional<T>> {
  static std::optional<T> get(const IValue& v) {
    if (v.isNone()) return std::nullopt;
    return IValueTo<T>::get(v);
  }
};
}  // namespace detail

template <typename T>
T IValue::to() const {
  return detail::IValueTo<T>::get(*this);
}

STRATA_API std::ostream& operator<<(std::ostream& os, const IValue& v);

namespace detail {
// One value of a braced Stack, `Stack st{a, b, 2.0}`: a reference to the argument
// and how to build an IValue from it, so that the Stack builds each value once, in
// place, where an initializer_list<IValue> would build it and then copy it (for a
// tensor, a reference taken and dropped per argument). It takes what an IValue
// list's element takes: an argument that converts to an IValue, and `{}` for None.
// A number whose conversion is ambiguous (unsigned, size_t, long long) is refused,
// as such a list refused it, rather than read as Stack(n)'s count. Raw pointers
// other than strings are not values: `Stack{first, last}` over IValue pointers is a
// range (a list of IValues made them two bools).
//
// Two things differ from a list of IValues, both only for arguments with side
// effects on each other. An argument is read when the Stack is built, after the
// whole list has been evaluated (numbers are read at once): in `Stack{std::move(t),
// t.defined()}` the second value is read before t is moved from, and
// `Stack{st.back(), pop(st)}` reads a value that pop destroyed. And the list
// refers to its arguments, so it is for building a Stack where it is written, not
// for keeping: the arguments, temporaries included, live until the end of that
// full expression only.
class StackArg {
 public:
  template <typename A, typename = std::enable_if_t<
                            std::is_convertible_v<A, IValue> && !std::is_member_pointer_v<std::decay_t<A>> &&
                            (!std::is_pointer_v<std::decay_t<A>> || std::is_convertible_v<std::decay_t<A>, const char*>)>>
  StackArg(A&& a) noexcept {  // NOLINT: an element of a braced list
    using T = std::remove_cvref_t<A>;
    // A const rvalue is copied, as IValue(Tensor) would copy it.
    constexpr bool rvalue = !std::is_lvalue_reference_v<A> && !std::is_const_v<std::remove_reference_t<A>>;
    if constexpr (std::is_same_v<T, Tensor>) {
      kind_ = rvalue ? Kind::TensorMove : Kind::TensorCopy;
      u_.arg = std::addressof(a);
    } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
      kind_ = Kind::Double;
      u_.d = a;
    } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t>) {
      kind_ = Kind::Int;
      u_.i = a;
    } else if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::Bool;
      u_.i = a;
    } else {
      kind_ = Kind::Other;
      u_.arg = std::addressof(a);
      make_ = &make<A>;
    }
  }
  // `{}`: None, as for an IValue list.
  StackArg() noexcept : kind_(Kind::None) { u_.i = 0; }
  // A number an IValue list found ambiguous stays an error (see above).
  template <typename A,
            typename = std::enable_if_t<std::is_arithmetic_v<std::remove_cvref_t<A>> && !std::is_convertible_v<A, IValue>>,
            typename = void>
  StackArg(A&&) = delete;

  // The common kinds are built inline; the rest through make_.
  void constructAt(IValue* at) const {
    switch (kind_) {
      case Kind::None: new (at) IValue(); return;
      case Kind::TensorCopy: new (at) IValue(*static_cast<const Tensor*>(u_.arg)); return;
      case Kind::TensorMove: new (at) IValue(std::move(*const_cast<Tensor*>(static_cast<const Tensor*>(u_.arg)))); return;
      case Kind::Double: new (at) IValue(u_.d); return;
      case Kind::Int: new (at) IValue(u_.i); return;
      case Kind::Bool: new (at) IValue(u_.i != 0); return;
      case Kind::Other: make_(at, u_.arg); return;
    }
  }

 private:
  template <typename A>
  static void make(IValue* at, const void* arg) {
    using T = std::remove_reference_t<A>;
    new (at) IValue(static_cast<A&&>(*const_cast<T*>(static_cast<const T*>(arg))));
  }
  enum class Kind : uint8_t { None, TensorCopy, TensorMove, Double, Int, Bool, Other };
  union {
    const void* arg;
    double d;
    int64_t i;
  } u_;
  Kind kind_;
  void (*make_)(IValue*, const void*) = nullptr;
};
}  // namespace detail

namespace detail::boxing {
template <typename F, bool kTakesKeySet, typename R, typename... P>
struct UnboxedWrapper;
}  // namespace detail::boxing

// The argument stack of a boxed call: arguments in schema order on entry,
// results in schema order on return.
//
// Note [Stacks in place]
// ~~~~~~~~~~~~~~~~~~~~~~
// A Stack is std::vector<IValue>'s interface with the first kInline values held in
// the object itself, so the stacks of nearly every call (a local `Stack st{a, b,
// 2.0}`, a typed call boxed to reach a dispatch mode, an autocast or vmap rule, or
// any boxed fallback) never touch the heap: on the VMs we measure on, malloc and
// free were about a third of a boxed call. A longer stack moves to the heap as a
// vector does. Two differences from std::vector, both as for llvm::SmallVector:
// moving a Stack moves its values one by one when they are in place (a few
// 16-byte copies), and iterators and references are invalidated by that move.
// It converts to and from std::vector<IValue> (a copy, or a move of the values).
// Its layout is part of the SDK ABI (a major version, see plugin.h).
class STRATA_API Stack {
 public:
  using value_type = IValue;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = IValue&;
  using const_reference = const IValue&;
  using pointer = IValue*;
  using const_pointer = const IValue*;
  using iterator = IValue*;
  using const_iterator = const IValue*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_t kInline = 8;

  Stack() noexcept : data_(inlineData()) {}
  // `Stack st{a, b, 2.0}`: each value built once, in place (see detail::StackArg).
  Stack(std::initializer_list<detail::StackArg> values) : Stack() {
    reserve(values.size());
    // Counts what is built, so that a value that throws (a string's allocation)
    // leaves the ones before it to the destructor; no try in a header that code
    // built with -fno-exceptions includes.
    struct Built {
      decltype(size_)& size;
      decltype(size_) n = 0;
      ~Built() { size = n; }
    } built{size_};
    IValue* at = data_;
    // Unrolled, a list's kinds are known where it is written: each value's build
    // is then straight-line code, no branch per value (`Stack{a, b, 2.0}` built and
    // dropped: 6.5 ns as a loop, 4.4 unrolled with this counter, on the Intel VM;
    // 9.9 through an initializer_list<IValue>).
#if defined(__CUDACC__)
#elif defined(__clang__)
#pragma unroll 16
#elif defined(__GNUC__)
#pragma GCC unroll 16
#endif
    for (const detail::StackArg& v : values) {
      v.constructAt(at++);
      ++built.n;
    }
  }
  explicit Stack(size_t n) : Stack() { resize(n); }
  Stack(size_t n, const IValue& v) : Stack() { resize(n, v); }
  template <typename It, typename = decltype(IValue(*std::declval<It>()))>
  Stack(It first, It last) : Stack() {
    append(first, last);
  }
  Stack(const std::vector<IValue>& v) : Stack() { append(v.begin(), v.end()); }  // NOLINT: as a vector converts
  Stack(std::vector<IValue>&& v) : Stack() {  // NOLINT
    reserve(v.size());
    for (IValue& x : v) new (data_ + size_++) IValue(std::move(x));
    v.clear();
  }
  // The values built in order, in place, none made first: for boxing a call.
  template <typename... A>
  explicit Stack(std::in_place_t, A&&... a) : Stack() {
    if constexpr (sizeof...(A) > kInline) reserve(sizeof...(A));
    (constructLast(std::forward<A>(a)), ...);
  }
  Stack(const Stack& o) : Stack() { append(o.begin(), o.end()); }
  Stack(Stack&& o) noexcept : Stack() { takeFrom(o); }
  Stack& operator=(const Stack& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Stack& operator=(Stack&& o) noexcept {
    if (this != &o) {
      clear();
      releaseHeap();
      takeFrom(o);
    }
    return *this;
  }
  Stack& operator=(std::initializer_list<IValue> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~Stack() {
    clear();
    releaseHeap();
  }

  // A copy as a std::vector (the values are shared, as IValue copies share).
  std::vector<IValue> vec() const& { return std::vector<IValue>(begin(), end()); }
  std::vector<IValue> vec() && {
    std::vector<IValue> out(std::make_move_iterator(begin()), std::make_move_iterator(end()));
    clear();
    return out;
  }
  operator std::vector<IValue>() const& { return vec(); }  // NOLINT: where a vector was taken
  operator std::vector<IValue>() && { return std::move(*this).vec(); }  // NOLINT

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  size_t max_size() const noexcept { return size_t{1} << 28; }
  bool inPlace() const noexcept { return data_ == inlineData(); }

  IValue* data() noexcept { return data_; }
  const IValue* data() const noexcept { return data_; }
  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  IValue& operator[](size_t i) noexcept { return data_[i]; }
  const IValue& operator[](size_t i) const noexcept { return data_[i]; }
  IValue& at(size_t i) {
    if (i >= size_) throwOutOfRange(i, size_);
    return data_[i];
  }
  const IValue& at(size_t i) const {
    if (i >= size_) throwOutOfRange(i, size_);
    return data_[i];
  }
  IValue& front() noexcept { return data_[0]; }
  const IValue& front() const noexcept { return data_[0]; }
  IValue& back() noexcept { return data_[size_ - 1]; }
  const IValue& back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  void shrink_to_fit() noexcept {}
  void clear() noexcept {
    for (size_t i = size_; i > 0; --i) data_[i - 1].~IValue();
    size_ = 0;
  }
  void resize(size_t n) {
    if (n < size_) {
      truncate(n);
      return;
    }
    if (n > capacity_) grow(std::max(n, growth(size_)));  // geometric, as a vector grows
    for (; size_ < n; ++size_) new (data_ + size_) IValue();
  }
  void resize(size_t n, const IValue& v) {
    if (n < size_) {
      truncate(n);
      return;
    }
    if (n > capacity_) {
      const IValue copy = v;  // v may live in this stack
      grow(std::max(n, growth(size_)));
      for (; size_ < n; ++size_) new (data_ + size_) IValue(copy);
      return;
    }
    for (; size_ < n; ++size_) new (data_ + size_) IValue(v);
  }
  template <typename... A>
  IValue& emplace_back(A&&... a) {
    if (__builtin_expect(size_ == capacity_, 0)) {
      IValue v(std::forward<A>(a)...);  // the arguments may refer into this stack
      grow(growth(size_ + 1));
      return *new (data_ + size_++) IValue(std::move(v));  // a move: cannot throw
    }
    // Counted once made: an IValue constructor may throw (a string's allocation).
    IValue* p = new (data_ + size_) IValue(std::forward<A>(a)...);
    ++size_;
    return *p;
  }
  void push_back(const IValue& v) { emplace_back(v); }
  void push_back(IValue&& v) { emplace_back(std::move(v)); }
  void pop_back() noexcept { data_[--size_].~IValue(); }

  iterator insert(const_iterator pos, IValue v) { return insert(pos, &v, &v + 1, true); }
  iterator insert(const_iterator pos, size_t n, const IValue& v) {
    Stack copies(n, v);
    return insert(pos, copies.begin(), copies.end(), true);
  }
  template <typename It, typename = decltype(IValue(*std::declval<It>()))>
  iterator insert(const_iterator pos, It first, It last) {
    Stack values(first, last);  // the range may be part of this stack
    return insert(pos, values.begin(), values.end(), true);
  }
  iterator insert(const_iterator pos, std::initializer_list<IValue> values) {
    return insert(pos, values.begin(), values.end());
  }
  template <typename... A>
  iterator emplace(const_iterator pos, A&&... a) {
    return insert(pos, IValue(std::forward<A>(a)...));
  }
  iterator erase(const_iterator pos) noexcept { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) noexcept {
    IValue* f = data_ + (first - data_);
    const size_t n = static_cast<size_t>(last - first);
    if (n == 0) return f;
    for (IValue* p = f; p + n < end(); ++p) *p = std::move(p[n]);
    truncate(size_ - n);
    return f;
  }
  template <typename It>
  void assign(It first, It last) {
    Stack values(first, last);
    *this = std::move(values);
  }
  void assign(std::initializer_list<IValue> values) { assign(values.begin(), values.end()); }
  void assign(size_t n, const IValue& v) { *this = Stack(n, v); }
  void swap(Stack& o) noexcept {
    if (this == &o) return;
    if (!inPlace() && !o.inPlace()) {  // two heap blocks: as a vector swaps
      std::swap(data_, o.data_);
      std::swap(size_, o.size_);
      std::swap(capacity_, o.capacity_);
    } else if (size_ == 0 && inPlace()) {  // swapping into an empty stack is a move
      takeFrom(o);
    } else if (o.size_ == 0 && o.inPlace()) {
      o.takeFrom(*this);
    } else {
      Stack t(std::move(o));
      o = std::move(*this);
      *this = std::move(t);
    }
  }
  friend void swap(Stack& a, Stack& b) noexcept { a.swap(b); }

 private:
  IValue* inlineData() noexcept { return reinterpret_cast<IValue*>(inline_); }
  const IValue* inlineData() const noexcept { return reinterpret_cast<const IValue*>(inline_); }
  static size_t growth(size_t need) noexcept {
    return need < 16 ? 16 : std::max(need, std::min(need * 2, size_t{1} << 28));
  }
  template <typename It>
  void append(It first, It last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, typename std::iterator_traits<It>::iterator_category>) {
      reserve(size_ + static_cast<size_t>(std::distance(first, last)));
    }
    for (; first != last; ++first) emplace_back(*first);
  }
  template <typename A>
  void constructLast(A&& a) {  // room is there
    new (data_ + size_) IValue(std::forward<A>(a));
    ++size_;
  }
  void truncate(size_t n) noexcept {
    while (size_ > n) data_[--size_].~IValue();
  }
  // The boxing wrapper of a typed kernel destroys the argument slots itself, knowing
  // their types (detail::boxing::releaseSlot), then forgets the last n of them.
  // So does a typed call boxed for a boxed kernel with the results it moved out.
  template <typename F, bool K, typename R, typename... P>
  friend struct detail::boxing::UnboxedWrapper;
  friend class KernelFunction;
  void forgetDestroyed(size_t n) noexcept { size_ -= static_cast<uint32_t>(n); }
  // Takes o's values (its heap block when it has one); o is left empty, in place.
  void takeFrom(Stack& o) noexcept {
    if (!o.inPlace()) {
      data_ = o.data_;
      size_ = o.size_;
      capacity_ = o.capacity_;
      o.data_ = o.inlineData();
      o.capacity_ = kInline;
      o.size_ = 0;
      return;
    }
    for (size_t i = 0; i < o.size_; ++i) {
      new (data_ + i) IValue(std::move(o.data_[i]));
      o.data_[i].~IValue();
    }
    size_ = o.size_;
    o.size_ = 0;
  }
  void releaseHeap() noexcept {
    if (!inPlace()) {
      ::operator delete(data_);
      data_ = inlineData();
      capacity_ = kInline;
    }
  }
  // Moves the values to a heap block of at least n values.
  void grow(size_t n);
  iterator insert(const_iterator pos, IValue* first, IValue* last, bool /*owned: moved from*/);
  [[noreturn]] static void throwOutOfRange(size_t i, size_t size);

  IValue* data_;
  uint32_t size_ = 0;
  uint32_t capacity_ = kInline;
  alignas(IValue) unsigned char inline_[kInline * sizeof(IValue)];
};

inline bool operator==(const Stack& a, const Stack& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i])) return false;
  }
  return true;
}

template <typename... Args>
inline void push(Stack& stack, Args&&... args) {
  (stack.emplace_back(std::forward<Args>(args)), ...);
}
// Removes and returns the top value. Throws Error(Index) on an empty stack.
STRATA_API IValue pop(Stack& stack);
// The i-th of the last n values (0 = the deepest of them), by reference.
STRATA_API IValue& peek(Stack& stack, size_t i, size_t n);
// Drops the last n values. Throws Error(Index) when fewer are there.
STRATA_API void drop(Stack& stack, size_t n);

}  // namespace strata
