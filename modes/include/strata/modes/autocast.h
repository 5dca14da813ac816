// Autocast: the C++ form of `with torch.autocast(device, dtype):` and of
// torch.library.register_autocast.
//
//   {
//     strata::modes::AutocastGuard autocast(DeviceType::CPU, kBFloat16);  // with torch.autocast("cpu", torch.bfloat16)
//     Tensor y = ops::matmul(x, w);   // core::matmul's rule casts x and w to bfloat16
//   }
//   auto rule = strata::modes::register_autocast("mylib::my_sin", "cuda", kFloat16);
//
// Note [Autocast]
// ~~~~~~~~~~~~~~~
// State. Each thread keeps, per device type (cpu, cuda, privateuse1), the lower-
// precision dtype (defaults as PyTorch's: cpu bfloat16, cuda and privateuse1 float16)
// and whether casts are cached, plus one nesting depth for the thread. Autocast is
// *on* for a device exactly while that device's Autocast key is in the TLS included
// set and not in the excluded set; the keys are in neither by default, so a thread
// that never turns autocast on never reaches the layer (Note [Computing the key set
// of a call]). AutocastGuard is `with torch.autocast(...)`: it sets the state for a
// scope and restores it on exit (also on an exception); the outermost guard's exit
// clears the cast cache.
//
// Rules. A rule is a boxed kernel at its device's Autocast key (owner, debug string,
// RAII handle; `strata dump` lists it, `strata kernel disable OP autocast:cpu` turns
// it off), so an op with no rule keeps the builtin fallthrough there and pays nothing.
// The rule's kernel
//   1. excludes its own Autocast key for the rest of the call (the ops it and the
//      kernels below call are not autocast again: the layers below run once),
//   2. picks the dtype its policy gives (CastPolicy below),
//   3. casts each *eligible* tensor argument to it, inside Tensor[] and Tensor?[]
//      lists too: floating point, not float64, on the rule's device, not written by
//      the op (a `Tensor(a!)` argument is left as it is, so the op writes where the
//      caller reads), and not already of that dtype,
//   4. redispatches to the keys below its own (Note [Redispatch masks]).
// The casts are core::to calls, so dispatch modes and traces see them, as PyTorch's
// modes see autocast's _to_copy. While an explain() or a trace observes, the rule
// notes each argument it cast or kept, and why, on its dispatch step.
//
// The cast cache (PyTorch's): a lower-precision cast of a float32 tensor that
// requires grad is kept for the rest of the outermost autocast scope, so a weight
// used by many ops is cast once. It holds the source tensor too, so the key (the
// source's TensorImpl) cannot be reused by another tensor while cached.
#pragma once

#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "strata/device.h"
#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/modes/export.h"
#include "strata/scalar_type.h"

namespace strata::modes {

// PyTorch's autocast cast policies (aten/src/ATen/autocast_mode.h).
enum class CastPolicy : uint8_t {
  // Cast to the device's autocast dtype (matmul, linear, convolutions).
  lower_precision_fp,
  // Cast up to float32 (ops that need the range: exp, log, losses).
  fp32,
  // If the first tensor argument is eligible, run with the op's `ScalarType? dtype`
  // arguments set to float32 where they are None; the tensors are not cast (sum,
  // softmax-like reductions accumulate and return float32).
  fp32_set_opt_dtype,
  // Run in the widest floating dtype among the eligible arguments: float32 wins over
  // the 16-bit types, float16 with bfloat16 gives float32, float64 arguments are left
  // as they are (add, mul, stack, cat).
  promote,
};
STRATA_MODES_API const char* toString(CastPolicy p);
// "lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote"; Error(Value) otherwise.
STRATA_MODES_API CastPolicy parseCastPolicy(std::string_view name);

// "cpu", "cuda", "privateuse1": the device types autocast has state for. Error(Value)
// naming the device for any other.
STRATA_MODES_API DeviceType parseAutocastDevice(std::string_view device_type);

// --- This thread's autocast state (torch.is_autocast_enabled(device), ...). ---
STRATA_MODES_API bool is_autocast_enabled(DeviceType device);
STRATA_MODES_API void set_autocast_enabled(DeviceType device, bool enabled);
STRATA_MODES_API ScalarType get_autocast_dtype(DeviceType device);
// float16 or bfloat16; Error(Value) naming the device and dtype otherwise.
STRATA_MODES_API void set_autocast_dtype(DeviceType device, ScalarType dtype);
STRATA_MODES_API bool is_autocast_cache_enabled(DeviceType device);
STRATA_MODES_API void set_autocast_cache_enabled(DeviceType device, bool enabled);
// How many AutocastGuards are open on this thread.
STRATA_MODES_API int autocast_nesting();
// Drops this thread's cached casts (the outermost guard's exit does it).
STRATA_MODES_API void clear_autocast_cache();
STRATA_MODES_API size_t autocast_cache_size();

// `with torch.autocast(device, dtype, enabled, cache_enabled):` for a scope. dtype
// nullopt keeps the device's current autocast dtype. enabled = false turns autocast
// off for the device inside the scope (a nested `enabled=False` region). Guards nest;
// each restores what it found. Error(Value) for a device without autocast (meta) or
// a dtype other than float16 and bfloat16, before anything changes.
class STRATA_MODES_API AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device, std::optional<ScalarType> dtype = std::nullopt, bool enabled = true,
                         bool cache_enabled = true);
  explicit AutocastGuard(std::string_view device_type, std::optional<ScalarType> dtype = std::nullopt,
                         bool enabled = true, bool cache_enabled = true);
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  ~AutocastGuard();

 private:
  DeviceType device_;
  ScalarType saved_dtype_;
  bool saved_cache_;
  bool saved_included_;
};

// --- Rules (Note [Autocast]). `op`: "ns::name" or "ns::name.overload", an operator
// that has a schema. `device_type`: "cpu", "cuda" or "privateuse1". A second rule for
// the same (op, device) is Error(Value) naming the op, the device and the owner of the
// first, unless allow_override (the newer rule then shadows the older until it goes).
// The rule is owned (RegistrationOwnerGuard) and lasts as long as the returned handle,
// or as lib when one is given. ---

// torch.library.register_autocast: casts the eligible tensor arguments to cast_inputs
// (a floating dtype; Error(Value) otherwise), then runs the op with autocast off.
STRATA_MODES_API RegistrationHandleRAII register_autocast(
    std::string_view op, std::string_view device_type, ScalarType cast_inputs, bool allow_override = false,
    std::source_location where = std::source_location::current());
STRATA_MODES_API void register_autocast(std::string_view op, std::string_view device_type, ScalarType cast_inputs,
                                        Library& lib, bool allow_override = false,
                                        std::source_location where = std::source_location::current());

// A rule with one of PyTorch's cast policies. fp32_set_opt_dtype needs an op with a
// `ScalarType?` argument (Error(Value) otherwise).
STRATA_MODES_API RegistrationHandleRAII register_autocast_policy(
    std::string_view op, std::string_view device_type, CastPolicy policy, bool allow_override = false,
    std::source_location where = std::source_location::current());
STRATA_MODES_API void register_autocast_policy(std::string_view op, std::string_view device_type, CastPolicy policy,
                                               Library& lib, bool allow_override = false,
                                               std::source_location where = std::source_location::current());

// The core:: ops' rules (owner "builtin", registered by modes::initialize()), each
// for cpu and cuda: {op, policy}. matmul, sum, stack and cat as PyTorch gives their
// aten namesakes; exp with PyTorch's CUDA policy; the binary elementwise ops promote.
struct CoreAutocastPolicy {
  const char* op;
  CastPolicy policy;
};
STRATA_MODES_API std::vector<CoreAutocastPolicy> core_autocast_policies();

}  // namespace strata::modes
