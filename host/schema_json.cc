#include "schema_json.h"

#include <QJsonArray>

namespace strata::host {

namespace {

const char* kindName(TypeKind k) {
  switch (k) {
    case TypeKind::List: return "List";
    case TypeKind::Optional: return "Optional";
    case TypeKind::Dict: return "Dict";
    case TypeKind::Tuple: return "Tuple";
    case TypeKind::Union: return "Union";
    case TypeKind::Future: return "Future";
    case TypeKind::Await: return "Await";
    case TypeKind::RRef: return "RRef";
    case TypeKind::Var: return "Var";
    case TypeKind::Class: return "Class";
    default: return nullptr;  // a leaf: its name is its spelling
  }
}

QJsonObject typeTree(const Type& t) {
  QJsonObject o;
  const char* kind = kindName(t.kind());
  o["kind"] = kind ? QString::fromLatin1(kind) : QString::fromStdString(t.str());
  if (!t.name().empty()) o["name"] = QString::fromStdString(t.name());
  if (!t.contained().empty()) {
    QJsonArray inner;
    for (const TypePtr& c : t.contained()) inner.append(typeTree(*c));
    o["contained"] = inner;
  }
  return o;
}

QJsonArray strings(const std::vector<std::string>& v) {
  QJsonArray a;
  for (const auto& s : v) a.append(QString::fromStdString(s));
  return a;
}

QJsonObject aliasJson(const AliasInfo& info) {
  QJsonObject o;
  o["before"] = strings(info.before_sets);
  o["after"] = strings(info.after_sets);
  o["write"] = info.is_write;
  if (!info.contained.empty()) {
    QJsonArray inner;
    for (const AliasInfo& c : info.contained) inner.append(aliasJson(c));
    o["contained"] = inner;
  }
  return o;
}

QJsonObject argumentJson(const Argument& a) {
  QJsonObject o;
  o["name"] = QString::fromStdString(a.name);
  o["type"] = QString::fromStdString(a.type->str());
  o["type_tree"] = typeTree(*a.type);
  if (a.N) o["N"] = *a.N;
  if (a.default_value) o["default"] = QString::fromStdString(a.defaultStr());
  o["kwarg_only"] = a.kwarg_only;
  if (a.alias_info) o["alias"] = aliasJson(*a.alias_info);
  return o;
}

}  // namespace

QJsonObject toJson(const FunctionSchema& schema) {
  QJsonObject o;
  o["canonical"] = QString::fromStdString(schema.str());
  o["name"] = QString::fromStdString(schema.name());
  o["overload"] = QString::fromStdString(schema.overload_name());
  QJsonArray args, rets;
  for (const Argument& a : schema.arguments()) args.append(argumentJson(a));
  for (const Argument& r : schema.returns()) rets.append(argumentJson(r));
  o["arguments"] = args;
  o["returns"] = rets;
  o["is_vararg"] = schema.is_vararg();
  o["is_varret"] = schema.is_varret();
  o["is_mutable"] = schema.is_mutable();
  return o;
}

}  // namespace strata::host
