// What the dispatcher registers on first use, owned by "builtin": the fallthrough
// fallbacks of the layers that have nothing to do for most ops, and the core:: ops.
#include <memory>
#include <vector>

#include "strata/library.h"
#include "strata/local_dispatch_key_set.h"

namespace strata::detail {

void registerCoreLibrary(Library& m);  // core_ops.cc

// The libraries are kept by the dispatcher, which is never destroyed: they must
// outlive every static destructor that may still call an op.
namespace {
// Below autograd, without it: what an op whose inputs require grad runs while no
// autograd layer is linked. Excluding the autograd keys for the call is what lets the
// view kernels use the Tensor methods, which route a tensor with a live autograd key
// back through the ops (Tensor::viaOps). The autograd layer's own fallback
// (modes/autograd.h) shadows this one when it initializes.
void belowAutogradFallback(const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  ExcludeDispatchKeyGuard no_autograd(kAutogradKeys);
  op.redispatchBoxed(ks & keysBelow(DispatchKey::AutogradMeta), stack);
}
}  // namespace

void registerBuiltins(std::vector<std::unique_ptr<Library>>& keep) {
  RegistrationOwnerGuard owner("builtin");
  // Autocast keys fall through by default, as in PyTorch: an op with no autocast rule
  // skips the layer at no cost. Autograd keys get a boxed fallback that steps below
  // autograd; only tensors that require grad carry those keys, so plain tensors never
  // reach it. (The Mode and Batched fallbacks come with the layers that own them.)
  for (DispatchKey k : {DispatchKey::AutogradCPU, DispatchKey::AutogradCUDA, DispatchKey::AutogradMeta}) {
    keep.push_back(std::make_unique<Library>(Library::IMPL, "_", k, __FILE__, __LINE__));
    keep.back()->fallback(CppFunction::makeFromBoxedFunction<&belowAutogradFallback>());
  }
  for (DispatchKey k : {DispatchKey::AutocastCPU, DispatchKey::AutocastCUDA, DispatchKey::AutocastPrivateUse1}) {
    keep.push_back(std::make_unique<Library>(Library::IMPL, "_", k, __FILE__, __LINE__));
    keep.back()->fallback(CppFunction::makeFallthrough());
  }
  keep.push_back(std::make_unique<Library>(Library::DEF, "core", std::nullopt, __FILE__, __LINE__));
  registerCoreLibrary(*keep.back());
}

}  // namespace strata::detail
