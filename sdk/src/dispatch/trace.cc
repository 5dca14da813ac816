// The dispatch trace (STRATA_DISPATCH_TRACE=1, set_dispatch_trace) and explain().
//
// Both observe calls through one slow-path hook: while anything observes, the
// global g_dispatch_observers is non-zero and every call and redispatch reports to
// traceEnter/traceExit; otherwise calls pay one relaxed load and a predicted branch.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "dispatch/operator_entry.h"
#include "strata/dispatcher.h"

namespace strata {

namespace {

std::atomic<bool> g_trace_on{false};
std::mutex g_sink_mu;
std::function<void(std::string_view)>* g_sink = nullptr;  // guarded by g_sink_mu

thread_local int tls_depth = 0;
thread_local std::vector<Explanation::Step>* tls_capture = nullptr;

SlotInfo slotFor(const OperatorHandle& op, DispatchKeySet ks) {
  const DispatchKey k = ks.highestPriorityKey();
  try {
    for (SlotInfo& s : Dispatcher::singleton().computedTable(op.operator_name())) {
      if (s.key == k) return s;
    }
  } catch (const Error&) {
    // A removed operator: report a missing slot.
  }
  SlotInfo s;
  s.key = k;
  s.source = "missing";
  return s;
}

// A slot with no kernel because an admin or a scope switched one off: which kernel
// would have served it (the call's error says the same).
void disabledNotes(const OperatorHandle& op, DispatchKey k, std::vector<std::string>& notes) {
  try {
    for (const RegistrationInfo& r : Dispatcher::singleton().registrations(op.operator_name())) {
      const bool would_serve = k == DispatchKey::Undefined ? r.key == DispatchKey::CompositeExplicitAutograd ||
                                                                 r.key == DispatchKey::CompositeImplicitAutograd
                                                           : runtimeKeySetFor(r.key).has(k);
      if (r.what == RegistrationInfo::What::Def || r.enabled || !would_serve) continue;
      notes.push_back("its " + std::string(toString(r.key)) + " kernel is disabled (set_kernel_enabled): " + r.kind +
                      ", owner " + r.owner + ", " + r.debug);
    }
  } catch (const Error&) {
    // A removed operator: nothing to say.
  }
}

std::string stepLine(const Explanation::Step& st) {
  std::ostringstream os;
  os << std::string(static_cast<size_t>(st.depth) * 2, ' ') << (st.redispatch ? "redispatch " : "call ")
     << st.op << (st.boxed ? " (boxed)" : "") << "  keys=" << st.keys.str() << " -> "
     << (st.slot.key == DispatchKey::Undefined ? "(no keys)" : toString(st.slot.key)) << ": " << st.slot.source;
  if (!st.slot.owner.empty()) {
    os << " [" << st.slot.kind;
    if (st.slot.registered_at != st.slot.key && st.slot.registered_at != DispatchKey::Undefined) {
      os << " at " << toString(st.slot.registered_at);
    }
    os << ", owner " << st.slot.owner << ", " << st.slot.debug << "]";
  }
  return os.str();
}

void emit(std::string_view line) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (g_sink != nullptr && *g_sink) {
    (*g_sink)(line);
  } else {
    std::fprintf(stderr, "[strata dispatch] %.*s\n", static_cast<int>(line.size()), line.data());
  }
}

// STRATA_DISPATCH_TRACE=1 turns the trace on at load time.
const bool g_env_trace = [] {
  const char* v = std::getenv("STRATA_DISPATCH_TRACE");
  if (v != nullptr && (std::string_view(v) == "1" || std::string_view(v) == "true")) {
    g_trace_on.store(true);
    detail::g_dispatch_observers.fetch_add(1);
    return true;
  }
  return false;
}();

}  // namespace

namespace detail {

void traceEnter(const OperatorHandle& op, DispatchKeySet ks, bool redispatch, bool boxed) {
  const int depth = tls_depth++;
  const bool tracing = g_trace_on.load(std::memory_order_relaxed);
  if (!tracing && tls_capture == nullptr) return;
  Explanation::Step st;
  st.depth = depth;
  st.op = op.name();
  st.redispatch = redispatch;
  st.boxed = boxed;
  st.keys = ks;
  st.slot = slotFor(op, ks);
  if (std::string_view(st.slot.source) == "missing") disabledNotes(op, ks.highestPriorityKey(), st.notes);
  if (tracing) {
    emit(stepLine(st));
    for (const std::string& n : st.notes) emit(std::string(static_cast<size_t>(depth) * 2 + 4, ' ') + n);
  }
  if (tls_capture != nullptr) tls_capture->push_back(std::move(st));
}

void traceExit() { --tls_depth; }

}  // namespace detail

// Each line of a note, indented by `indent` spaces.
static std::string indentLines(const std::string& note, size_t indent) {
  std::string out(indent, ' ');
  for (char c : note) {
    out += c;
    if (c == '\n') out.append(indent, ' ');
  }
  return out;
}

bool detail::dispatchObservedOnThisThread() {
  return tls_capture != nullptr || g_trace_on.load(std::memory_order_relaxed);
}

void note_dispatch_step(std::string note) {
  const bool tracing = g_trace_on.load(std::memory_order_relaxed);
  if (!tracing && tls_capture == nullptr) return;
  // The running kernel's step is the newest one at the depth just above this one.
  const int depth = tls_depth - 1;
  if (tracing) {
    const size_t indent = static_cast<size_t>(depth < 0 ? 0 : depth) * 2 + 2;
    for (size_t start = 0; start <= note.size();) {
      const size_t end = std::min(note.find('\n', start), note.size());
      emit(std::string(indent, ' ') + note.substr(start, end - start));
      start = end + 1;
    }
  }
  if (tls_capture == nullptr) return;
  for (auto it = tls_capture->rbegin(); it != tls_capture->rend(); ++it) {
    if (it->depth == depth) {
      it->notes.push_back(std::move(note));
      return;
    }
  }
}

void set_dispatch_trace(bool on) {
  const bool was = g_trace_on.exchange(on);
  if (was != on) detail::g_dispatch_observers.fetch_add(on ? 1 : -1);
}

bool dispatch_trace_enabled() { return g_trace_on.load(); }

void set_dispatch_trace_sink(std::function<void(std::string_view)> sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  delete g_sink;
  g_sink = sink ? new std::function<void(std::string_view)>(std::move(sink)) : nullptr;
}

Explanation explain(const OperatorHandle& op, Stack stack) { return explain(op, std::move(stack), nullptr); }

Explanation explain(const OperatorHandle& op, Stack stack, std::exception_ptr* failure) {
  Explanation ex;
  ex.op = op.name();
  const FunctionSchema& schema = op.schema();
  const OperatorInfo* info = op.entry_->info.load(std::memory_order_acquire);
  if (failure != nullptr) {
    *failure = nullptr;
    try {
      info->checkArguments(stack);
    } catch (...) {
      *failure = std::current_exception();
      return ex;
    }
  } else {
    info->checkArguments(stack);
  }
  for (size_t i : info->tensor_args) {
    ex.arguments.push_back({schema.arguments()[i].name, OperatorInfo::keysOfValue(stack[i])});
  }
  for (size_t i : info->device_args) {  // Note [Dispatching on a Device argument]
    ex.arguments.push_back(
        {schema.arguments()[i].name, stack[i].isDevice() ? detail::deviceKeysOf(stack[i].toDevice()) : DispatchKeySet()});
  }
  const LocalDispatchKeySet tls = tls_local_dispatch_key_set();
  ex.tls_included = tls.included;
  ex.tls_excluded = tls.excluded;
  ex.non_fallthrough = op.nonFallthroughKeys();
  ex.final_keys = detail::computeCallKeys(info->argumentKeys(stack), ex.non_fallthrough);

  struct Capture {
    std::vector<Explanation::Step>* saved;
    int depth;
    explicit Capture(std::vector<Explanation::Step>* steps) : saved(tls_capture), depth(tls_depth) {
      tls_capture = steps;
      tls_depth = 0;
      detail::g_dispatch_observers.fetch_add(1);
    }
    ~Capture() {
      detail::g_dispatch_observers.fetch_sub(1);
      tls_capture = saved;
      tls_depth = depth;
    }
  } capture(&ex.steps);
  if (failure == nullptr) {
    op.callBoxed(stack);
  } else {
    try {
      op.callBoxed(stack);
    } catch (...) {
      *failure = std::current_exception();
      return ex;
    }
  }
  ex.results = std::move(stack);
  return ex;
}

std::string Explanation::str() const {
  std::ostringstream os;
  os << "op: " << op << "\n";
  os << "argument keys:\n";
  if (arguments.empty()) os << "  (no tensor arguments)\n";
  for (const auto& a : arguments) os << "  " << a.name << ": " << a.keys.str() << "\n";
  os << "TLS included: " << tls_included.str() << "\n";
  os << "TLS excluded: " << tls_excluded.str() << "\n";
  os << "non-fallthrough keys of the op: " << non_fallthrough.str() << "\n";
  os << "final key set: " << final_keys.str() << "\n";
  if (!steps.empty()) {
    const auto& s = steps.front().slot;
    os << "chosen: " << (s.key == DispatchKey::Undefined ? "(no keys)" : toString(s.key)) << " -> " << s.source;
    if (!s.owner.empty()) os << " (" << s.kind << ", owner " << s.owner << ", " << s.debug << ")";
    os << "\n";
  }
  os << "dispatch steps:\n";
  for (const auto& st : steps) {
    os << "  " << stepLine(st) << "\n";
    for (const auto& n : st.notes) os << indentLines(n, static_cast<size_t>(st.depth) * 2 + 4) << "\n";
  }
  return os.str();
}

}  // namespace strata
