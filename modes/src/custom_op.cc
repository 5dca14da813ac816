// custom_op: the schema from fn's type and the caller's names, mutates_args checked
// against it, and the CustomOpDef that owns the op's registrations.
#include "strata/modes/custom_op.h"

#include <algorithm>
#include <set>

#include "registered_at.h"
#include "tensor_walk.h"

namespace strata::modes {

CustomOpDef::CustomOpDef(std::string name, std::unique_ptr<Library> lib) : name_(std::move(name)), lib_(std::move(lib)) {}
CustomOpDef::CustomOpDef(CustomOpDef&&) noexcept = default;
CustomOpDef& CustomOpDef::operator=(CustomOpDef&&) noexcept = default;
CustomOpDef::~CustomOpDef() = default;

OperatorHandle CustomOpDef::op() const { return Dispatcher::singleton().findSchemaOrThrow(name_); }

DispatchKey CustomOpDef::checkDeviceType(std::string_view device_type, const char* api) {
  for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA, DeviceType::Meta, DeviceType::PrivateUse1}) {
    if (device_type == toString(t)) return backendKey(t);
  }
  STRATA_FAIL(Value, api, ": unknown device type '", device_type, "' (expected cpu, cuda, meta or privateuse1)");
}

namespace detail {

std::vector<DispatchKey> customOpKeys(std::string_view name, const std::vector<std::string>& device_types) {
  if (device_types.empty()) return {DispatchKey::CompositeExplicitAutograd};
  std::vector<DispatchKey> keys;
  for (const std::string& d : device_types) {
    try {
      const DispatchKey k = CustomOpDef::checkDeviceType(d, "custom_op");
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    } catch (const Error& e) {
      STRATA_FAIL(Value, "custom_op(", name, "): ", e.what());
    }
  }
  return keys;
}

void refusedAtLoad(const std::string& name) {
  STRATA_FAIL(NotImplemented, "custom_op(", name, ") was made by a static initializer while a host loaded its "
              "bundle, so its definition was refused and the bundle rejected; make it in registerAll, or keep it "
              "out of namespace scope");
}

std::unique_ptr<Library> defineCustomOp(std::string_view name, const FunctionSchema& inferred,
                                        const std::vector<std::string>& arg_names, const MutatesArgs& mutates_args,
                                        std::string_view schema_text, const std::vector<Tag>& tags,
                                        std::source_location where) {
  const std::string call = "custom_op(" + std::string(name) + ")";
  const OperatorName op = parseOperatorName(name);
  const size_t sep = op.name.find("::");
  STRATA_CHECK(sep != std::string::npos && sep > 0, Value, call,
               ": the name must look like \"namespace::name\" (use your project's name as the namespace)");
  const std::string ns = op.name.substr(0, sep);
  const auto& args = inferred.arguments();
  FunctionSchema schema = inferred;
  if (!schema_text.empty()) {
    auto parsed = parseSchemaOrName(std::string(op.str()) + std::string(schema_text),
                                    SchemaParseOptions{.allow_typevars = false});
    STRATA_CHECK(std::holds_alternative<FunctionSchema>(parsed), Schema, call, ": schema \"", schema_text,
                 "\" is not a schema (expected \"(Tensor x, int y) -> Tensor\")");
    schema = std::get<FunctionSchema>(std::move(parsed));
  } else {
    STRATA_CHECK(arg_names.size() == args.size(), Schema, call, ": fn takes ", args.size(), " argument(s) but ",
                 arg_names.size(), " name(s) were given; C++ has no argument names, so custom_op needs one per "
                 "parameter");
    std::set<std::string> seen;
    std::vector<Argument> named = args;
    for (size_t i = 0; i < named.size(); ++i) {
      const std::string& n = arg_names[i];
      const bool ident = !n.empty() && (std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_') &&
                         std::all_of(n.begin(), n.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                         });
      STRATA_CHECK(ident, Schema, call, ": argument name '", n, "' is not an identifier");
      STRATA_CHECK(seen.insert(n).second, Schema, call, ": argument name '", n, "' is given twice");
      named[i].name = n;
    }
    // mutates_args: exactly the Tensor& parameters and any Tensor?/Tensor[]/Tensor?[]
    // ones named, or "unknown" (every tensor).
    for (const std::string& m : mutates_args.names()) {
      const auto it = std::find(arg_names.begin(), arg_names.end(), m);
      STRATA_CHECK(it != arg_names.end(), Schema, call, ": mutates_args names '", m, "', which is not an argument");
      const Argument& a = named[static_cast<size_t>(it - arg_names.begin())];
      // A Tensor? or a list of tensors has no mutable C++ form; its tensors' data can be
      // written all the same, so naming it is enough (PyTorch's Tensor(a!)?, Tensor(a!)[]).
      const bool tensor_container = a.type->kind() != TypeKind::Tensor && isTensorLike(*a.type);
      STRATA_CHECK(a.is_write() || tensor_container, Schema, call, ": mutates_args names '", m, "', but fn takes it as ",
                   a.type->kind() == TypeKind::Tensor ? "const Tensor&: take it as Tensor& to mutate it"
                                                      : a.type->str() + ", which cannot be mutated");
    }
    size_t alias = static_cast<size_t>(std::count_if(named.begin(), named.end(), [](const Argument& a) {
      return a.alias_info.has_value();
    }));
    for (Argument& a : named) {
      if (a.is_write() && !mutates_args.is_unknown()) {
        STRATA_CHECK(std::find(mutates_args.names().begin(), mutates_args.names().end(), a.name) !=
                         mutates_args.names().end(),
                     Schema, call, ": fn takes '", a.name, "' as Tensor& (it may mutate it) but mutates_args does "
                     "not name it: add it, or take it as const Tensor&");
      }
      // "unknown" is pessimistic about every tensor-like argument (Tensor, Tensor?,
      // Tensor[], Tensor?[]), as PyTorch's infer_schema is.
      const bool named_container =
          a.type->kind() != TypeKind::Tensor &&
          std::find(mutates_args.names().begin(), mutates_args.names().end(), a.name) != mutates_args.names().end();
      if ((mutates_args.is_unknown() || named_container) && isTensorLike(*a.type) && !a.alias_info) {
        AliasInfo info;
        info.before_sets = {strata::detail::infer::aliasSetName(alias++)};
        info.after_sets = info.before_sets;
        info.is_write = true;
        if (a.type->kind() == TypeKind::List) {
          // On the element, inside the list's own (as the parser builds `Tensor(a!)[]`).
          AliasInfo list;
          list.is_write = true;
          list.contained.push_back(std::move(info));
          a.alias_info = std::move(list);
        } else {
          a.alias_info = std::move(info);
        }
      }
    }
    schema = FunctionSchema(op.name, op.overload_name, std::move(named), inferred.returns());
  }
  if (!schema_text.empty()) {
    // The schema's written arguments must be exactly mutates_args (PyTorch: "The schema
    // suggests that the op mutates {...} which is different from what was provided").
    std::set<std::string> declared, named;
    for (const Argument& a : schema.arguments()) {
      if (a.is_write()) declared.insert(a.name);
    }
    if (mutates_args.is_unknown()) {
      named = declared;
    } else {
      for (const std::string& m : mutates_args.names()) {
        const auto& sargs = schema.arguments();
        STRATA_CHECK(std::any_of(sargs.begin(), sargs.end(), [&](const Argument& a) { return a.name == m; }), Schema,
                     call, ": mutates_args names '", m, "', which is not an argument of the schema ", schema.str());
        named.insert(m);
      }
    }
    auto list = [](const std::set<std::string>& s) {
      std::string out = "{";
      for (const std::string& n : s) out += (out.size() > 1 ? ", " : "") + n;
      return out + "}";
    };
    STRATA_CHECK(declared == named, Schema, call, ": the schema ", schema.str(), " writes ", list(declared),
                 " (Tensor(a!)), but mutates_args names ", list(named), "; make them the same");
  }
  // A keyword-only tensor would get no gradient and no version bump from the layers
  // that walk positional inputs; PyTorch refuses them in custom ops too.
  for (const Argument& a : schema.arguments()) {
    STRATA_CHECK(!(a.kwarg_only && isTensorLike(*a.type)), Schema, call, ": argument '", a.name, "' (", a.type->str(),
                 ") is keyword-only; a custom op's tensor arguments must be positional (move it before the '*')");
  }
  auto lib = std::make_unique<Library>(Library::FRAGMENT, ns, std::nullopt, where);
  lib->def(schema.str(), tags, where);
  return lib;
}

// The functions below find no op when its def was refused at a bundle's load
// (refusedAtLoad): there is nothing to wrap or check then.
CustomKernelInfo customKernelInfo(std::string_view op, DispatchKey key) {
  CustomKernelInfo info;
  info.op = std::string(op);
  info.key = key;
  const std::optional<OperatorHandle> h = Dispatcher::singleton().findSchema(parseOperatorName(op));
  if (!h) return info;
  const FunctionSchema& schema = h->schema();
  const auto& args = schema.arguments();
  if (std::any_of(args.begin(), args.end(), [](const Argument& a) { return a.is_write(); })) {
    for (const Argument& a : args) info.written.push_back(a.is_write());
  }
  // PyTorch's FunctionSchema._is_view_op: an argument some result may alias (Tensor(a),
  // not written). Such an op's results are meant to be views; none is checked.
  info.view_op = std::any_of(args.begin(), args.end(),
                             [](const Argument& a) { return a.alias_info.has_value() && !a.alias_info->is_write; });
  return info;
}

void checkAliases(const CustomKernelInfo& info, const std::vector<AliasSeen>& inputs,
                  const std::vector<AliasSeen>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    const AliasSeen& out = results[r];
    if (out.storage == nullptr) continue;
    for (const AliasSeen& in : inputs) {
      if (in.storage == out.storage) throwAliasedResult(info, in, out);
    }
    for (size_t e = 0; e < r; ++e) {
      if (results[e].storage == out.storage) throwAliasedResult(info, results[e], out);
    }
  }
}

void throwAliasedResult(const CustomKernelInfo& info, const AliasSeen& earlier, const AliasSeen& result) {
  const std::optional<OperatorHandle> h = Dispatcher::singleton().findSchema(parseOperatorName(info.op));
  const FunctionSchema* schema = h && h->hasSchema() ? &h->schema() : nullptr;
  auto outputName = [](const AliasSeen& r) {
    std::string s = "output " + std::to_string(r.index);
    if (r.element != kAliasWhole) s = "element " + std::to_string(r.element) + " of " + s;
    return s;
  };
  std::string other;
  std::string advice;
  if (earlier.input) {
    std::string name = std::to_string(earlier.index);
    if (schema != nullptr && earlier.index < schema->arguments().size()) {
      name = "'" + schema->arguments()[earlier.index].name + "'";
    }
    other = "argument " + name;
    if (earlier.element != kAliasWhole) other = "element " + std::to_string(earlier.element) + " of " + other;
    const std::string x = schema != nullptr && earlier.index < schema->arguments().size() && earlier.element == kAliasWhole
                              ? schema->arguments()[earlier.index].name
                              : "x";
    advice = "Return a clone instead (e.g. " + x + ".clone())";
    if (schema != nullptr && earlier.index < schema->arguments().size() && schema->arguments()[earlier.index].is_write()) {
      advice += ", or return nothing: the op writes it in place already";
    }
  } else {
    other = outputName(earlier);
    advice = "Return a clone of one of them instead";
  }
  const std::string kernel = info.key == DispatchKey::CompositeExplicitAutograd
                                 ? std::string("its default kernel")
                                 : "its " + std::string(toString(info.key)) + " kernel";
  STRATA_FAIL(Value, info.op, " (", kernel, "): ", outputName(result),
              earlier.impl == result.impl ? " is " + other : " shares its storage with " + other,
              "; the output of a custom op must not be one of its inputs, nor alias an input or another output, "
              "since every layer takes its outputs as new tensors. ", advice, ".");
}

void checkDeviceKernelsCanBeReached(std::string_view name, const std::vector<DispatchKey>& keys) {
  if (keys.size() == 1 && keys[0] == DispatchKey::CompositeExplicitAutograd) return;
  const std::optional<OperatorHandle> h = Dispatcher::singleton().findSchema(parseOperatorName(name));
  if (!h) return;
  for (const Argument& a : h->schema().arguments()) {
    if (isTensorLike(*a.type) || a.type->str().starts_with("Device")) return;
  }
  STRATA_FAIL(Schema, "custom_op(", name, "): it takes no tensor, so a kernel per device type (device_types) needs "
              "a Device argument to dispatch on: add one, or give no device_types");
}

void addTrivialFake(Library& lib, std::string_view name, const std::vector<DispatchKey>& keys,
                    std::source_location where) {
  if (std::find(keys.begin(), keys.end(), DispatchKey::Meta) != keys.end()) return;  // fn is its Meta kernel
  const std::optional<OperatorHandle> h = Dispatcher::singleton().findSchema(parseOperatorName(name));
  if (!h) return;
  const FunctionSchema& schema = h->schema();
  if (!schema.returns().empty() || schema.is_varret()) return;
  const auto& args = schema.arguments();
  if (std::none_of(args.begin(), args.end(), [](const Argument& a) { return a.is_write(); })) return;
  lib.keep(registerTrivialFake(name, args.size(), where));
}

}  // namespace detail

}  // namespace strata::modes
