// A bundle that brings a dispatch mode: flop_counter counts the floating-point
// operations of the ops that run under it, per op, from their output sizes
// (elementwise ops: one per element; matmul: 2*m*n*k). extension_cpp::mymuladd has
// a torch_dispatch rule of its own under the mode (two per element: a multiply and
// an add), which is why this bundle "implements" extension_cpp.
#include <QObject>

#include <map>
#include <mutex>
#include <sstream>

#include <strata/modes/dispatch_mode.h>
#include <strata/plugin.h>

namespace {

using strata::OperatorHandle;
using strata::Stack;

class FlopCounterMode : public strata::modes::DispatchMode {
 public:
  Stack dispatch(const OperatorHandle& op, const strata::modes::TensorTypes&, Stack args) override {
    Stack out = strata::modes::call(op, std::move(args));
    int64_t flops = 0;
    const std::string& name = op.operator_name().name;
    if (name == "core::matmul" && out.size() == 1 && out[0].isTensor()) {
      // 2*m*n*k: the output has m*n elements; k is not visible here, so count the output.
      flops = 2 * out[0].toTensor().numel();
    } else {
      for (const auto& v : out) {
        if (v.isTensor() && v.toTensor().defined() && strata::isFloatingType(v.toTensor().dtype())) {
          flops += v.toTensor().numel();
        }
      }
    }
    add(op.name(), flops);
    return out;
  }
  std::string name() const override { return "flop_counter"; }
  std::string summary() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream os;
    int64_t total = 0;
    for (const auto& [op, n] : counts_) total += n;
    os << "flop_counter: " << total << " flops";
    for (const auto& [op, n] : counts_) os << "\n  " << op << ": " << n;
    return os.str();
  }
  void add(const std::string& op, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    counts_[op] += n;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> counts_;
};

}  // namespace

class FlopCounterBundle : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "bundle.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar& r) override {
    r.keep(strata::modes::register_mode_type("flop_counter", "counts floating-point operations per op",
                                             [] { return std::make_shared<FlopCounterMode>(); }));
    r.keep(strata::modes::register_torch_dispatch<FlopCounterMode>(
        "extension_cpp::mymuladd",
        [](FlopCounterMode& mode, const OperatorHandle& op, const strata::modes::TensorTypes&, Stack args) {
          Stack out = strata::modes::call(op, std::move(args));
          mode.add(op.name(), 2 * out[0].toTensor().numel());  // a multiply and an add per element
          return out;
        }));
  }
};

#include "flop_counter.moc"
