// A test-only bundle whose second STRATA_LIBRARY block throws half way. Run at load
// time, that would only print to stderr and keep the first block; run in the load
// transaction, it rejects the bundle with the reason, and nothing of either stays.
#include <QObject>

#include <stdexcept>

#include <strata/ops.h>
#include <strata/plugin.h>

STRATA_LIBRARY(static_throws, m) { m.def("ok(Tensor x) -> Tensor"); }

STRATA_LIBRARY_FRAGMENT(static_throws, m) {
  m.def("half(Tensor x) -> Tensor");
  throw std::runtime_error("the block gave up half way");
}

class StaticThrowsBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "static_throws.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar&) override {}
};

#include "static_throws.moc"
