// What the autograd layer's sources share: the metadata it keeps on tensors, the
// formula record, and the registration of formulas. See Note [Autograd metadata].
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "strata/modes/autograd.h"
#include "strata/modes/dispatch_mode.h"

namespace strata::modes {

namespace detail {

// g summed down to `shape` when shape broadcasts to g's shape (the gradient of a
// broadcast); g as it is otherwise.
Tensor sumTo(const Tensor& g, const std::vector<int64_t>& shape);

struct AutogradMeta final : AutogradMetaInterface {
  std::shared_ptr<Node> grad_fn;  // null for a leaf
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad, while a graph holds it
  bool is_view = false;                  // a view op's result (Note [Autograd metadata])
  uint32_t view_version = 0;             // its storage's version when the view was made
  mutable std::mutex mu;                 // guards grad_ and grad_accumulator
  std::mutex accumulate_mu;              // one accumulation into grad_ at a time
  Tensor grad_;

  bool is_leaf() const override;
  Tensor grad() const override;
  void set_grad(const Tensor& g) override;
  std::string grad_fn_name() const override;
};

AutogradMeta* metaOf(const Tensor& t);
AutogradMeta& ensureMeta(const Tensor& t);
Tensor freshAlias(const Tensor& t);
void setHistory(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr);

// Which edges of a node one argument's tensors occupy.
struct ArgSlots {
  size_t first = 0;
  size_t count = 0;
  bool is_tensor = false;
  bool is_list = false;
};

// One op's formula: register_autograd's or a builtin one.
struct Formula {
  std::string op;         // "ns::name.overload"
  std::string node_name;  // "MulBackward0"
  // A builtin formula whose node PyTorch names by the inputs (matmul is mm, mv or dot
  // by rank; reshape a view or a copy): the name for these inputs and outputs.
  const char* (*node_name_for)(const Stack& inputs, const Stack& outputs) = nullptr;
  BackwardFn backward;
  SetupContextFn setup;
  SetupContextKwFn setup_kw;
  bool nondifferentiable = false;  // outputs never require grad (empty_like, rand_like)
  bool builtin = false;
  std::vector<std::string> arg_names;
  size_t num_positional = 0;  // gradients backward returns
};

// Registers f at the op's Autograd key (owner: the current RegistrationOwnerGuard).
RegistrationHandleRAII registerFormula(std::shared_ptr<Formula> f, bool allow_override, const std::string& debug);
// The layer's fallback at the Autograd<Backend> keys (ops without a formula).
RegistrationHandleRAII registerAutogradFallback();
// The core:: formulas (autograd_formulas.cc).
void registerCoreFormulas(std::vector<RegistrationHandleRAII>& keep);

}  // namespace detail
}  // namespace strata::modes
