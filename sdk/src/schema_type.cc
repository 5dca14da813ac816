// Schema types, alias annotations and the FunctionSchema value.
#include <algorithm>
#include <array>

#include "strata/schema.h"

namespace strata {

namespace {
constexpr std::array<std::pair<TypeKind, const char*>, 24> kLeafNames{{
    {TypeKind::Tensor, "Tensor"},     {TypeKind::Int, "int"},
    {TypeKind::SymInt, "SymInt"},     {TypeKind::Float, "float"},
    {TypeKind::Complex, "complex"},   {TypeKind::Bool, "bool"},
    {TypeKind::Str, "str"},           {TypeKind::Scalar, "Scalar"},
    {TypeKind::ScalarType, "ScalarType"}, {TypeKind::Layout, "Layout"},
    {TypeKind::MemoryFormat, "MemoryFormat"}, {TypeKind::Device, "Device"},
    {TypeKind::Stream, "Stream"},     {TypeKind::Generator, "Generator"},
    {TypeKind::Storage, "Storage"},   {TypeKind::QScheme, "QScheme"},
    {TypeKind::Quantizer, "Quantizer"}, {TypeKind::Capsule, "Capsule"},
    {TypeKind::Any, "Any"},           {TypeKind::AnyClass, "AnyClassType"},
    {TypeKind::AnyEnum, "AnyEnumType"}, {TypeKind::NoneType, "NoneType"},
    {TypeKind::SymFloat, "SymFloat"}, {TypeKind::SymBool, "SymBool"},
}};

std::string join(const std::vector<TypePtr>& types) {
  std::string s;
  for (size_t i = 0; i < types.size(); ++i) {
    if (i) s += ", ";
    s += types[i]->str();
  }
  return s;
}

TypePtr make(TypeKind kind, std::vector<TypePtr> contained = {}, std::string name = {}) {
  return std::make_shared<const Type>(kind, std::move(contained), std::move(name));
}
}  // namespace

TypePtr Type::get(TypeKind leaf) {
  static const std::array<TypePtr, kLeafNames.size()> singletons = [] {
    std::array<TypePtr, kLeafNames.size()> a;
    for (size_t i = 0; i < kLeafNames.size(); ++i) a[i] = make(kLeafNames[i].first);
    return a;
  }();
  for (size_t i = 0; i < kLeafNames.size(); ++i) {
    if (kLeafNames[i].first == leaf) return singletons[i];
  }
  STRATA_INTERNAL_ASSERT(false, "Type::get needs a leaf kind");
  return nullptr;
}

TypePtr Type::list(TypePtr element) { return make(TypeKind::List, {std::move(element)}); }
TypePtr Type::optional(TypePtr element) {
  // `T??` is `T?`: an optional of an optional adds nothing.
  if (element->kind() == TypeKind::Optional) return element;
  return make(TypeKind::Optional, {std::move(element)});
}
TypePtr Type::dict(TypePtr key, TypePtr value) { return make(TypeKind::Dict, {std::move(key), std::move(value)}); }
TypePtr Type::tuple(std::vector<TypePtr> elements) { return make(TypeKind::Tuple, std::move(elements)); }
TypePtr Type::future(TypePtr element) { return make(TypeKind::Future, {std::move(element)}); }
TypePtr Type::await(TypePtr element) { return make(TypeKind::Await, {std::move(element)}); }
TypePtr Type::rref(TypePtr element) { return make(TypeKind::RRef, {std::move(element)}); }
TypePtr Type::var(std::string name) { return make(TypeKind::Var, {}, std::move(name)); }
TypePtr Type::customClass(std::string qualified_name) { return make(TypeKind::Class, {}, std::move(qualified_name)); }

TypePtr Type::unionOf(std::vector<TypePtr> alternatives) {
  std::vector<TypePtr> flat;
  auto add = [&flat](const TypePtr& t) {
    if (std::none_of(flat.begin(), flat.end(), [&](const TypePtr& f) { return *f == *t; })) flat.push_back(t);
  };
  for (const TypePtr& t : alternatives) {
    if (t->kind() == TypeKind::Union) {
      for (const TypePtr& inner : t->contained()) add(inner);
    } else {
      add(t);
    }
  }
  return make(TypeKind::Union, std::move(flat));
}

std::string Type::str() const {
  switch (kind_) {
    case TypeKind::Var:
    case TypeKind::Class: return name_;
    case TypeKind::List: return element()->str() + "[]";
    case TypeKind::Optional: return element()->str() + "?";
    case TypeKind::Dict: return "Dict(" + join(contained_) + ")";
    case TypeKind::Tuple: return "(" + join(contained_) + ")";
    case TypeKind::Union: return "Union(" + join(contained_) + ")";
    case TypeKind::Future: return "Future(" + element()->str() + ")";
    case TypeKind::Await: return "Await(" + element()->str() + ")";
    case TypeKind::RRef: return "RRef(" + element()->str() + ")";
    default:
      for (const auto& [k, n] : kLeafNames) {
        if (k == kind_) return n;
      }
  }
  return "?";
}

bool Type::isIntLike() const {
  return kind_ == TypeKind::Int || kind_ == TypeKind::SymInt || kind_ == TypeKind::ScalarType ||
         kind_ == TypeKind::Layout || kind_ == TypeKind::MemoryFormat;
}

bool Type::operator==(const Type& o) const {
  if (kind_ != o.kind_ || name_ != o.name_ || contained_.size() != o.contained_.size()) return false;
  for (size_t i = 0; i < contained_.size(); ++i) {
    if (!(*contained_[i] == *o.contained_[i])) return false;
  }
  return true;
}

bool AliasInfo::isWildcardBefore() const {
  return std::find(before_sets.begin(), before_sets.end(), "*") != before_sets.end();
}
bool AliasInfo::isWildcardAfter() const {
  return std::find(after_sets.begin(), after_sets.end(), "*") != after_sets.end();
}

std::string AliasInfo::str() const {
  auto joinSets = [](const std::vector<std::string>& sets) {
    std::string s;
    for (size_t i = 0; i < sets.size(); ++i) s += (i ? "|" : "") + sets[i];
    return s;
  };
  std::string s = "(" + joinSets(before_sets);
  if (is_write) s += "!";
  if (before_sets != after_sets) s += " -> " + joinSets(after_sets);
  return s + ")";
}

bool Argument::operator==(const Argument& o) const {
  return name == o.name && *type == *o.type && N == o.N && default_value == o.default_value &&
         kwarg_only == o.kwarg_only && alias_info == o.alias_info;
}

FunctionSchema::FunctionSchema(std::string name, std::string overload_name, std::vector<Argument> arguments,
                               std::vector<Argument> returns, bool is_vararg, bool is_varret)
    : name_{std::move(name), std::move(overload_name)},
      arguments_(std::move(arguments)),
      returns_(std::move(returns)),
      is_vararg_(is_vararg),
      is_varret_(is_varret) {}

std::string_view FunctionSchema::ns() const {
  const auto pos = name_.name.find("::");
  return pos == std::string::npos ? std::string_view() : std::string_view(name_.name).substr(0, pos);
}

bool FunctionSchema::is_mutable() const {
  return std::any_of(arguments_.begin(), arguments_.end(), [](const Argument& a) {
    if (a.is_write()) return true;
    return a.alias_info && std::any_of(a.alias_info->contained.begin(), a.alias_info->contained.end(),
                                       [](const AliasInfo& c) { return c.is_write; });
  });
}

std::optional<size_t> FunctionSchema::argumentIndexWithName(std::string_view name) const {
  for (size_t i = 0; i < arguments_.size(); ++i) {
    if (arguments_[i].name == name) return i;
  }
  return std::nullopt;
}

bool FunctionSchema::operator==(const FunctionSchema& o) const {
  return name_ == o.name_ && arguments_ == o.arguments_ && returns_ == o.returns_ &&
         is_vararg_ == o.is_vararg_ && is_varret_ == o.is_varret_;
}

SchemaError::SchemaError(std::string_view text, size_t column, std::string reason)
    : Error(ErrorKind::Schema,
            detail::concat("invalid schema '", text, "': column ", column, ": ", reason)),
      column_(column),
      reason_(std::move(reason)) {}

}  // namespace strata
