// libFuzzer target for `strata call`'s argument literals (host/call_args.h): the
// first byte picks the schema type the rest is read as, the way `strata call` reads
// each word for its argument. Reading must give a value or throw strata::Error (the
// CLI prints it and exits 1), and a value must print; a crash, a sanitizer report, an
// allocation past the literal cap or another exception is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "call_args.h"
#include "fuzz_input.h"
#include "strata/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const FunctionSchema kTypes = parseSchema(
      "fuzz::types(Tensor a, int b, float c, bool d, str e, Scalar f, ScalarType g, Device h, int[] i, "
      "float[] j, bool[] k, Tensor[] l, Tensor? m, int[]? n, Tensor?[] o, SymInt[] p, int[2] q, Any r, "
      "float[][] s, str? t, SymFloat u, SymBool v, SymFloat[] w) -> ()");
  fuzz::Input in(data, size);
  const size_t which = in.pick(kTypes.arguments().size() + 1);
  const std::string text = in.rest();
  // Factories are capped at 2^16 elements here, not the CLI's 2^24: the cap's check is
  // the same code, and a 12 M-element ones() takes 20 s under coverage instrumentation
  // (every element loop traced), which libFuzzer reports as a timeout.
  host::LiteralParser parser(/*seed=*/0, /*max_elements=*/int64_t{1} << 16);
  try {
    std::ostringstream printed;
    if (which == kTypes.arguments().size()) {
      printed << parser.parseTensor(text);
    } else {
      printed << parser.parse(text, *kTypes.arguments()[which].type);
    }
  } catch (const Error&) {
    // A clear refusal: what the CLI reports.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reading a literal threw a %s, not a strata::Error: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}
