// Function schemas: PyTorch's schema language, parsed and printed.
//
//   aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
//
// parseSchema() reads the full language (types, `?` and `[]`/`[N]` suffixes, alias
// annotations, defaults, keyword-only `*`, `...` varargs, tuple and named returns)
// and FunctionSchema::str() prints the canonical string PyTorch prints for it, so
// parse(print(s)) == s and print is idempotent. Where PyTorch canonicalizes, so do
// we: `Dimname` prints as `str`, `Tensor!` as `Tensor($0!)`, identifier defaults as
// their codes (`MemoryFormat m=contiguous_format` -> `=0`), floats with 17
// significant digits (`1e-05` -> `1.0000000000000001e-05`), `int[2] s=[1, 1]` as
// `int[2] s=1`. See Note [Schema printing] in schema_printer.cc for the rules.
//
// Errors are SchemaError: the 1-based column of the fault and what was expected.
//
// Thread safety: Types, FunctionSchemas and the parser functions are safe to use
// from any thread; schemas are immutable values once built.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "strata/error.h"
#include "strata/export.h"
#include "strata/ivalue.h"

namespace strata {

enum class TypeKind : uint8_t {
  // Leaves.
  Tensor, Int, SymInt, Float, Complex, Bool, Str, Scalar, ScalarType, Layout, MemoryFormat,
  Device, Stream, Generator, Storage, QScheme, Quantizer, Capsule, Any, AnyClass, AnyEnum,
  NoneType,
  Var,    // a type variable such as `t` (aten:: and prim:: schemas only, as in PyTorch)
  Class,  // a custom class, `__torch__.torch.classes.ns.Name`
  // Containers.
  List, Optional, Dict, Tuple, Union, Future, Await, RRef,
  // Leaves added later, last so that the kinds above keep their values for bundles
  // built before them: PyTorch 2's symbolic float and bool (a float and a bool on the
  // stack, as SymInt is an int).
  SymFloat, SymBool,
};

class Type;
using TypePtr = std::shared_ptr<const Type>;

// A schema type. Immutable; compare with ==, which is structural.
class STRATA_API Type {
 public:
  static TypePtr get(TypeKind leaf);  // REQUIRES: a leaf kind other than Var/Class
  static TypePtr list(TypePtr element);
  static TypePtr optional(TypePtr element);
  static TypePtr dict(TypePtr key, TypePtr value);
  static TypePtr tuple(std::vector<TypePtr> elements);
  static TypePtr unionOf(std::vector<TypePtr> alternatives);  // flattened, deduplicated
  static TypePtr future(TypePtr element);
  static TypePtr await(TypePtr element);
  static TypePtr rref(TypePtr element);
  static TypePtr var(std::string name);
  static TypePtr customClass(std::string qualified_name);

  TypeKind kind() const { return kind_; }
  const std::vector<TypePtr>& contained() const { return contained_; }
  // The element of List, Optional, Future, Await, RRef.
  const TypePtr& element() const { return contained_.at(0); }
  const std::string& name() const { return name_; }  // Var and Class

  // The schema-language spelling: "Tensor", "int[]", "Tensor?", "Dict(str, t)".
  std::string str() const;
  // The type a boxed value is checked against: SymInt, ScalarType, Layout and
  // MemoryFormat are ints on the stack (PyTorch's "fake" type).
  bool isIntLike() const;
  // SymFloat and SymBool are floats and bools on the stack: the kind their values
  // have (Float, Bool), and kind() for every other type. Inline: a bundle that calls
  // it needs no symbol a 3.3 host lacks.
  TypeKind valueKind() const {
    if (kind_ == TypeKind::SymFloat) return TypeKind::Float;
    if (kind_ == TypeKind::SymBool) return TypeKind::Bool;
    return kind_;
  }

  bool operator==(const Type& o) const;

  Type(TypeKind kind, std::vector<TypePtr> contained, std::string name)
      : kind_(kind), contained_(std::move(contained)), name_(std::move(name)) {}

 private:
  TypeKind kind_;
  std::vector<TypePtr> contained_;
  std::string name_;
};

// Alias annotation: `(a)`, `(a!)`, `(a|b)`, `(a -> *)`, `!`.
struct STRATA_API AliasInfo {
  std::vector<std::string> before_sets;  // unqualified: "a", "*", "$0"
  std::vector<std::string> after_sets;
  bool is_write = false;
  // For a list argument, the annotation of its elements: `Tensor(a!)[]`.
  std::vector<AliasInfo> contained;

  bool isWildcardBefore() const;
  bool isWildcardAfter() const;
  // "(a!)", "(a -> *)"; empty for a container annotation without sets of its own.
  std::string str() const;
  bool operator==(const AliasInfo&) const = default;
};

struct STRATA_API Argument {
  std::string name;           // empty for unnamed returns
  TypePtr type;               // the type as written (SymInt stays SymInt)
  std::optional<int32_t> N;   // `int[2]`: the list size hint
  std::optional<IValue> default_value;
  bool kwarg_only = false;
  std::optional<AliasInfo> alias_info;

  bool is_write() const { return alias_info && alias_info->is_write; }
  // "Tensor(a!) out", "int[2] stride=1".
  std::string str() const;
  // The default as str() prints it ("1", "None", "[0, 1]"); "" when there is none.
  std::string defaultStr() const;
  bool operator==(const Argument& o) const;
};

struct OperatorName {
  std::string name;           // "aten::add"
  std::string overload_name;  // "Tensor", or "" for the default overload
  std::string str() const { return overload_name.empty() ? name : name + "." + overload_name; }
  bool operator==(const OperatorName&) const = default;
};

class STRATA_API FunctionSchema {
 public:
  FunctionSchema(std::string name, std::string overload_name, std::vector<Argument> arguments,
                 std::vector<Argument> returns, bool is_vararg = false, bool is_varret = false);

  const std::string& name() const { return name_.name; }  // "aten::add"
  const std::string& overload_name() const { return name_.overload_name; }
  const OperatorName& operator_name() const { return name_; }
  // "aten" for "aten::add", "" when the name has no namespace.
  std::string_view ns() const;
  const std::vector<Argument>& arguments() const { return arguments_; }
  const std::vector<Argument>& returns() const { return returns_; }
  bool is_vararg() const { return is_vararg_; }
  bool is_varret() const { return is_varret_; }
  // True when any argument is written to (an alias annotation with `!`).
  bool is_mutable() const;
  std::optional<size_t> argumentIndexWithName(std::string_view name) const;

  // The canonical string, as PyTorch prints it.
  std::string str() const;
  // The same without the name: "(Tensor x) -> Tensor" (torch.library.infer_schema's form).
  std::string signatureStr() const;

  bool operator==(const FunctionSchema& o) const;

 private:
  OperatorName name_;
  std::vector<Argument> arguments_;
  std::vector<Argument> returns_;
  bool is_vararg_;
  bool is_varret_;
};

STRATA_API std::ostream& operator<<(std::ostream& os, const FunctionSchema& s);
STRATA_API std::ostream& operator<<(std::ostream& os, const Argument& a);

// A schema string that does not parse or does not make sense. what() reads
// "invalid schema 'TEXT': column N: REASON".
class STRATA_API SchemaError : public Error {
 public:
  SchemaError(std::string_view text, size_t column, std::string reason);
  size_t column() const { return column_; }  // 1-based; text.size()+1 means "at the end"
  const std::string& reason() const { return reason_; }

 private:
  size_t column_;
  std::string reason_;
};

struct SchemaParseOptions {
  // Lower-case unknown type names become type variables (`t`, `t[]`), as in
  // PyTorch's parseSchema and torch._C.parse_schema, which allow them by default
  // (registered schemas outside aten:: use them, e.g. profiler:: ops taking
  // `Future(t)`). With false, only aten:: and prim:: schemas may use them, which
  // is what torch.library's define() enforces.
  bool allow_typevars = true;
};

// Parses a full schema. Throws SchemaError.
STRATA_API FunctionSchema parseSchema(std::string_view text, SchemaParseOptions options = {});
// Parses "ns::name.overload" alone, or a full schema. Throws SchemaError.
STRATA_API std::variant<OperatorName, FunctionSchema> parseSchemaOrName(std::string_view text,
                                                                        SchemaParseOptions options = {});
// Parses "ns::name.overload" and nothing else. Throws SchemaError.
STRATA_API OperatorName parseName(std::string_view text);

}  // namespace strata
