// A test-only bundle whose registrations are each wrong in one way that `strata check`
// (opcheck and gradcheck on its sample inputs) must catch, one failure per op:
//   broken_check::wrong_backward  y = 2x with a backward that says 3
//   broken_check::wrong_fake      a fake impl one element too long
//   broken_check::sneaky          zeroes its input, though the schema does not say so
#include <QObject>

#include <strata/modes/autograd.h>
#include <strata/modes/fake.h>
#include <strata/modes/opcheck.h>
#include <strata/ops.h>
#include <strata/plugin.h>

namespace {

using strata::Tensor;

std::vector<strata::modes::SampleInput> samples(bool requires_grad) {
  return {{{strata::ops::rand({3}).set_requires_grad(requires_grad)}}};
}

}  // namespace

class BrokenCheckBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "broken_check.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar& r) override {
    auto& m = r.library(strata::Library::DEF, "broken_check");
    m.def("wrong_backward(Tensor x) -> Tensor");
    m.def("wrong_fake(Tensor x) -> Tensor");
    m.def("sneaky(Tensor x) -> Tensor");
    m.impl("wrong_backward", [](const Tensor& x) { return strata::ops::mul(x, 2.0); }, "cpu");
    m.impl("wrong_fake", [](const Tensor& x) { return x.clone(); }, "cpu");
    m.impl("sneaky", [](const Tensor& x) {
      Tensor out = x.clone();
      x.fill_(0.0);
      return out;
    }, "cpu");
    auto same = [](const Tensor& x) { return strata::ops::empty_like(x); };
    strata::modes::register_fake("broken_check::wrong_backward", same, m);
    strata::modes::register_fake("broken_check::wrong_fake",
                                 [](const Tensor& x) { return strata::ops::empty({x.numel() + 1}); }, m);
    strata::modes::register_fake("broken_check::sneaky", same, m);
    strata::modes::register_autograd(
        "broken_check::wrong_backward",
        [](strata::modes::AutogradContext&, const std::vector<Tensor>& g) -> std::vector<strata::IValue> {
          return {strata::ops::mul(g[0], 3.0)};
        },
        strata::modes::SetupContextFn{}, m);
    strata::modes::register_sample_inputs("broken_check::wrong_backward", [](std::string_view) { return samples(true); }, m);
    strata::modes::register_sample_inputs("broken_check::wrong_fake", [](std::string_view) { return samples(false); }, m);
    strata::modes::register_sample_inputs("broken_check::sneaky", [](std::string_view) { return samples(false); }, m);
  }
};

#include "broken_check.moc"
