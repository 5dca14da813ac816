// opcheck: torch.library.opcheck for Strata ops, and the sample inputs bundles
// register for their ops so that `strata check` can run it.
//
//   auto results = strata::modes::opcheck("extension_cpp::mymuladd", {a, b, 1.5});
//   // {"test_schema": "SUCCESS", "test_autograd_registration": "SUCCESS", ...}
//
// opcheck tests that an op's registrations are consistent, not that its math is right
// (that is gradcheck, in autograd.h). Each test runs when its layer applies:
//   test_schema                 the op does what its schema says: an argument not
//                               declared written (Tensor(a!)) is unchanged, a result
//                               not declared an alias (Tensor(a)) is not an input nor
//                               a view of one.
//   test_autograd_registration  inputs that require grad reach an autograd formula (or
//                               a CompositeImplicitAutograd kernel); without one the
//                               outputs must not require grad.
//   test_faketensor             the fake impl, run under FakeTensorMode, gives the real
//                               run's sizes, strides, dtype and device.
//   test_vmap                   a batching rule agrees with the for-loop fallback
//                               (skipped when the op has no rule or takes a list).
//   test_autocast               an autocast rule's outputs have the dtype its policy
//                               gives (skipped without a rule for the inputs' device).
// The tests run on copies of the arguments. test_vmap turns the op's rule off for a
// moment (KernelEnabledScope): do not run it while other threads vmap the same op.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "strata/dispatcher.h"
#include "strata/ivalue.h"
#include "strata/library.h"
#include "strata/modes/export.h"

namespace strata::modes {

STRATA_MODES_API const std::vector<std::string>& opcheck_default_tests();

// What each test gave: "SUCCESS", "SKIPPED: <why>", or the failure's message.
using OpcheckResults = std::map<std::string, std::string>;
STRATA_MODES_API bool opcheck_passed(const OpcheckResults& r);

// op: "ns::name[.overload]". args: the op's arguments (trailing defaults may be left
// out). test_utils: a subset of opcheck_default_tests() (Error(Value) naming an
// unknown one). raise_exception: throw Error(Value) "opcheck(OP): TEST failed: ..."
// at the first failure; else return every result. atol and rtol go together (both or
// neither; Error(Value) otherwise); neither: per-dtype defaults as assert_close.
STRATA_MODES_API OpcheckResults opcheck(std::string_view op, const Stack& args,
                                        const std::vector<std::string>& test_utils = opcheck_default_tests(),
                                        bool raise_exception = true, std::optional<double> atol = std::nullopt,
                                        std::optional<double> rtol = std::nullopt);

// torch.testing.assert_close for two tensors: same sizes and dtype, and
// |actual - expected| <= atol + rtol * |expected| everywhere (defaults per dtype).
// Throws Error(Value) naming the first mismatching index and both values.
STRATA_MODES_API void assert_close(const Tensor& actual, const Tensor& expected,
                                   std::optional<double> atol = std::nullopt, std::optional<double> rtol = std::nullopt);

// --- Sample inputs: what `strata check` runs opcheck and gradcheck on. ---

// One call's arguments. Tensors that require grad are what gradcheck differentiates.
struct SampleInput {
  Stack args;
};
// Makes the samples for a device type ("cpu", "cuda"): called by `strata check` when
// it runs, so tensors are fresh for each run.
using SampleInputsFn = std::function<std::vector<SampleInput>(std::string_view device_type)>;

// Registers sample inputs for op (a rule like any other: owner, debug string, RAII,
// `strata dump`, goes with its bundle). A second set for one op is Error(Value).
STRATA_MODES_API RegistrationHandleRAII register_sample_inputs(
    std::string_view op, SampleInputsFn samples, std::source_location where = std::source_location::current());
STRATA_MODES_API void register_sample_inputs(std::string_view op, SampleInputsFn samples, Library& lib,
                                             std::source_location where = std::source_location::current());
// The op's samples for a device type; nullopt when none are registered.
STRATA_MODES_API std::optional<std::vector<SampleInput>> sample_inputs(const OperatorHandle& op,
                                                                       std::string_view device_type);

// One line of `strata check`.
struct CheckRow {
  std::string op;
  std::string test;    // "test_schema", ..., "gradcheck"
  std::string sample;  // "sample 0"
  bool passed = true;
  bool skipped = false;
  std::string reason;  // empty when passed
};
// opcheck (every test) and gradcheck (samples with inputs that require grad and an op
// with a formula) on every sample of op, on cpu.
STRATA_MODES_API std::vector<CheckRow> check_op(const OperatorHandle& op);

}  // namespace strata::modes
