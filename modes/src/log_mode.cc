#include "strata/modes/log_mode.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <ostream>
#include <sstream>

namespace strata::modes {

namespace {

struct GlobalSink {
  std::mutex mu;
  LogSink sink;
};

GlobalSink& globalSink() {
  static GlobalSink* g = new GlobalSink();  // leaked: modes may log during static destruction
  return *g;
}

GlobalSink& warningSink() {
  static GlobalSink* g = new GlobalSink();  // leaked, as globalSink
  return *g;
}

std::string describeStack(const Stack& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + describeValue(s[i]);
  return out;
}

std::string formatDuration(std::chrono::nanoseconds d) {
  char buf[32];
  const double ns = static_cast<double>(d.count());
  if (ns < 1e3) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (ns < 1e6) std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  else if (ns < 1e9) std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  return buf;
}

}  // namespace

std::string describeValue(const IValue& v) {
  if (v.isTensor()) {
    const Tensor& t = v.toTensor();
    if (!t.defined()) return "undefined";
    std::string s = toString(t.dtype());
    s += "[";
    for (size_t i = 0; i < t.sizes().size(); ++i) s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
    s += "] ";
    s += toString(t.device().type);
    if (t.requires_grad()) s += " requires_grad";
    return s;
  }
  if (v.isTensorList()) {
    std::string s = "[";
    const auto& ts = v.toTensorList();
    for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + describeValue(ts[i]);
    return s + "]";
  }
  if (v.isGenericList()) {
    std::string s = "[";
    const auto& xs = v.toList();
    for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + describeValue(xs[i]);
    return s + "]";
  }
  std::ostringstream os;
  os << v;
  return os.str();
}

void set_log_sink(LogSink sink) {
  GlobalSink& g = globalSink();
  std::lock_guard<std::mutex> lock(g.mu);
  g.sink = std::move(sink);
}

void set_warning_sink(LogSink sink) {
  GlobalSink& g = warningSink();
  std::lock_guard<std::mutex> lock(g.mu);
  g.sink = std::move(sink);
}

void warn(std::string_view message) {
  LogSink sink;
  {
    GlobalSink& g = warningSink();
    std::lock_guard<std::mutex> lock(g.mu);
    sink = g.sink;
  }
  if (sink) sink(message);
  else std::fprintf(stderr, "strata: warning: %.*s\n", static_cast<int>(message.size()), message.data());
}

LogMode::LogMode(std::ostream& os)
    : sink_([&os](std::string_view line) { os << line << '\n'; }) {}

void LogMode::writeLine(std::string_view line) const {
  if (sink_) {
    sink_(line);
    return;
  }
  LogSink sink;
  {
    GlobalSink& g = globalSink();
    std::lock_guard<std::mutex> lock(g.mu);
    sink = g.sink;
  }
  if (sink) sink(line);
  else std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
}

Stack LogMode::dispatch(const OperatorHandle& op, const TensorTypes&, Stack args) {
  std::string line = op.name() + "(" + describeStack(args) + ")";
  const auto start = std::chrono::steady_clock::now();
  Stack out;
  try {
    out = call(op, std::move(args));
  } catch (const std::exception& e) {
    const auto took = std::chrono::steady_clock::now() - start;
    writeLine(line + " raised: " + e.what() + "  " + formatDuration(took));
    throw;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  writeLine(line + " -> (" + describeStack(out) + ")  " + formatDuration(took));
  return out;
}

}  // namespace strata::modes
