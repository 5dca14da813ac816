#include "strata/library.h"

#include "dispatch/grace_period.h"

#include <cstdio>
#include <mutex>
#include <optional>

namespace strata {

const char* toString(Library::Kind kind) {
  switch (kind) {
    case Library::DEF: return "DEF";
    case Library::IMPL: return "IMPL";
    case Library::FRAGMENT: return "FRAGMENT";
  }
  return "?";
}

namespace {

bool isIdentifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

const char* macroOf(Library::Kind kind) {
  switch (kind) {
    case Library::DEF: return "STRATA_LIBRARY";
    case Library::IMPL: return "STRATA_LIBRARY_IMPL";
    case Library::FRAGMENT: return "STRATA_LIBRARY_FRAGMENT";
  }
  return "?";
}

}  // namespace

Library::Library(Kind kind, std::string ns, std::optional<DispatchKey> key, std::source_location where)
    : Library(kind, std::move(ns), key, where.file_name(), where.line()) {}

Library::Library(Kind kind, std::string ns, std::optional<DispatchKey> key, const char* file, uint32_t line)
    : kind_(kind),
      ns_(std::move(ns)),
      key_(key),
      file_(file != nullptr ? file : ""),
      line_(line),
      owner_(RegistrationOwnerGuard::current()) {
  STRATA_CHECK(isIdentifier(ns_), Value, "invalid library namespace '", ns_,
               "': a namespace is a C++ identifier (letters, digits, _), or _ for fallbacks");
  STRATA_CHECK(!(ns_ == "_" && kind_ != IMPL), Value, "Cannot create a ", toString(kind_),
               " library for the wildcard namespace _ (", where(std::source_location()),
               "): namespace _ is for fallbacks only; use STRATA_LIBRARY_IMPL(_, KEY, m)");
  // As torch.library: prim is PyTorch's namespace of interpreter primitives, reserved
  // so that no library defines ops in it; its ops may still get kernels.
  STRATA_CHECK(!(ns_ == "prim" && kind_ != IMPL), Value, "Cannot create a ", toString(kind_),
               " library for namespace prim (", where(std::source_location()),
               "): prim is a reserved namespace; create the library with another name");
  if (key_) {
    STRATA_CHECK(isRuntimeKey(*key_) || isAliasKey(*key_), Value, "library ", ns_, " (", where(std::source_location()),
                 "): ", toString(*key_), " is not a dispatch key");
  }
  if (kind_ == DEF) registrations_.push_back(Dispatcher::singleton().registerLibrary(ns_, where(std::source_location())));
}

Library::Library(Library&&) noexcept = default;
Library& Library::operator=(Library&& o) noexcept {
  if (this != &o) {
    reset();
    kind_ = o.kind_;
    ns_ = std::move(o.ns_);
    key_ = o.key_;
    file_ = std::move(o.file_);
    line_ = o.line_;
    owner_ = std::move(o.owner_);
    allow_override_ = o.allow_override_;
    registrations_ = std::move(o.registrations_);
  }
  return *this;
}
Library::~Library() { reset(); }

void Library::reset() {
  // One grace period for all of them, not a membarrier() per removal (Note
  // [Deferred reclamation]).
  const detail::DeferReclaim defer;
  while (!registrations_.empty()) {
    RegistrationHandleRAII h = std::move(registrations_.back());
    registrations_.pop_back();
  }
}

std::string Library::where(std::source_location loc) const {
  // Once per registration: appends, not an ostringstream (a locale and a
  // dynamic_cast each time).
  if (loc.file_name() != nullptr && loc.file_name()[0] != '\0') {
    return std::string("registered at ").append(loc.file_name()).append(":").append(std::to_string(loc.line()));
  }
  if (!file_.empty() && line_ == 0) return std::string("registered ").append(file_);  // "by ..."
  if (!file_.empty()) return std::string("registered at ").append(file_).append(":").append(std::to_string(line_));
  return "registered at (unknown)";
}

OperatorName Library::qualify(std::string_view name, const char* what) const {
  std::string text(name);
  const bool qualified = text.find("::") != std::string::npos;
  STRATA_CHECK(qualified || ns_ != "_", Value, what, " '", name,
               "' in a library of namespace _ must name its namespace (ns::name)");
  if (!qualified) text = ns_ + "::" + text;
  OperatorName op;
  try {
    op = parseName(text);
  } catch (const SchemaError& e) {
    STRATA_FAIL(Value, "invalid operator name '", name, "' in ", what, ": ", e.reason());
  }
  return op;
}

Library& Library::def(std::string_view schema_text, std::source_location loc) & {
  return def(SchemaSpec{std::string(schema_text), AliasAnalysisKind::FROM_SCHEMA}, {}, loc);
}

Library& Library::def(std::string_view schema_text, const std::vector<Tag>& tags, std::source_location loc) & {
  return def(SchemaSpec{std::string(schema_text), AliasAnalysisKind::FROM_SCHEMA}, tags, loc);
}

Library& Library::def(const SchemaSpec& spec, const std::vector<Tag>& tags, std::source_location loc) & {
  checkMayDefine(loc);
  defSchema(parseSchema(spec.schema, SchemaParseOptions{.allow_typevars = false}), loc, TagSet(tags),
            spec.alias_analysis);
  return *this;
}

void Library::checkMayDefine(std::source_location loc) const {
  STRATA_CHECK(kind_ != IMPL, Value, "Cannot define an operator inside of a ", macroOf(kind_), " block (",
               where(loc), "). All def()s should be placed in the (unique) STRATA_LIBRARY block for their namespace.");
}

OperatorName Library::defSchema(FunctionSchema schema, std::source_location loc, TagSet tags,
                                AliasAnalysisKind alias_analysis) {
  if (schema.ns().empty()) {
    schema = FunctionSchema(ns_ + "::" + schema.name(), schema.overload_name(), schema.arguments(), schema.returns(),
                            schema.is_vararg(), schema.is_varret());
  } else {
    STRATA_CHECK(schema.ns() == ns_, Value, "Explicitly provided namespace (", schema.ns(),
                 ") in schema string does not match namespace of enclosing ", macroOf(kind_), " block (", ns_,
                 "). Move this definition to the (unique) STRATA_LIBRARY block corresponding to this namespace "
                 "(and consider deleting the namespace from your schema string.) (",
                 where(loc), ")");
  }
  OperatorName name = schema.operator_name();
  registrations_.push_back(
      Dispatcher::singleton().registerDef(std::move(schema), {owner_, where(loc), allow_override_}, tags, alias_analysis));
  return name;
}

Library& Library::defImpl(std::string_view name_or_schema, KernelFunction kernel, std::source_location loc) {
  checkMayDefine(loc);
  auto parsed = parseSchemaOrName(name_or_schema, SchemaParseOptions{.allow_typevars = false});
  AliasAnalysisKind alias_analysis = AliasAnalysisKind::FROM_SCHEMA;
  if (auto* n = std::get_if<OperatorName>(&parsed)) {
    const auto inferred = kernel.inferredSchema();
    STRATA_CHECK(inferred.has_value(), Schema, "def(\"", name_or_schema, "\", fn) (", where(loc),
                 "): a schema cannot be inferred from a boxed kernel; give def() the full schema");
    parsed = FunctionSchema(n->name, n->overload_name, inferred->arguments(), inferred->returns());
    // An inferred schema cannot say that a result aliases an argument, so compilers
    // must assume it may (PyTorch's choice); a Tensor& parameter is annotated (a!),
    // and the annotation is then what the schema says.
    if (!inferred->is_mutable()) alias_analysis = AliasAnalysisKind::CONSERVATIVE;
  }
  // def, then impl; if the impl is refused, the def is undone with it.
  const size_t before = registrations_.size();
  const OperatorName op = defSchema(std::get<FunctionSchema>(std::move(parsed)), loc, {}, alias_analysis);
  try {
    implImpl(op.str(), std::move(kernel), key_, ImplOptions{}, loc);
  } catch (...) {
    while (registrations_.size() > before) registrations_.pop_back();
    throw;
  }
  return *this;
}

Library& Library::implImpl(std::string_view name, KernelFunction kernel, std::optional<DispatchKey> key,
                           ImplOptions options, std::source_location loc) {
  const OperatorName op = qualify(name, "impl()");
  const std::string_view op_ns = std::string_view(op.name).substr(0, op.name.find("::"));
  STRATA_CHECK(ns_ == "_" || op_ns == ns_, Value, "Explicitly provided namespace (", op_ns,
               ") in operator name does not match namespace of enclosing ", macroOf(kind_), " block (", ns_,
               "). Move this impl() to a block for namespace ", op_ns, " (", where(loc), ")");
  if (key && key_ && *key != *key_ && kind_ == IMPL) {
    STRATA_FAIL(Value, "Explicitly provided dispatch key (", toString(*key),
                ") is inconsistent with the dispatch key of the enclosing STRATA_LIBRARY_IMPL block (",
                toString(*key_), "). Please declare a separate STRATA_LIBRARY_IMPL block for this dispatch key and "
                "move your impl() there. (", where(loc), ")");
  }
  const DispatchKey k = key ? *key : key_ ? *key_ : DispatchKey::CompositeImplicitAutograd;
  registrations_.push_back(Dispatcher::singleton().registerImpl(
      op, k, std::move(kernel), {owner_, where(loc), options.allow_override || allow_override_}));
  return *this;
}

Library& Library::fallbackImpl(KernelFunction kernel, std::source_location loc) {
  STRATA_CHECK(kind_ == IMPL && ns_ == "_" && key_.has_value(), Value,
               "fallback() must be called from an IMPL library of namespace _ with a dispatch key, "
               "STRATA_LIBRARY_IMPL(_, KEY, m); this is a ", toString(kind_), " library of namespace ", ns_,
               key_ ? detail::concat(" at ", toString(*key_)) : std::string(" without a key"), " (", where(loc), ")");
  registrations_.push_back(Dispatcher::singleton().registerFallback(*key_, std::move(kernel), {owner_, where(loc), false}));
  return *this;
}

namespace detail {

namespace {
std::mutex g_static_errors_mu;
std::vector<std::string>& staticErrors() {
  static auto* v = new std::vector<std::string>();
  return *v;
}
}  // namespace

LibraryInit::LibraryInit(Library::Kind kind, InitFn fn, const char* ns, std::optional<DispatchKey> key,
                         const char* file, uint32_t line) {
  if (deferStaticBlock({kind, fn, ns, key, file != nullptr ? file : "", line})) return;
  try {
    lib_.emplace(kind, ns, key, file, line);
    fn(*lib_);
  } catch (const std::exception& e) {
    lib_.reset();  // nothing of the block stays registered
    const std::string msg = concat(macroOf(kind), "(", ns, key ? concat(", ", toString(*key)) : std::string(), ") at ",
                                   file, ":", line, " failed; nothing it registered was kept: ", e.what());
    std::fprintf(stderr, "strata: %s\n", msg.c_str());
    std::lock_guard<std::mutex> lock(g_static_errors_mu);
    staticErrors().push_back(msg);
  }
}

std::vector<std::string> staticRegistrationErrors() {
  std::lock_guard<std::mutex> lock(g_static_errors_mu);
  return staticErrors();
}

}  // namespace detail

}  // namespace strata
