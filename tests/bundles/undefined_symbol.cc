// A test-only muladd 1.4.0 that calls a function no library defines: the host binds
// every symbol at load, so the load fails naming it (bound lazily, the process would
// end at the first call).
#include <QObject>

#include <strata/plugin.h>

extern "C" void strata_test_no_such_function();

class UndefinedSymbolBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "undefined_symbol.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar&) override { strata_test_no_such_function(); }
};

#include "undefined_symbol.moc"
