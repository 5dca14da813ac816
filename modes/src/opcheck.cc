// gradcheck, opcheck, assert_close and sample inputs. See opcheck.h and autograd.h.
#include "strata/modes/opcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "registered_at.h"
#include "tensor_walk.h"
#include "vmap_internal.h"
#include "strata/error.h"
#include "strata/modes/autocast.h"
#include "strata/modes/autograd.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/fake.h"
#include "strata/modes/vmap.h"
#include "strata/ops.h"

namespace strata::modes {

namespace {

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

// The multi-index of flat element k of sizes, "(1, 2)".
std::string indexStr(IntArrayRef sizes, int64_t k) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d > 0; --d) {
    idx[d - 1] = sizes[d - 1] == 0 ? 0 : k % sizes[d - 1];
    k = sizes[d - 1] == 0 ? 0 : k / sizes[d - 1];
  }
  std::string s = "(";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + ")";
}

std::vector<double> valuesOf(const Tensor& t) {
  return t.detach().to(kCPU).to(ScalarType::Double).contiguous().to_vector<double>();
}

// assert_close's defaults (torch.testing): per dtype, (rtol, atol).
std::pair<double, double> defaultTolerances(ScalarType t) {
  switch (t) {
    case ScalarType::Half: return {1e-3, 1e-5};
    case ScalarType::BFloat16: return {1.6e-2, 1e-5};
    case ScalarType::Float: return {1.3e-6, 1e-5};
    case ScalarType::Double: return {1e-7, 1e-7};
    default: return {0.0, 0.0};
  }
}

}  // namespace

// --- gradcheck --------------------------------------------------------------------------

GradcheckResult gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol,
                          bool raise_exception) {
  initialize();
  // float64 copies of the floating inputs, leaves with the caller's requires_grad.
  std::vector<Tensor> x;
  std::vector<size_t> diff;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.defined() && isFloatingType(t.dtype())) {
      Tensor c = t.detach().to(ScalarType::Double).contiguous().clone();
      if (t.requires_grad()) {
        c.set_requires_grad(true);
        diff.push_back(i);
      }
      x.push_back(std::move(c));
    } else {
      x.push_back(t);
    }
  }
  GradcheckResult result;
  auto fail = [&](std::string msg) {
    result.ok = false;
    result.message = "gradcheck: " + std::move(msg);
    if (raise_exception) STRATA_FAIL(Value, result.message);
    return result;
  };
  if (diff.empty()) return fail("no input requires grad: nothing to check (mark the inputs to differentiate)");
  std::vector<Tensor> outs = fn(x);
  std::vector<Tensor> diff_inputs;
  for (size_t i : diff) diff_inputs.push_back(x[i]);
  // Numerical Jacobians: numerical[o][i] has (numel(out o)) x (numel(in i)) entries.
  auto evalOutputs = [&]() {
    NoGradGuard no_grad;
    std::vector<std::vector<double>> vals;
    for (const Tensor& o : fn(x)) vals.push_back(o.defined() && isFloatingType(o.dtype()) ? valuesOf(o) : std::vector<double>{});
    return vals;
  };
  for (size_t o = 0; o < outs.size(); ++o) {
    const Tensor& out = outs[o];
    if (!out.defined() || !isFloatingType(out.dtype())) continue;
    // Analytical: one backward per output element; an output that does not depend on
    // the inputs (it does not require grad) has a zero Jacobian, which the numerical
    // one must confirm.
    const int64_t n_out = out.numel();
    std::vector<std::vector<std::vector<double>>> analytical(diff.size());  // [input][out elem][in elem]
    for (int64_t k = 0; k < n_out && !out.requires_grad(); ++k) {
      for (size_t i = 0; i < diff.size(); ++i) {
        analytical[i].push_back(std::vector<double>(static_cast<size_t>(diff_inputs[i].numel()), 0.0));
      }
    }
    for (int64_t k = 0; k < n_out && out.requires_grad(); ++k) {
      Tensor onehot = ops::zeros(std::vector<int64_t>(out.sizes().begin(), out.sizes().end()), out.dtype(), out.device());
      {
        NoGradGuard no_grad;
        onehot.view({-1}).select(0, k).fill_(1.0);
      }
      std::vector<Tensor> gs = grad({out}, diff_inputs, {onehot}, /*retain_graph=*/true, false, /*allow_unused=*/true);
      for (size_t i = 0; i < diff.size(); ++i) {
        analytical[i].push_back(gs[i].defined() ? valuesOf(gs[i]) : std::vector<double>(static_cast<size_t>(diff_inputs[i].numel()), 0.0));
      }
    }
    for (size_t i = 0; i < diff.size(); ++i) {
      Tensor& xi = x[diff[i]];
      double* p = xi.data_ptr<double>();
      for (int64_t e = 0; e < xi.numel(); ++e) {
        const double orig = p[e];
        p[e] = orig + eps;
        const auto plus = evalOutputs();
        p[e] = orig - eps;
        const auto minus = evalOutputs();
        p[e] = orig;
        for (int64_t k = 0; k < n_out; ++k) {
          const double num = (plus[o][static_cast<size_t>(k)] - minus[o][static_cast<size_t>(k)]) / (2 * eps);
          const double ana = analytical[i][static_cast<size_t>(k)][static_cast<size_t>(e)];
          if (!(std::abs(num - ana) <= atol + rtol * std::abs(num))) {
            return fail("Jacobian mismatch for output " + std::to_string(o) + " with respect to input " +
                        std::to_string(diff[i]) + ", at output index " + indexStr(out.sizes(), k) +
                        " and input index " + indexStr(xi.sizes(), e) + ": numerical " + fmt(num) + ", analytical " +
                        fmt(ana) + " (eps " + fmt(eps) + ", atol " + fmt(atol) + ", rtol " + fmt(rtol) + ")");
          }
        }
      }
    }
  }
  return result;
}

// --- assert_close -----------------------------------------------------------------------

void assert_close(const Tensor& actual, const Tensor& expected, std::optional<double> atol,
                  std::optional<double> rtol) {
  STRATA_CHECK(atol.has_value() == rtol.has_value(), Value, "assert_close: atol and rtol must both be given or "
               "both be omitted");
  STRATA_CHECK(std::equal(actual.sizes().begin(), actual.sizes().end(), expected.sizes().begin(),
                          expected.sizes().end()),
               Value, "assert_close: the shapes do not match: ", sym::shapeStr(actual.sizes()), " != ",
               sym::shapeStr(expected.sizes()));
  STRATA_CHECK(actual.dtype() == expected.dtype(), Value, "assert_close: the dtypes do not match: ",
               toString(actual.dtype()), " != ", toString(expected.dtype()));
  const auto [drtol, datol] = defaultTolerances(actual.dtype());
  const double rt = rtol.value_or(drtol), at = atol.value_or(datol);
  const auto a = valuesOf(actual), e = valuesOf(expected);
  for (size_t k = 0; k < a.size(); ++k) {
    const bool both_nan = std::isnan(a[k]) && std::isnan(e[k]);
    if (both_nan || a[k] == e[k]) continue;
    if (!(std::abs(a[k] - e[k]) <= at + rt * std::abs(e[k]))) {
      STRATA_FAIL(Value, "assert_close: tensors are not close at index ", indexStr(actual.sizes(), static_cast<int64_t>(k)),
                  ": actual ", fmt(a[k]), ", expected ", fmt(e[k]), " (difference ", fmt(std::abs(a[k] - e[k])),
                  ", allowed ", fmt(at + rt * std::abs(e[k])), ": atol ", fmt(at), ", rtol ", fmt(rt), ")");
    }
  }
}

// --- opcheck ----------------------------------------------------------------------------

const std::vector<std::string>& opcheck_default_tests() {
  static const std::vector<std::string> tests = {"test_schema", "test_autograd_registration", "test_faketensor",
                                                 "test_vmap", "test_autocast"};
  return tests;
}

bool opcheck_passed(const OpcheckResults& r) {
  for (const auto& [_, v] : r) {
    if (v != "SUCCESS" && v.rfind("SKIPPED", 0) != 0) return false;
  }
  return true;
}

namespace {

using detail::forEachTensor;
using detail::mapTensors;

// A copy of the arguments: each tensor cloned (same requires_grad), lists too.
Stack copyArgs(const Stack& args, bool keep_grad) {
  Stack out;
  auto copy = [&](const Tensor& t) {
    if (!t.defined()) return t;
    Tensor c = t.detach().clone();
    if (keep_grad && t.requires_grad()) c.set_requires_grad(true);
    return c;
  };
  for (const IValue& v : args) out.push_back(mapTensors(v, copy));
  return out;
}

std::vector<Tensor> tensorsOf(const Stack& s) {
  std::vector<Tensor> out;
  for (const IValue& v : s) forEachTensor(v, [&](const Tensor& t) { out.push_back(t); });
  return out;
}

bool sharesStorage(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() && a.is_alias_of(b);
}

bool sameValues(const Tensor& a, const Tensor& b) {
  if (!std::equal(a.sizes().begin(), a.sizes().end(), b.sizes().begin(), b.sizes().end())) return false;
  if (a.is_meta() || b.is_meta()) return true;
  const auto va = valuesOf(a), vb = valuesOf(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) return false;
  }
  return true;
}

Stack callOp(const OperatorHandle& op, Stack args) {
  op.callBoxed(args);
  return args;
}

std::string testSchema(const OperatorHandle& op, const Stack& args) {
  const FunctionSchema& schema = op.schema();
  NoGradGuard no_grad;
  Stack in = copyArgs(args, false);
  const Stack before = copyArgs(in, false);
  const Stack out = callOp(op, in);
  const auto& sargs = schema.arguments();
  for (size_t i = 0; i < in.size() && i < sargs.size(); ++i) {
    if (sargs[i].is_write()) continue;
    const auto now = tensorsOf({in[i]}), then = tensorsOf({before[i]});
    for (size_t j = 0; j < now.size(); ++j) {
      if (now[j].defined() && !sameValues(now[j], then[j])) {
        return "argument '" + sargs[i].name + "' was mutated but the schema (" + schema.str() +
               ") does not declare it written: mark it Tensor(a!) (mutates_args in custom_op)";
      }
    }
  }
  const auto& rets = schema.returns();
  const auto inputs = tensorsOf(in);
  for (size_t r = 0; r < out.size(); ++r) {
    const bool declared_alias = r < rets.size() && rets[r].alias_info.has_value();
    if (declared_alias) continue;
    for (const Tensor& o : tensorsOf({out[r]})) {
      if (!o.defined()) continue;
      for (size_t k = 0; k < inputs.size(); ++k) {
        if (!o.is_meta() && sharesStorage(o, inputs[k])) {
          return "output " + std::to_string(r) + " aliases an input (it shares its storage), but the schema (" +
                 schema.str() + ") declares a fresh result: return a copy, or declare the alias (Tensor(a))";
        }
      }
    }
    // Two fresh results share nothing either (SchemaCheckMode: "Outputs 0 and 1 alias
    // unexpectedly").
    for (size_t q = 0; q < r; ++q) {
      if (q < rets.size() && rets[q].alias_info.has_value()) continue;
      for (const Tensor& o : tensorsOf({out[r]})) {
        for (const Tensor& p : tensorsOf({out[q]})) {
          if (!o.is_meta() && sharesStorage(o, p)) {
            return "outputs " + std::to_string(q) + " and " + std::to_string(r) +
                   " alias each other (they share storage), but the schema (" + schema.str() +
                   ") declares fresh results: return a copy";
          }
        }
      }
    }
  }
  return "SUCCESS";
}

bool hasAutogradKernel(const OperatorHandle& op) {
  for (const RegistrationInfo& r : Dispatcher::singleton().registrations(op.operator_name())) {
    if (r.what != RegistrationInfo::What::Impl || !r.enabled) continue;
    if (r.key == DispatchKey::Autograd || r.key == DispatchKey::CompositeImplicitAutograd ||
        kAutogradKeys.has(r.key)) {
      return true;
    }
  }
  return false;
}

std::string testAutogradRegistration(const OperatorHandle& op, const Stack& args) {
  bool any = false;
  for (const Tensor& t : tensorsOf(args)) any = any || (t.defined() && t.requires_grad());
  if (!any) return "SKIPPED: no input requires grad";
  if (hasAutogradKernel(op)) return "SUCCESS";
  AutoGradMode grad_on(true);
  const Stack out = callOp(op, copyArgs(args, true));
  for (const Tensor& o : tensorsOf(out)) {
    if (o.defined() && o.requires_grad()) {
      const auto regs = Dispatcher::singleton().registrations(op.operator_name());
      if (std::any_of(regs.begin(), regs.end(), [](const RegistrationInfo& r) {
            return r.what == RegistrationInfo::What::Impl && !r.enabled &&
                   (r.key == DispatchKey::Autograd || kAutogradKeys.has(r.key));
          })) {
        return "inputs require grad and the outputs do, but " + op.operator_name().str() +
               "'s autograd formula is switched off, so a backward through it raises (strata kernel enable " +
               op.operator_name().str() + " autograd)";
      }
      return "inputs require grad and the outputs do, but " + op.operator_name().str() +
             " has no autograd formula (Autograd kernel) and no CompositeImplicitAutograd kernel: a backward through "
             "it raises; register one with register_autograd";
    }
  }
  return "SUCCESS";
}

// A fake size, stride or offset matches a real one when equal, or, when symbolic (a
// data-dependent size: new_dynamic_size), when the real one is in its range, as
// PyTorch's cross-check allows an unbacked symbol on the fake side.
bool fakeMatches(int64_t fake, int64_t real) {
  if (!sym::isSymbolic(fake)) return fake == real;
  const sym::Range r = sym::range(fake);
  return real >= r.min && real <= r.max;
}
bool fakeMatches(IntArrayRef fake, IntArrayRef real) {
  if (fake.size() != real.size()) return false;
  for (size_t i = 0; i < fake.size(); ++i) {
    if (!fakeMatches(fake[i], real[i])) return false;
  }
  return true;
}
// The strides that decide a layout: those of dims longer than 1, in a tensor with
// elements (PyTorch's check_significant_strides).
bool significantStridesMatch(const Tensor& fake, const Tensor& real) {
  if (fake.dim() != real.dim()) return false;
  if (real.numel() == 0) return true;
  for (int64_t d = 0; d < real.dim(); ++d) {
    if (real.sizes()[d] > 1 && !fakeMatches(fake.strides()[d], real.strides()[d])) return false;
  }
  return true;
}
// Whether t shares storage with one of the tensors of `inputs`.
bool aliasesOneOf(const Tensor& t, const std::vector<Tensor>& inputs) {
  for (const Tensor& in : inputs) {
    if (sharesStorage(t, in)) return true;
  }
  return false;
}

std::string testFakeTensor(const OperatorHandle& op, const Stack& args) {
  NoGradGuard no_grad;
  Stack real_in = copyArgs(args, false);
  const std::vector<Tensor> real_inputs = tensorsOf(real_in);
  const Stack real = callOp(op, real_in);
  auto mode = std::make_shared<FakeTensorMode>();
  Stack fake_in;
  for (const IValue& v : copyArgs(args, false)) {
    fake_in.push_back(mapTensors(v, [&](const Tensor& t) { return t.defined() ? mode->from_tensor(t) : t; }));
  }
  const std::vector<Tensor> fake_inputs = tensorsOf(fake_in);
  Stack fake;
  try {
    ModeGuard guard(mode);
    fake = callOp(op, std::move(fake_in));
  } catch (const Error& e) {
    return std::string("running the op under FakeTensorMode failed: ") + e.what();
  }
  const auto r = tensorsOf(real), f = tensorsOf(fake);
  if (r.size() != f.size()) {
    return "the fake impl returned " + std::to_string(f.size()) + " tensor(s), the real kernel " +
           std::to_string(r.size());
  }
  for (size_t i = 0; i < r.size(); ++i) {
    if (!r[i].defined() || !f[i].defined()) continue;
    auto differ = [&](const char* what, const std::string& fv, const std::string& rv) {
      return "output " + std::to_string(i) + ": the fake impl gives " + what + " " + fv + ", the real kernel " + rv;
    };
    if (!fakeMatches(f[i].sizes(), r[i].sizes())) {
      return differ("sizes", sym::shapeStr(f[i].sizes()), sym::shapeStr(r[i].sizes())) +
             (sym::anySymbolic(f[i].sizes()) ? " (" + sym::rangesStr(f[i].sizes()) + ")" : "");
    }
    if (!significantStridesMatch(f[i], r[i])) {
      return differ("strides", sym::shapeStr(f[i].strides()), sym::shapeStr(r[i].strides()));
    }
    if (!fakeMatches(f[i].storage_offset(), r[i].storage_offset())) {
      return differ("storage offset", sym::str(f[i].storage_offset()), std::to_string(r[i].storage_offset()));
    }
    if (r[i].dtype() != f[i].dtype()) return differ("dtype", toString(f[i].dtype()), toString(r[i].dtype()));
    if (r[i].device().type != f[i].device().type) {
      return differ("device", f[i].device().str(), r[i].device().str());
    }
    const bool real_alias = aliasesOneOf(r[i], real_inputs), fake_alias = aliasesOneOf(f[i], fake_inputs);
    if (real_alias != fake_alias) {
      return "output " + std::to_string(i) + (fake_alias ? ": the fake impl returns" : ": the real kernel returns") +
             " an alias of an input (a tensor sharing its storage) and the " +
             (fake_alias ? "real kernel" : "fake impl") + " a fresh tensor: both must do the same";
    }
    for (size_t j = 0; j < i; ++j) {
      if (sharesStorage(r[i], r[j]) != sharesStorage(f[i], f[j])) {
        return "outputs " + std::to_string(j) + " and " + std::to_string(i) + " share storage in the " +
               (sharesStorage(f[i], f[j]) ? "fake impl's results but not the real kernel's"
                                          : "real kernel's results but not the fake impl's");
      }
    }
  }
  return "SUCCESS";
}

bool hasKernelAt(const OperatorHandle& op, DispatchKey k) {
  for (const RegistrationInfo& r : Dispatcher::singleton().registrations(op.operator_name())) {
    if (r.what == RegistrationInfo::What::Impl && r.key == k && r.enabled) return true;
  }
  return false;
}

std::string testVmap(const OperatorHandle& op, const Stack& args, std::optional<double> atol,
                     std::optional<double> rtol) {
  if (!hasKernelAt(op, DispatchKey::Batched)) return "SKIPPED: no batching rule";
  for (const IValue& v : args) {
    if (v.isTensorList() || v.isGenericList()) return "SKIPPED: the op takes a list of tensors";
  }
  NoGradGuard no_grad;
  const Stack base = copyArgs(args, false);
  std::vector<size_t> pos;  // the tensor arguments, mapped over dim 0
  std::vector<Tensor> batched;
  for (size_t i = 0; i < base.size(); ++i) {
    if (!base[i].isTensor() || !base[i].toTensor().defined()) continue;
    const Tensor& t = base[i].toTensor();
    // Two batch elements: the sample and a shifted copy (floating) or the same values.
    const Tensor second = isFloatingType(t.dtype()) ? ops::add(ops::mul(t, 0.5), 0.25) : t.clone();
    pos.push_back(i);
    batched.push_back(ops::stack({t, second}, 0));
  }
  if (pos.empty()) return "SKIPPED: no tensor argument";
  auto fn = [&](const std::vector<Tensor>& ts) {
    Stack s = base;
    for (size_t k = 0; k < pos.size(); ++k) s[pos[k]] = ts[k];
    const Stack out = callOp(op, std::move(s));
    return tensorsOf(out);
  };
  std::vector<Tensor> with_rule, with_loop;
  try {
    with_rule = vmap(fn)(batched);
  } catch (const Error& e) {
    return std::string("the batching rule failed: ") + e.what();
  }
  {
    KernelEnabledScope off(op.operator_name().str(), "batched", false);
    const detail::QuietVmapFallback quiet;  // the op has a rule: the loop is the reference here
    with_loop = vmap(fn)(batched);
  }
  if (with_rule.size() != with_loop.size()) {
    return "the batching rule returned " + std::to_string(with_rule.size()) + " tensor(s), the for-loop fallback " +
           std::to_string(with_loop.size());
  }
  for (size_t i = 0; i < with_rule.size(); ++i) {
    try {
      assert_close(with_rule[i], with_loop[i], atol, rtol);
    } catch (const Error& e) {
      return "output " + std::to_string(i) + ": the batching rule and the for-loop fallback differ: " + e.what();
    }
  }
  return "SUCCESS";
}

// The policy of the op's active autocast rule for a device, read from the debug string
// autocast.cc gives its rules ("autocast rule, policy P[, cast_inputs=T]; ...").
std::optional<std::pair<CastPolicy, std::optional<ScalarType>>> autocastRule(const OperatorHandle& op,
                                                                             DispatchKey key) {
  for (const RegistrationInfo& r : Dispatcher::singleton().registrations(op.operator_name())) {
    if (r.what != RegistrationInfo::What::Impl || r.key != key || !r.active || !r.enabled) continue;
    const std::string tag = "autocast rule, policy ";
    const size_t p = r.debug.find(tag);
    if (p == std::string::npos) continue;
    const size_t s = p + tag.size();
    const size_t e = r.debug.find_first_of(",;", s);
    const CastPolicy policy = parseCastPolicy(r.debug.substr(s, e - s));
    std::optional<ScalarType> cast;
    const std::string ci = "cast_inputs=";
    if (const size_t c = r.debug.find(ci); c != std::string::npos && c < r.debug.find(';')) {
      const size_t ce = r.debug.find_first_of(",;", c + ci.size());
      const std::string name = r.debug.substr(c + ci.size(), ce - c - ci.size());
      for (ScalarType t : {ScalarType::Half, ScalarType::BFloat16, ScalarType::Float, ScalarType::Double}) {
        if (name == toString(t)) cast = t;
      }
    }
    return std::make_pair(policy, cast);
  }
  return std::nullopt;
}

std::string testAutocast(const OperatorHandle& op, const Stack& args) {
  std::optional<DeviceType> device;
  for (const Tensor& t : tensorsOf(args)) {
    if (t.defined() && !device) device = t.device().type;
  }
  if (!device) return "SKIPPED: no tensor argument";
  const DispatchKey key = autocastKey(*device);
  if (key == DispatchKey::Undefined) return "SKIPPED: no autocast on this device";
  const auto rule = autocastRule(op, key);
  if (!rule) return "SKIPPED: no autocast rule for " + std::string(toString(*device));
  NoGradGuard no_grad;
  const Stack in = copyArgs(args, false);
  // The dtype the rule's policy gives float32 inputs.
  ScalarType widest = ScalarType::Float;
  bool any_float = false;
  for (const Tensor& t : tensorsOf(in)) {
    if (!t.defined() || !isFloatingType(t.dtype())) continue;
    any_float = true;
    if (t.dtype() == ScalarType::Double) widest = ScalarType::Double;
  }
  if (!any_float) return "SKIPPED: no floating tensor argument";
  Stack out;
  ScalarType expect = ScalarType::Float;
  {
    AutocastGuard guard(*device);
    switch (rule->first) {
      case CastPolicy::lower_precision_fp: expect = rule->second.value_or(get_autocast_dtype(*device)); break;
      case CastPolicy::fp32:
      case CastPolicy::fp32_set_opt_dtype: expect = ScalarType::Float; break;
      case CastPolicy::promote: expect = widest; break;
    }
    try {
      out = callOp(op, in);
    } catch (const Error& e) {
      return std::string("the op failed under autocast: ") + e.what();
    }
  }
  // Outputs follow their inputs' dtype for the ops autocast serves; float64 inputs
  // are left as they are, so only a float32-in run is judged.
  if (widest == ScalarType::Double) return "SKIPPED: float64 inputs are not cast";
  for (const Tensor& o : tensorsOf(out)) {
    if (o.defined() && isFloatingType(o.dtype()) && o.dtype() != expect) {
      return std::string("under autocast the output is ") + toString(o.dtype()) + ", but the rule's policy (" +
             toString(rule->first) + ") gives " + toString(expect);
    }
  }
  return "SUCCESS";
}

}  // namespace

OpcheckResults opcheck(std::string_view op_name, const Stack& args, const std::vector<std::string>& test_utils,
                       bool raise_exception, std::optional<double> atol, std::optional<double> rtol) {
  initialize();
  STRATA_CHECK(atol.has_value() == rtol.has_value(), Value, "opcheck(", op_name,
               "): atol and rtol must both be given or both be omitted");
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow(op_name);
  for (const std::string& t : test_utils) {
    const auto& all = opcheck_default_tests();
    if (std::find(all.begin(), all.end(), t) == all.end()) {
      std::string known;
      for (const auto& k : all) known += (known.empty() ? "" : ", ") + k;
      STRATA_FAIL(Value, "opcheck(", op_name, "): unknown test '", t, "' (expected one of ", known, ")");
    }
  }
  // Trailing defaults, as a boxed call fills them.
  Stack full = args;
  const auto& sargs = op.schema().arguments();
  STRATA_CHECK(full.size() <= sargs.size(), Value, "opcheck(", op_name, "): ", full.size(), " argument(s) given, the "
               "schema (", op.schema().str(), ") takes ", sargs.size());
  for (size_t i = full.size(); i < sargs.size(); ++i) {
    STRATA_CHECK(sargs[i].default_value.has_value(), Value, "opcheck(", op_name, "): argument '", sargs[i].name,
                 "' has no default and was not given");
    full.push_back(*sargs[i].default_value);
  }
  OpcheckResults results;
  for (const std::string& t : test_utils) {
    std::string r;
    try {
      if (t == "test_schema") r = testSchema(op, full);
      else if (t == "test_autograd_registration") r = testAutogradRegistration(op, full);
      else if (t == "test_faketensor") r = testFakeTensor(op, full);
      else if (t == "test_vmap") r = testVmap(op, full, atol, rtol);
      else r = testAutocast(op, full);
    } catch (const Error& e) {
      r = std::string("the op raised: ") + e.what();
    }
    if (raise_exception && r != "SUCCESS" && r.rfind("SKIPPED", 0) != 0) {
      STRATA_FAIL(Value, "opcheck(", op.operator_name().str(), "): ", t, " failed: ", r);
    }
    results[t] = std::move(r);
  }
  return results;
}

// --- Sample inputs ---------------------------------------------------------------------

namespace {
// An op has one sample-inputs rule, for no type in particular: its target is void
// (Note [Operator rules]), which dump() and the store show as the kind alone.
constexpr const char* kSampleInputs = "sample_inputs";
}  // namespace

RegistrationHandleRAII register_sample_inputs(std::string_view op, SampleInputsFn samples, std::source_location loc) {
  initialize();
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration("register_sample_inputs(" + std::string(op) + ") (" +
                                                    detail::registeredAt(loc) + ")");
  }
  STRATA_CHECK(static_cast<bool>(samples), Value, "register_sample_inputs(", op, "): the function is empty");
  const OperatorHandle h = Dispatcher::singleton().findSchemaOrThrow(op);
  auto payload = std::make_shared<const SampleInputsFn>(std::move(samples));
  return Dispatcher::singleton().registerRule(h.operator_name(), kSampleInputs, typeid(void), payload,
                                              {RegistrationOwnerGuard::current(), detail::registeredAt(loc), false});
}

void register_sample_inputs(std::string_view op, SampleInputsFn samples, Library& lib, std::source_location loc) {
  lib.keep(register_sample_inputs(op, std::move(samples), loc));
}

std::optional<std::vector<SampleInput>> sample_inputs(const OperatorHandle& op, std::string_view device_type) {
  const CallScope keep;  // the rule stays alive while it runs, even if removed meanwhile
  const void* p = op.findRule(kSampleInputs, typeid(void));
  if (p == nullptr) return std::nullopt;
  return (*static_cast<const SampleInputsFn*>(p))(device_type);
}

std::vector<CheckRow> check_op(const OperatorHandle& op) {
  std::vector<CheckRow> rows;
  const std::string name = op.operator_name().str();
  std::optional<std::vector<SampleInput>> samples;
  try {
    samples = sample_inputs(op, "cpu");
  } catch (const Error& e) {
    rows.push_back({name, "sample_inputs", "", false, false, std::string("making the samples failed: ") + e.what()});
    return rows;
  }
  if (!samples) {
    rows.push_back({name, "sample_inputs", "", true, true, "no sample inputs registered"});
    return rows;
  }
  for (size_t s = 0; s < samples->size(); ++s) {
    const std::string label = "sample " + std::to_string(s);
    const Stack& args = (*samples)[s].args;
    OpcheckResults r;
    try {
      r = opcheck(name, args, opcheck_default_tests(), /*raise_exception=*/false);
    } catch (const Error& e) {
      rows.push_back({name, "opcheck", label, false, false, e.what()});
      continue;
    }
    for (const auto& t : opcheck_default_tests()) {
      const std::string& v = r[t];
      const bool skipped = v.rfind("SKIPPED", 0) == 0;
      // The row says "skipped" itself: its reason is the why alone ("no batching rule").
      constexpr std::string_view kSkipped = "SKIPPED: ";
      std::string why = v == "SUCCESS" ? "" : v;
      if (skipped && why.rfind(kSkipped, 0) == 0) why.erase(0, kSkipped.size());
      rows.push_back({name, t, label, v == "SUCCESS" || skipped, skipped, why});
    }
    // gradcheck on the inputs that require grad, when there are any.
    std::vector<size_t> tensor_pos;
    std::vector<Tensor> tensors;
    bool any_grad = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].isTensor() && args[i].toTensor().defined()) {
        tensor_pos.push_back(i);
        tensors.push_back(args[i].toTensor());
        any_grad = any_grad || args[i].toTensor().requires_grad();
      }
    }
    if (!any_grad) {
      rows.push_back({name, "gradcheck", label, true, true, "no input requires grad"});  // skipped: the why alone
      continue;
    }
    auto fn = [&](const std::vector<Tensor>& xs) {
      Stack st = args;
      for (size_t k = 0; k < tensor_pos.size(); ++k) st[tensor_pos[k]] = xs[k];
      return tensorsOf(callOp(op, std::move(st)));
    };
    try {
      // Kernels of one's own often take float32 only: check in the inputs' dtype then,
      // with tolerances to match.
      bool all_double_ok = true;
      for (const Tensor& t : tensors) all_double_ok = all_double_ok && t.dtype() == ScalarType::Double;
      GradcheckResult g;
      if (all_double_ok) {
        g = gradcheck(fn, tensors, 1e-6, 1e-5, 1e-3, false);
      } else {
        auto fn32 = [&](const std::vector<Tensor>& xs) {
          std::vector<Tensor> cast;
          for (size_t k = 0; k < xs.size(); ++k) {
            cast.push_back(isFloatingType(xs[k].dtype()) ? ops::to(xs[k], tensors[k].dtype()) : xs[k]);
          }
          return fn(cast);
        };
        g = gradcheck(fn32, tensors, 1e-2, 1e-2, 1e-2, false);
      }
      rows.push_back({name, "gradcheck", label, g.ok, false, g.message});
    } catch (const Error& e) {
      rows.push_back({name, "gradcheck", label, false, false, e.what()});
    }
  }
  return rows;
}

}  // namespace strata::modes
