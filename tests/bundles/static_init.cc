// A test-only bundle that registers the way PyTorch code usually does: from
// STRATA_LIBRARY blocks at namespace scope, run by static initializers when the
// library loads. The host runs them inside the bundle's load transaction instead,
// owned by the bundle (Note [Static registrations in bundles] in strata/plugin.h);
// registerAll adds one op of its own beside them.
#include <QObject>

#include <strata/modes/fake.h>
#include <strata/ops.h>
#include <strata/plugin.h>

namespace {
strata::Tensor twice(const strata::Tensor& x) { return strata::ops::add(x, x); }
strata::Tensor twice_meta(const strata::Tensor& x) { return strata::ops::empty_like(x); }
}  // namespace

STRATA_LIBRARY(static_init, m) {
  m.def("twice(Tensor x) -> Tensor");
  m.keep(strata::modes::register_fake("static_init::twice", &twice_meta));
}

STRATA_LIBRARY_IMPL(static_init, CPU, m) { m.impl("twice", &twice); }

class StaticInitBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "static_init.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar& r) override {
    auto& m = r.library(strata::Library::FRAGMENT, "static_init");
    m.def("thrice(Tensor x) -> Tensor");
    m.impl("thrice", [](const strata::Tensor& x) { return strata::ops::add(twice(x), x); }, "cpu");
  }
};

#include "static_init.moc"
