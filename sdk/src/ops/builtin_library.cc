// What the dispatcher registers on first use, owned by "builtin": the fallthrough
// fallbacks of the layers that have nothing to do for most ops, and the core:: ops.
#include <memory>
#include <vector>

#include "strata/library.h"

namespace strata::detail {

void registerCoreLibrary(Library& m);  // core_ops.cc

// The libraries are kept by the dispatcher, which is never destroyed: they must
// outlive every static destructor that may still call an op.
void registerBuiltins(std::vector<std::unique_ptr<Library>>& keep) {
  RegistrationOwnerGuard owner("builtin");
  // Autograd and autocast keys fall through by default, as in PyTorch: an op with no
  // autograd kernel or autocast rule skips the layer at no cost. (The Mode and
  // Batched fallbacks come with the layers that own them.)
  for (DispatchKey k : {DispatchKey::AutogradCPU, DispatchKey::AutogradCUDA, DispatchKey::AutogradMeta,
                        DispatchKey::AutocastCPU, DispatchKey::AutocastCUDA, DispatchKey::AutocastPrivateUse1}) {
    keep.push_back(std::make_unique<Library>(Library::IMPL, "_", k, __FILE__, __LINE__));
    keep.back()->fallback(CppFunction::makeFallthrough());
  }
  keep.push_back(std::make_unique<Library>(Library::DEF, "core", std::nullopt, __FILE__, __LINE__));
  registerCoreLibrary(*keep.back());
}

}  // namespace strata::detail
