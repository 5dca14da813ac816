// The seeds' examples as a bundle: mylib::sin with a cpu kernel, and mylib::f
// whose default kernel returns zeros and whose cpu kernel returns ones (so
// `strata kernel disable mylib::f cpu` makes it return zeros).
#include <QObject>

#include <strata/ops.h>
#include <strata/plugin.h>

namespace {

strata::Tensor sin_cpu(const strata::Tensor& x) { return strata::ops::sin(x); }
strata::Tensor f_default(const strata::Tensor& x) { return strata::ops::zeros(std::vector<int64_t>(x.sizes().begin(), x.sizes().end()), x.dtype(), x.device()); }
strata::Tensor f_cpu(const strata::Tensor& x) { return strata::ops::ones(std::vector<int64_t>(x.sizes().begin(), x.sizes().end()), x.dtype()); }

}  // namespace

class MyLibBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "bundle.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar& r) override {
    auto& m = r.library(strata::Library::DEF, "mylib");
    m.def("sin(Tensor x) -> Tensor", {strata::Tag::pointwise});
    m.impl("sin", &sin_cpu, "cpu");
    m.def("f(Tensor x) -> Tensor");
    m.impl("f", &f_default, "default");
    m.impl("f", &f_cpu, "cpu");
  }
};

#include "mylib.moc"
