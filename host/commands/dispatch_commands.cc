// strata ops / dump / call: the dispatcher from the command line.
#include <algorithm>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>

#include "call_args.h"
#include "plugin_host.h"
#include "strata/db/store.h"
#include "commands/commands.h"
#include "strata/dispatcher.h"
#include "strata/modes/autocast.h"
#include "strata/modes/fake.h"
#include "strata/modes/opcheck.h"
#include "strata/modes/vmap.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/trace_mode.h"

namespace strata::host {

namespace {

// Who disabled the kernel a failed call needed, and how to turn it on again: the
// store's record of each disabled kernel of `op`, when the dispatcher said that a
// disabled kernel left no kernel to run. "" otherwise.
std::string whyDisabled(const Session& session, const std::exception& failure, const std::string& db_arg) {
  const auto* e = dynamic_cast<const Error*>(&failure);
  if (e == nullptr || e->kind() != ErrorKind::NotImplemented || session.store == nullptr) return "";
  // "OP: no kernel for dispatch key K (...): its KEY kernel is disabled (...)": the op
  // that failed (perhaps one the called op calls) and each disabled key named.
  const std::string_view what = e->what();
  std::string out;
  for (const db::KernelStateRow& k : session.store->kernelStates()) {
    if (k.enabled || !what.starts_with(k.op + ": no kernel") ||
        what.find("its " + k.key + " kernel is disabled") == std::string_view::npos) {
      continue;
    }
    out += "\n  " + k.op + " " + k.key + " was disabled by " + k.actor + " at " + k.time +
           (k.reason.empty() ? "" : " (" + k.reason + ")") + ": `strata kernel enable " + k.op + " " + k.key + db_arg +
           "` turns it on";
  }
  return out;
}

// Why an op is missing when a bundle in the plugin directory would define it: an
// admin disabled that bundle, or it failed to load. "" when no bundle here defines
// the op's namespace.
std::string whyMissing(const Session& session, const OperatorName& op) {
  if (!session.host) return "";
  const std::string ns = op.name.substr(0, op.name.find("::"));
  if (ns == "core") return "";  // the host's own: no bundle defines it
  // A loaded bundle that defined this very op in registerAll and dropped it.
  for (const auto& [name, l] : session.host->loaded()) {
    for (const QString& d : l.dropped) {
      const std::string dropped = d.toStdString();
      if (dropped == op.str() || (op.overload_name.empty() && dropped.starts_with(op.name + "."))) {
        return " (bundle " + name.toStdString() + "@" + l.version.toStdString() + " defined " + dropped +
               " in registerAll and dropped it before registerAll returned: a custom_op or a Library the bundle "
               "makes is removed with it unless the bundle keeps it, r.keep(std::move(op)), or r.library(...) "
               "for a library)";
      }
    }
  }
  const std::vector<std::string> live = liveOperatorNames();
  const bool namespace_served = std::any_of(live.begin(), live.end(), [&](const std::string& n) {
    return n.size() > ns.size() + 2 && n.starts_with(ns) && n.compare(ns.size(), 2, "::") == 0;
  });
  for (const db::HostBundleRow& row : session.host->view()) {
    if (row.state != "disabled" && row.state != "rejected") continue;
    // Only a file whose metadata the host read (it has a version): one refused before
    // that (a FIFO, an insecure or untrusted file) is never parsed (Note [Plugin trust]).
    if (row.version.empty()) continue;
    const BundleFile f = readBundleFile(QString::fromStdString(row.path));
    // It lists the namespace; or, where nothing loaded defines it, the host rejected it
    // for defining that namespace without listing it (an admin's reason for disabling
    // a bundle is free text, and is not read for this).
    const bool names_ns = f.metadata && f.metadata->defines.contains(QString::fromStdString(ns));
    const bool rejected_for_ns = row.state == "rejected" && !namespace_served &&
                                 row.reason.find("namespace '" + ns + "'") != std::string::npos;
    if (!names_ns && !rejected_for_ns) continue;
    if (row.state == "disabled") {
      return " (" + row.reason + ", which defines namespace " + ns + "; `strata plugins enable " + row.name +
             "` loads it again)";
    }
    return " (bundle " + row.name + "@" + row.version + (names_ns ? ", which defines namespace " + ns + "," : "") +
           " was rejected: " + row.reason + ")";
  }
  // Files refused unread (in an insecure directory, insecure or untrusted themselves):
  // any of them may be the one that defines it.
  size_t unread = 0;
  std::string first;
  for (const db::HostBundleRow& row : session.host->view()) {
    if (row.state != "rejected" || !row.version.empty() || !row.reason.starts_with("refused: ")) continue;
    if (unread++ == 0) first = row.path + ": " + row.reason;
  }
  if (unread == 1) return " (a file in the plugin directory was refused before it was read, " + first + ")";
  if (unread > 1) {
    return " (" + std::to_string(unread) + " files in the plugin directory were refused before they were read; the "
           "first, " + first + ")";
  }
  return "";
}


QString q(const std::string& s) { return QString::fromStdString(s); }

// --autocast DEVICE[:DTYPE]: "cpu", "cpu:bf16", "cuda:f16", "cuda:float16".
struct AutocastSpec {
  DeviceType device;
  std::optional<ScalarType> dtype;
};
AutocastSpec parseAutocastSpec(const std::string& text) {
  const size_t colon = text.find(':');
  AutocastSpec spec{modes::parseAutocastDevice(text.substr(0, colon)), std::nullopt};
  if (colon == std::string::npos) return spec;
  const std::string d = text.substr(colon + 1);
  spec.dtype = dtypeName(d);
  STRATA_CHECK(spec.dtype == ScalarType::BFloat16 || spec.dtype == ScalarType::Half, Value,
               "the dtype must be bf16 (bfloat16) or f16 (float16), not '", shortened(d), "'");
  return spec;
}

// --vmap IN_DIMS: "0", "0,0,None", "1,None": one entry per argument of the op in
// schema order (omitted trailing ones are None), or one for every tensor argument
// (*broadcast set).
std::vector<modes::Dim> parseVmapInDims(const std::string& text, size_t num_args, bool* broadcast) {
  std::vector<modes::Dim> dims;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    item.erase(0, item.find_first_not_of(" ("));
    item.erase(item.find_last_not_of(" )") + 1);
    if (item == "None" || item == "none") {
      dims.push_back(std::nullopt);
    } else {
      size_t used = 0;
      int64_t d = 0;
      try {
        d = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      STRATA_CHECK(!item.empty() && used == item.size(), Value, "--vmap ", shortened(text), ": '", shortened(item),
                   "' is not an in_dim (an integer or None)");
      dims.push_back(d);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  STRATA_CHECK(dims.size() <= num_args, Value, "--vmap ", text, ": in_dims has ", dims.size(),
               " entries but the op has ", num_args, " arguments");
  *broadcast = dims.size() == 1 && text.find(',') == std::string::npos;
  if (*broadcast) dims.assign(num_args, dims[0]);
  dims.resize(num_args, std::nullopt);
  return dims;
}

// The stack for schema from command-line words (positional, then NAME=VALUE).
Stack bindArguments(const FunctionSchema& schema, const QStringList& words, uint64_t seed) {
  const auto& params = schema.arguments();
  LiteralParser literals(seed);
  std::vector<std::optional<IValue>> given(params.size());
  size_t next = 0;
  for (const QString& w : words) {
    const std::string word = w.toStdString();
    const size_t eq = word.find('=');
    size_t index = next;
    std::string text = word;
    if (eq != std::string::npos && eq > 0 && word.find_first_of("[(") > eq) {
      auto idx = schema.argumentIndexWithName(word.substr(0, eq));
      STRATA_CHECK(idx.has_value(), Value, schema.operator_name().str(), " has no argument named '", shortened(word.substr(0, eq)),
                   "'");
      index = *idx;
      text = word.substr(eq + 1);
    } else {
      STRATA_CHECK(index < params.size() && !params[index].kwarg_only, Value, schema.operator_name().str(), " takes ",
                   index, " positional arguments; '", shortened(word), "' is one too many");
      next = index + 1;
    }
    STRATA_CHECK(!given[index].has_value(), Value, "argument '", params[index].name, "' given twice");
    try {
      given[index] = literals.parse(text, *params[index].type);
    } catch (const Error& e) {
      STRATA_FAIL(Value, "argument '", params[index].name, "' (position ", index, ", ", params[index].type->str(),
                  "): ", e.what());
    }
  }
  Stack stack;
  for (size_t i = 0; i < params.size(); ++i) {
    if (given[i]) {
      stack.push_back(*given[i]);
    } else if (params[i].default_value) {
      stack.push_back(*params[i].default_value);
    } else {
      STRATA_FAIL(Value, schema.operator_name().str(), ": missing argument '", params[i].name, "' (position ", i, ", ",
                  params[i].type->str(), ")\n  schema: ", schema.str());
    }
  }
  return stack;
}

}  // namespace

int runOpsCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "List the registered operators and their schemas, sorted by name. With a\n"
      "PATTERN, only the operators whose name contains it.");
  parser.addHelpOption();
  parser.addOption({"json", "Print a JSON array: name, schema and registrations (key, kind, owner, debug, enabled)."});
  addHostOptions(parser);
  parser.addPositionalArgument("pattern", "A substring of the operator names to show.", "[PATTERN]");
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  const QStringList pos = parser.positionalArguments();
  if (pos.size() > 1) {
    err << args.first() << ": at most one PATTERN\n";
    return kExitUsage;
  }
  std::unique_ptr<Session> session;
  try {
    session = openSession(parser, true, true);
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
  const std::string pattern = pos.isEmpty() ? "" : pos.first().toStdString();
  QJsonArray all;
  for (const OperatorName& n : Dispatcher::singleton().operatorNames()) {
    if (!pattern.empty() && n.str().find(pattern) == std::string::npos) continue;
    if (parser.isSet("json")) {
      all.append(opJson(n, false));
    } else {
      auto h = Dispatcher::singleton().findOp(n);
      out << (h && h->hasSchema() ? q(h->schema().str()) : q(n.str()) + "  (no schema)") << "\n";
    }
  }
  if (parser.isSet("json")) out << QJsonDocument(all).toJson(QJsonDocument::Indented);
  return kExitOk;
}

int runCheckCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Check what bundles register, as torch.library.opcheck and gradcheck do, on the\n"
      "sample inputs each bundle ships for its ops (register_sample_inputs): test_schema,\n"
      "test_autograd_registration, test_faketensor, test_vmap, test_autocast and\n"
      "gradcheck, per sample. With a BUNDLE name, its ops; with an OP, that op; with\n"
      "neither, every op that has samples. Exits 1 when any test fails.");
  parser.addHelpOption();
  parser.addOption({"json", "Print a JSON array: op, test, sample, result (pass, fail, skipped), reason."});
  addHostOptions(parser);
  parser.addPositionalArgument("target", "A bundle name (muladd) or an operator (extension_cpp::mymuladd).",
                               "[BUNDLE | OP]");
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  const QStringList pos = parser.positionalArguments();
  if (pos.size() > 1) {
    err << args.first() << ": at most one BUNDLE or OP\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  std::unique_ptr<Session> session;
  try {
    session = openSession(parser, true, true);
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
  std::vector<modes::CheckRow> rows;
  QString what = "every op with sample inputs";
  if (pos.isEmpty()) {
    rows = checkOwnedOps("");
  } else {
    const QString target = pos.first();
    const auto& loaded = session->host->loaded();
    if (auto it = loaded.find(target); it != loaded.end()) {
      what = target + "@" + it->second.version;
      rows = checkOwnedOps(it->second.registrar->owner());
    } else if (auto op = [&]() -> std::optional<OperatorHandle> {
                 try {
                   return Dispatcher::singleton().findSchema(parseOperatorName(target.toStdString()));
                 } catch (const Error&) {  // not an operator name: a bundle name nothing loaded
                   return std::nullopt;
                 }
               }()) {
      what = target;
      try {
        rows = modes::check_op(*op);
      } catch (const std::exception& e) {
        err << "error: " << e.what() << "\n";
        return kExitInvalidInput;
      }
    } else {
      // A bundle of that name the host saw but did not load: say why.
      for (const db::HostBundleRow& row : session->host->view()) {
        if (row.name != target.toStdString() || (row.state != "rejected" && row.state != "disabled")) continue;
        err << "error: bundle " << q(row.name) << (row.version.empty() ? "" : "@") << q(row.version)
            << " is not loaded, so it has nothing to check: it was " << q(row.state) << ": " << q(row.reason) << "\n";
        return kExitInvalidInput;
      }
      std::vector<std::string> known = liveOperatorNames();
      for (const auto& [name, _] : loaded) known.push_back(name.toStdString());
      err << "error: no loaded bundle or operator named '" << q(shortened(target.toStdString())) << "'"
          << q(didYouMean(target.toStdString(), known)) << "\n";
      return kExitInvalidInput;
    }
  }
  bool failed = false;
  size_t ran = 0;
  for (const auto& r : rows) {
    failed = failed || !r.passed;
    ran += r.skipped ? 0 : 1;
  }
  auto result = [](const modes::CheckRow& r) { return r.skipped ? "skipped" : r.passed ? "pass" : "fail"; };
  if (parser.isSet("json")) {
    QJsonArray all;
    for (const auto& r : rows) {
      all.append(QJsonObject{{"op", q(r.op)}, {"test", q(r.test)}, {"sample", q(r.sample)}, {"result", result(r)},
                             {"reason", q(r.reason)}});
    }
    out << QJsonDocument(all).toJson(QJsonDocument::Indented);
    return failed ? kExitInvalidInput : kExitOk;
  }
  if (rows.empty()) {
    out << "nothing to check: " << what << " has no sample inputs (register_sample_inputs)\n";
    return kExitOk;
  }
  int w_op = 2, w_test = 4;
  for (const auto& r : rows) {
    w_op = std::max(w_op, static_cast<int>(r.op.size()));
    w_test = std::max(w_test, static_cast<int>(r.test.size()));
  }
  out << QString("op").leftJustified(w_op + 2) << QString("test").leftJustified(w_test + 2)
      << QString("sample").leftJustified(11) << QString("result").leftJustified(9) << "reason\n";
  for (const auto& r : rows) {
    out << q(r.op).leftJustified(w_op + 2) << q(r.test).leftJustified(w_test + 2) << q(r.sample).leftJustified(11)
        << QString(result(r)).leftJustified(9) << q(r.reason) << "\n";
  }
  size_t fails = 0;
  for (const auto& r : rows) fails += r.passed ? 0 : 1;
  out << what << ": " << ran << " test(s) ran, " << fails << " failed\n";
  return failed ? kExitInvalidInput : kExitOk;
}

int runModesCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "List the dispatch mode types 'strata call --mode NAME' can push: the built-in\n"
      "trace, log and passthrough modes and those the bundles in the plugin directory\n"
      "bring (loaded by this command, as 'strata call' loads them), with their owners.");
  parser.addHelpOption();
  parser.addOption({"json", "Print a JSON array: name, description, owner, debug."});
  addHostOptions(parser);
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  if (!parser.positionalArguments().isEmpty()) {
    err << args.first() << ": takes no arguments\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  std::unique_ptr<Session> session;
  try {
    session = openSession(parser, true, true);
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
  const auto types = modes::mode_types();
  if (parser.isSet("json")) {
    QJsonArray all;
    for (const auto& t : types) {
      all.append(QJsonObject{{"name", q(t.name)}, {"description", q(t.description)}, {"owner", q(t.owner)},
                             {"debug", q(t.debug)}});
    }
    out << QJsonDocument(all).toJson(QJsonDocument::Indented);
    return kExitOk;
  }
  for (const auto& t : types) {
    out << q(t.name).leftJustified(14) << " " << q(t.description) << "  [owner " << q(t.owner) << "]\n";
  }
  return kExitOk;
}

int runDumpCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Print an operator's dispatch table: its schema, every registration (key, kind,\n"
      "owner, where it was registered, enabled or not), and the kernel each runtime\n"
      "key's slot computes to, with the reason (kernel, default kernel, composite\n"
      "implicit kernel, autograd kernel, backend fallback, fallthrough, missing).");
  parser.addHelpOption();
  parser.addOption({"json", "Print the same as a JSON object (name, schema, tags, alias_analysis, registrations, "
                            "table)."});
  parser.addOption({"host", "Ask the running host ID (as 'strata hosts' prints it, or its pid) for its table, "
                            "instead of loading the plugin directory in this command.",
                    "ID"});
  addHostOptions(parser);
  parser.addPositionalArgument("op", "The operator: ns::name or ns::name.overload.", "OP");
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  if (parser.positionalArguments().size() != 1) {
    err << args.first() << ": expected exactly one OP\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  try {
    const std::string op = parser.positionalArguments().first().toStdString();
    if (parser.isSet("host")) {
      parseOperatorName(op);  // a malformed name is this command's error, not the host's
      const std::unique_ptr<db::Store> opened = openExistingStore(storeOption(parser));
      db::Store& store = *opened;
      const db::HostRow h = findHost(store, parser.value("host"));
      const QJsonObject answer = QJsonDocument::fromJson(QByteArray::fromStdString(askRunningHost(store, h, "dump", op, 5.0))).object();
      if (parser.isSet("json")) {
        out << QJsonDocument(answer["json"].toObject()).toJson(QJsonDocument::Indented);
      } else {
        out << "host " << q(h.id) << " (plugins " << q(h.plugins) << "):\n" << answer["text"].toString();
      }
      return kExitOk;
    }
    auto session = openSession(parser, true, true);
    const OperatorName name = parseOperatorName(op);
    STRATA_CHECK(Dispatcher::singleton().findOp(name).has_value(), NotImplemented, "no operator named ", shortened(name.str()),
                 whyMissing(*session, name), didYouMean(name.str(), liveOperatorNames()));
    if (parser.isSet("json")) {
      out << QJsonDocument(opJson(name, true)).toJson(QJsonDocument::Indented);
    } else {
      out << q(Dispatcher::singleton().dump(name));
      // Note [What each host runs]: this is this process's table, not a host's.
      out << "(this table is from this command's own load of " << QFileInfo(pluginDirOption(parser)).absoluteFilePath()
          << "; a running host's: strata dump " << q(name.str()) << " --host ID)\n";
    }
    return kExitOk;
  } catch (const HostTimeoutError& e) {
    err << "error: " << e.what() << "\n";
    return kExitTimeout;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
}

// What a kernel returned, checked against the schema before it is printed: a boxed
// kernel (a bundle's, written by hand) may return the wrong number or kind of values,
// which a typed caller would refuse too.
void checkReturned(const OperatorHandle& op, const Stack& s) {
  const FunctionSchema& schema = op.schema();
  const auto& returns = schema.returns();
  STRATA_CHECK(schema.is_varret() || s.size() == returns.size(), Value, op.name(), ": its kernel returned ",
               s.size(), " value(s), but the schema (", schema.str(), ") has ", returns.size());
  for (size_t i = 0; i < std::min(s.size(), returns.size()); ++i) {
    STRATA_CHECK(returns[i].type->kind() != TypeKind::Tensor || s[i].isTensor(), Value, op.name(),
                 ": its kernel returned ", s[i].typeName(), " for result ", i, ", which the schema declares Tensor");
  }
}

// `strata call OP ARGS --vmap IN_DIMS`: the tensor arguments go to vmap as one list
// (each with its in_dim); the function rebuilds the op's stack around the batched
// tensors and calls the op (through explain() with --explain, which then shows the
// Batched step). Returns the results, unwrapped.
Stack callUnderVmap(const OperatorHandle& op, Stack stack, const std::string& in_dims_text, bool with_explain,
                    QTextStream& out) {
  const FunctionSchema& schema = op.schema();
  bool broadcast = false;
  std::vector<modes::Dim> dims = parseVmapInDims(in_dims_text, schema.arguments().size(), &broadcast);
  // As written: one in_dim for every tensor is torch.vmap(op, 1), not a tuple with one
  // per argument (the non-tensors' are None).
  const std::string shown =
      broadcast ? in_dims_text : modes::Dims(std::vector<modes::DimEntry>(dims.begin(), dims.end())).str();
  // The tensors go to vmap as one list, each with its in_dim; where[k] is the
  // argument (and, in a Tensor[], the element) tensor k came from.
  struct Where {
    size_t arg;
    std::optional<size_t> element;
  };
  std::vector<Where> where;
  std::vector<Tensor> tensors;
  std::vector<modes::Dim> tensor_dims;
  auto checkRange = [&](size_t i, const Tensor& t) {
    const int64_t n = t.dim();
    STRATA_CHECK(!dims[i] || (*dims[i] >= -n && *dims[i] < n), Value, "vmap(", op.name(), ", in_dims=", shown,
                 ", ...)(<inputs>): Got in_dim=", *dims[i], " for some input (argument ", i, ", ",
                 schema.arguments()[i].name, "), but that input is a Tensor of dimensionality ", n,
                 " so expected in_dim to satisfy -", n, " <= in_dim < ", n, ".");
  };
  for (size_t i = 0; i < stack.size(); ++i) {
    if (stack[i].isTensor()) {
      checkRange(i, stack[i].toTensor());
      where.push_back({i, std::nullopt});
      tensors.push_back(stack[i].toTensor());
      tensor_dims.push_back(dims[i]);
    } else if (stack[i].isTensorList()) {
      const std::vector<Tensor>& ts = stack[i].toTensorList();
      for (size_t k = 0; k < ts.size(); ++k) {
        checkRange(i, ts[k]);
        where.push_back({i, k});
        tensors.push_back(ts[k]);
        tensor_dims.push_back(dims[i]);
      }
    } else if (broadcast) {
      dims[i] = std::nullopt;  // one in_dim for all maps the tensors, as torch.vmap(op, 0) with defaults unset
    } else {
      STRATA_CHECK(!dims[i], Value, "vmap(", op.name(), ", in_dims=", shown, ", ...)(<inputs>): Got in_dim=",
                   *dims[i], " for an input (argument ", i, ", ", schema.arguments()[i].name,
                   ") but the input is of type ", stack[i].typeName(),
                   ". We cannot vmap over non-Tensor arguments, please use None as the respective in_dim");
    }
  }
  for (const Argument& r : schema.returns()) {
    STRATA_CHECK(r.type->kind() == TypeKind::Tensor, Value, "--vmap: ", op.name(), " returns ", r.type->str(),
                 "; vmap needs an op that returns Tensors");
  }
  std::string explanation;
  auto fn = [&](const std::vector<Tensor>& batched) {
    Stack s = stack;
    for (size_t k = 0; k < where.size(); ++k) {
      if (!where[k].element) {
        s[where[k].arg] = IValue(batched[k]);
        continue;
      }
      std::vector<Tensor> list = s[where[k].arg].toTensorList();
      list[*where[k].element] = batched[k];
      s[where[k].arg] = IValue(std::move(list));
    }
    if (with_explain) {
      std::exception_ptr failure;
      const Explanation ex = explain(op, std::move(s), &failure);
      explanation = ex.str();
      if (failure) {
        out << q(explanation) << (ex.steps.empty() ? "failed before any kernel ran\n" : "failed at the last step above\n");
        out.flush();
        std::rethrow_exception(failure);
      }
      s = ex.results;
    } else {
      op.callBoxed(s);
    }
    checkReturned(op, s);
    std::vector<Tensor> results;
    for (const IValue& v : s) results.push_back(v.toTensor());
    return results;
  };
  const std::vector<Tensor> results = modes::vmap(fn, {modes::DimEntry(tensor_dims)})(tensors);
  if (with_explain) {
    out << q(explanation);
    out << "result:\n";
  }
  Stack out_stack;
  for (const Tensor& t : results) out_stack.push_back(t);
  return out_stack;
}

int runCallCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Run an operator on literal arguments and print its results.\n\n"
      "Arguments are read by the type the schema gives them; NAME=VALUE sets one by name:\n"
      "  ints 3 -1   floats 2.0 1e-3   bools true false   None   strings   lists [1,2]\n"
      "  dtypes float16 f16   devices cpu meta\n"
      "  tensors [1,2,3]  [[1,2],[3,4]]:f16  [1.5,2]  ones(2,3)  zeros(4)  randn(3)  rand(2)\n"
      "          arange(5), with ':' modifiers: a dtype, a device, requires_grad\n"
      "          (ones(2,3):meta, randn(3):f64:requires_grad), then PyTorch's methods:\n"
      "          arange(4).reshape(2,2)  ones(2,3).to(f16)  randn(2,3).t().contiguous()\n"
      "          (.reshape .view .to .float .double .half .bfloat16 .int .long .bool .t .T .mT\n"
      "           .transpose .permute .unsqueeze .squeeze .expand .narrow .select .contiguous\n"
      "           .clone .detach .requires_grad_)\n"
      "  tensor lists [ones(2),[1,2]]\n"
      "Options may come anywhere; negative numbers are arguments, not options.");
  parser.addHelpOption();
  parser.addOption({"explain", "Also say why each layer ran: the keys each argument contributed, the TLS sets, "
                               "the final key set, and every kernel chosen, with its owner."});
  parser.addOption({"seed", "Seed of randn/rand (default 0).", "N", "0"});
  parser.addOption({"mode", "Run the call under the dispatch mode NAME (see 'strata modes'): trace prints the ops "
                            "it recorded, log logs one line per op. Repeat to nest, as nested `with` blocks: "
                            "the last one given is the innermost, and sees the call first.",
                    "NAME"});
  parser.addOption({"json", "With --mode trace: print the recorded graph as JSON."});
  parser.addOption({"autocast", "Run the call with autocast on for DEVICE (cpu, cuda, privateuse1), in DTYPE "
                                "(bf16 or f16; default: the device's, bf16 on cpu and f16 on cuda), as "
                                "`with torch.autocast(DEVICE, DTYPE)`. Repeat for several devices. --explain "
                                "shows each autocast rule that ran and every argument it cast.",
                    "DEVICE[:DTYPE]"});
  parser.addOption({"vmap", "Run the call under vmap, as torch.vmap(op, in_dims)(args...): IN_DIMS gives each "
                            "argument's batch dim in schema order, or None (e.g. 0,0,None; omitted trailing "
                            "ones are None), or one dim for every tensor argument (e.g. 0). Prints the batched "
                            "results; --explain shows whether a batching rule or the for-loop fallback ran.",
                    "IN_DIMS"});
  parser.addOption({"fake", "A dry run: run the call under FakeTensorMode, where tensors have sizes, a dtype and "
                            "a device but no data, and print each output's shape, dtype and device (a size that "
                            "depends on data as u0, with its range). No real kernel runs: --explain shows the "
                            "fake implementation or Meta kernel that did. With --vmap, vmap runs under "
                            "FakeTensorMode: the batching rule or the for-loop fallback on fake tensors."});
  addHostOptions(parser);
  parser.addPositionalArgument("op", "The operator: ns::name or ns::name.overload.", "OP");
  parser.addPositionalArgument("args", "Its arguments.", "[ARG...]");
  QTextStream out(stdout);
  QTextStream err(stderr);
  // Pull our options out by hand: QCommandLineParser would take "-1" for an option.
  QStringList options{args.first()};
  QStringList positional;
  bool only_positional = false;
  for (qsizetype i = 1; i < args.size(); ++i) {
    const QString& a = args[i];
    const bool number = a.size() > 1 && a[0] == '-' && (a[1].isDigit() || a[1] == '.' || a.startsWith("-inf"));
    if (only_positional || !a.startsWith('-') || number) {
      positional << a;
    } else if (a == "--") {
      only_positional = true;
    } else {
      options << a;
      static const QStringList kWithValue{"--seed", "-seed", "--mode", "-mode", "--plugins", "-plugins",
                                          "--db", "-db", "--actor", "-actor", "--autocast", "-autocast",
                                          "--vmap", "-vmap"};
      if (kWithValue.contains(a) && i + 1 < args.size()) {
        options << args[++i];
      }
    }
  }
  if (int rc = parseOrExit(parser, options); rc >= 0) return rc;
  if (positional.isEmpty()) {
    err << args.first() << ": expected an OP\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  bool seed_ok = false;
  const qulonglong seed = parser.value("seed").toULongLong(&seed_ok);
  if (!seed_ok) {
    err << args.first() << ": --seed expects a non-negative integer, got '" << parser.value("seed") << "'\n";
    return kExitUsage;
  }
  std::vector<AutocastSpec> autocast;
  for (const QString& a : parser.values("autocast")) {
    try {
      autocast.push_back(parseAutocastSpec(a.toStdString()));
    } catch (const Error& e) {
      err << args.first() << ": --autocast " << q(shortened(a.toStdString())) << ": " << e.what() << "\n";  // the flag, once
      return kExitUsage;
    }
    for (size_t i = 0; i + 1 < autocast.size(); ++i) {
      if (autocast[i].device == autocast.back().device) {
        err << args.first() << ": --autocast names " << toString(autocast.back().device)
            << " twice: give one DEVICE[:DTYPE] per device\n";
        return kExitUsage;
      }
    }
  }
  if (const QStringList vmaps = parser.values("vmap"); vmaps.size() > 1) {
    err << args.first() << ": --vmap given " << vmaps.size()
        << " times: give the in_dims once, one per argument (e.g. --vmap 0,None)\n";
    return kExitUsage;
  } else if (vmaps.size() == 1) {
    try {  // the form here; its fit to the op's arguments once the op is known
      bool broadcast = false;
      parseVmapInDims(vmaps[0].toStdString(), static_cast<size_t>(vmaps[0].count(',')) + 1, &broadcast);
    } catch (const Error& e) {
      err << args.first() << ": " << e.what() << "\n";
      return kExitUsage;
    }
  }
  if (parser.isSet("json") && !parser.values("mode").contains("trace")) {
    err << args.first() << ": --json prints the graph --mode trace records: give --mode trace with it\n";
    return kExitUsage;
  }
  std::unique_ptr<Session> session;
  try {
    session = openSession(parser, true, true);
    const std::string op_text = positional.first().toStdString();
    const QStringList words = positional.mid(1);
    // "ns::name" with no default overload: the first overload the arguments fit,
    // as PyTorch's Python bindings pick one.
    std::vector<OperatorHandle> candidates;
    const OperatorName wanted = parseOperatorName(op_text);
    if (auto h = Dispatcher::singleton().findSchema(wanted)) candidates.push_back(*h);
    if (wanted.overload_name.empty()) {  // the default overload first, then the others by name
      for (const OperatorName& n : Dispatcher::singleton().operatorNames()) {
        if (n.name != wanted.name || n.overload_name.empty()) continue;
        if (auto h = Dispatcher::singleton().findSchema(n)) candidates.push_back(*h);
      }
    }
    if (candidates.empty()) {
      STRATA_CHECK(Dispatcher::singleton().findOp(wanted).has_value(), NotImplemented, "no operator named ",
                   shortened(wanted.str()), whyMissing(*session, wanted), didYouMean(wanted.str(), liveOperatorNames()));
      Dispatcher::singleton().findSchemaOrThrow(op_text);  // kernels but no schema: its own error
    }
    std::optional<OperatorHandle> chosen;
    Stack stack;
    std::string first_error;
    for (const OperatorHandle& candidate : candidates) {
      try {
        stack = bindArguments(candidate.schema(), words, seed);
        chosen = candidate;
        break;
      } catch (const Error& e) {
        if (candidates.size() == 1) first_error = e.what();
        else first_error += "\n  " + candidate.schema().str() + ": " + e.what();
      }
    }
    STRATA_CHECK(chosen.has_value(), Value,
                 candidates.size() == 1 ? first_error : "no overload of " + wanted.name + " takes these arguments:" + first_error);
    const OperatorHandle op = *chosen;
    std::vector<std::shared_ptr<modes::DispatchMode>> pushed;
    // The fake mode goes first, under any --mode: those see the call and pass it down.
    std::shared_ptr<modes::FakeTensorMode> fake;
    if (parser.isSet("fake")) {
      fake = std::make_shared<modes::FakeTensorMode>();
      pushed.push_back(fake);
    }
    for (const QString& name : parser.values("mode")) pushed.push_back(modes::make_mode(name.toStdString()));
    std::vector<std::unique_ptr<modes::AutocastGuard>> autocast_guards;
    for (const AutocastSpec& a : autocast) {
      autocast_guards.push_back(std::make_unique<modes::AutocastGuard>(a.device, a.dtype));
    }
    std::vector<std::unique_ptr<modes::ModeGuard>> guards;
    // Guards end innermost first, on a throw too (a vector destroys its elements
    // first to last, which would end the outer mode while an inner one is on top).
    struct InnermostFirst {
      std::vector<std::unique_ptr<modes::ModeGuard>>& modes;
      std::vector<std::unique_ptr<modes::AutocastGuard>>& autocasts;
      ~InnermostFirst() {
        while (!modes.empty()) modes.pop_back();
        while (!autocasts.empty()) autocasts.pop_back();
      }
    } innermost_first{guards, autocast_guards};
    for (const auto& m : pushed) guards.push_back(std::make_unique<modes::ModeGuard>(m));
    if (parser.isSet("vmap")) {
      if (fake) {
        // The inputs become fake first, as `m.from_tensor(x)` before vmap under
        // FakeTensorMode: vmap hands an in-place op's input back as its result, and a
        // dry run must show that as fake, never the real input unchanged.
        for (IValue& v : stack) {
          if (v.isTensor() && v.toTensor().defined()) {
            v = IValue(fake->from_tensor(v.toTensor()));
          } else if (v.isTensorList()) {
            std::vector<Tensor> list = v.toTensorList();
            for (Tensor& t : list) {
              if (t.defined()) t = fake->from_tensor(t);
            }
            v = IValue(std::move(list));
          }
        }
      }
      stack = callUnderVmap(op, std::move(stack), parser.value("vmap").toStdString(), parser.isSet("explain"), out);
    } else if (parser.isSet("explain")) {
      std::exception_ptr failure;
      const Explanation ex = explain(op, std::move(stack), &failure);
      out << q(ex.str());
      if (failure) {
        out << (ex.steps.empty() ? "failed before any kernel ran\n" : "failed at the last step above\n");
        out.flush();
        std::rethrow_exception(failure);
      }
      stack = ex.results;
      out << "result:\n";
    } else {
      try {
        op.callBoxed(stack);
      } catch (const Error&) {
        throw;  // Strata's errors name the op where it matters
      } catch (const std::exception& e) {
        throw std::runtime_error(op.name() + ": " + e.what());  // a bundle's own exception: say whose
      }
    }
    if (!parser.isSet("vmap")) checkReturned(op, stack);
    while (!guards.empty()) guards.pop_back();  // innermost first
    while (!autocast_guards.empty()) autocast_guards.pop_back();  // innermost first
    for (const IValue& v : stack) {
      if (v.isTensor() && modes::is_fake(v.toTensor())) {
        const Tensor& t = v.toTensor();
        std::string line = "FakeTensor(shape=" + sym::shapeStr(t.sizes()) + ", dtype=" + toString(t.dtype()) +
                           ", device=" + t.device().str() + ")";
        if (const std::string ranges = sym::rangesStr(t.sizes()); !ranges.empty()) line += "  where " + ranges;
        out << q(line) << "\n";
        continue;
      }
      out << q(v.isTensor() ? v.toTensor().str() : v.repr()) << "\n";
    }
    for (size_t i = 0; i < pushed.size(); ++i) {
      const auto* trace = dynamic_cast<const modes::TraceMode*>(pushed[i].get());
      if (trace == nullptr) {
        if (const std::string sm = pushed[i]->summary(); !sm.empty()) out << q(sm) << "\n";
        continue;
      }
      const modes::TraceGraph g = trace->graph();
      if (parser.isSet("json")) {
        out << q(g.json());
      } else {
        out << "trace (" << g.nodes.size() << (g.nodes.size() == 1 ? " op" : " ops") << "):\n" << q(g.str());
      }
    }
    return kExitOk;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << (session ? q(whyDisabled(*session, e, storeArgument(parser).toStdString())) : QString()) << "\n";
    return kExitInvalidInput;
  }
}

}  // namespace strata::host
