// A test-only muladd 1.2.0 whose own static initializer (not a STRATA_LIBRARY block)
// throws while the library loads: the host rejects this file with the reason and
// keeps the version that ran before (Note [The load transaction]).
#include <QObject>

#include <stdexcept>

#include <strata/plugin.h>

namespace {
struct ThrowsAtLoad {
  ThrowsAtLoad() { throw std::runtime_error("the static initializer gave up"); }
};
const ThrowsAtLoad throws_at_load;
}  // namespace

class static_init_throws_Bundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "static_init_throws.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar&) override {}
};

#include "static_init_throws.moc"
