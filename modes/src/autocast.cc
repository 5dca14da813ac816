// Autocast state, AutocastGuard, and the rules' kernel. See Note [Autocast] in
// autocast.h.
#include "strata/modes/autocast.h"

#include <array>
#include <map>
#include <memory>
#include <utility>

#include "strata/error.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/ops.h"
#include "registered_at.h"

namespace strata::modes {

namespace {

// --- State (per thread). ---------------------------------------------------

struct DeviceState {
  ScalarType dtype;
  bool cache_enabled = true;
};

// A cached cast: the source is held so that its TensorImpl (the key) stays its own.
struct CachedCast {
  Tensor source;
  Tensor cast;
};

struct State {
  // cpu, cuda, privateuse1 (slot()).
  std::array<DeviceState, 3> devices{{{ScalarType::BFloat16}, {ScalarType::Half}, {ScalarType::Half}}};
  int nesting = 0;
  std::map<std::pair<const TensorImpl*, ScalarType>, CachedCast> cache;
};

thread_local State tls_state;

size_t slot(DeviceType d) {
  switch (d) {
    case DeviceType::CPU: return 0;
    case DeviceType::CUDA: return 1;
    case DeviceType::PrivateUse1: return 2;
    case DeviceType::Meta: break;
  }
  STRATA_FAIL(Value, "autocast has no state for device type '", toString(d),
              "': expected cpu, cuda or privateuse1");
}

DispatchKey keyOf(DeviceType d) {
  slot(d);  // refuses meta
  return autocastKey(d);
}

void checkLowPrecision(DeviceType d, ScalarType t) {
  STRATA_CHECK(t == ScalarType::Half || t == ScalarType::BFloat16, Value, "autocast on ", toString(d),
               " supports the dtypes float16 and bfloat16, not ", toString(t));
}

bool included(DispatchKey k) {
  return DispatchKeySet::fromRaw(strata::detail::tls_local_dispatch_key_set.included).has(k);
}
void setIncluded(DispatchKey k, bool on) {
  auto& tls = strata::detail::tls_local_dispatch_key_set;
  const uint64_t bit = DispatchKeySet(k).raw();
  tls.included = on ? (tls.included | bit) : (tls.included & ~bit);
}

// --- Rules. ------------------------------------------------------------------

struct Rule {
  std::string op;
  DeviceType device;
  DispatchKey key;
  CastPolicy policy;
  std::optional<ScalarType> cast_inputs;  // register_autocast's fixed dtype
  std::vector<std::string> names;         // the schema's argument names
  std::vector<bool> written;              // Tensor(a!) arguments: never cast
  std::vector<size_t> opt_dtype_args;     // fp32_set_opt_dtype: the ScalarType? arguments
  std::string owner;
};

enum class Verdict { Cast, Same, NotFloating, Float64, OtherDevice, Written };

Verdict judge(const Rule& r, const Tensor& t, bool written, ScalarType to) {
  if (written) return Verdict::Written;
  if (!isFloatingType(t.dtype())) return Verdict::NotFloating;
  if (t.dtype() == ScalarType::Double) return Verdict::Float64;
  if (t.device().type != r.device) return Verdict::OtherDevice;
  return t.dtype() == to ? Verdict::Same : Verdict::Cast;
}

// Eligible for any cast: what the policies look at when they choose a dtype. (judge
// says Same for an eligible tensor asked to stay in its own dtype.)
bool eligible(const Rule& r, const Tensor& t, bool written) {
  return t.defined() && judge(r, t, written, t.dtype()) == Verdict::Same;
}

std::string describe(const Rule& r, Verdict v, const std::string& name, const Tensor& t, ScalarType to) {
  const std::string from = toString(t.dtype());
  switch (v) {
    case Verdict::Cast: return name + ": " + from + " -> " + toString(to);
    case Verdict::Same: return name + ": " + from + " (already)";
    case Verdict::NotFloating: return name + ": " + from + " kept (not floating point)";
    case Verdict::Float64: return name + ": float64 kept (float64 is never cast)";
    case Verdict::OtherDevice:
      return name + ": " + from + " kept (on " + t.device().str() + ", the rule is for " + toString(r.device) + ")";
    case Verdict::Written: return name + ": " + from + " kept (the op writes to it)";
  }
  return name;
}

// The cast of one tensor, through the cache where PyTorch's would use it.
Tensor castTensor(const Rule& r, const Tensor& t, ScalarType to) {
  State& st = tls_state;
  const DeviceState& ds = st.devices[slot(r.device)];
  // PyTorch caches leaves that are not views. With no autograd graph yet, every tensor
  // that requires grad is a leaf; a view is told apart by its layout: a cached tensor
  // covers its whole storage, contiguously, from offset 0 (a weight; not w.t(), not a
  // slice), so views made per call do not pile up in the cache.
  const bool cacheable = ds.cache_enabled && st.nesting > 0 && to == ds.dtype && t.dtype() == ScalarType::Float &&
                         t.requires_grad() && t.storage_offset() == 0 && t.is_contiguous() &&
                         t.storage() && t.nbytes() == t.storage()->nbytes();
  if (!cacheable) return ops::to(t, to);
  const auto key = std::make_pair(t.unsafeGetTensorImpl(), to);
  if (auto it = st.cache.find(key); it != st.cache.end()) return it->second.cast;
  Tensor cast = ops::to(t, to);
  st.cache.emplace(key, CachedCast{t, cast});
  return cast;
}

// The dtype the policy casts to; nullopt: cast nothing.
std::optional<ScalarType> targetOf(const Rule& r, const Stack& stack) {
  switch (r.policy) {
    case CastPolicy::lower_precision_fp:
      return r.cast_inputs.value_or(tls_state.devices[slot(r.device)].dtype);
    case CastPolicy::fp32:
      return ScalarType::Float;
    case CastPolicy::fp32_set_opt_dtype:
      return std::nullopt;
    case CastPolicy::promote: {
      std::optional<ScalarType> widest;
      auto see = [&](const Tensor& t, bool written) {
        if (!eligible(r, t, written)) return;
        if (!widest || *widest == t.dtype()) widest = t.dtype();
        else widest = ScalarType::Float;  // float32 wins; float16 with bfloat16 gives float32
      };
      for (size_t i = 0; i < stack.size(); ++i) {
        const bool written = i < r.written.size() && r.written[i];
        const IValue& v = stack[i];
        if (v.isTensor()) see(v.toTensor(), written);
        else if (v.isTensorList()) for (const Tensor& t : v.toTensorList()) see(t, written);
        else if (v.isGenericList()) {
          for (const IValue& x : v.toList()) {
            if (x.isTensor()) see(x.toTensor(), written);
          }
        }
      }
      return widest;
    }
  }
  return std::nullopt;
}

void runRule(const Rule& r, const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  ExcludeDispatchKeyGuard no_autocast(r.key);
  const bool observed = dispatch_observed();
  std::vector<std::string> said;

  if (r.policy == CastPolicy::fp32_set_opt_dtype) {
    // PyTorch's: only when the first tensor argument is eligible; tensors stay as they are.
    const IValue* first = nullptr;
    for (const IValue& v : stack) {
      if (v.isTensor()) {
        first = &v;
        break;
      }
    }
    const bool go = first != nullptr && eligible(r, first->toTensor(), false);
    for (size_t i : r.opt_dtype_args) {
      if (i >= stack.size()) continue;
      if (go && stack[i].isNone()) {
        stack[i] = IValue(ScalarType::Float);
        if (observed) said.push_back(r.names[i] + ": None -> float32");
      } else if (observed) {
        said.push_back(r.names[i] + (go ? ": kept (given)" : ": kept (the first tensor argument is not eligible)"));
      }
    }
  } else if (const std::optional<ScalarType> to = targetOf(r, stack)) {
    for (size_t i = 0; i < stack.size(); ++i) {
      const bool written = i < r.written.size() && r.written[i];
      IValue& v = stack[i];
      // j: the index in a list argument, or -1. The label is made only for a note.
      auto one = [&](const Tensor& t, int64_t j) -> std::optional<Tensor> {
        if (!t.defined()) return std::nullopt;
        const Verdict verdict = judge(r, t, written, *to);
        if (observed) {
          std::string label = i < r.names.size() ? r.names[i] : "argument " + std::to_string(i);
          if (j >= 0) label += "[" + std::to_string(j) + "]";
          said.push_back(describe(r, verdict, label, t, *to));
        }
        if (verdict != Verdict::Cast) return std::nullopt;
        return castTensor(r, t, *to);
      };
      if (v.isTensor()) {
        if (auto c = one(v.toTensor(), -1)) v = IValue(std::move(*c));
      } else if (v.isTensorList()) {
        const std::vector<Tensor>& ts = v.toTensorList();
        std::optional<std::vector<Tensor>> out;
        for (size_t j = 0; j < ts.size(); ++j) {
          auto c = one(ts[j], static_cast<int64_t>(j));
          if (!c) continue;
          if (!out) out = ts;
          (*out)[j] = std::move(*c);
        }
        if (out) v = IValue(std::move(*out));
      } else if (v.isGenericList()) {
        const std::vector<IValue>& xs = v.toList();
        std::optional<std::vector<IValue>> out;
        for (size_t j = 0; j < xs.size(); ++j) {
          if (!xs[j].isTensor()) continue;
          auto c = one(xs[j].toTensor(), static_cast<int64_t>(j));
          if (!c) continue;
          if (!out) out = xs;
          (*out)[j] = IValue(std::move(*c));
        }
        if (out) v = IValue(std::move(*out));
      }
    }
  } else if (observed) {
    said.push_back("no eligible tensor argument: nothing to cast");
  }

  if (observed) {
    std::string note = std::string("autocast: ") + toString(r.key) + " rule of " + r.op + " (owner " + r.owner +
                       ", policy " + toString(r.policy);
    if (r.cast_inputs) note += std::string(", cast_inputs=") + toString(*r.cast_inputs);
    note += ")";
    for (const auto& s : said) note += "\n  " + s;
    note_dispatch_step(std::move(note));
  }
  op.redispatchBoxed(ks & keysBelow(r.key), stack);
}

std::string where(const std::source_location& loc) { return detail::registeredAt(loc); }

RegistrationHandleRAII addRule(std::string_view op_text, std::string_view device_type, CastPolicy policy,
                               std::optional<ScalarType> cast_inputs, bool allow_override, const std::string& debug,
                               const char* api) {
  const std::string call = std::string(api) + "(" + std::string(op_text) + ", " + std::string(device_type) + ")";
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration(call + " (" + debug + ")");
  }
  DeviceType device;
  try {
    device = parseAutocastDevice(device_type);
  } catch (const Error& e) {
    STRATA_FAIL(Value, call, ": ", e.what());
  }
  if (cast_inputs) {
    STRATA_CHECK(isFloatingType(*cast_inputs), Value, call, ": cast_inputs must be a floating-point dtype "
                 "(float16, bfloat16, float32, float64), got ", toString(*cast_inputs));
  }
  const OperatorName name = parseOperatorName(op_text);
  Dispatcher& d = Dispatcher::singleton();
  auto handle = d.findSchema(name);
  STRATA_CHECK(handle.has_value(), NotImplemented, call, ": no operator named ", name.str(),
               " has a schema; define it first (Library::def)");
  const DispatchKey key = autocastKey(device);
  if (!allow_override) {
    detail::refuseSecondRule(name, key, call,
                             std::string("an autocast rule for ") + toString(device) + " (" + toString(key) + ")", debug);
  }
  auto rule = std::make_shared<Rule>();
  rule->op = name.str();
  rule->device = device;
  rule->key = key;
  rule->policy = policy;
  rule->cast_inputs = cast_inputs;
  rule->owner = RegistrationOwnerGuard::current();
  const FunctionSchema& schema = handle->schema();
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const Argument& a = schema.arguments()[i];
    rule->names.push_back(a.name);
    rule->written.push_back(a.is_write());
    if (a.type->kind() == TypeKind::Optional && a.type->element()->kind() == TypeKind::ScalarType) {
      rule->opt_dtype_args.push_back(i);
    }
  }
  if (policy == CastPolicy::fp32_set_opt_dtype) {
    STRATA_CHECK(!rule->opt_dtype_args.empty(), Value, call, ": the policy fp32_set_opt_dtype sets the op's "
                 "`ScalarType? dtype` argument, and ", schema.str(), " has none");
  }
  std::string what = std::string("autocast rule, policy ") + toString(policy);
  if (cast_inputs) what += std::string(", cast_inputs=") + toString(*cast_inputs);
  return d.registerImpl(
      name, key,
      KernelFunction::makeFromBoxedFunctor([rule = std::shared_ptr<const Rule>(rule)](
                                               const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
        runRule(*rule, op, ks, stack);
      }),
      {rule->owner, what + "; " + debug, allow_override});
}

constexpr CoreAutocastPolicy kCorePolicies[] = {
    // lower_precision_fp: matmul runs in the autocast dtype.
    {"core::matmul", CastPolicy::lower_precision_fp},
    // fp32: ops that need float32's range.
    {"core::exp", CastPolicy::fp32},
    // fp32_set_opt_dtype: reductions accumulate (and return) float32.
    {"core::sum", CastPolicy::fp32_set_opt_dtype},
    {"core::sum.dim_IntList", CastPolicy::fp32_set_opt_dtype},
    // promote: ops that combine tensors run in the widest dtype among them.
    {"core::add.Tensor", CastPolicy::promote},
    {"core::sub.Tensor", CastPolicy::promote},
    {"core::mul.Tensor", CastPolicy::promote},
    {"core::div.Tensor", CastPolicy::promote},
    {"core::stack", CastPolicy::promote},
    {"core::cat", CastPolicy::promote},
};

}  // namespace

namespace detail {
// modes::initialize() keeps these for the life of the process (owner "builtin").
void registerCoreAutocastRules(std::vector<RegistrationHandleRAII>& keep) {
  RegistrationOwnerGuard owner("builtin");
  const std::string debug = where(std::source_location::current());
  for (const auto& p : kCorePolicies) {
    for (const char* device : {"cpu", "cuda"}) {
      keep.push_back(addRule(p.op, device, p.policy, std::nullopt, false, debug, "register_autocast_policy"));
    }
  }
}
}  // namespace detail

// ---------------------------------------------------------------------------

const char* toString(CastPolicy p) {
  switch (p) {
    case CastPolicy::lower_precision_fp: return "lower_precision_fp";
    case CastPolicy::fp32: return "fp32";
    case CastPolicy::fp32_set_opt_dtype: return "fp32_set_opt_dtype";
    case CastPolicy::promote: return "promote";
  }
  return "unknown";
}

CastPolicy parseCastPolicy(std::string_view name) {
  for (CastPolicy p : {CastPolicy::lower_precision_fp, CastPolicy::fp32, CastPolicy::fp32_set_opt_dtype,
                       CastPolicy::promote}) {
    if (name == toString(p)) return p;
  }
  STRATA_FAIL(Value, "unknown autocast cast policy '", name,
              "': expected lower_precision_fp, fp32, fp32_set_opt_dtype or promote");
}

DeviceType parseAutocastDevice(std::string_view device_type) {
  if (device_type == "cpu") return DeviceType::CPU;
  if (device_type == "cuda") return DeviceType::CUDA;
  if (device_type == "privateuse1") return DeviceType::PrivateUse1;
  STRATA_FAIL(Value, "autocast has no device type '", strata::detail::shortened(device_type), "': expected cpu, cuda or privateuse1");
}

bool is_autocast_enabled(DeviceType device) {
  const DispatchKey k = keyOf(device);
  return included(k) && !DispatchKeySet::fromRaw(strata::detail::tls_local_dispatch_key_set.excluded).has(k);
}

void set_autocast_enabled(DeviceType device, bool enabled) {
  const DispatchKey k = keyOf(device);
  if (enabled) initialize();  // the core:: ops' rules
  setIncluded(k, enabled);
}

ScalarType get_autocast_dtype(DeviceType device) { return tls_state.devices[slot(device)].dtype; }

void set_autocast_dtype(DeviceType device, ScalarType dtype) {
  const size_t i = slot(device);
  checkLowPrecision(device, dtype);
  tls_state.devices[i].dtype = dtype;
}

bool is_autocast_cache_enabled(DeviceType device) { return tls_state.devices[slot(device)].cache_enabled; }
void set_autocast_cache_enabled(DeviceType device, bool enabled) {
  tls_state.devices[slot(device)].cache_enabled = enabled;
}

int autocast_nesting() { return tls_state.nesting; }
void clear_autocast_cache() { tls_state.cache.clear(); }
size_t autocast_cache_size() { return tls_state.cache.size(); }

AutocastGuard::AutocastGuard(DeviceType device, std::optional<ScalarType> dtype, bool enabled, bool cache_enabled)
    : device_(device) {
  DeviceState& ds = tls_state.devices[slot(device)];
  if (dtype) checkLowPrecision(device, *dtype);
  initialize();
  const DispatchKey k = autocastKey(device);
  saved_dtype_ = ds.dtype;
  saved_cache_ = ds.cache_enabled;
  saved_included_ = included(k);
  if (dtype) ds.dtype = *dtype;
  ds.cache_enabled = cache_enabled;
  setIncluded(k, enabled);
  ++tls_state.nesting;
}

AutocastGuard::AutocastGuard(std::string_view device_type, std::optional<ScalarType> dtype, bool enabled,
                             bool cache_enabled)
    : AutocastGuard(parseAutocastDevice(device_type), dtype, enabled, cache_enabled) {}

AutocastGuard::~AutocastGuard() {
  DeviceState& ds = tls_state.devices[slot(device_)];
  ds.dtype = saved_dtype_;
  ds.cache_enabled = saved_cache_;
  setIncluded(autocastKey(device_), saved_included_);
  if (--tls_state.nesting == 0) tls_state.cache.clear();
}

// The public entry points run modes::initialize() first, so the core:: ops' builtin
// rules are in place before any rule a caller registers (and a caller's rule with
// allow_override shadows the builtin one, never the other way round).
RegistrationHandleRAII register_autocast(std::string_view op, std::string_view device_type, ScalarType cast_inputs,
                                         bool allow_override, std::source_location loc) {
  initialize();
  return addRule(op, device_type, CastPolicy::lower_precision_fp, cast_inputs, allow_override, where(loc),
                 "register_autocast");
}

void register_autocast(std::string_view op, std::string_view device_type, ScalarType cast_inputs, Library& lib,
                       bool allow_override, std::source_location loc) {
  lib.keep(register_autocast(op, device_type, cast_inputs, allow_override, loc));
}

RegistrationHandleRAII register_autocast_policy(std::string_view op, std::string_view device_type, CastPolicy policy,
                                                bool allow_override, std::source_location loc) {
  initialize();
  return addRule(op, device_type, policy, std::nullopt, allow_override, where(loc), "register_autocast_policy");
}

void register_autocast_policy(std::string_view op, std::string_view device_type, CastPolicy policy, Library& lib,
                              bool allow_override, std::source_location loc) {
  lib.keep(register_autocast_policy(op, device_type, policy, allow_override, loc));
}

std::vector<CoreAutocastPolicy> core_autocast_policies() {
  return std::vector<CoreAutocastPolicy>(std::begin(kCorePolicies), std::end(kCorePolicies));
}

}  // namespace strata::modes
