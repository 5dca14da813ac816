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

#include <complex>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
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

// The argument stack of a boxed call: arguments in schema order on entry,
// results in schema order on return.
using Stack = std::vector<IValue>;

// Note [Pooled stacks]
// ~~~~~~~~~~~~~~~~~~~~
// A typed call that reaches a boxed kernel (a dispatch mode, an autocast or vmap
// rule, any boxed fallback) boxes its arguments into a Stack: a malloc and a free
// per call, about a sixth of what one boxed layer costs. PooledStack lends it a
// Stack kept by the thread (its capacity kept; at most 8 per thread, none above 64
// values), empty on loan and cleared on return, so nested calls each get their own.
// A kernel may swap the Stack's contents with another vector: what comes back is
// pooled all the same.
namespace detail {
STRATA_API Stack take_pooled_stack() noexcept;
STRATA_API void return_pooled_stack(Stack&& stack) noexcept;
}  // namespace detail

class PooledStack {
 public:
  PooledStack() noexcept : stack_(detail::take_pooled_stack()) {}
  ~PooledStack() { detail::return_pooled_stack(std::move(stack_)); }
  PooledStack(const PooledStack&) = delete;
  PooledStack& operator=(const PooledStack&) = delete;
  Stack& operator*() noexcept { return stack_; }
  Stack* operator->() noexcept { return &stack_; }

 private:
  Stack stack_;
};

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
