// The muladd bundle, version 1.0.0.
#include <QObject>

#include "muladd.h"

class MulAddBundle_1_0_0 : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "muladd_1_0_0.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar& r) override { extension_cpp::registerMulAdd(r, false); }
};

#include "muladd_1_0_0.moc"
