// What the dispatcher registers on first use, owned by "builtin": the fallthrough
// fallbacks of the layers that have nothing to do for most ops, and the core:: ops.
#include "strata/library.h"

namespace strata::detail {

void registerCoreLibrary(Library& m);  // core_ops.cc

void registerBuiltins() {
  RegistrationOwnerGuard owner("builtin");
  // Leaked on purpose, like the dispatcher: they must outlive every static
  // destructor that may still call an op.
  // Autograd and autocast keys fall through by default, as in PyTorch: an op with no
  // autograd kernel or autocast rule skips the layer at no cost. (The Mode and
  // Batched fallbacks come with the layers that own them.)
  auto* fallthroughs = new std::vector<Library>();
  for (DispatchKey k : {DispatchKey::AutogradCPU, DispatchKey::AutogradCUDA, DispatchKey::AutogradMeta,
                        DispatchKey::AutocastCPU, DispatchKey::AutocastCUDA}) {
    fallthroughs->emplace_back(Library::IMPL, "_", k, __FILE__, __LINE__);
    fallthroughs->back().fallback(CppFunction::makeFallthrough());
  }
  auto* core = new Library(Library::DEF, "core", std::nullopt, __FILE__, __LINE__);
  registerCoreLibrary(*core);
}

}  // namespace strata::detail
