// A test-only bundle that registers from static initializers without the macros: a
// namespace-scope Library and a registration kept in a static. The host cannot own
// or remove these, so it refuses them (they register nothing) and rejects the
// bundle, naming each (Note [Static registrations in bundles] in strata/plugin.h).
#include <QObject>

#include <strata/ops.h>
#include <strata/plugin.h>

namespace {
strata::Tensor ident(const strata::Tensor& x) { return x; }

strata::Library escaped_lib(strata::Library::DEF, "static_escape");
const bool escaped_def = [] {
  escaped_lib.def("f(Tensor x) -> Tensor");
  escaped_lib.impl("f", &ident, "cpu");
  return true;
}();
// A kernel for an op Strata already has, which would otherwise outlive the bundle.
strata::RegistrationHandleRAII escaped_impl = strata::Dispatcher::singleton().registerImpl(
    strata::parseOperatorName("core::neg"), strata::DispatchKey::Meta,
    strata::KernelFunction::make(&ident), {"static_escape", "a static registerImpl", true});
}  // namespace

// A well-behaved block beside them: deferred, and dropped with the rejected bundle.
STRATA_LIBRARY_FRAGMENT(static_escape, m) { m.def("g(Tensor x) -> Tensor"); }

class StaticEscapeBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "static_escape.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar&) override { (void)escaped_def; }
};

#include "static_escape.moc"
