// Exact instruction counts for the dispatch paths, where timings on a shared VM
// are noisy: `strata_dispatch_count MODES CALLS [boxed]` calls a muladd-shaped op
// CALLS times (typed, or boxed with the stack built per call, as boxed/muladd does)
// under MODES pass-through modes, as bench/mode_bench.cc's mode_stack/N. With
// BOXED_REUSE set, `boxed` refills one Stack (emplace_back) instead of building a new
// one from a braced list: the boxed call without the Stack's construction and
// destruction (and, before SDK ABI 4 kept a Stack's values in place, without the
// vector's allocation; before a braced list built its values in place, without the
// list's copies).
// `strata_dispatch_count vmap|plain CALLS` runs vmap/muladd_rule/8's work (an op with
// a batching rule vmapped over [8, 4] rows) or the op called plainly on the same
// data, as vmap/muladd_plain/8: the difference is the vmap layer's overhead. With
// VMAP_IDENT set in the environment, `vmap` maps a function that returns its first
// argument and calls no op: what vmap() itself costs (levels, wrapping two inputs,
// unwrapping the output). The rule is in the typed form (register_vmap<Sig>); with
// VMAP_BOXED_RULE set, in the boxed form. VMAP_B sets the batch size (default 8). Run it
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
#include "strata/modes/vmap.h"
#include "vmap_muladd.h"
#include "strata/strata.h"

using namespace strata;

namespace {
Tensor muladd_cpu(const Tensor& a, const Tensor&, double) { return a; }

using bench::VmSig;

int runVmap(bool vmapped, long calls) {
  Library lib(Library::DEF, "dispatch_count_vm");
  lib.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  lib.impl("muladd", &bench::muladd_vm_cpu, DispatchKey::CPU);
  const auto op = Dispatcher::singleton().findSchemaOrThrow("dispatch_count_vm::muladd").typed<VmSig>();
  if (std::getenv("VMAP_BOXED_RULE") != nullptr) {
    modes::register_vmap("dispatch_count_vm::muladd", bench::muladdVmapRule(op), lib);
  } else {
    modes::register_vmap<VmSig>("dispatch_count_vm::muladd", bench::muladdTypedVmapRule(op), lib);
  }
  const char* rows = std::getenv("VMAP_B");  // the batch size (default 8)
  const int64_t b = rows != nullptr ? std::atol(rows) : 8;
  const Tensor x = ones({b, 4}), y = ones({b, 4});
  const auto f = modes::vmap([&op](const Tensor& p, const Tensor& q) { return op.call(p, q, 2.0); });
  const auto g = modes::vmap([](const Tensor& p, const Tensor&) { return p; });
  const bool ident = std::getenv("VMAP_IDENT") != nullptr;
  long results = 0;
  for (long i = 0; i < calls; ++i) results += (vmapped ? (ident ? g(x, y) : f(x, y)) : op.call(x, y, 2.0)).sizes()[0] == b ? 1 : 0;
  std::printf("%ld results\n", results);
  return results == calls ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODES|vmap|plain CALLS [boxed]\n", argv[0]);
    return 2;
  }
  const long calls = std::atol(argv[2]);
  if (std::string_view(argv[1]) == "vmap" || std::string_view(argv[1]) == "plain") {
    return runVmap(std::string_view(argv[1]) == "vmap", calls);
  }
  const int n_modes = std::atoi(argv[1]);
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
  const bool reuse = std::getenv("BOXED_REUSE") != nullptr;
  Stack kept;
  for (long i = 0; i < calls; ++i) {
    if (boxed && reuse) {
      kept.clear();
      kept.emplace_back(a);
      kept.emplace_back(b);
      kept.emplace_back(2.0);
      h.callBoxed(kept);
      results += static_cast<long>(kept.size());
    } else if (boxed) {
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
