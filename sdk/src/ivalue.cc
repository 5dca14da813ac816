#include "strata/ivalue.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace strata {

namespace {
template <typename T>
intrusive_ptr_target* makeList(std::vector<T> v) {
  return intrusive_ptr<ivalue::ListImpl<T>>::make(std::move(v)).release();
}
template <typename T>
const std::vector<T>& listOf(intrusive_ptr_target* p) {
  return static_cast<const ivalue::ListImpl<T>*>(p)->elements;
}
}  // namespace

IValue::IValue(std::string s) : tag_(Tag::String) {
  payload_.u.p = intrusive_ptr<ivalue::StringImpl>::make(std::move(s)).release();
}
IValue::IValue(std::vector<int64_t> v) : tag_(Tag::IntList) { payload_.u.p = makeList(std::move(v)); }
IValue::IValue(std::vector<double> v) : tag_(Tag::DoubleList) { payload_.u.p = makeList(std::move(v)); }
IValue::IValue(std::vector<bool> v) : tag_(Tag::BoolList) { payload_.u.p = makeList(std::move(v)); }
IValue::IValue(std::vector<Tensor> v) : tag_(Tag::TensorList) { payload_.u.p = makeList(std::move(v)); }
IValue::IValue(std::vector<IValue> v) : tag_(Tag::GenericList) { payload_.u.p = makeList(std::move(v)); }
IValue::IValue(std::complex<double> v) : tag_(Tag::Complex) {
  payload_.u.p = intrusive_ptr<ivalue::ComplexImpl>::make(v).release();
}
IValue::IValue(const Scalar& s) noexcept {
  switch (s.kind()) {
    case Scalar::Kind::Int: tag_ = Tag::Int; payload_.u.i = s.toLong(); break;
    case Scalar::Kind::Double: tag_ = Tag::Double; payload_.u.d = s.toDouble(); break;
    case Scalar::Kind::Bool: tag_ = Tag::Bool; payload_.u.i = s.toBool(); break;
  }
}

const char* IValue::tagName(Tag t) {
  switch (t) {
    case Tag::None: return "None";
    case Tag::Tensor: return "Tensor";
    case Tag::Int: return "int";
    case Tag::Double: return "float";
    case Tag::Bool: return "bool";
    case Tag::String: return "str";
    case Tag::IntList: return "int[]";
    case Tag::DoubleList: return "float[]";
    case Tag::BoolList: return "bool[]";
    case Tag::TensorList: return "Tensor[]";
    case Tag::GenericList: return "list";
    case Tag::ScalarType: return "ScalarType";
    case Tag::Device: return "Device";
    case Tag::Complex: return "complex";
  }
  return "unknown";
}
const char* IValue::typeName() const { return tagName(tag_); }

void IValue::throwWrongType(Tag expected) const {
  STRATA_FAIL(Type, "IValue: expected ", tagName(expected), ", got ", typeName());
}

std::optional<Tensor> IValue::toOptionalTensor() const {
  if (tag_ == Tag::None) return std::nullopt;
  STRATA_CHECK(tag_ == Tag::Tensor, Type, "IValue: expected Tensor or None, got ", typeName());
  return toTensor();
}

const std::string& IValue::toStringRef() const {
  if (tag_ != Tag::String) throwWrongType(Tag::String);
  return static_cast<const ivalue::StringImpl*>(payload_.u.p)->str;
}
const std::vector<int64_t>& IValue::toIntList() const {
  if (tag_ != Tag::IntList) throwWrongType(Tag::IntList);
  return listOf<int64_t>(payload_.u.p);
}
const std::vector<double>& IValue::toDoubleList() const {
  if (tag_ != Tag::DoubleList) throwWrongType(Tag::DoubleList);
  return listOf<double>(payload_.u.p);
}
const std::vector<bool>& IValue::toBoolList() const {
  if (tag_ != Tag::BoolList) throwWrongType(Tag::BoolList);
  return listOf<bool>(payload_.u.p);
}
const std::vector<Tensor>& IValue::toTensorList() const {
  if (tag_ != Tag::TensorList) throwWrongType(Tag::TensorList);
  return listOf<Tensor>(payload_.u.p);
}
const std::vector<IValue>& IValue::toList() const {
  if (tag_ != Tag::GenericList) throwWrongType(Tag::GenericList);
  return listOf<IValue>(payload_.u.p);
}

ScalarType IValue::toScalarType() const {
  if (tag_ == Tag::ScalarType) return static_cast<ScalarType>(payload_.u.i);
  STRATA_CHECK(tag_ == Tag::Int, Type, "IValue: expected ScalarType, got ", typeName());
  STRATA_CHECK(isValidScalarTypeCode(payload_.u.i), Value, "IValue: ", payload_.u.i,
               " is not a ScalarType code strata supports");
  return static_cast<ScalarType>(payload_.u.i);
}

Device IValue::toDevice() const {
  if (tag_ != Tag::Device) throwWrongType(Tag::Device);
  return payload_.u.device;
}

std::complex<double> IValue::toComplex() const {
  if (tag_ != Tag::Complex) throwWrongType(Tag::Complex);
  return static_cast<const ivalue::ComplexImpl*>(payload_.u.p)->value;
}

Scalar IValue::toScalar() const {
  switch (tag_) {
    case Tag::Int: return Scalar(payload_.u.i);
    case Tag::Double: return Scalar(payload_.u.d);
    case Tag::Bool: return Scalar(payload_.u.i != 0);
    default: STRATA_FAIL(Type, "IValue: expected Scalar (int, float or bool), got ", typeName());
  }
}

bool operator==(const IValue& a, const IValue& b) {
  if (a.tag_ != b.tag_) return false;
  switch (a.tag_) {
    case IValue::Tag::None: return true;
    case IValue::Tag::Int:
    case IValue::Tag::Bool:
    case IValue::Tag::ScalarType: return a.payload_.u.i == b.payload_.u.i;
    case IValue::Tag::Double: return a.payload_.u.d == b.payload_.u.d;
    case IValue::Tag::Device: return a.payload_.u.device == b.payload_.u.device;
    case IValue::Tag::Tensor:
      return a.payload_.tensor.unsafeGetTensorImpl() == b.payload_.tensor.unsafeGetTensorImpl();
    case IValue::Tag::String: return a.toStringRef() == b.toStringRef();
    case IValue::Tag::Complex: return a.toComplex() == b.toComplex();
    case IValue::Tag::IntList: return a.toIntList() == b.toIntList();
    case IValue::Tag::DoubleList: return a.toDoubleList() == b.toDoubleList();
    case IValue::Tag::BoolList: return a.toBoolList() == b.toBoolList();
    case IValue::Tag::GenericList: return a.toList() == b.toList();
    case IValue::Tag::TensorList: {
      const auto& x = a.toTensorList();
      const auto& y = b.toTensorList();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i].unsafeGetTensorImpl() != y[i].unsafeGetTensorImpl()) return false;
      }
      return true;
    }
  }
  return false;
}

namespace {
std::string reprDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == std::trunc(d) && std::fabs(d) < 1e16) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f.", d);
    return buf;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

template <typename T, typename F>
std::string reprList(const std::vector<T>& v, F&& each) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += each(v[i]);
  }
  return s + "]";
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string IValue::repr() const {
  switch (tag_) {
    case Tag::None: return "None";
    case Tag::Tensor: return toTensor().str();
    case Tag::Int: return std::to_string(payload_.u.i);
    case Tag::Double: return reprDouble(payload_.u.d);
    case Tag::Bool: return payload_.u.i ? "True" : "False";
    case Tag::String: return quoted(toStringRef());
    case Tag::ScalarType: return toString(static_cast<ScalarType>(payload_.u.i));
    case Tag::Device: return payload_.u.device.str();
    case Tag::Complex: {
      const auto c = toComplex();
      return "(" + reprDouble(c.real()) + (c.imag() < 0 ? "-" : "+") + reprDouble(std::fabs(c.imag())) + "j)";
    }
    case Tag::IntList: return reprList(toIntList(), [](int64_t x) { return std::to_string(x); });
    case Tag::DoubleList: return reprList(toDoubleList(), reprDouble);
    case Tag::BoolList: return reprList(toBoolList(), [](bool x) { return std::string(x ? "True" : "False"); });
    case Tag::TensorList: return reprList(toTensorList(), [](const Tensor& t) { return t.str(); });
    case Tag::GenericList: return reprList(toList(), [](const IValue& v) { return v.repr(); });
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, const IValue& v) { return os << v.repr(); }

// ---------------------------------------------------------------------------
// Stack (Note [Stacks in place] in strata/ivalue.h).

void Stack::grow(size_t n) {
  if (n > max_size()) {
    STRATA_FAIL(Index, "a Stack of ", n, " values: more than the ", max_size(), " values a Stack holds");
  }
  auto* block = static_cast<IValue*>(::operator new(n * sizeof(IValue)));
  for (size_t i = 0; i < size_; ++i) {
    new (block + i) IValue(std::move(data_[i]));
    data_[i].~IValue();
  }
  releaseHeap();
  data_ = block;
  capacity_ = static_cast<uint32_t>(n);
}

Stack::iterator Stack::insert(const_iterator pos, IValue* first, IValue* last, bool) {
  const size_t at = static_cast<size_t>(pos - data_);
  const size_t n = static_cast<size_t>(last - first);
  if (at > size_) {
    STRATA_FAIL(Index, "Stack::insert at position ", at, ": past the end of a Stack of ", size_, " values");
  }
  if (n == 0) return data_ + at;
  if (size_ + n > capacity_) grow(std::max(growth(size_ + n), static_cast<size_t>(size_) + n));
  // Shift the tail up by n (move-construct into the new end, move-assign the rest).
  const size_t old = size_;
  for (size_t i = old; i > at; --i) {
    const size_t from = i - 1, to = from + n;
    if (to >= old) new (data_ + to) IValue(std::move(data_[from]));
    else data_[to] = std::move(data_[from]);
  }
  for (size_t k = 0; k < n; ++k) {
    const size_t to = at + k;
    if (to >= old) new (data_ + to) IValue(std::move(first[k]));
    else data_[to] = std::move(first[k]);
  }
  size_ = static_cast<uint32_t>(old + n);
  return data_ + at;
}

void Stack::throwOutOfRange(size_t i, size_t size) {
  STRATA_FAIL(Index, "Stack::at(", i, "): out of range for a Stack of ", size, " values");
}

IValue pop(Stack& stack) {
  STRATA_CHECK(!stack.empty(), Index, "pop: the stack is empty");
  IValue v = std::move(stack.back());
  stack.pop_back();
  return v;
}

IValue& peek(Stack& stack, size_t i, size_t n) {
  STRATA_CHECK(n <= stack.size() && i < n, Index, "peek(", i, ", ", n, "): the stack holds ", stack.size(),
               " values");
  return stack[stack.size() - n + i];
}

void drop(Stack& stack, size_t n) {
  STRATA_CHECK(n <= stack.size(), Index, "drop(", n, "): the stack holds ", stack.size(), " values");
  stack.erase(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Int: return os << s.toLong();
    case Scalar::Kind::Double: return os << reprDouble(s.toDouble());
    case Scalar::Kind::Bool: return os << (s.toBool() ? "True" : "False");
  }
  return os;
}

}  // namespace strata
