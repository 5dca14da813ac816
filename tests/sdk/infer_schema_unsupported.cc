// Must NOT compile: infer_schema of a kernel taking an unsupported type. The
// test (infer_schema_rejects_unsupported_types) compiles this file and expects
// the static_assert's message.
#include "strata/infer_schema.h"

#include <map>

int main() {
#if defined(STRATA_CASE_INT32)
  (void)strata::infer_schema<strata::Tensor(const strata::Tensor&, int)>();
#else
  (void)strata::infer_schema<strata::Tensor(std::map<int, int>)>();
#endif
}
