// The schema-language parser: a lexer plus recursive descent over PyTorch's
// grammar (torch/csrc/jit/frontend/function_schema_parser.cpp and
// schema_type_parser.cpp), with errors that name the column and what was expected.
//
//   decl     := name [ '(' args ')' '->' returns ]
//   name     := IDENT [ '::' IDENT ] [ '.' IDENT ]
//   args     := [ arg_item (',' arg_item)* ]      arg_item := '*' | '...' | argument
//   returns  := '...' | '(' [ ret (',' ret)* ] ')' | argument
//   argument := type [ '[' NUMBER ']' [alias] ['?'] ] IDENT [ '=' default ]
//   type     := ( '(' types ')' | 'Tensor' alias? | 'Dict' '(' type ',' type ')' alias?
//              | 'Union' '(' types ')' alias? | 'Future'|'Await'|'RRef' '(' type ')'
//              | '__torch__.torch.classes.' IDENT '.' IDENT | BASE alias? ) ( '[]' alias? | '?' )*
//   alias    := '(' sets ['!'] ['->' sets] ')' | '!'
#include <algorithm>
#include <optional>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>

#include "strata/schema.h"

namespace strata {

namespace {

enum class Tok : uint8_t { Ident, Number, String, Arrow, Dots, Char, End };

struct Token {
  Tok kind = Tok::End;
  char ch = 0;         // for Tok::Char
  size_t begin = 0;    // byte offsets into the text
  size_t end = 0;
  std::string text;    // the spelling; for strings, the decoded value
  bool keyword = false;  // an Ident that PyTorch's lexer reserves (see isKeyword)
};

// The identifier-like tokens of PyTorch's JIT lexer (torch/csrc/jit/frontend/
// lexer.h). They are never names: `Tensor in` or `aten::for` do not parse there,
// so they do not parse here. `from` and `to` are not among them.
bool isKeyword(std::string_view s) {
  static constexpr std::string_view kKeywords[] = {
      "def", "if", "else", "elif", "while", "return", "is", "True", "False", "None", "and", "or", "not",
      "global", "for", "in", "raise", "assert", "break", "continue", "del", "pass", "class", "import",
      "with", "as", "Ellipsis", "NoneType"};
  for (std::string_view k : kKeywords) {
    if (k == s) return true;
  }
  return false;
}

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isIdentChar(char c) { return isIdentStart(c) || (c >= '0' && c <= '9'); }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

// The largest N whose `T[N] x=v` default is repeated into a list, and the most
// values one schema's repeated defaults may hold together (see parseListDefault).
constexpr int32_t kMaxRepeatedDefault = 1 << 16;

class Parser {
 public:
  Parser(std::string_view text, SchemaParseOptions options) : text_(text), options_(options) {
    // PyTorch lets aten:: and prim:: schemas use type variables whatever the caller says.
    if (text.starts_with("aten::") || text.starts_with("prim::")) options_.allow_typevars = true;
  }

  std::variant<OperatorName, FunctionSchema> parseDeclaration();
  // An operator name and nothing after it.
  OperatorName parseNameAlone();

 private:
  // --- Lexing ---------------------------------------------------------------
  Token lex();
  void lexNumber(Token& t);
  void lexString(Token& t);

  const Token& peek(size_t k = 0) {
    while (buffered_.size() <= k) buffered_.push_back(lex());
    return buffered_[k];
  }
  const Token& cur() { return peek(0); }
  Token next() {
    Token t = peek(0);
    buffered_.pop_front();
    return t;
  }
  bool isChar(char c) { return cur().kind == Tok::Char && cur().ch == c; }
  bool nextIfChar(char c) {
    if (!isChar(c)) return false;
    next();
    return true;
  }
  bool isIdent(std::string_view s) { return cur().kind == Tok::Ident && cur().text == s; }

  std::string describe(const Token& t) const {
    if (t.kind == Tok::End) return name_alone_ ? "the end of the name" : "the end of the schema";
    return "'" + detail::shortened(text_.substr(t.begin, t.end - t.begin)) + "'";
  }
  [[noreturn]] void failAt(size_t offset, const std::string& reason) const {
    throw SchemaError(text_, offset + 1, reason);
  }
  [[noreturn]] void fail(const Token& at, const std::string& expected) {
    failAt(at.begin, "expected " + expected + ", got " + describe(at));
  }
  void expectChar(char c, const std::string& what) {
    if (!nextIfChar(c)) fail(cur(), what);
  }
  // A name: an identifier that is neither a keyword nor a fresh alias set ($0).
  bool isName(const Token& t) const { return t.kind == Tok::Ident && !t.keyword && t.text[0] != '$'; }
  Token expectIdent(const std::string& what) {
    if (!isName(cur())) {
      if (cur().keyword) failAt(cur().begin, "expected " + what + ", got the keyword '" + cur().text + "'");
      fail(cur(), what);
    }
    return next();
  }

  // --- Grammar --------------------------------------------------------------
  OperatorName parseOperatorName();
  Argument parseArgument(bool is_return, bool kwarg_only, size_t* column);
  std::pair<TypePtr, std::optional<AliasInfo>> parseType();
  TypePtr parseBaseType();
  std::optional<AliasInfo> parseAliasAnnotation();
  void wrapInList(TypePtr& type, std::optional<AliasInfo>& alias);
  void parseAliasSets(std::vector<std::string>& sets);
  IValue parseDefault(const TypePtr& type, std::optional<int32_t> N);
  IValue parseConstant(const TypePtr& type, bool optional_form);
  IValue parseListDefault(const TypePtr& list_type, std::optional<int32_t> N);
  IValue parseDeviceDefault();
  void checkSchema(const std::vector<Argument>& args, const std::vector<size_t>& columns, bool is_vararg);

  // Types nest by recursion; a limit keeps hostile input from overflowing the
  // stack. Real schemas nest three deep at most (`Dict(str, t)[]?`).
  static constexpr int kMaxTypeDepth = 64;

  std::string_view text_;
  SchemaParseOptions options_;
  bool name_alone_ = false;  // reading a name alone (parseNameAlone), not a schema
  int type_depth_ = 0;
  size_t pos_ = 0;
  std::deque<Token> buffered_;
  int next_fresh_alias_ = 0;
  int64_t repeated_budget_ = kMaxRepeatedDefault;  // values repeated defaults may still add
};

// --- Lexer -----------------------------------------------------------------

Token Parser::lex() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c == '#') {  // a comment runs to the end of the line, as in PyTorch's lexer
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else if (c != '\0' && std::strchr(" \t\r\n\f\v", c) != nullptr) {
      ++pos_;
    } else {
      break;
    }
  }
  Token t;
  t.begin = pos_;
  if (pos_ >= text_.size()) {
    t.kind = Tok::End;
    t.end = pos_;
    return t;
  }
  const char c = text_[pos_];
  if (isIdentStart(c) || (c == '$' && pos_ + 1 < text_.size() && isIdentChar(text_[pos_ + 1]))) {
    // '$' names are the fresh alias sets `Tensor!` prints as (`Tensor($0!)`).
    size_t e = pos_ + 1;
    while (e < text_.size() && isIdentChar(text_[e])) ++e;
    t.kind = Tok::Ident;
    t.text = std::string(text_.substr(pos_, e - pos_));
    t.keyword = isKeyword(t.text);
    pos_ = t.end = e;
    return t;
  }
  if (isDigit(c) || (c == '.' && pos_ + 1 < text_.size() && isDigit(text_[pos_ + 1]))) {
    lexNumber(t);
    return t;
  }
  if (c == '"' || c == '\'') {
    lexString(t);
    return t;
  }
  if (text_.substr(pos_).starts_with("->")) {
    t.kind = Tok::Arrow;
    pos_ = t.end = pos_ + 2;
    return t;
  }
  if (text_.substr(pos_).starts_with("...")) {
    t.kind = Tok::Dots;
    pos_ = t.end = pos_ + 3;
    return t;
  }
  t.kind = Tok::Char;
  t.ch = c;
  size_t e = pos_ + 1;
  // A character beyond ASCII is one token of all its bytes, so an error shows it whole.
  if (static_cast<unsigned char>(c) >= 0xC0) {
    while (e < text_.size() && e - pos_ < 4 && (static_cast<unsigned char>(text_[e]) & 0xC0) == 0x80) ++e;
  }
  pos_ = t.end = e;
  return t;
}

void Parser::lexNumber(Token& t) {
  size_t e = pos_;
  while (e < text_.size() && isDigit(text_[e])) ++e;
  if (e < text_.size() && text_[e] == '.' && !text_.substr(e).starts_with("...")) {
    ++e;
    while (e < text_.size() && isDigit(text_[e])) ++e;
  }
  if (e < text_.size() && (text_[e] == 'e' || text_[e] == 'E')) {
    size_t x = e + 1;
    if (x < text_.size() && (text_[x] == '+' || text_[x] == '-')) ++x;
    if (x < text_.size() && isDigit(text_[x])) {
      e = x;
      while (e < text_.size() && isDigit(text_[e])) ++e;
    }
  }
  if (e < text_.size() && text_[e] == 'j') ++e;  // imaginary literal
  if (e < text_.size() && isIdentChar(text_[e])) {
    failAt(pos_, "malformed number '" + std::string(text_.substr(pos_, e + 1 - pos_)) + "'");
  }
  t.kind = Tok::Number;
  t.text = std::string(text_.substr(pos_, e - pos_));
  pos_ = t.end = e;
}

void Parser::lexString(Token& t) {
  const char quote = text_[pos_];
  size_t i = pos_ + 1;
  std::string value;
  while (true) {
    if (i >= text_.size()) failAt(pos_, "unterminated string literal");
    const char c = text_[i];
    if (c == quote) break;
    if (c == '\n') failAt(pos_, "unterminated string literal (a newline before the closing quote)");
    if (c != '\\') {
      value += c;
      ++i;
      continue;
    }
    if (i + 1 >= text_.size()) failAt(pos_, "unterminated string literal");
    const char esc = text_[i + 1];
    i += 2;
    switch (esc) {
      case 'n': value += '\n'; break;
      case 't': value += '\t'; break;
      case 'r': value += '\r'; break;
      case 'a': value += '\a'; break;
      case 'b': value += '\b'; break;
      case 'f': value += '\f'; break;
      case 'v': value += '\v'; break;
      case '\\': value += '\\'; break;
      case '\'': value += '\''; break;
      case '"': value += '"'; break;
      default:
        if (esc >= '0' && esc <= '7') {  // up to three octal digits
          int v = esc - '0';
          for (int k = 0; k < 2 && i < text_.size() && text_[i] >= '0' && text_[i] <= '7'; ++k, ++i) {
            v = v * 8 + (text_[i] - '0');
          }
          if (v > 255) failAt(i - 4, "octal escape out of range");
          value += static_cast<char>(v);
          break;
        }
        failAt(i - 2, std::string("unknown escape sequence '\\") + esc + "' in string literal");
    }
  }
  t.kind = Tok::String;
  t.text = std::move(value);
  pos_ = t.end = i + 1;
}

// --- Declarations ----------------------------------------------------------

OperatorName Parser::parseOperatorName() {
  std::string name = expectIdent("an operator name").text;
  if (isChar(':')) {
    next();
    expectChar(':', "'::' between the namespace and the operator name");
    name += "::" + expectIdent("an operator name after '::'").text;
  }
  std::string overload;
  if (nextIfChar('.')) {
    const Token tok = expectIdent("an overload name after '.'");
    if (tok.text == "default") failAt(tok.begin, "'default' is not a legal overload name (it names the overload \"\")");
    if (tok.text.starts_with("__")) failAt(tok.begin, "overload names may not start with '__'");
    overload = tok.text;
  }
  return {std::move(name), std::move(overload)};
}

OperatorName Parser::parseNameAlone() {
  name_alone_ = true;
  OperatorName name = parseOperatorName();
  if (cur().kind == Tok::End) return name;
  if (isChar('(')) failAt(cur().begin, "expected an operator name alone, got a schema");
  if (isChar('.') && !name.overload_name.empty()) {
    failAt(cur().begin, "an overload name has no '.' in it");
  }
  failAt(cur().begin, describe(cur()) + " after the operator name");
}

std::variant<OperatorName, FunctionSchema> Parser::parseDeclaration() {
  OperatorName name = parseOperatorName();
  if (cur().kind == Tok::End) return name;
  if (!isChar('(')) fail(cur(), "'(' to start the argument list");
  next();

  std::vector<Argument> arguments;
  std::vector<size_t> columns;
  bool kwarg_only = false;
  bool is_vararg = false;
  if (!isChar(')')) {
    do {
      if (is_vararg) failAt(cur().begin, "'...' must be the last element of the argument list");
      if (nextIfChar('*')) {
        kwarg_only = true;
      } else if (cur().kind == Tok::Dots) {
        next();
        is_vararg = true;
      } else {
        size_t column = 0;
        arguments.push_back(parseArgument(/*is_return=*/false, kwarg_only, &column));
        columns.push_back(column);
      }
    } while (nextIfChar(','));
  }
  expectChar(')', "',' or ')' in the argument list");
  checkSchema(arguments, columns, is_vararg);

  if (cur().kind != Tok::Arrow) fail(cur(), "'->' after the argument list");
  next();
  std::vector<Argument> returns;
  bool is_varret = false;
  if (cur().kind == Tok::Dots) {
    next();
    is_varret = true;
  } else if (isChar('(')) {
    next();
    if (!isChar(')')) {
      do {
        if (is_varret) failAt(cur().begin, "'...' must be the last element of the return list");
        if (cur().kind == Tok::Dots) {
          next();
          is_varret = true;
        } else {
          returns.push_back(parseArgument(/*is_return=*/true, false, nullptr));
        }
      } while (nextIfChar(','));
    }
    expectChar(')', "',' or ')' in the return list");
  } else {
    returns.push_back(parseArgument(/*is_return=*/true, false, nullptr));
  }
  if (cur().kind != Tok::End) fail(cur(), "the end of the schema");
  return FunctionSchema(std::move(name.name), std::move(name.overload_name), std::move(arguments),
                        std::move(returns), is_vararg, is_varret);
}

void Parser::checkSchema(const std::vector<Argument>& args, const std::vector<size_t>& columns, bool is_vararg) {
  bool seen_default = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const Argument& a = args[i];
    // Repeated names are allowed, as in PyTorch: a registered schema has one
    // (static_runtime::clamp_nan_to_num takes `posinf` twice).
    if (is_vararg && a.default_value) {
      failAt(columns[i], "schemas with varargs ('...') cannot have default values ('" + a.name + "')");
    }
    if (a.default_value) {
      seen_default = true;
    } else if (seen_default && !a.kwarg_only && a.type->kind() != TypeKind::List) {
      // Lists are exempt: PyTorch has always serialized broadcasting lists so.
      failAt(columns[i], "non-default argument '" + a.name + "' follows a default argument");
    }
  }
}

Argument Parser::parseArgument(bool is_return, bool kwarg_only, size_t* column) {
  if (column) *column = cur().begin;
  auto [type, alias] = parseType();
  std::optional<int32_t> N;
  if (isChar('[')) {
    next();
    const Token& num = cur();
    int32_t n = -1;
    const char* first = num.text.data();
    const char* last = first + num.text.size();
    if (num.kind != Tok::Number || std::from_chars(first, last, n).ptr != last || n < 0) {
      fail(num, "a list size (a non-negative integer) or ']'");
    }
    next();
    N = n;
    expectChar(']', "']' after the list size");
    wrapInList(type, alias);
    if (nextIfChar('?')) type = Type::optional(std::move(type));
  }
  Argument arg;
  arg.type = std::move(type);
  arg.N = N;
  arg.alias_info = std::move(alias);
  if (is_return) {
    if (isName(cur())) arg.name = next().text;
    return arg;
  }
  arg.name = expectIdent("an argument name after the type '" + arg.type->str() + "'").text;
  arg.kwarg_only = kwarg_only;
  if (nextIfChar('=')) arg.default_value = parseDefault(arg.type, N);
  return arg;
}

// --- Types -----------------------------------------------------------------

TypePtr Parser::parseBaseType() {
  static const std::pair<std::string_view, TypeKind> kBase[] = {
      {"Generator", TypeKind::Generator}, {"Dimname", TypeKind::Str},
      {"ScalarType", TypeKind::ScalarType}, {"Layout", TypeKind::Layout},
      {"MemoryFormat", TypeKind::MemoryFormat}, {"Storage", TypeKind::Storage},
      {"QScheme", TypeKind::QScheme}, {"Quantizer", TypeKind::Quantizer},
      {"ConstQuantizerPtr", TypeKind::Int}, {"Device", TypeKind::Device},
      {"DeviceIndex", TypeKind::Int}, {"Stream", TypeKind::Stream},
      {"Scalar", TypeKind::Scalar}, {"str", TypeKind::Str},
      {"float", TypeKind::Float}, {"complex", TypeKind::Complex},
      {"int", TypeKind::Int}, {"SymInt", TypeKind::SymInt},
      {"SymFloat", TypeKind::SymFloat}, {"SymBool", TypeKind::SymBool},
      {"bool", TypeKind::Bool}, {"None", TypeKind::NoneType},
      {"NoneType", TypeKind::NoneType}, {"Capsule", TypeKind::Capsule},
      {"Any", TypeKind::Any}, {"AnyClassType", TypeKind::AnyClass},
      {"AnyEnumType", TypeKind::AnyEnum},
  };
  if (!isName(cur()) && !isIdent("None") && !isIdent("NoneType")) {
    if (cur().keyword) failAt(cur().begin, "expected a type, got the keyword '" + cur().text + "'");
    fail(cur(), "a type");
  }
  const Token tok = next();
  for (const auto& [name, kind] : kBase) {
    if (name == tok.text) return Type::get(kind);
  }
  if (options_.allow_typevars && tok.text[0] >= 'a' && tok.text[0] <= 'z') return Type::var(tok.text);
  if (tok.text == "double") failAt(tok.begin, "unknown type 'double': use 'float' (a C++ double) in schemas");
  if (tok.text == "int64_t") failAt(tok.begin, "unknown type 'int64_t': use 'int' (a C++ int64_t) or 'SymInt'");
  failAt(tok.begin, "unknown type '" + tok.text +
                        "'; common types are Tensor, SymInt, int, float, bool, str, Scalar, ScalarType, Device");
}

std::pair<TypePtr, std::optional<AliasInfo>> Parser::parseType() {
  if (type_depth_ == kMaxTypeDepth) {
    failAt(cur().begin, "types nest more than " + std::to_string(kMaxTypeDepth) + " levels deep");
  }
  struct DepthGuard {
    int& depth;
    explicit DepthGuard(int& d) : depth(++d) {}
    ~DepthGuard() { --depth; }
  } guard(type_depth_);
  TypePtr type;
  std::optional<AliasInfo> alias;
  auto parseParenthesized = [this](const char* what) {
    expectChar('(', std::string("'(' after '") + what + "'");
    TypePtr inner = parseType().first;
    expectChar(')', std::string("')' to close '") + what + "('");
    return inner;
  };
  if (isChar('(')) {
    next();
    std::vector<TypePtr> elements;
    if (!isChar(')')) {
      do {
        elements.push_back(parseType().first);
      } while (nextIfChar(','));
    }
    expectChar(')', "',' or ')' in the tuple type");
    type = Type::tuple(std::move(elements));
  } else if (isIdent("Future") && peek(1).kind == Tok::Char && peek(1).ch == '(') {
    next();
    type = Type::future(parseParenthesized("Future"));
  } else if (isIdent("Await") && peek(1).kind == Tok::Char && peek(1).ch == '(') {
    next();
    type = Type::await(parseParenthesized("Await"));
  } else if (isIdent("RRef") && peek(1).kind == Tok::Char && peek(1).ch == '(') {
    next();
    type = Type::rref(parseParenthesized("RRef"));
  } else if (isIdent("Tensor")) {
    next();
    type = Type::get(TypeKind::Tensor);
    alias = parseAliasAnnotation();
  } else if (isIdent("Dict")) {
    next();
    expectChar('(', "'(' after 'Dict'");
    const size_t key_offset = cur().begin;
    TypePtr key = parseType().first;
    switch (key->kind()) {
      case TypeKind::Int: case TypeKind::Bool: case TypeKind::Float: case TypeKind::Complex:
      case TypeKind::Str: case TypeKind::Tensor: case TypeKind::Device: case TypeKind::Any:
        break;
      default:
        failAt(key_offset, "'" + key->str() + "' cannot be a Dict key; keys are int, float, complex, bool, "
                           "str, Tensor, Device or Any");
    }
    expectChar(',', "',' between the key and value types of 'Dict'");
    TypePtr value = parseType().first;
    expectChar(')', "')' to close 'Dict('");
    alias = parseAliasAnnotation();
    type = Type::dict(std::move(key), std::move(value));
  } else if (isIdent("Union")) {
    next();
    expectChar('(', "'(' after 'Union'");
    std::vector<TypePtr> alternatives;
    do {
      alternatives.push_back(parseType().first);
    } while (nextIfChar(','));
    expectChar(')', "',' or ')' in 'Union('");
    alias = parseAliasAnnotation();
    type = Type::unionOf(std::move(alternatives));
  } else if (isIdent("__torch__")) {
    next();
    std::string qualified = "__torch__";
    for (const char* part : {"torch", "classes"}) {
      expectChar('.', "'.' in a custom class name (__torch__.torch.classes.NS.NAME)");
      const Token t = expectIdent(std::string("'") + part + "'");
      if (t.text != part) failAt(t.begin, std::string("expected '") + part + "' in a custom class name, got '" + t.text + "'");
      qualified += "." + t.text;
    }
    for (const char* part : {"a namespace", "a class name"}) {
      expectChar('.', "'.' in a custom class name (__torch__.torch.classes.NS.NAME)");
      qualified += "." + expectIdent(part).text;
    }
    type = Type::customClass(std::move(qualified));
  } else {
    type = parseBaseType();
    alias = parseAliasAnnotation();
  }
  // Each `[]` and `?` nests the type one level deeper, under the same limit as
  // parentheses: types are destroyed, compared and printed recursively.
  int suffixes = 0;
  while (true) {
    const bool list = isChar('[') && peek(1).kind == Tok::Char && peek(1).ch == ']';
    if (!list && !isChar('?')) break;
    if (type_depth_ + ++suffixes > kMaxTypeDepth) {
      failAt(cur().begin, "types nest more than " + std::to_string(kMaxTypeDepth) + " levels deep");
    }
    if (list) {
      next();
      next();
      wrapInList(type, alias);
    } else {
      next();
      type = Type::optional(std::move(type));
    }
  }
  return {std::move(type), std::move(alias)};
}

// After `[]` or `[N]`: the type becomes a list, an annotation after the brackets
// is the list's own, and the element's annotation nests inside it
// (`Tensor(a!)[]`), as PyTorch's parser builds it.
void Parser::wrapInList(TypePtr& type, std::optional<AliasInfo>& alias) {
  type = Type::list(std::move(type));
  std::optional<AliasInfo> container = parseAliasAnnotation();
  if (alias) {
    if (!container) {
      container = AliasInfo{};
      container->is_write = alias->is_write;
    }
    container->contained.push_back(std::move(*alias));
  }
  alias = std::move(container);
}

void Parser::parseAliasSets(std::vector<std::string>& sets) {
  bool wildcard = std::find(sets.begin(), sets.end(), "*") != sets.end();  // once, not per name
  do {
    if (nextIfChar('*')) {
      sets.emplace_back("*");
      wildcard = true;
    } else {
      if (cur().kind != Tok::Ident || cur().keyword) fail(cur(), "an alias set name (like 'a') or '*'");
      std::string name = next().text;
      // After a wildcard, further sets add nothing (PyTorch drops them too).
      if (!wildcard) sets.push_back(std::move(name));
    }
  } while (nextIfChar('|'));
  // PyTorch keeps alias sets in a set: `(b|a)` and `(a|b)` are one annotation,
  // and `(a|a)` is `(a)`. Sorted order makes the printed form canonical, with a
  // wildcard last: sets written after one are dropped, so `(*|a)` would not
  // parse back to `(a|*)`.
  std::sort(sets.begin(), sets.end(), [](const std::string& x, const std::string& y) {
    return std::make_pair(x == "*", x) < std::make_pair(y == "*", y);
  });
  sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
}

std::optional<AliasInfo> Parser::parseAliasAnnotation() {
  AliasInfo info;
  if (nextIfChar('(')) {
    parseAliasSets(info.before_sets);
    if (nextIfChar('!')) info.is_write = true;
    if (cur().kind == Tok::Arrow) {
      next();
      parseAliasSets(info.after_sets);
    } else {
      info.after_sets = info.before_sets;
    }
    expectChar(')', "')' to close the alias annotation");
    return info;
  }
  if (nextIfChar('!')) {
    info.before_sets.push_back("$" + std::to_string(next_fresh_alias_++));
    info.after_sets = info.before_sets;
    info.is_write = true;
    return info;
  }
  return std::nullopt;
}

// --- Defaults --------------------------------------------------------------

// The kind a boxed value of this type has: SymInt, ScalarType, Layout and
// MemoryFormat travel as ints.
TypeKind fakeKind(const Type& t) { return t.isIntLike() ? TypeKind::Int : t.valueKind(); }

std::optional<int64_t> identifierDefault(std::string_view name, const Type& type) {
  // PyTorch's names (float/complex/long are dtype codes kept for compatibility),
  // plus the other enum values of the same families.
  static const std::pair<std::string_view, int64_t> kNames[] = {
      {"float", 6}, {"complex", 9}, {"long", 4},                 // ScalarType
      {"strided", 0}, {"sparse_coo", 1},                         // Layout
      {"Mean", 1}, {"Sum", 2},                                   // Reduction
      {"contiguous_format", 0}, {"preserve_format", 1},          // MemoryFormat
      {"channels_last", 2}, {"channels_last_3d", 3},
  };
  for (const auto& [n, v] : kNames) {
    if (n == name) return v;
  }
  if (type.kind() == TypeKind::ScalarType) {
    if (auto st = scalarTypeFromString(name)) return static_cast<int64_t>(*st);
  }
  return std::nullopt;
}

IValue Parser::parseDefault(const TypePtr& type, std::optional<int32_t> N) {
  const Token start = cur();
  switch (fakeKind(*type)) {
    case TypeKind::Tensor:
    case TypeKind::Generator:
    case TypeKind::Quantizer:
      if (!isIdent("None")) fail(cur(), "None (the only default a " + type->str() + " argument can have)");
      next();
      return IValue();
    case TypeKind::Optional: {
      if (isIdent("None")) {
        next();
        return IValue();
      }
      const TypePtr& element = type->element();
      switch (fakeKind(*element)) {
        case TypeKind::List: return parseListDefault(element, N);
        case TypeKind::Device: return parseDeviceDefault();
        case TypeKind::Int: case TypeKind::Float: case TypeKind::Bool: case TypeKind::Str:
        case TypeKind::Scalar: case TypeKind::Complex:
          return parseConstant(element, /*optional_form=*/true);
        default:
          fail(cur(), "None (the only default a " + type->str() + " argument can have)");
      }
    }
    case TypeKind::Device: return parseDeviceDefault();
    case TypeKind::List:
      if (isIdent("None")) {
        next();
        return IValue();
      }
      return parseListDefault(type, N);
    case TypeKind::Int: case TypeKind::Float: case TypeKind::Bool: case TypeKind::Str:
    case TypeKind::Scalar: case TypeKind::Complex:
      return parseConstant(type, /*optional_form=*/false);
    default:
      failAt(start.begin, "default values are not supported for arguments of type '" + type->str() + "'");
  }
}

IValue Parser::parseConstant(const TypePtr& type, bool optional_form) {
  const TypeKind k = fakeKind(*type);
  const Token tok = cur();
  // `literal_end` is where the offending literal ends (a negative number spans
  // two tokens).
  auto mismatch = [&](const char* got, size_t literal_end) {
    failAt(tok.begin, "expected a default of type " + type->str() + ", got " + got + " ('" +
                          std::string(text_.substr(tok.begin, literal_end - tok.begin)) + "')");
  };
  if (tok.kind == Tok::Ident) {
    next();
    if (tok.text == "None") return IValue();
    if (tok.text == "True" || tok.text == "False") {
      if (k != TypeKind::Bool && k != TypeKind::Scalar) mismatch("a bool", tok.end);
      return IValue(tok.text == "True");
    }
    if (k != TypeKind::Int) mismatch("an identifier", tok.end);
    if (auto v = identifierDefault(tok.text, *type)) return IValue(*v);
    failAt(tok.begin, "invalid default value '" + tok.text + "' for a " + type->str() + " argument");
  }
  if (tok.kind == Tok::String) {
    next();
    if (k != TypeKind::Str) mismatch("a string", tok.end);
    return IValue(tok.text);
  }
  const bool negative = nextIfChar('-');
  if (cur().kind != Tok::Number) fail(cur(), "a default value for the " + type->str() + " argument");
  const Token num = next();
  const std::string n = (negative ? "-" : "") + num.text;
  if (k == TypeKind::Bool || k == TypeKind::Str) mismatch("a number", num.end);
  const bool imaginary = n.back() == 'j';
  const bool float_form = n.find_first_of(".eE") != std::string::npos;
  auto toDouble = [&](std::string_view s) {
    double v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
      failAt(tok.begin, "number '" + n + "' is out of range for a float");
    }
    return v;
  };
  if (imaginary) {
    if (k != TypeKind::Complex && k != TypeKind::Scalar) mismatch("an imaginary number", num.end);
    return IValue(std::complex<double>(0, toDouble(std::string_view(n).substr(0, n.size() - 1))));
  }
  if (k == TypeKind::Complex) return IValue(std::complex<double>(toDouble(n), 0));
  if ((k == TypeKind::Float && !optional_form) || float_form) {
    if (k == TypeKind::Int) mismatch("a float", num.end);
    return IValue(toDouble(n));
  }
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
  if (ec != std::errc() || p != n.data() + n.size()) {
    failAt(tok.begin, "integer '" + n + "' does not fit in 64 bits");
  }
  return IValue(v);
}

IValue Parser::parseListDefault(const TypePtr& list_type, std::optional<int32_t> N) {
  const TypePtr& element = list_type->element();
  const TypeKind ek = fakeKind(*element);
  const Token start = cur();
  if (ek != TypeKind::Int && ek != TypeKind::Float && ek != TypeKind::Bool && ek != TypeKind::Complex &&
      ek != TypeKind::Str && ek != TypeKind::Scalar) {
    failAt(start.begin, "list defaults are only supported for lists of int, float, bool, complex, str and "
                        "Scalar, not '" + list_type->str() + "'");
  }
  std::vector<IValue> values;
  auto element_value = [&] {
    if (isIdent("None")) failAt(cur().begin, "None cannot be an element of a list default");
    values.push_back(parseConstant(element, /*optional_form=*/false));
  };
  if (N && !isChar('[')) {
    // `int[2] stride=1` repeats the value N times, as PyTorch does; a size of
    // millions would make a list of that many values (811111111 took 13 GB).
    if (*N > kMaxRepeatedDefault) {
      failAt(cur().begin, "a list size above " + std::to_string(kMaxRepeatedDefault) +
                              " with a single default value (the value would be repeated " + std::to_string(*N) +
                              " times); write the list out, or drop the size");
    }
    // And in all: twenty `complex[62322] z=1` in one 4 KB schema made 1.2 million
    // values (the fuzzer's round trip took 20 s).
    if (static_cast<int64_t>(*N) > repeated_budget_) {
      failAt(cur().begin, "the repeated list defaults of this schema would hold more than " +
                              std::to_string(kMaxRepeatedDefault) +
                              " values in all; write the lists out, or drop the sizes");
    }
    repeated_budget_ -= *N;
    element_value();
    values.assign(static_cast<size_t>(*N), values.front());
  } else {
    expectChar('[', "'[' to start a list default");
    if (!isChar(']')) {
      do {
        element_value();
      } while (nextIfChar(','));
    }
    expectChar(']', "',' or ']' in the list default");
  }
  switch (ek) {
    case TypeKind::Int: {
      std::vector<int64_t> out;
      for (const IValue& v : values) out.push_back(v.toInt());
      return IValue(std::move(out));
    }
    case TypeKind::Float: {
      std::vector<double> out;
      for (const IValue& v : values) out.push_back(v.isInt() ? static_cast<double>(v.toInt()) : v.toDouble());
      return IValue(std::move(out));
    }
    case TypeKind::Bool: {
      std::vector<bool> out;
      for (const IValue& v : values) out.push_back(v.toBool());
      return IValue(std::move(out));
    }
    default:
      return IValue(std::move(values));
  }
}

IValue Parser::parseDeviceDefault() {
  if (isIdent("None")) {
    next();
    return IValue();
  }
  if (cur().kind != Tok::String) fail(cur(), "a quoted device such as \"cpu\" or \"cuda:0\"");
  const Token tok = next();
  try {
    return IValue(Device(tok.text));
  } catch (const Error& e) {
    failAt(tok.begin, e.what());
  }
}

}  // namespace

std::variant<OperatorName, FunctionSchema> parseSchemaOrName(std::string_view text, SchemaParseOptions options) {
  return Parser(text, options).parseDeclaration();
}

FunctionSchema parseSchema(std::string_view text, SchemaParseOptions options) {
  auto parsed = parseSchemaOrName(text, options);
  if (auto* schema = std::get_if<FunctionSchema>(&parsed)) return std::move(*schema);
  throw SchemaError(text, text.size() + 1, "expected '(' and an argument list after the operator name");
}

namespace {
// "ns::name" or "ns::name.overload" and nothing else (no spaces, no keywords, a
// legal overload name): the form nearly every name a library registers has, read
// without the lexer. Anything else, valid or not, goes to the parser, which gives the
// same OperatorName for what this accepts.
std::optional<OperatorName> plainName(std::string_view text) {
  size_t i = 0;
  auto ident = [&]() -> std::string_view {
    const size_t start = i;
    if (i < text.size() && isIdentStart(text[i])) {
      ++i;
      while (i < text.size() && isIdentChar(text[i])) ++i;
    }
    return text.substr(start, i - start);
  };
  const std::string_view ns = ident();
  if (ns.empty() || isKeyword(ns) || text.substr(i, 2) != "::") return std::nullopt;
  i += 2;
  const std::string_view name = ident();
  if (name.empty() || isKeyword(name)) return std::nullopt;
  std::string_view overload;
  if (i < text.size() && text[i] == '.') {
    ++i;
    overload = ident();
    if (overload.empty() || isKeyword(overload) || overload == "default" || overload.starts_with("__")) {
      return std::nullopt;
    }
  }
  if (i != text.size()) return std::nullopt;
  return OperatorName{std::string(text.substr(0, ns.size() + 2 + name.size())), std::string(overload)};
}
}  // namespace

OperatorName parseName(std::string_view text) {
  if (auto plain = plainName(text)) return std::move(*plain);
  return Parser(text, SchemaParseOptions{}).parseNameAlone();
}

}  // namespace strata
