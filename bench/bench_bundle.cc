// The template of host/load_100_bundles' generated bundles: three ops with CPU and
// Meta kernels, in a namespace named after the bundle (registrar.name()). The
// benchmark makes each bundle by copying this library and rewriting its name,
// "zbench000000" in the embedded bundle.json, to one of the same length.
#include <QObject>

#include <strata/ops.h>
#include <strata/plugin.h>

namespace {
strata::Tensor scale_cpu(const strata::Tensor& x, double c) { return strata::ops::mul(x, c); }
strata::Tensor pair_cpu(const strata::Tensor& a, const strata::Tensor& b) { return strata::ops::add(a, b); }
strata::Tensor ident(const strata::Tensor& x) { return x; }
}  // namespace

class BenchBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "bench_bundle.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar& r) override {
    auto& m = r.library(strata::Library::DEF, r.name());
    m.def("scale(Tensor x, float c) -> Tensor");
    m.def("pair(Tensor a, Tensor b) -> Tensor");
    m.def("ident(Tensor x) -> Tensor");
    auto& cpu = r.library(strata::Library::IMPL, r.name(), strata::DispatchKey::CPU);
    cpu.impl("scale", &scale_cpu);
    cpu.impl("pair", &pair_cpu);
    cpu.impl("ident", &ident);
    auto& meta = r.library(strata::Library::IMPL, r.name(), strata::DispatchKey::Meta);
    meta.impl("scale", [](const strata::Tensor& x, double) { return strata::ops::empty_like(x); });
    meta.impl("pair", [](const strata::Tensor& a, const strata::Tensor&) { return strata::ops::empty_like(a); });
  }
};

#include "bench_bundle.moc"
