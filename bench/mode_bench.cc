// Dispatch modes: bench::muladd called unboxed under N pass-through modes (the
// modes/ PassthroughMode, which calls the op below and returns). mode_stack/0 is
// the plain call; each mode adds one trip through the Mode-key fallback (Note [The
// mode stack] in modes/), so the cost should grow linearly in N.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "bench_ops.h"
#include "strata/modes/dispatch_mode.h"

namespace strata::bench {
namespace {

void mode_stack(benchmark::State& s) {
  const auto& op = muladdOp();
  const Tensor a = ones({4}), b = ones({4});
  std::vector<std::unique_ptr<modes::ModeGuard>> modes;
  for (int64_t i = 0; i < s.range(0); ++i) {
    modes.push_back(std::make_unique<modes::ModeGuard>(std::make_shared<modes::PassthroughMode>()));
  }
  for (auto _ : s) benchmark::DoNotOptimize(op.call(a, b, 2.0));
  if (!modes.empty() && modes.front()->as<modes::PassthroughMode>().calls() != static_cast<uint64_t>(s.iterations())) {
    s.SkipWithError("a pass-through mode did not see every call");
  }
  while (!modes.empty()) modes.pop_back();  // innermost first
}
BENCHMARK(mode_stack)->Name("mode_stack")->Arg(0)->Arg(1)->Arg(2)->Arg(4)->Arg(8);

}  // namespace
}  // namespace strata::bench
