#include "strata/modes/trace_mode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "strata/error.h"
#include "strata/modes/log_mode.h"

namespace strata::modes {

namespace {

std::string sizesStr(const std::vector<int64_t>& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::string valueName(int64_t id) { return id < 0 ? std::string("None") : "%" + std::to_string(id); }

std::string argStr(const TraceArg& a) {
  switch (a.kind) {
    case TraceArg::Kind::Value: return valueName(a.value);
    case TraceArg::Kind::ValueList: {
      std::string s = "[";
      for (size_t i = 0; i < a.values.size(); ++i) s += (i ? ", " : "") + valueName(a.values[i]);
      return s + "]";
    }
    case TraceArg::Kind::Constant: return describeValue(a.constant);
  }
  return "?";
}

void jsonString(std::ostream& os, std::string_view s) {
  os << '"';
  for (char c : s) {
    switch (c) {
      case '"': os << "\\\""; break;
      case '\\': os << "\\\\"; break;
      case '\n': os << "\\n"; break;
      case '\t': os << "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          os << buf;
        } else {
          os << c;
        }
    }
  }
  os << '"';
}

void jsonDouble(std::ostream& os, double d) {
  if (std::isfinite(d)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", d);
    os << buf;
  } else {
    jsonString(os, std::isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf"));
  }
}

// A constant as JSON: numbers, bools, strings, null and lists; dtypes and devices as
// their names; complex as [re, im].
void jsonConstant(std::ostream& os, const IValue& v) {
  auto list = [&os](const auto& xs, auto each) {
    os << '[';
    bool first = true;
    for (const auto& x : xs) {
      if (!first) os << ", ";
      first = false;
      each(x);
    }
    os << ']';
  };
  if (v.isNone()) os << "null";
  else if (v.isInt()) os << v.toInt();
  else if (v.isDouble()) jsonDouble(os, v.toDouble());
  else if (v.isBool()) os << (v.toBool() ? "true" : "false");
  else if (v.isString()) jsonString(os, v.toStringRef());
  else if (v.isIntList()) list(v.toIntList(), [&os](int64_t x) { os << x; });
  else if (v.isDoubleList()) list(v.toDoubleList(), [&os](double x) { jsonDouble(os, x); });
  else if (v.isBoolList()) list(v.toBoolList(), [&os](bool x) { os << (x ? "true" : "false"); });
  else if (v.isGenericList()) list(v.toList(), [&os](const IValue& x) { jsonConstant(os, x); });
  else if (v.isScalarType()) jsonString(os, toString(v.toScalarType()));
  else if (v.isDevice()) jsonString(os, v.toDevice().str());
  else if (v.isComplex()) {
    os << '[';
    jsonDouble(os, v.toComplex().real());
    os << ", ";
    jsonDouble(os, v.toComplex().imag());
    os << ']';
  } else {
    jsonString(os, describeValue(v));
  }
}

void jsonArg(std::ostream& os, const TraceArg& a) {
  switch (a.kind) {
    case TraceArg::Kind::Value: os << "{\"value\": " << a.value << "}"; return;
    case TraceArg::Kind::ValueList:
      os << "{\"values\": [";
      for (size_t i = 0; i < a.values.size(); ++i) {
        if (i) os << ", ";
        if (a.values[i] < 0) os << "null";
        else os << a.values[i];
      }
      os << "]" << (a.optional_list ? ", \"optional\": true" : "") << "}";
      return;
    case TraceArg::Kind::Constant:
      os << "{\"constant\": ";
      jsonConstant(os, a.constant);
      os << "}";
      return;
  }
}

}  // namespace

std::string TraceValue::str() const {
  return std::string(toString(dtype)) + sizesStr(sizes) + " " + toString(device);
}

std::vector<int64_t> TraceGraph::outputs() const {
  std::vector<bool> used(values.size(), false);
  std::vector<int64_t> out;
  for (size_t n = nodes.size(); n-- > 0;) {
    for (const auto& o : nodes[n].outputs) {
      if (o.kind == TraceArg::Kind::Value && values[o.value].producer == static_cast<int64_t>(n) && !used[o.value]) {
        out.push_back(o.value);
        used[o.value] = true;  // reported once
      }
    }
    for (const auto& a : nodes[n].args) {
      if (a.kind == TraceArg::Kind::Value) used[a.value] = true;
      for (int64_t v : a.values) {
        if (v >= 0) used[v] = true;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string TraceGraph::str() const {
  std::ostringstream os;
  os << "graph(";
  for (size_t i = 0; i < inputs.size(); ++i) {
    os << (i ? ", " : "") << valueName(inputs[i]) << " : " << values[inputs[i]].str();
  }
  os << "):\n";
  for (size_t n = 0; n < nodes.size(); ++n) {
    const TraceNode& node = nodes[n];
    os << "  ";
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const TraceArg& o = node.outputs[i];
      os << (i ? ", " : "") << argStr(o);
      if (o.kind == TraceArg::Kind::Value) {
        os << " : " << values[o.value].str();
        if (values[o.value].producer != static_cast<int64_t>(n)) os << " (same tensor)";
      }
    }
    os << (node.outputs.empty() ? "" : " = ") << node.op << "(";
    for (size_t i = 0; i < node.args.size(); ++i) os << (i ? ", " : "") << argStr(node.args[i]);
    os << ")\n";
  }
  os << "  return (";
  const auto outs = outputs();
  for (size_t i = 0; i < outs.size(); ++i) os << (i ? ", " : "") << valueName(outs[i]);
  os << ")\n";
  return os.str();
}

std::string TraceGraph::json() const {
  std::ostringstream os;
  os << "{\n  \"values\": [";
  for (size_t i = 0; i < values.size(); ++i) {
    const TraceValue& v = values[i];
    os << (i ? "," : "") << "\n    {\"id\": " << v.id << ", \"producer\": " << v.producer << ", \"shape\": [";
    for (size_t d = 0; d < v.sizes.size(); ++d) os << (d ? ", " : "") << v.sizes[d];
    os << "], \"dtype\": ";
    jsonString(os, toString(v.dtype));
    os << ", \"device\": ";
    jsonString(os, toString(v.device));
    os << "}";
  }
  os << "\n  ],\n  \"inputs\": [";
  for (size_t i = 0; i < inputs.size(); ++i) os << (i ? ", " : "") << inputs[i];
  os << "],\n  \"nodes\": [";
  for (size_t n = 0; n < nodes.size(); ++n) {
    os << (n ? "," : "") << "\n    {\"op\": ";
    jsonString(os, nodes[n].op);
    os << ", \"args\": [";
    for (size_t i = 0; i < nodes[n].args.size(); ++i) {
      if (i) os << ", ";
      jsonArg(os, nodes[n].args[i]);
    }
    os << "], \"outputs\": [";
    for (size_t i = 0; i < nodes[n].outputs.size(); ++i) {
      if (i) os << ", ";
      jsonArg(os, nodes[n].outputs[i]);
    }
    os << "]}";
  }
  os << "\n  ],\n  \"outputs\": [";
  const auto outs = outputs();
  for (size_t i = 0; i < outs.size(); ++i) os << (i ? ", " : "") << outs[i];
  os << "]\n}\n";
  return os.str();
}

Stack TraceGraph::replay(const std::vector<Tensor>& new_inputs) const {
  STRATA_CHECK(new_inputs.size() == inputs.size(), Value, "replay: the trace has ", inputs.size(),
               " input(s), but ", new_inputs.size(), " tensor(s) were given");
  std::vector<IValue> env(values.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRATA_CHECK(new_inputs[i].defined(), Value, "replay: input ", i, " (", valueName(inputs[i]), ") is undefined");
    env[inputs[i]] = new_inputs[i];
  }
  auto lookup = [&](int64_t id, const std::string& op) -> IValue {
    if (id < 0) return IValue();
    STRATA_CHECK(static_cast<size_t>(id) < env.size() && !env[id].isNone(), Value, "replay: ", op, " uses ",
                 valueName(id), ", which no earlier node produced");
    return env[id];
  };
  for (const TraceNode& node : nodes) {
    auto h = Dispatcher::singleton().findSchema(parseOperatorName(node.op));
    STRATA_CHECK(h.has_value(), Value, "replay: the trace calls ", node.op, ", which is no longer registered");
    Stack stack;
    stack.reserve(node.args.size());
    for (const TraceArg& a : node.args) {
      switch (a.kind) {
        case TraceArg::Kind::Value: stack.emplace_back(lookup(a.value, node.op)); break;
        case TraceArg::Kind::ValueList:
          if (a.optional_list) {
            std::vector<IValue> xs;
            for (int64_t v : a.values) xs.push_back(lookup(v, node.op));
            stack.emplace_back(std::move(xs));
          } else {
            std::vector<Tensor> xs;
            for (int64_t v : a.values) xs.push_back(lookup(v, node.op).toTensor());
            stack.emplace_back(std::move(xs));
          }
          break;
        case TraceArg::Kind::Constant: stack.push_back(a.constant); break;
      }
    }
    h->callBoxed(stack);
    STRATA_CHECK(stack.size() == node.outputs.size(), Value, "replay: ", node.op, " returned ", stack.size(),
                 " value(s); the trace recorded ", node.outputs.size());
    for (size_t i = 0; i < stack.size(); ++i) {
      const TraceArg& o = node.outputs[i];
      if (o.kind == TraceArg::Kind::Value) env[o.value] = stack[i];
    }
  }
  Stack out;
  for (int64_t id : outputs()) out.push_back(env[id]);
  return out;
}

// ---------------------------------------------------------------------------

int64_t TraceMode::newValue(const Tensor& t, int64_t producer) {
  TraceValue v;
  v.id = static_cast<int64_t>(graph_.values.size());
  v.producer = producer;
  v.sizes.assign(t.sizes().begin(), t.sizes().end());
  v.dtype = t.dtype();
  v.device = t.device().type;
  graph_.values.push_back(std::move(v));
  ids_[t.unsafeGetTensorImpl()] = graph_.values.back().id;
  held_.push_back(t);
  return graph_.values.back().id;
}

int64_t TraceMode::valueOf(const Tensor& t, std::vector<int64_t>& new_inputs) {
  if (!t.defined()) return -1;
  if (auto it = ids_.find(t.unsafeGetTensorImpl()); it != ids_.end()) return it->second;
  const int64_t id = newValue(t, -1);
  new_inputs.push_back(id);
  return id;
}

TraceArg TraceMode::recordArg(const IValue& v, std::vector<int64_t>& new_inputs) {
  TraceArg a;
  if (v.isTensor()) {
    a.kind = TraceArg::Kind::Value;
    a.value = valueOf(v.toTensor(), new_inputs);
  } else if (v.isTensorList()) {
    a.kind = TraceArg::Kind::ValueList;
    for (const Tensor& t : v.toTensorList()) a.values.push_back(valueOf(t, new_inputs));
  } else if (v.isGenericList() && !v.toList().empty() && [&] {
               for (const IValue& x : v.toList()) {
                 if (!x.isTensor() && !x.isNone()) return false;
               }
               return true;
             }()) {
    a.kind = TraceArg::Kind::ValueList;
    a.optional_list = true;
    for (const IValue& x : v.toList()) a.values.push_back(x.isTensor() ? valueOf(x.toTensor(), new_inputs) : -1);
  } else {
    a.constant = v;
  }
  return a;
}

Stack TraceMode::dispatch(const OperatorHandle& op, const TensorTypes&, Stack args) {
  TraceNode node;
  node.op = op.name();
  std::vector<int64_t> new_inputs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    node.args.reserve(args.size());
    for (const IValue& v : args) node.args.push_back(recordArg(v, new_inputs));
  }
  Stack out;
  try {
    out = call(op, std::move(args));
  } catch (...) {
    // Not recorded: forget the inputs this node introduced.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = new_inputs.rbegin(); it != new_inputs.rend(); ++it) {
      if (!graph_.values.empty() && graph_.values.back().id == *it) {
        ids_.erase(held_.back().unsafeGetTensorImpl());
        graph_.values.pop_back();
        held_.pop_back();
      }
    }
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto producer = static_cast<int64_t>(graph_.nodes.size());
  for (const IValue& v : out) {
    TraceArg o;
    if (v.isTensor() && v.toTensor().defined()) {
      o.kind = TraceArg::Kind::Value;
      auto it = ids_.find(v.toTensor().unsafeGetTensorImpl());
      o.value = it != ids_.end() ? it->second : newValue(v.toTensor(), producer);
    } else if (v.isTensorList()) {
      o.kind = TraceArg::Kind::ValueList;
      for (const Tensor& t : v.toTensorList()) {
        if (!t.defined()) {
          o.values.push_back(-1);
          continue;
        }
        auto it = ids_.find(t.unsafeGetTensorImpl());
        o.values.push_back(it != ids_.end() ? it->second : newValue(t, producer));
      }
    } else {
      o.constant = v;
    }
    node.outputs.push_back(std::move(o));
  }
  graph_.inputs.insert(graph_.inputs.end(), new_inputs.begin(), new_inputs.end());
  graph_.nodes.push_back(std::move(node));
  return out;
}

TraceGraph TraceMode::graph() const {
  std::lock_guard<std::mutex> lock(mu_);
  return graph_;
}

size_t TraceMode::numNodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return graph_.nodes.size();
}

void TraceMode::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  graph_ = TraceGraph();
  ids_.clear();
  held_.clear();
}

}  // namespace strata::modes
