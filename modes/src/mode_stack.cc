// The mode stack, the Mode-key fallback and register_torch_dispatch. See Note [The
// mode stack] in dispatch_mode.h.
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "strata/error.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/fake.h"
#include "strata/modes/log_mode.h"
#include "strata/modes/trace_mode.h"
#include "registered_at.h"
#include "autograd_internal.h"
#include "vmap_internal.h"

namespace strata::modes {

namespace detail {
void registerCoreAutocastRules(std::vector<RegistrationHandleRAII>& keep);  // autocast.cc
RegistrationHandleRAII registerFakeFallback();                              // fake.cc
}  // namespace detail

namespace {

constexpr std::string_view kTorchDispatch = "torch_dispatch";
constexpr uint64_t kModeBit = uint64_t{1} << static_cast<unsigned>(DispatchKey::Mode);

// Bottom first. While a handler runs, its mode is off the stack (Note [The mode
// stack]) but stays in `modes`: the top `hidden` entries are the modes whose handlers
// are running, innermost lowest, and the stack a user sees is the rest below them. So
// a trip through the fallback moves a count, not a shared_ptr; a mode pushed from a
// handler goes in below the hidden ones, and comes out on top of the visible stack.
// Each entry also says, once at push, whether the mode is a BoxedDispatchMode, so the
// fallback never casts.
struct ModeStack {
  struct Entry {
    std::shared_ptr<DispatchMode> mode;
    BoxedDispatchMode* boxed;  // mode.get() when it is one, else null
  };
  std::vector<Entry> modes;
  size_t hidden = 0;
  size_t size() const { return modes.size() - hidden; }
  bool empty() const { return size() == 0; }
  Entry& top() { return modes[size() - 1]; }
  void push(std::shared_ptr<DispatchMode> mode) {
    BoxedDispatchMode* boxed = dynamic_cast<BoxedDispatchMode*>(mode.get());
    modes.insert(modes.end() - static_cast<std::ptrdiff_t>(hidden), Entry{std::move(mode), boxed});
  }
  std::shared_ptr<DispatchMode> pop() {
    std::shared_ptr<DispatchMode> t = std::move(top().mode);
    modes.erase(modes.begin() + static_cast<std::ptrdiff_t>(size() - 1));
    return t;
  }
};

// Each thread has its own stack: modes never leak across threads. It is reached
// through an initial-exec __thread pointer (one %fs-relative load on every trip
// through the fallback) and freed by a thread_local owner when the thread exits.
__thread ModeStack* tls_stack __attribute__((tls_model("initial-exec"))) = nullptr;
struct ModeStackOwner {
  std::unique_ptr<ModeStack> stack;
  ~ModeStackOwner() { tls_stack = nullptr; }
};
thread_local ModeStackOwner tls_stack_owner;

ModeStack& modeStack() {
  if (__builtin_expect(tls_stack == nullptr, 0)) {
    tls_stack_owner.stack = std::make_unique<ModeStack>();
    tls_stack = tls_stack_owner.stack.get();
  }
  return *tls_stack;
}
bool noModes() { return tls_stack == nullptr || tls_stack->empty(); }

// The Mode key is included exactly while the stack is non-empty.
void syncModeKey(const ModeStack& modes) {
  auto& tls = strata::detail::tls_local_dispatch_key_set;
  if (modes.empty()) tls.included &= ~kModeBit;
  else tls.included |= kModeBit;
}

std::string where(const std::source_location& loc) { return detail::registeredAt(loc); }

// Out of line and cold: the hot check below stays a few compares.
[[noreturn]] __attribute__((noinline, cold)) void badResults(const OperatorHandle& op, const DispatchMode& mode,
                                                             bool by_rule, const Stack& out, size_t bad_index) {
  const FunctionSchema& schema = op.schema();
  const char* handler = by_rule                                          ? "the torch_dispatch rule of "
                        : dynamic_cast<const BoxedDispatchMode*>(&mode) ? "the dispatch_boxed() of mode "
                                                                         : "the dispatch() of mode ";
  const std::string who = handler + mode.name();
  if (bad_index == SIZE_MAX) {
    STRATA_FAIL(Value, op.name(), ": ", who, " returned ", out.size(), " value(s), but the schema (", schema.str(),
                ") has ", schema.returns().size());
  }
  STRATA_FAIL(Value, op.name(), ": ", who, " returned ", out[bad_index].typeName(), " for result ", bad_index,
              ", which the schema declares Tensor");
}

void checkResults(const OperatorHandle& op, const DispatchMode& mode, bool by_rule, const Stack& out) {
  const FunctionSchema& schema = op.schema();
  const auto& returns = schema.returns();
  const size_t n = returns.size();
  if (__builtin_expect(out.size() != n, 0) && !schema.is_varret()) badResults(op, mode, by_rule, out, SIZE_MAX);
  const size_t m = n < out.size() ? n : out.size();
  for (size_t i = 0; i < m; ++i) {
    // The value's tag first: the schema's type is one more load, needed only for a non-tensor.
    if (__builtin_expect(!out[i].isTensor(), 0) && returns[i].type->kind() == TypeKind::Tensor) {
      badResults(op, mode, by_rule, out, i);
    }
  }
}

// The boxed fallback at the Mode key, for every operator.
void modeFallback(const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  ModeStack* const visible = tls_stack;
  const size_t depth = visible != nullptr ? visible->size() : 0;
  if (__builtin_expect(depth == 0, 0)) {
    // Mode included by hand with no mode pushed: this layer has nothing to do.
    op.redispatchBoxed(ks & keysBelow(DispatchKey::Mode), stack);
    return;
  }
  // The top mode goes off the stack for the handler's run (it stays owned by the
  // stack's vector, so the raw pointer lives as long), and the keys above Mode are
  // excluded: one save of the TLS key set, one restore, whether the handler returns
  // or throws.
  ModeStack& modes = *visible;
  const ModeStack::Entry& top = modes.modes[depth - 1];
  DispatchMode* const mode = top.mode.get();
  BoxedDispatchMode* const boxed = top.boxed;
  ++modes.hidden;
  RawLocalDispatchKeySet& tls = strata::detail::tls_local_dispatch_key_set;
  struct PutBack {
    ModeStack& modes;
    uint64_t excluded;
    ~PutBack() {
      --modes.hidden;
      RawLocalDispatchKeySet& tls = strata::detail::tls_local_dispatch_key_set;
      tls.excluded = excluded;
      tls.included |= kModeBit;  // the stack holds this mode again
    }
  } put_back{modes, tls.excluded};
  tls.excluded |= keysAbove(DispatchKey::Mode).raw();
  if (depth == 1) tls.included &= ~kModeBit;  // the handler sees an empty stack

  const auto* rule = op.hasRules() ? static_cast<const TorchDispatchRule*>(op.findRule(kTorchDispatch, typeid(*mode)))
                                    : nullptr;
  if (rule == nullptr && boxed != nullptr) {
    boxed->dispatch_boxed(op, stack);  // in place: no types, no moves
  } else {
    // The handler takes the arguments (stack is left empty) and its results become the stack.
    const TensorTypes types = TensorTypes::of(stack);
    stack = rule != nullptr ? (*rule)(*mode, op, types, std::move(stack)) : mode->dispatch(op, types, std::move(stack));
  }
  checkResults(op, *mode, rule != nullptr, stack);
}

// The named mode types.
struct ModeTypeEntry {
  ModeTypeInfo info;
  ModeFactory factory;
  uint64_t id = 0;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, ModeTypeEntry, std::less<>> types;
  uint64_t next_id = 1;
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: handles may outlive static destruction
  return *r;
}

bool validModeName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == '-';
    if (!ok) return false;
  }
  return true;
}

RegistrationHandleRAII addModeType(std::string name, std::string description, ModeFactory factory,
                                              std::string debug) {
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration("register_mode_type(" + name + ") (" + debug + ")");
  }
  STRATA_CHECK(validModeName(name), Value, "invalid mode type name '", name, "' (", debug,
               "): use letters, digits, '_', '.' and '-'");
  STRATA_CHECK(static_cast<bool>(factory), Value, "mode type '", name, "' (", debug, ") has no factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (auto it = r.types.find(name); it != r.types.end()) {
    STRATA_FAIL(Value, "a mode type named '", name, "' is already registered by '", it->second.info.owner, "' (",
                it->second.info.debug, "); the new one, by '", RegistrationOwnerGuard::current(), "' (", debug,
                "), is refused");
  }
  const uint64_t id = r.next_id++;
  ModeTypeEntry e;
  e.info = {name, std::move(description), RegistrationOwnerGuard::current(), std::move(debug)};
  e.factory = std::move(factory);
  e.id = id;
  r.types.emplace(name, std::move(e));
  return RegistrationHandleRAII([name, id] {
    Registry& reg = registry();
    ModeFactory gone;  // destroyed outside the lock (it may hold a bundle's state)
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.types.find(name);
    if (it == reg.types.end() || it->second.id != id) return;
    gone = std::move(it->second.factory);
    reg.types.erase(it);
  });
}

// What initialize() registers, once; leaked like the dispatcher.
struct Runtime {
  RegistrationHandleRAII fallback;
  std::vector<RegistrationHandleRAII> builtin_types;
  std::vector<RegistrationHandleRAII> autocast_rules;
  RegistrationHandleRAII vmap_fallback;
  RegistrationHandleRAII fake_fallback;
  std::vector<RegistrationHandleRAII> batching_rules;
  RegistrationHandleRAII autograd_fallback;
  std::vector<RegistrationHandleRAII> autograd_formulas;
  Runtime() {
    RegistrationOwnerGuard owner("builtin");
    const auto here = std::source_location::current();
    fallback = Dispatcher::singleton().registerFallback(
        // A lambda, not &modeFallback: the kernel's thunk then calls the fallback
        // directly (a function pointer would be a second indirect call per layer).
        DispatchKey::Mode,
        KernelFunction::makeFromBoxedFunctor(
            [](const OperatorHandle& op, DispatchKeySet ks, Stack& stack) { modeFallback(op, ks, stack); }),
        {RegistrationOwnerGuard::current(), where(here), false});
    builtin_types.push_back(addModeType(
        "trace", "records every op (name, shapes, dtypes, outputs) as a graph; prints, exports JSON, replays",
        [] { return std::make_shared<TraceMode>(); }, where(here)));
    builtin_types.push_back(addModeType(
        "log", "one line per op (name, shapes, time taken) to the log sink",
        [] { return std::make_shared<LogMode>(); }, where(here)));
    builtin_types.push_back(addModeType(
        "passthrough", "calls the op below and returns", [] { return std::make_shared<PassthroughMode>(); },
        where(here)));
    detail::registerCoreAutocastRules(autocast_rules);
    vmap_fallback = detail::registerVmapFallback();
    fake_fallback = detail::registerFakeFallback();
    builtin_types.push_back(addModeType(
        "fake", "FakeTensorMode: ops run their fake implementations on tensors without data",
        [] { return std::make_shared<FakeTensorMode>(); }, where(here)));
    detail::registerCoreBatchingRules(batching_rules);
    autograd_fallback = detail::registerAutogradFallback();
    detail::registerCoreFormulas(autograd_formulas);
  }
};

}  // namespace

// ---------------------------------------------------------------------------

std::string TensorType::str() const {
  std::string s = std::string(toString(device)) + ":" + toString(dtype);
  if (requires_grad) s += ":requires_grad";
  return s;
}

void TensorTypes::add(const Tensor& t) {
  if (!t.defined()) return;
  const TensorImpl& impl = *t.unsafeGetTensorImpl();
  keys_ = keys_ | impl.key_set();
  const TensorType tt{impl.storage()->device().type, impl.dtype(), impl.requires_grad()};
  for (size_t i = 0; i < n_; ++i) {
    if (types_[i] == tt) return;
  }
  if (__builtin_expect(n_ == kMax, 0)) {
    truncated_ = true;
    return;
  }
  types_[n_++] = tt;
}

// Every trip through the Mode fallback computes these: plain tensors first, the rest
// out of line.
TensorTypes TensorTypes::of(const Stack& args) {
  TensorTypes out;
  for (const IValue& v : args) {
    if (__builtin_expect(v.isTensor(), 1)) {
      out.add(v.toTensor());
    } else if (v.isTensorList()) {
      for (const Tensor& t : v.toTensorList()) out.add(t);
    } else if (v.isGenericList()) {
      for (const IValue& x : v.toList()) {
        if (x.isTensor()) out.add(x.toTensor());
      }
    }
  }
  return out;
}

std::string TensorTypes::str() const {
  std::string s = "(";
  for (size_t i = 0; i < n_; ++i) {
    if (i != 0) s += ", ";
    s += types_[i].str();
  }
  if (truncated_) s += ", ...";
  return s + ")";
}

DispatchMode::~DispatchMode() = default;

std::string DispatchMode::name() const { return demangle(typeid(*this)); }

Stack call(const OperatorHandle& op, Stack args) {
  op.callBoxed(args);
  return args;
}

Stack BoxedDispatchMode::dispatch(const OperatorHandle& op, const TensorTypes&, Stack args) {
  dispatch_boxed(op, args);
  return args;
}

Stack PassthroughMode::dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) {
  return BoxedDispatchMode::dispatch(op, types, std::move(args));
}

void PassthroughMode::dispatch_boxed(const OperatorHandle& op, Stack& stack) {
  ++calls_;
  op.callBoxed(stack);
}

void initialize() {
  // Leaked on purpose, like the dispatcher. volatile keeps the pointer stored, so
  // LeakSanitizer sees it as reachable.
  // Its builtin fallbacks are Strata's even when a bundle's load first needs them
  // (Note [Static registrations in bundles] in strata/plugin.h).
  static Runtime* volatile runtime = [] {
    strata::detail::SuspendStaticCapture suspend;
    return new Runtime();
  }();
  (void)runtime;
}

void push_mode(std::shared_ptr<DispatchMode> mode) {
  STRATA_CHECK(mode != nullptr, Value, "push_mode: the mode is null");
  initialize();
  ModeStack& modes = modeStack();
  modes.push(std::move(mode));
  syncModeKey(modes);
}

std::shared_ptr<DispatchMode> pop_mode() {
  STRATA_CHECK(!noModes(), Value, "pop_mode: this thread's mode stack is empty");
  ModeStack& modes = *tls_stack;
  std::shared_ptr<DispatchMode> top = modes.pop();
  syncModeKey(modes);
  return top;
}

size_t mode_stack_size() { return noModes() ? 0 : tls_stack->size(); }

std::vector<std::shared_ptr<DispatchMode>> mode_stack() {
  if (noModes()) return {};
  const auto& all = tls_stack->modes;
  std::vector<std::shared_ptr<DispatchMode>> out;
  out.reserve(tls_stack->size());
  for (size_t i = 0; i < tls_stack->size(); ++i) out.push_back(all[i].mode);
  return out;
}

std::shared_ptr<DispatchMode> current_mode() { return noModes() ? nullptr : tls_stack->top().mode; }

ModeGuard::ModeGuard(std::shared_ptr<DispatchMode> mode) : mode_(std::move(mode)) { push_mode(mode_); }

ModeGuard::~ModeGuard() {
  if (!noModes() && tls_stack->top().mode == mode_) {
    tls_stack->pop();
    syncModeKey(*tls_stack);
    return;
  }
  std::fprintf(stderr, "strata: ModeGuard for mode '%s' ends, but that mode is not on top of the mode stack; "
               "the stack is left as it is (scopes must nest)\n", mode_->name().c_str());
}

namespace detail {

RegistrationHandleRAII registerTorchDispatch(std::string_view op, const std::type_info& mode_type,
                                             TorchDispatchRule rule, std::source_location loc) {
  initialize();
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration("register_torch_dispatch(" + std::string(op) + ", " +
                                                    demangle(mode_type) + ") (" + where(loc) + ")");
  }
  STRATA_CHECK(static_cast<bool>(rule), Value, "register_torch_dispatch(", op, ", ", demangle(mode_type),
               "): the rule is empty");
  const OperatorName name = parseOperatorName(op);
  auto payload = std::make_shared<const TorchDispatchRule>(std::move(rule));
  return Dispatcher::singleton().registerRule(name, std::string(kTorchDispatch), mode_type, std::move(payload),
                                              {RegistrationOwnerGuard::current(), where(loc), false});
}

}  // namespace detail

RegistrationHandleRAII register_mode_type(std::string name, std::string description, ModeFactory factory,
                                          std::source_location loc) {
  initialize();
  return addModeType(std::move(name), std::move(description), std::move(factory), where(loc));
}

void register_mode_type(std::string name, std::string description, ModeFactory factory, Library& lib,
                        std::source_location loc) {
  lib.keep(register_mode_type(std::move(name), std::move(description), std::move(factory), loc));
}

std::shared_ptr<DispatchMode> make_mode(std::string_view name) {
  initialize();
  ModeFactory factory;
  std::string owner;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.types.find(name);
    if (it == r.types.end()) {
      std::string known;
      for (const auto& [n, _] : r.types) known += (known.empty() ? "" : ", ") + n;
      STRATA_FAIL(Value, "no mode type named '", strata::detail::shortened(name), "'; known: ", known.empty() ? "(none)" : known);
    }
    factory = it->second.factory;
    owner = it->second.info.owner;
  }
  std::shared_ptr<DispatchMode> mode = factory();
  STRATA_CHECK(mode != nullptr, Value, "the factory of mode type '", name, "' (owner '", owner, "') returned null");
  return mode;
}

std::vector<ModeTypeInfo> mode_types() {
  initialize();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<ModeTypeInfo> out;
  for (const auto& [_, e] : r.types) out.push_back(e.info);
  return out;
}

}  // namespace strata::modes
