// libFuzzer target for the schema parser. Beyond "never crash", it checks the
// printer's contract on every input that parses: print(parse(s)) parses back to
// an equal schema and prints identically (Note [Schema printing]); and every
// error's column lies within the input (or just past its end).
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "strata/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool typevars : {true, false}) {
    try {
      const strata::FunctionSchema schema = strata::parseSchema(text, {.allow_typevars = typevars});
      const std::string printed = schema.str();
      strata::FunctionSchema again = [&] {
        try {
          return strata::parseSchema(printed, {.allow_typevars = typevars});
        } catch (const strata::SchemaError& e) {
          std::fprintf(stderr, "printed form does not parse: %s\n  input: %s\n", e.what(), text.c_str());
          std::abort();
        }
      }();
      if (!(again == schema) || again.str() != printed) {
        std::fprintf(stderr, "round trip changed the schema\n  input:   %s\n  printed: %s\n  again:   %s\n",
                     text.c_str(), printed.c_str(), again.str().c_str());
        std::abort();
      }
    } catch (const strata::SchemaError& e) {
      if (e.column() < 1 || e.column() > size + 1) {
        std::fprintf(stderr, "column %zu outside the input of %zu bytes: %s\n", e.column(), size, e.what());
        std::abort();
      }
    }
  }
  return 0;
}
