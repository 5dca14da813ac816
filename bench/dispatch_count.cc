// Exact instruction counts for the dispatch paths, where timings on a shared VM
// are noisy: `strata_dispatch_count MODES CALLS [boxed]` calls a muladd-shaped op
// CALLS times (typed, or boxed with the stack built per call, as boxed/muladd does)
// under MODES pass-through modes, as bench/mode_bench.cc's mode_stack/N. Run it
// under callgrind twice and take the difference, so start-up cancels out:
//
//   for n in 20000 40000; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//     build/bin/strata_dispatch_count 8 $n 2>&1 | grep Collected; done
//   (second - first) / 20000 = instructions per call
//
// Not a benchmark: performance claims are bench/'s; this is for profiles.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "strata/modes/dispatch_mode.h"
#include "strata/strata.h"

using namespace strata;

namespace {
Tensor muladd_cpu(const Tensor& a, const Tensor&, double) { return a; }
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODES CALLS [boxed]\n", argv[0]);
    return 2;
  }
  const int n_modes = std::atoi(argv[1]);
  const long calls = std::atol(argv[2]);
  const bool boxed = argc > 3 && std::string_view(argv[3]) == "boxed";
  Library def(Library::DEF, "dispatch_count");
  def.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  Library impl(Library::IMPL, "dispatch_count", DispatchKey::CPU);
  impl.impl("muladd", &muladd_cpu);
  const OperatorHandle h = Dispatcher::singleton().findSchemaOrThrow("dispatch_count::muladd");
  const auto op = h.typed<Tensor(const Tensor&, const Tensor&, double)>();
  const Tensor a = ones({4}), b = ones({4});
  std::vector<std::unique_ptr<modes::ModeGuard>> guards;
  for (int i = 0; i < n_modes; ++i) {
    guards.push_back(std::make_unique<modes::ModeGuard>(std::make_shared<modes::PassthroughMode>()));
  }
  long results = 0;
  for (long i = 0; i < calls; ++i) {
    if (boxed) {
      Stack st{a, b, 2.0};
      h.callBoxed(st);
      results += static_cast<long>(st.size());
    } else {
      results += op.call(a, b, 2.0).defined() ? 1 : 0;
    }
  }
  while (!guards.empty()) guards.pop_back();  // innermost first
  std::printf("%ld results\n", results);
  return results == calls ? 0 : 1;
}
