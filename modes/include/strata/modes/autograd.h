// Autograd: gradients of Strata ops, PyTorch's way (torch.autograd, and
// torch.library.register_autograd for an op of one's own).
//
//   Tensor x = strata::ones({3}).set_requires_grad(true);   // a leaf
//   Tensor y = ops::sum(ops::mul(x, x));                     // y.grad_fn_name() == "SumBackward0"
//   y.backward();                                            // x.grad() == 2 * x
//   auto [gx] = strata::modes::grad({y2}, {x});              // torch.autograd.grad
//
//   strata::modes::register_autograd("extension_cpp::mymuladd", backward, setup_context, lib);
//
// Note [Autograd metadata]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A tensor that requires grad carries the Autograd key of its device. A *leaf* (made
// by the user, requires_grad set by hand) has no grad_fn and accumulates into .grad;
// a result of a differentiable op has a grad_fn: the graph Node that the op's autograd
// kernel made, and the index (output_nr) of the result among the node's inputs. Both
// live in the TensorImpl's AutogradMetaInterface slot (strata/tensor.h), which the SDK
// holds and this layer fills. Plain tensors have neither the key nor the metadata:
// they never reach the layer and pay nothing for it.
//
// The autograd kernel of an op (a formula, core:: or register_autograd) is a boxed
// kernel at the Autograd alias key, so it is a registration like any other (owner,
// debug string, RAII handle, `strata dump`, the store, `strata kernel disable OP
// autograd`). It runs when some argument requires grad, and
//   1. when grad mode is off (NoGradGuard) or no input requires grad, runs the op
//      below autograd and returns;
//   2. refuses an in-place write to a leaf that requires grad, and to a view of one
//      (PyTorch's errors);
//   3. runs the op below autograd (Autograd keys excluded for the call, so the kernels
//      it reaches and the Tensor methods they use are plain), then bumps the version
//      of every argument the schema says it writes;
//   4. makes a Node with one edge per tensor input (the input's grad_fn, or the leaf's
//      AccumulateGrad), calls the formula's setup_context(ctx, inputs, outputs), and
//      gives each floating output requires_grad, the node and its output_nr. A result
//      that is one of the inputs' own TensorImpl (a view op returning self) is first
//      replaced by a fresh alias, so the input keeps its own history.
// An op with no formula, no CompositeImplicitAutograd kernel and inputs that require
// grad reaches the layer's fallback: it runs the op, and its floating outputs get a
// node that raises "trying to backward through OP but no autograd formula was
// registered" when a backward reaches it (PyTorch's NotImplemented node). With no
// autograd layer linked, the SDK's own fallback runs ops below autograd.
//
// Note [Version counters]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Every storage has a version counter (StorageImpl::version), shared by all views of
// it. Tensor::copy_ and fill_ bump it, and so does a call of any op whose schema
// declares an argument written (Tensor(a!)), once per call, whether or not anything
// requires grad (Note [One write, one bump] in sdk/src/dispatch/dispatcher.cc; a
// custom op whose kernel calls fill_ on what it writes counts two, since custom_op
// counts before its kernel runs). ctx.save_for_backward
// records each tensor's version; saved_tensors() compares, and a tensor modified
// since is PyTorch's error ("one of the variables needed for gradient computation
// has been modified by an inplace operation: ..."). A kernel of one's own that writes
// into a tensor with data_ptr must be declared mutating in its schema, as in PyTorch.
//
// The engine (backward, grad) computes, from the roots, how many gradients each node
// waits for, and runs a node once all have arrived, highest sequence number first (the
// order the ops ran in, reversed), summing the gradients that reach one input. Without
// retain_graph each node frees what its formula saved once it ran; a second backward
// through it is PyTorch's error. With create_graph the formulas run with grad mode on,
// so the gradients are themselves differentiable.
//
// Thread safety: grad mode is per thread. A graph may be used by one backward at a
// time; leaves' .grad accumulation is locked per leaf, so backwards of different graphs
// sharing leaves may run on different threads. A tensor gets its metadata before any
// other thread can see it (a leaf when requires_grad is set, as PyTorch's
// requires_grad_ does; a result when its op makes it), so ops on several threads
// read a shared leaf's metadata without a lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "strata/dispatcher.h"
#include "strata/ivalue.h"
#include "strata/library.h"
#include "strata/modes/export.h"
#include "strata/tensor.h"

namespace strata::modes {

class Node;
namespace detail {
class FormulaNode;
}

// Where a gradient goes: input input_nr of node function.
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
  bool valid() const { return function != nullptr; }
};

// A node of the backward graph: one per recorded op call. Its inputs are the
// gradients of the op's outputs; its outputs, one per edge, the gradients of the op's
// tensor inputs.
class STRATA_MODES_API Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node();
  // "MulBackward0", "AccumulateGrad", "MymuladdBackward".
  virtual std::string name() const = 0;
  // grads: one per input of the node (undefined: no gradient reached it). Returns one
  // per next edge (undefined: none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Frees what the node saved for backward (called after it ran without retain_graph).
  virtual void release_variables() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  // The metadata of each input (an output of the forward op): sizes, dtype, device.
  struct InputMeta {
    std::vector<int64_t> sizes;
    ScalarType dtype = ScalarType::Float;
    Device device = kCPU;
  };
  const std::vector<InputMeta>& input_metadata() const { return inputs_; }
  uint32_t add_input_metadata(const Tensor& t);
  // For an undefined output: keeps the numbering of the outputs after it.
  uint32_t add_input_metadata_placeholder();

 protected:
  Node();
  std::vector<Edge> next_edges_;
  std::vector<InputMeta> inputs_;
  uint64_t sequence_nr_;
  friend struct NodeAccess;
};

// The edge a gradient of t flows along: its grad_fn and output_nr, or for a leaf
// that requires grad its AccumulateGrad node; invalid when t does not require grad.
STRATA_MODES_API Edge gradient_edge(const Tensor& t);
// t's grad_fn (null for a leaf or a tensor outside autograd).
STRATA_MODES_API std::shared_ptr<Node> grad_fn(const Tensor& t);

// --- Grad mode (torch.is_grad_enabled / torch.no_grad / torch.inference_mode). ---
STRATA_MODES_API bool is_grad_enabled();
STRATA_MODES_API void set_grad_enabled(bool enabled);

// `with torch.no_grad():` ops record nothing in the scope.
class STRATA_MODES_API NoGradGuard {
 public:
  NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
  ~NoGradGuard();

 private:
  bool prev_;
};

// `with torch.enable_grad():` / set_grad_enabled(mode) for a scope.
class STRATA_MODES_API AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled);
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;
  ~AutoGradMode();

 private:
  bool prev_;
};

// `with torch.inference_mode():` grad mode off, and the Autograd keys excluded, so
// ops skip the layer entirely (not even its kernels run): the cheapest way to run a
// model that has weights requiring grad. Results never require grad.
class STRATA_MODES_API InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  ~InferenceMode();
  static bool is_enabled();

 private:
  bool prev_grad_;
  bool prev_inference_;
  uint64_t prev_excluded_;
};

// --- The engine. ---

// torch.autograd.backward: accumulates d(outputs)/d(leaf) * grads into every leaf's
// .grad. grads: one per output, or empty (each output must then have one element:
// its gradient is 1). Errors (Error(Value)) as PyTorch's: an output that does not
// require grad, a grad of the wrong shape, a second backward through freed nodes.
STRATA_MODES_API void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads = {},
                               bool retain_graph = false, bool create_graph = false);

// torch.autograd.grad: the gradients of outputs with respect to inputs (leaves or
// not), without touching any .grad. An input the outputs do not depend on is an error
// unless allow_unused (its gradient is then undefined). retain_graph defaults to
// create_graph.
STRATA_MODES_API std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                          const std::vector<Tensor>& grad_outputs = {},
                                          std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                                          bool allow_unused = false);

// --- Formulas: register_autograd. ---

// What setup_context saves for backward (torch.autograd.function.FunctionCtx).
class STRATA_MODES_API AutogradContext {
 public:
  // Saves tensors (undefined ones too: they come back undefined), each with its
  // version (Note [Version counters]).
  void save_for_backward(std::vector<Tensor> tensors);
  // The saved tensors. Error(Value) after the graph was freed (a second backward
  // without retain_graph) or when one was modified in place since it was saved.
  std::vector<Tensor> saved_tensors() const;
  // Whether input i (the op's i-th argument) needs a gradient: a tensor, or a list
  // holding one, that requires grad.
  bool needs_input_grad(size_t i) const;
  // Named attributes of any IValue type (ctx.val = ... in Python).
  void set(const std::string& name, IValue value);
  // Error(Value) naming the attribute when setup_context set none by that name.
  const IValue& get(const std::string& name) const;
  bool has(const std::string& name) const;
  // The op the formula belongs to ("ns::name.overload").
  const std::string& op_name() const { return op_; }

 private:
  friend class detail::FormulaNode;
  struct Saved {
    Tensor tensor;  // for an output of the node: an alias without history
    uint32_t version = 0;
    bool is_output = false;
    uint32_t output_nr = 0;
  };
  std::string op_;
  std::vector<Saved> saved_;
  std::vector<bool> needs_input_grad_;
  std::map<std::string, IValue, std::less<>> attrs_;
  std::weak_ptr<Node> node_;
  bool released_ = false;
};

// setup_context(ctx, inputs, output): inputs are the op's arguments (defaults filled
// in), outputs its results.
using SetupContextFn = std::function<void(AutogradContext& ctx, const Stack& inputs, const Stack& outputs)>;
// The form for an op with keyword-only arguments: inputs are the positional ones,
// keyword_only_inputs the rest by name.
using SetupContextKwFn = std::function<void(AutogradContext& ctx, const Stack& inputs,
                                            const std::map<std::string, IValue>& keyword_only_inputs,
                                            const Stack& outputs)>;
// backward(ctx, grads): grads has one gradient per output of the op (zeros where no
// gradient reached it); returns one gradient per input (per positional input with
// the keyword-only form): a Tensor of the input's shape, an undefined Tensor or None
// for no gradient, None for a non-tensor input, a list for a Tensor[] input.
using BackwardFn = std::function<std::vector<IValue>(AutogradContext& ctx, const std::vector<Tensor>& grads)>;

// torch.library.register_autograd. op: "ns::name[.overload]" with a schema that is
// functional (no argument written, no result aliasing an input): Error(Value)
// "cannot register an autograd formula for non-functional operator OP" otherwise.
// setup_context may be empty (nothing saved). A second formula for one op is
// Error(Value) unless allow_override. The handle (or lib) owns the registration.
STRATA_MODES_API RegistrationHandleRAII register_autograd(std::string_view op, BackwardFn backward,
                                                          SetupContextFn setup_context = {},
                                                          bool allow_override = false,
                                                          std::source_location where = std::source_location::current());
STRATA_MODES_API RegistrationHandleRAII register_autograd(std::string_view op, BackwardFn backward,
                                                          SetupContextKwFn setup_context, bool allow_override = false,
                                                          std::source_location where = std::source_location::current());
STRATA_MODES_API void register_autograd(std::string_view op, BackwardFn backward, SetupContextFn setup_context,
                                        Library& lib, bool allow_override = false,
                                        std::source_location where = std::source_location::current());
STRATA_MODES_API void register_autograd(std::string_view op, BackwardFn backward, SetupContextKwFn setup_context,
                                        Library& lib, bool allow_override = false,
                                        std::source_location where = std::source_location::current());
// With nothing to save: (op, backward, lib), as register_fake and register_vmap take.
inline void register_autograd(std::string_view op, BackwardFn backward, Library& lib, bool allow_override = false,
                              std::source_location where = std::source_location::current()) {
  register_autograd(op, std::move(backward), SetupContextFn{}, lib, allow_override, where);
}

// --- gradcheck. ---

struct GradcheckResult {
  bool ok = true;
  // The first mismatch: "input 0, output 0, Jacobian entry (2, 1): numerical 0.5403,
  // analytical 0.8415 (atol 1e-05, rtol 0.001)"; empty when ok.
  std::string message;
};

// torch.autograd.gradcheck: compares, for every floating input that requires grad
// and every floating output, the Jacobian by central finite differences (each input
// element moved by +-eps, in float64) with the one backward computes (one backward
// per output element). fn is called with the inputs as given, converted to float64.
// raise_exception: throw Error(Value) with the message on a mismatch (default), else
// return it.
STRATA_MODES_API GradcheckResult gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                                           const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                                           double rtol = 1e-3, bool raise_exception = true);

// Initializes the layer (its fallback and the core:: formulas), once; the first
// tensor marked requires_grad does it too.
STRATA_MODES_API void initialize_autograd();

// The core:: ops that have a formula (owner "builtin"), for docs and tests.
STRATA_MODES_API std::vector<std::string> core_autograd_ops();

}  // namespace strata::modes
