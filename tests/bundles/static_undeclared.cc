// A test-only bundle whose STRATA_LIBRARY block defines a namespace bundle.json does
// not list: its load transaction rejects it, and nothing of either block stays.
#include <QObject>

#include <strata/ops.h>
#include <strata/plugin.h>

STRATA_LIBRARY(static_undeclared, m) { m.def("ok(Tensor x) -> Tensor"); }

STRATA_LIBRARY(not_in_metadata, m) { m.def("sneaky(Tensor x) -> Tensor"); }

class StaticUndeclaredBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "static_undeclared.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar&) override {}
};

#include "static_undeclared.moc"
