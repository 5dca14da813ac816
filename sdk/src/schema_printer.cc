// Printing schemas the way PyTorch prints them.
//
// Note [Schema printing]
// ~~~~~~~~~~~~~~~~~~~~~~
// FunctionSchema::str() is PyTorch's operator<<(ostream&, const FunctionSchema&)
// (aten/src/ATen/core/function_schema.{h,cpp}), rule for rule:
//  - types print as written, except aliases PyTorch resolves while parsing
//    (Dimname -> str, ConstQuantizerPtr/DeviceIndex -> int, None -> NoneType);
//  - an alias annotation follows the type it annotates and precedes '?':
//    `Tensor(a)?`, `Tensor(a!)[]`, `Tensor[](a)`;
//  - `*, ` appears once, before the first keyword-only argument; `...` last;
//  - the returns are bare for a single unnamed-or-named return (unless its text
//    starts with '(', e.g. a tuple type) and parenthesized otherwise; `()` is none;
//  - defaults: strings in double quotes with C escapes; floats as "<int>." when
//    whole, else with 17 significant digits (%.17g, so 1e-05 prints
//    1.0000000000000001e-05); identifier defaults as the codes they stand for;
//    an `int[N]` default whose elements are all equal as that one element
//    (`int[2] stride=1`).
// We differ from PyTorch only where its output would not parse back, so that
// print(parse(s)) always parses to the same schema:
//  - `Tensor!` prints `Tensor($0!)` (PyTorch prints `Tensor($0! -> )`);
//  - the `int[N]` collapse needs the size hint N and exactly N elements (PyTorch also collapses `int[]`
//    defaults, printing `int[] x=1`, which does not parse), and applies to a
//    one-element `int[1]` default too (`int[1] padding=0`, as
//    native_functions.yaml writes it; PyTorch prints `[0]`);
//  - a list element's annotation stays on the element (`Tensor(a)?[]`, where
//    PyTorch prints `Tensor?(a)[]`);
//  - Device and string-list defaults print quoted, complex ones as `2.j`
//    (PyTorch: unquoted, and `0.+2.j`).
// Alias sets print sorted (PyTorch keeps them in an unordered set), and `T??`
// is `T?`.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "strata/schema.h"

namespace strata {

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      case '"': out += "\\\""; break;
      case '\a': out += "\\a"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\v': out += "\\v"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f) {
          out += c;
        } else {
          char buf[5];
          std::snprintf(buf, sizeof buf, "\\%03o", static_cast<unsigned char>(c));
          out += buf;
        }
    }
  }
  return out + "\"";
}

std::string printDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  if (std::fabs(d) < 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d))) {
    std::snprintf(buf, sizeof buf, "%lld.", static_cast<long long>(d));
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", d);
  }
  return buf;
}

std::string printValue(const IValue& v);

template <typename T, typename F>
std::string printList(const std::vector<T>& items, F&& each) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + each(items[i]);
  return s + "]";
}

std::string printValue(const IValue& v) {
  switch (v.tag()) {
    case IValue::Tag::None: return "None";
    case IValue::Tag::Int: return std::to_string(v.toInt());
    case IValue::Tag::Double: return printDouble(v.toDouble());
    case IValue::Tag::Bool: return v.toBool() ? "True" : "False";
    case IValue::Tag::String: return quoted(v.toStringRef());
    case IValue::Tag::Device: return quoted(v.toDevice().str());
    case IValue::Tag::Complex: {
      const auto c = v.toComplex();
      // An imaginary literal (`0j` too) must print as one: `0.` would parse back
      // as a float for a Scalar argument.
      if (c.real() == 0) return printDouble(c.imag()) + "j";
      if (c.imag() == 0) return printDouble(c.real());
      return printDouble(c.real()) + (c.imag() < 0 ? "-" : "+") + printDouble(std::fabs(c.imag())) + "j";
    }
    case IValue::Tag::IntList: return printList(v.toIntList(), [](int64_t x) { return std::to_string(x); });
    case IValue::Tag::DoubleList: return printList(v.toDoubleList(), printDouble);
    case IValue::Tag::BoolList:
      return printList(v.toBoolList(), [](bool b) { return std::string(b ? "True" : "False"); });
    case IValue::Tag::GenericList: return printList(v.toList(), printValue);
    default: return v.repr();
  }
}

std::string printDefault(const Argument& arg) {
  const Type& type = *arg.type;
  const IValue& v = *arg.default_value;
  if (type.kind() == TypeKind::List && type.element()->kind() == TypeKind::Int && v.isIntList() && arg.N) {
    const auto& list = v.toIntList();
    // Only a list of exactly N equal elements: `int[2] s=[6]` must not print as
    // `s=6`, which would parse back as [6, 6].
    const bool all_same = std::all_of(list.begin(), list.end(), [&](int64_t x) { return x == list[0]; });
    if (!list.empty() && all_same && list.size() == static_cast<size_t>(*arg.N)) return std::to_string(list[0]);
  }
  return printValue(v);
}

// The type with its alias annotation, recursively: see Note [Schema printing].
std::string typeWithAlias(const Type& type, const AliasInfo* alias, std::optional<int32_t> N) {
  if (type.kind() == TypeKind::Optional) return typeWithAlias(*type.element(), alias, N) + "?";
  std::string s;
  if (type.kind() == TypeKind::List) {
    const AliasInfo* inner = alias && !alias->contained.empty() ? &alias->contained[0] : nullptr;
    s = typeWithAlias(*type.element(), inner, std::nullopt) + "[" + (N ? std::to_string(*N) : "") + "]";
  } else {
    s = type.str();
  }
  if (alias && !alias->before_sets.empty()) s += alias->str();
  return s;
}

std::string printSignature(const FunctionSchema& schema) {
  std::string s = "(";
  bool seen_kwarg_only = false;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) s += ", ";
    if (args[i].kwarg_only && !seen_kwarg_only) {
      s += "*, ";
      seen_kwarg_only = true;
    }
    s += args[i].str();
  }
  if (schema.is_vararg()) s += args.empty() ? "..." : ", ...";
  s += ") -> ";

  const auto& returns = schema.returns();
  bool need_paren = !((returns.size() == 1 && !schema.is_varret()) || (returns.empty() && schema.is_varret()));
  if (returns.size() == 1 && !schema.is_varret() && returns[0].str().starts_with("(")) need_paren = true;
  if (need_paren) s += "(";
  for (size_t i = 0; i < returns.size(); ++i) s += (i ? ", " : "") + returns[i].str();
  if (schema.is_varret()) s += returns.empty() ? "..." : ", ...";
  if (need_paren) s += ")";
  return s;
}

}  // namespace

std::string Argument::str() const {
  std::string s = typeWithAlias(*type, alias_info ? &*alias_info : nullptr, N);
  if (!name.empty()) s += " " + name;
  if (default_value) s += "=" + printDefault(*this);
  return s;
}

std::string Argument::defaultStr() const { return default_value ? printDefault(*this) : std::string(); }

std::string FunctionSchema::str() const { return operator_name().str() + printSignature(*this); }
std::string FunctionSchema::signatureStr() const { return printSignature(*this); }

std::ostream& operator<<(std::ostream& os, const FunctionSchema& s) { return os << s.str(); }
std::ostream& operator<<(std::ostream& os, const Argument& a) { return os << a.str(); }

}  // namespace strata
