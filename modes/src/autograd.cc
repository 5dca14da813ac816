// The autograd layer: tensors' autograd metadata, the graph nodes, the autograd
// kernel every formula shares, the fallback for ops without one, and the engine. See
// Note [Autograd metadata] and Note [Version counters] in autograd.h.
#include "strata/modes/autograd.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd_internal.h"
#include "registered_at.h"
#include "tensor_walk.h"
#include "strata/error.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/ops.h"

namespace strata::modes {

namespace {

thread_local bool tls_grad_enabled = true;
thread_local bool tls_inference_mode = false;
std::atomic<uint64_t> g_next_sequence_nr{0};

std::string shapeStr(IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

// g summed down to `shape` when shape broadcasts to g's shape (leading dims, and dims
// of size 1): the gradient of a broadcast. g as it is otherwise, for the caller's
// check to name.
Tensor detail::sumTo(const Tensor& g, const std::vector<int64_t>& shape) {
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  if (lead < 0) return g;
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t have = g.size(lead + static_cast<int64_t>(i));
    if (shape[i] == have) continue;
    if (shape[i] != 1) return g;
    dims.push_back(lead + static_cast<int64_t>(i));
  }
  if (dims.empty()) return g;
  return ops::reshape(ops::sum(g, dims, /*keepdim=*/true), shape);
}

namespace {

std::string typeStr(const Tensor& t) {
  return "[" + std::string(toString(t.device().type)) + ":" + toString(t.dtype()) + " " + shapeStr(t.sizes()) + "]";
}

}  // namespace

namespace detail {

AutogradMeta* metaOf(const Tensor& t) {
  return static_cast<AutogradMeta*>(t.unsafeGetTensorImpl()->autograd_meta());
}

// Held while a tensor's metadata is installed, here and by the requires_grad hook.
std::mutex g_create_meta_mu;

AutogradMeta& ensureMeta(const Tensor& t) {
  TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->autograd_meta() == nullptr) {
    // Leaves got theirs when requires_grad was set (Note [Autograd metadata]), so this
    // is a tensor no other thread can see yet. The lock makes two installers agree;
    // the read before it is unlocked, so sharing a tensor across threads before it
    // has metadata is a race, as it is in PyTorch.
    std::lock_guard<std::mutex> lock(g_create_meta_mu);
    if (impl->autograd_meta() == nullptr) impl->set_autograd_meta(std::make_unique<AutogradMeta>());
  }
  return *static_cast<AutogradMeta*>(impl->autograd_meta());
}

// A new TensorImpl over t's storage and layout, outside autograd (Tensor::detach).
Tensor freshAlias(const Tensor& t) { return t.detach(); }

void setHistory(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr) {
  AutogradMeta& m = ensureMeta(t);
  m.grad_fn = fn;
  m.output_nr = output_nr;
  t.unsafeGetTensorImpl()->set_requires_grad(true);
}

}  // namespace detail

using detail::AutogradMeta;
using detail::ensureMeta;
using detail::metaOf;

// --- Metadata -------------------------------------------------------------------

bool detail::AutogradMeta::is_leaf() const { return grad_fn == nullptr; }
Tensor detail::AutogradMeta::grad() const {
  std::lock_guard<std::mutex> lock(mu);
  return grad_;
}
void detail::AutogradMeta::set_grad(const Tensor& g) {
  std::lock_guard<std::mutex> lock(mu);
  grad_ = g;
}
std::string detail::AutogradMeta::grad_fn_name() const { return grad_fn ? grad_fn->name() : std::string(); }

// --- Nodes ------------------------------------------------------------------------

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}
Node::~Node() = default;

uint32_t Node::add_input_metadata_placeholder() {
  inputs_.emplace_back();
  return static_cast<uint32_t>(inputs_.size() - 1);
}

uint32_t Node::add_input_metadata(const Tensor& t) {
  inputs_.push_back({std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), t.dtype(), t.device()});
  return static_cast<uint32_t>(inputs_.size() - 1);
}

namespace detail {

// Note [The layout of .grad]: as PyTorch's AccumulateGrad, a leaf whose layout is
// dense and non-overlapping (a transposed or permuted tensor included) gets a .grad
// with its own strides, so that an optimizer may walk both the same way; any other
// leaf (an expanded or a strided slice) gets a contiguous .grad.
bool nonOverlappingAndDense(const Tensor& t) {
  const int64_t nd = t.dim();
  std::vector<int64_t> perm(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) perm[static_cast<size_t>(i)] = i;
  const IntArrayRef sizes = t.sizes(), strides = t.strides();
  // Innermost first; dims of size 0 or 1 (whose stride means nothing) last.
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t want = 1;
  for (int64_t d : perm) {
    if (sizes[d] < 2) return true;
    if (strides[d] != want) return false;
    want *= sizes[d];
  }
  return true;
}

// No two elements share memory (a strided slice, not an expanded tensor): innermost
// dim first, each stride past everything the dims inside it reach.
bool nonOverlapping(const Tensor& t) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return t.stride(a) < t.stride(b); });
  int64_t reach = 0;  // the largest offset the dims so far reach
  for (int64_t d : dims) {
    if (t.stride(d) <= reach) return false;
    reach += (t.size(d) - 1) * t.stride(d);
  }
  return true;
}

bool obeysLayoutContract(const Tensor& grad, const Tensor& variable) {
  if (!nonOverlappingAndDense(variable)) return grad.is_contiguous();
  for (int64_t d = 0; d < grad.dim(); ++d) {
    // A dim of size 1 may have any stride but 0 (a broadcast's, which views another tensor).
    if (grad.size(d) != 1 ? grad.stride(d) != variable.stride(d) : grad.stride(d) == 0) return false;
  }
  return true;
}

Tensor cloneObeyingContract(const Tensor& grad, const Tensor& variable) {
  if (grad.wrapper() != nullptr || !nonOverlappingAndDense(variable)) return ops::clone(grad);
  Tensor out = empty_strided(variable.sizes(), variable.strides(),
                             TensorOptions(grad.dtype()).with_device(grad.device()));
  ops::copy_(out, grad);  // recorded when the gradient has history (create_graph)
  return out;
}

// The node of a leaf: adds what reaches it to the leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable) : variable_(std::move(variable)) {
    // As PyTorch: accumulation runs as soon as its gradient is complete.
    sequence_nr_ = UINT64_MAX;
    add_input_metadata(variable_);
  }
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = std::move(grads.at(0));
    if (!g.defined()) return {};
    AutogradMeta& m = ensureMeta(variable_);
    // Without create_graph the stored grad has no history of its own.
    if (!is_grad_enabled() && g.requires_grad()) g = g.detach();
    // One accumulation at a time per leaf (backwards of different graphs may share
    // it); readers of .grad take only `mu`.
    std::lock_guard<std::mutex> acc(m.accumulate_mu);
    Tensor old = m.grad();
    if (old.defined() && !is_grad_enabled() && nonOverlapping(old)) {
      // Into .grad itself, as PyTorch's `variable_grad += new_grad`: a reference to
      // .grad taken before (an optimizer's, set_grad's buffer) sees the sum. A .grad
      // set to an overlapping layout (an expanded tensor) is summed out of place.
      old.copy_(ops::add(old, g));
    } else if (old.defined()) {
      m.set_grad(ops::add(old, g));  // create_graph: a sum with history, out of place
    } else if (!is_grad_enabled() && g.getIntrusivePtr().use_count() == 1 && g.storage().use_count() == 1 &&
               obeysLayoutContract(g, variable_)) {
      m.set_grad(std::move(g));  // the only reference, laid out as .grad must be: kept
    } else {
      // .grad never aliases a caller's tensor or a broadcast view.
      m.set_grad(cloneObeyingContract(g, variable_));
    }
    return {};
  }
  const Tensor& variable() const { return variable_; }

 private:
  Tensor variable_;
};

// The node of an op with inputs that require grad and no formula.
class NotImplementedNode final : public Node {
 public:
  // The op's handle, not its name: the name is a string built only if a backward
  // reaches this node (an operator's entry outlives its removal, so the handle stays
  // valid). Whether the op's formula is switched off is asked then too, not on every
  // forward: that question takes the dispatcher's lock, which would serialize every
  // thread's calls to ops without a formula.
  explicit NotImplementedNode(const OperatorHandle& op) : op_(op) {}
  std::string name() const override { return "NotImplemented"; }
  std::vector<Tensor> apply(std::vector<Tensor>&&) override {
    const std::string op = op_.name();
    Dispatcher& d = Dispatcher::singleton();
    std::string why;
    if (!d.isKernelEnabled(op_.operator_name(), DispatchKey::Autograd)) {
      why = " (its formula is switched off: strata kernel enable " + op + " autograd)";
    } else if (hasFormulaNow(d)) {
      // Switched back on, or registered, after the forward ran: its graph has none.
      why = " when its forward ran (its formula was switched off or not yet registered then; run the forward again)";
    } else {
      why = " (register one with register_autograd, or give the op a CompositeImplicitAutograd kernel made of "
            "differentiable ops)";
    }
    STRATA_FAIL(NotImplemented, "trying to backward through ", op, " but no autograd formula was registered", why);
  }
  void setEdges(std::vector<Edge> e) { next_edges_ = std::move(e); }

 private:
  bool hasFormulaNow(Dispatcher& d) const {
    for (const RegistrationInfo& r : d.registrations(op_.operator_name())) {
      if (r.what == RegistrationInfo::What::Impl && r.key == DispatchKey::Autograd && r.enabled) return true;
    }
    return false;
  }

  OperatorHandle op_;
};

}  // namespace detail

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& m = ensureMeta(t);
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  std::lock_guard<std::mutex> lock(m.mu);
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<detail::AccumulateGrad>(t);
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  const AutogradMeta* m = t.defined() ? metaOf(t) : nullptr;
  return m != nullptr ? m->grad_fn : nullptr;
}

// --- Grad mode ----------------------------------------------------------------------

bool is_grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool enabled) { tls_grad_enabled = enabled; }
NoGradGuard::NoGradGuard() : prev_(tls_grad_enabled) { tls_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { tls_grad_enabled = prev_; }
AutoGradMode::AutoGradMode(bool enabled) : prev_(tls_grad_enabled) { tls_grad_enabled = enabled; }
AutoGradMode::~AutoGradMode() { tls_grad_enabled = prev_; }

InferenceMode::InferenceMode(bool enabled)
    : prev_grad_(tls_grad_enabled),
      prev_inference_(tls_inference_mode),
      prev_excluded_(strata::detail::tls_local_dispatch_key_set.excluded) {
  if (!enabled) {
    // inference_mode(False) inside an inference scope: autograd comes back.
    tls_grad_enabled = true;
    tls_inference_mode = false;
    strata::detail::tls_local_dispatch_key_set.excluded &= ~kAutogradKeys.raw();
    return;
  }
  tls_grad_enabled = false;
  tls_inference_mode = true;
  strata::detail::tls_local_dispatch_key_set.excluded |= kAutogradKeys.raw();
}
InferenceMode::~InferenceMode() {
  tls_grad_enabled = prev_grad_;
  tls_inference_mode = prev_inference_;
  strata::detail::tls_local_dispatch_key_set.excluded = prev_excluded_;
}
bool InferenceMode::is_enabled() { return tls_inference_mode; }

// --- AutogradContext ------------------------------------------------------------------

void AutogradContext::save_for_backward(std::vector<Tensor> tensors) {
  saved_.clear();
  for (Tensor& t : tensors) {
    Saved s;
    if (t.defined()) s.version = t.storage()->version();
    s.tensor = std::move(t);
    saved_.push_back(std::move(s));
  }
}

std::vector<Tensor> AutogradContext::saved_tensors() const {
  STRATA_CHECK(!released_, Value, op_, ": Trying to backward through the graph a second time (or directly access "
               "saved tensors after they have already been freed). Saved intermediate values of the graph are freed "
               "when you call backward() or grad(). Specify retain_graph=true if you need to backward through the "
               "graph a second time or if you need to access saved tensors after calling backward.");
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  std::shared_ptr<Node> node = node_.lock();
  for (const Saved& s : saved_) {
    if (!s.tensor.defined()) {
      out.emplace_back();
      continue;
    }
    const uint32_t now = s.tensor.storage()->version();
    if (now != s.version) {
      STRATA_FAIL(Value, "one of the variables needed for gradient computation has been modified by an inplace "
                  "operation: ", typeStr(s.tensor), (s.is_output && node ? ", which is output " +
                  std::to_string(s.output_nr) + " of " + node->name() + "," : std::string()), " is at version ", now,
                  "; expected version ", s.version, " instead (saved by the formula of ", op_, ")");
    }
    if (s.is_output && node) {
      // An output is kept without its history (it would hold its own node); it
      // comes back with it.
      Tensor t = detail::freshAlias(s.tensor);
      detail::setHistory(t, node, s.output_nr);
      out.push_back(std::move(t));
    } else {
      out.push_back(s.tensor);
    }
  }
  return out;
}

bool AutogradContext::needs_input_grad(size_t i) const {
  STRATA_CHECK(i < needs_input_grad_.size(), Index, op_, ": needs_input_grad(", i, ") is out of range: the op has ",
               needs_input_grad_.size(), " input(s)");
  return needs_input_grad_[i];
}

void AutogradContext::set(const std::string& name, IValue value) { attrs_[name] = std::move(value); }
bool AutogradContext::has(const std::string& name) const { return attrs_.count(name) != 0; }
const IValue& AutogradContext::get(const std::string& name) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) {
    std::string known;
    for (const auto& [k, _] : attrs_) known += (known.empty() ? "" : ", ") + k;
    STRATA_FAIL(Value, op_, ": the autograd context has no attribute '", name, "' (setup_context set: ",
                known.empty() ? "none" : known, ")");
  }
  return it->second;
}

// --- The autograd kernel ------------------------------------------------------------

namespace detail {

namespace {

bool anyRequiresGrad(const Stack& stack, size_t n) {
  for (size_t i = 0; i < n && i < stack.size(); ++i) {
    bool any = false;
    forEachTensor(stack[i], [&](const Tensor& t) { any = any || (t.defined() && t.requires_grad()); });
    if (any) return true;
  }
  return false;
}

void runBelow(const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  ExcludeDispatchKeyGuard no_autograd(kAutogradKeys);
  op.redispatchBoxed(ks & keysBelow(DispatchKey::AutogradMeta), stack);
}

// The version counters of the tensors the schema declares written, in the order
// bumpWritten walks them. Empty for an op that writes nothing (no allocation).
std::vector<uint32_t> writtenVersions(const FunctionSchema& schema, const Stack& inputs) {
  std::vector<uint32_t> out;
  if (!schema.is_mutable()) return out;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && i < inputs.size(); ++i) {
    if (!args[i].is_write()) continue;
    forEachTensor(inputs[i], [&](const Tensor& t) {
      if (t.defined() && t.wrapper() == nullptr) out.push_back(t.storage()->version());
    });
  }
  return out;
}

// Note [One write, one bump] (sdk/src/dispatch/dispatcher.cc): a written tensor whose
// counter the kernel below did not move (one that wrote through data_ptr) is bumped
// here, before the node records versions; one whose kernel bumped it already
// (core::fill_'s calls Tensor::fill_) is not bumped twice, and the call's entry point
// then finds it moved and counts nothing more.
void bumpWritten(const FunctionSchema& schema, const Stack& inputs, const std::vector<uint32_t>& before) {
  if (before.empty()) return;
  const auto& args = schema.arguments();
  size_t k = 0;
  for (size_t i = 0; i < args.size() && i < inputs.size(); ++i) {
    if (!args[i].is_write()) continue;
    forEachTensor(inputs[i], [&](const Tensor& t) {
      if (!t.defined() || t.wrapper() != nullptr) return;
      if (k < before.size() && t.storage()->version() == before[k]) t.storage()->bump_version();
      ++k;
    });
  }
}

// PyTorch's checks of an in-place write under autograd. The op's name is built only
// for a message (STRATA_CHECK evaluates its message when the check fails).
void checkInplace(const OperatorHandle& op, const FunctionSchema& schema, const Stack& inputs) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && i < inputs.size(); ++i) {
    if (!args[i].is_write()) continue;
    forEachTensor(inputs[i], [&](const Tensor& t) {
      if (!t.defined() || !t.requires_grad()) return;
      STRATA_CHECK(!t.is_leaf(), Value, op.name(), ": a leaf Variable that requires grad is being used in an in-place "
                   "operation (argument '", args[i].name, "')");
      const AutogradMeta* m = metaOf(t);
      STRATA_CHECK(m == nullptr || !m->is_view, Value, op.name(), ": argument '", args[i].name, "' is a view of a tensor "
                   "that requires grad, and Strata's autograd does not rebase a view's base after an in-place "
                   "write; clone() the view first");
    });
    // A value that requires grad written into part of a storage (a view of a plain
    // tensor): the base would not know, and its gradient would be lost.
    forEachTensor(inputs[i], [&](const Tensor& t) {
      if (!t.defined() || t.wrapper() != nullptr || t.is_meta()) return;
      const size_t span = static_cast<size_t>(t.numel()) * t.element_size();
      STRATA_CHECK(t.storage_offset() == 0 && span == t.storage()->nbytes(), Value, op.name(), ": argument '", args[i].name,
                   "' is a view of part of a storage, and writing a value that requires grad into it in place would "
                   "lose the gradient of the tensor it views (Strata's autograd does not rebase views); write into "
                   "a tensor of its own, or detach() the value");
      // Nor into a plain tensor whose storage another tensor shares (its base, a view
      // of it, a view covering it whole): that one would keep no history, and the
      // gradient through it would be lost without a word. A tensor that requires grad
      // already is tracked: its views notice the write (checkViewsCurrent).
      STRATA_CHECK(t.requires_grad() || t.storage().use_count() <= 1, Value, op.name(), ": argument '", args[i].name,
                   "' shares its storage with another tensor (a view of it, the tensor it views, or a detach()ed "
                   "alias), and writing a "
                   "value that requires grad into it in place would lose the gradient through that other tensor "
                   "(Strata's autograd does not rebase views); write into a tensor of its own, or detach() the value");
    });
  }
}

// A view whose storage was written in place since it was made (through its base or
// another view) no longer has the history autograd recorded for it.
void checkViewsCurrent(const OperatorHandle& op, const Stack& inputs) {
  for (const IValue& v : inputs) {
    forEachTensor(v, [&](const Tensor& t) {
      if (!t.defined() || !t.requires_grad()) return;
      const AutogradMeta* m = metaOf(t);
      if (m == nullptr || !m->is_view || t.wrapper() != nullptr) return;
      STRATA_CHECK(t.storage()->version() == m->view_version, Value, op.name(), ": an input is a view (made by ",
                   m->grad_fn_name(), ") whose base was modified by an inplace operation after the view was made; "
                   "Strata's autograd does not rebase views: make the view after the write, or clone() it before");
    });
  }
}

}  // namespace

// The inputs' edges and metadata, per argument (Note [Autograd metadata]).
void collectEdges(const Stack& inputs, std::vector<Edge>& edges, std::vector<ArgSlots>& slots,
                  std::vector<Node::InputMeta>& metas, std::vector<bool>& needs) {
  for (const IValue& v : inputs) {
    ArgSlots s;
    s.first = edges.size();
    s.is_list = v.isTensorList() || v.isGenericList();
    s.is_tensor = v.isTensor() || s.is_list;
    bool need = false;
    forEachTensor(v, [&](const Tensor& t) {
      if (t.defined()) {
        edges.push_back(gradient_edge(t));
        metas.push_back({std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), t.dtype(), t.device()});
        need = need || t.requires_grad();
      } else {
        edges.emplace_back();
        metas.emplace_back();
      }
    });
    s.count = edges.size() - s.first;
    slots.push_back(s);
    needs.push_back(need);
  }
}

// Gives the op's floating outputs their history. An output that is an input's own
// TensorImpl is first replaced by a fresh alias (the input keeps its history), except
// for an in-place op's written argument, whose history is rebased onto the node.
void markOutputs(const FunctionSchema& schema, const Stack& inputs, Stack& stack, const std::shared_ptr<Node>& node,
                 bool differentiable) {
  const auto& returns = schema.returns();
  auto mark = [&](Tensor& t, size_t ret_index) {
    if (!t.defined()) {
      node->add_input_metadata_placeholder();  // keeps the later outputs' numbers
      return;
    }
    const Argument* ret = ret_index < returns.size() ? &returns[ret_index] : nullptr;
    const bool written = ret != nullptr && ret->is_write();
    bool is_input = false;
    for (const IValue& in : inputs) {
      forEachTensor(in, [&](const Tensor& x) { is_input = is_input || x.unsafeGetTensorImpl() == t.unsafeGetTensorImpl(); });
    }
    // A wrapper (a fake tensor) gets no history: its layer is not differentiated.
    if (t.wrapper() != nullptr) {
      node->add_input_metadata(t);
      return;
    }
    bool aliases = false;
    if (ret != nullptr && ret->alias_info && !written) {
      for (const IValue& in : inputs) forEachTensor(in, [&](const Tensor& x) { aliases = aliases || (x.defined() && t.is_alias_of(x)); });
    }
    if (is_input && !written) t = freshAlias(t);
    const uint32_t nr = node->add_input_metadata(t);
    if (!differentiable || !isFloatingType(t.dtype())) return;
    setHistory(t, node, nr);
    if (aliases) {
      AutogradMeta& m = ensureMeta(t);
      m.is_view = true;
      m.view_version = t.storage()->version();
    }
  };
  for (size_t r = 0; r < stack.size(); ++r) {
    IValue& v = stack[r];
    if (v.isTensor()) {
      Tensor t = std::move(v).toTensor();
      mark(t, r);
      v = IValue(std::move(t));
    } else if (v.isTensorList()) {
      std::vector<Tensor> ts = v.toTensorList();
      for (Tensor& t : ts) mark(t, r);
      v = IValue(std::move(ts));
    }
  }
}

namespace {

// The layer's fallback: ops with inputs that require grad and no formula.
void notImplementedFallback(const OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  const FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  if (!is_grad_enabled() || !anyRequiresGrad(stack, n)) {
    runBelow(op, ks, stack);
    return;
  }
  // The arguments, kept for after the op has run (in place: no allocation).
  const Stack inputs(stack.begin(), stack.begin() + static_cast<std::ptrdiff_t>(std::min(n, stack.size())));
  checkInplace(op, schema, inputs);
  checkViewsCurrent(op, inputs);
  const std::vector<uint32_t> versions = writtenVersions(schema, inputs);
  runBelow(op, ks, stack);
  bumpWritten(schema, inputs, versions);
  auto node = std::make_shared<NotImplementedNode>(op);
  // Only the edges, numbered as collectEdges numbers them (one per tensor slot): the
  // node never runs a formula, so it keeps no slots, input metadata or needs.
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const IValue& v : inputs) {
    forEachTensor(v, [&](const Tensor& t) { edges.push_back(t.defined() ? gradient_edge(t) : Edge{}); });
  }
  node->setEdges(std::move(edges));
  markOutputs(schema, inputs, stack, node, /*differentiable=*/true);
}

}  // namespace

// --- Formulas -------------------------------------------------------------------------

class FormulaNode final : public Node {
 public:
  FormulaNode(std::shared_ptr<const Formula> f, std::string op) : formula_(std::move(f)) { ctx_.op_ = std::move(op); }
  std::string name() const override { return name_ != nullptr ? std::string(name_) : formula_->node_name; }
  void release_variables() override {
    ctx_.saved_.clear();
    ctx_.released_ = true;
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

  void init(std::vector<bool> needs, const std::shared_ptr<FormulaNode>& self) {
    ctx_.needs_input_grad_ = std::move(needs);
    ctx_.node_ = self;
  }
  // An output setup_context saved is kept without its history (it would hold this
  // node): recognized by its TensorImpl, replaced by a fresh alias.
  void detachSavedOutputs(const Stack& outputs) {
    for (auto& s : ctx_.saved_) {
      if (!s.tensor.defined()) continue;
      for (size_t r = 0; r < outputs.size(); ++r) {
        if (outputs[r].isTensor() && outputs[r].toTensor().unsafeGetTensorImpl() == s.tensor.unsafeGetTensorImpl()) {
          s.is_output = true;
          s.output_nr = static_cast<uint32_t>(r);
          s.tensor = freshAlias(s.tensor);
        }
      }
    }
  }

  AutogradContext ctx_;
  std::vector<ArgSlots> slots_;
  std::vector<Node::InputMeta> arg_metas_;
  size_t num_grads_expected_ = 0;  // arguments backward answers for
  const char* name_ = nullptr;     // Formula::node_name_for's answer, when it has one
  void setEdges(std::vector<Edge> e) { next_edges_ = std::move(e); }

 private:
  std::shared_ptr<const Formula> formula_;
};

std::vector<Tensor> FormulaNode::apply(std::vector<Tensor>&& grads) {
  // Gradients that did not reach an output are zeros (materialize_grads).
  for (size_t i = 0; i < grads.size() && i < inputs_.size(); ++i) {
    if (!grads[i].defined()) {
      grads[i] = ops::zeros(inputs_[i].sizes, isFloatingType(inputs_[i].dtype) ? inputs_[i].dtype : ScalarType::Float,
                            inputs_[i].device);
    }
  }
  const std::string& op = ctx_.op_;
  std::vector<IValue> result = formula_->backward(ctx_, grads);
  STRATA_CHECK(result.size() == num_grads_expected_, Value, op, ": the backward formula returned ", result.size(),
               " gradient(s), but the op has ", num_grads_expected_, " positional input(s): backward must return one "
               "per positional input, as torch.library.register_autograd's does (None for an input that is not a "
               "tensor or needs no gradient; keyword-only inputs get none)");
  std::vector<Tensor> out(next_edges_.size());
  for (size_t i = 0; i < result.size(); ++i) {
    const IValue& g = result[i];
    if (g.isNone()) continue;
    if (g.isTensor() && !g.toTensor().defined()) continue;
    const ArgSlots& s = slots_[i];
    const std::string arg = formula_->arg_names.size() > i ? formula_->arg_names[i] : std::to_string(i);
    STRATA_CHECK(s.is_tensor, Value, op, ": the backward formula returned a ", g.typeName(), " for input ", i, " (",
                 arg, "), which is not a tensor: return None for it");
    std::vector<Tensor> gs;
    if (s.is_list) {
      STRATA_CHECK(g.isTensorList(), Value, op, ": the backward formula returned a ", g.typeName(), " for input ", i,
                   " (", arg, "), a list of tensors: return a list of gradients, one per tensor");
      gs = g.toTensorList();
      STRATA_CHECK(gs.size() == s.count, Value, op, ": the backward formula returned ", gs.size(),
                   " gradient(s) for input ", i, " (", arg, "), a list of ", s.count, " tensor(s)");
    } else {
      STRATA_CHECK(g.isTensor(), Value, op, ": the backward formula returned a ", g.typeName(), " for input ", i,
                   " (", arg, "), which is a tensor: return a Tensor or None");
      gs.push_back(g.toTensor());
    }
    for (size_t j = 0; j < gs.size(); ++j) {
      const size_t slot = s.first + j;
      if (!gs[j].defined()) continue;
      const Node::InputMeta& m = arg_metas_[slot];
      // A gradient the input's shape broadcasts to is summed down to it, as PyTorch's
      // engine does (validate_outputs: sum_to).
      if (!std::equal(gs[j].sizes().begin(), gs[j].sizes().end(), m.sizes.begin(), m.sizes.end())) {
        gs[j] = sumTo(gs[j], m.sizes);
      }
      STRATA_CHECK(std::equal(gs[j].sizes().begin(), gs[j].sizes().end(), m.sizes.begin(), m.sizes.end()), Value, op,
                   ": the backward formula returned a gradient of shape ", shapeStr(gs[j].sizes()), " for input ", i,
                   " (", arg, s.is_list ? ", element " + std::to_string(j) : std::string(), "), which has shape ",
                   shapeStr(m.sizes));
      if (next_edges_[slot].valid()) out[slot] = std::move(gs[j]);
    }
  }
  return out;
}

namespace {

void formulaKernel(const std::shared_ptr<const Formula>& f, const OperatorHandle& op, DispatchKeySet ks,
                   Stack& stack) {
  const FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  if (!is_grad_enabled() || !anyRequiresGrad(stack, n)) {
    runBelow(op, ks, stack);
    return;
  }
  const Stack inputs(stack.begin(), stack.begin() + static_cast<std::ptrdiff_t>(std::min(n, stack.size())));
  checkInplace(op, schema, inputs);
  checkViewsCurrent(op, inputs);
  const std::vector<uint32_t> versions = writtenVersions(schema, inputs);
  runBelow(op, ks, stack);
  bumpWritten(schema, inputs, versions);
  if (f->nondifferentiable) return;
  auto node = std::make_shared<FormulaNode>(f, f->op);
  if (f->node_name_for != nullptr) node->name_ = f->node_name_for(inputs, stack);
  std::vector<Edge> edges;
  std::vector<bool> needs;
  collectEdges(inputs, edges, node->slots_, node->arg_metas_, needs);
  node->setEdges(std::move(edges));
  node->init(std::move(needs), node);
  markOutputs(schema, inputs, stack, node, /*differentiable=*/true);
  // setup_context sees the outputs as the caller gets them; an output it saves is
  // recognized and kept without its history (AutogradContext::Saved).
  if (f->setup || f->setup_kw) {
    if (f->setup_kw) {
      Stack positional;
      std::map<std::string, IValue> kw;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (schema.arguments()[i].kwarg_only) kw[schema.arguments()[i].name] = inputs[i];
        else positional.push_back(inputs[i]);
      }
      f->setup_kw(node->ctx_, positional, kw, stack);
    } else {
      f->setup(node->ctx_, inputs, stack);
    }
    node->detachSavedOutputs(stack);
  }
  node->num_grads_expected_ = f->num_positional;
}

}  // namespace

RegistrationHandleRAII registerFormula(std::shared_ptr<Formula> f, bool allow_override, const std::string& debug) {
  Dispatcher& d = Dispatcher::singleton();
  const OperatorHandle op = d.findSchemaOrThrow(f->op);
  const FunctionSchema& schema = op.schema();
  f->op = op.operator_name().str();
  f->arg_names.clear();
  f->num_positional = 0;
  for (const Argument& a : schema.arguments()) {
    f->arg_names.push_back(a.name);
    if (!a.kwarg_only) ++f->num_positional;
  }
  // A builtin formula's plain form answers for every argument; register_autograd's
  // backward, as PyTorch's, for the positional ones (keyword-only inputs travel beside).
  if (f->builtin && !f->setup_kw) f->num_positional = schema.arguments().size();
  std::shared_ptr<const Formula> cf = f;
  std::string what = !f->builtin                ? "autograd formula (register_autograd)"
                     : f->node_name.empty()      ? "autograd formula: not differentiable"
                                                 : "autograd formula " + f->node_name;
  return d.registerImpl(op.operator_name(), DispatchKey::Autograd,
                        KernelFunction::makeFromBoxedFunctor(
                            [cf](const OperatorHandle& o, DispatchKeySet ks, Stack& stack) {
                              formulaKernel(cf, o, ks, stack);
                            }),
                        {RegistrationOwnerGuard::current(), what + "; " + debug, allow_override});
}

RegistrationHandleRAII registerAutogradFallback() {
  Dispatcher& d = Dispatcher::singleton();
  // Shadows the SDK's below-autograd fallback (builtin_library.cc) while alive.
  const std::string debug = registeredAt(std::source_location::current());
  std::vector<RegistrationHandleRAII> hs;
  for (DispatchKey k : {DispatchKey::AutogradCPU, DispatchKey::AutogradCUDA, DispatchKey::AutogradMeta}) {
    hs.push_back(d.registerFallback(k, KernelFunction::makeFromBoxedFunctor(&notImplementedFallback),
                                    {RegistrationOwnerGuard::current(),
                                     "autograd fallback: ops without a formula; " + debug, true}));
  }
  auto keep = std::make_shared<std::vector<RegistrationHandleRAII>>(std::move(hs));
  return RegistrationHandleRAII([keep] { keep->clear(); });
}

}  // namespace detail

// --- register_autograd ------------------------------------------------------------------

namespace {

std::string camel(std::string_view qualified) {
  std::string_view n = qualified;
  if (auto p = n.rfind("::"); p != std::string_view::npos) n = n.substr(p + 2);
  if (auto p = n.find('.'); p != std::string_view::npos) n = n.substr(0, p);
  std::string out;
  bool up = true;
  for (char c : n) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out + "Backward";
}

RegistrationHandleRAII registerUserFormula(std::string_view op_name, BackwardFn backward, SetupContextFn setup,
                                           SetupContextKwFn setup_kw, bool allow_override,
                                           const std::source_location& loc) {
  initialize();
  const std::string call = "register_autograd(" + std::string(op_name) + ")";
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration(call + " (" + modes::detail::registeredAt(loc) + ")");
  }
  STRATA_CHECK(static_cast<bool>(backward), Value, call, ": backward is empty");
  std::optional<OperatorHandle> op;
  try {
    op = Dispatcher::singleton().findSchemaOrThrow(op_name);
  } catch (const Error& e) {
    STRATA_FAIL(NotImplemented, call, ": ", e.what());
  }
  const FunctionSchema& schema = op->schema();
  bool functional = true;
  bool has_kw = false;
  for (const Argument& a : schema.arguments()) {
    functional = functional && !a.is_write();
    has_kw = has_kw || a.kwarg_only;
    // backward answers for positional inputs only: a keyword-only tensor's gradient
    // would be lost (PyTorch refuses these too).
    STRATA_CHECK(!(a.kwarg_only && detail::isTensorLike(*a.type)), NotImplemented, call, ": ", schema.str(),
                 " has the keyword-only tensor argument '", a.name, "', which backward cannot answer for; make it "
                 "positional");
  }
  for (const Argument& r : schema.returns()) functional = functional && !r.alias_info;
  functional = functional && !schema.returns().empty();  // PyTorch's is_functional_schema
  STRATA_CHECK(functional, Value, "cannot register an autograd formula for non-functional operator ",
               op->operator_name().str(), " (", schema.str(), "): register_autograd takes ops that write no argument, "
               "return something, and return no alias of an argument");
  STRATA_CHECK(!(has_kw && setup), Value, call, ": ", schema.str(), " has keyword-only arguments, so setup_context "
               "must take (ctx, inputs, keyword_only_inputs, output)");
  const std::string debug = modes::detail::registeredAt(loc);
  if (!allow_override) {
    modes::detail::refuseSecondRule(op->operator_name(), DispatchKey::Autograd, call, "an autograd formula", debug);
  }
  auto f = std::make_shared<detail::Formula>();
  f->op = op->operator_name().str();
  f->node_name = camel(f->op);
  f->backward = std::move(backward);
  f->setup = std::move(setup);
  f->setup_kw = std::move(setup_kw);
  return detail::registerFormula(std::move(f), allow_override, debug);
}

}  // namespace

RegistrationHandleRAII register_autograd(std::string_view op, BackwardFn backward, SetupContextFn setup_context,
                                         bool allow_override, std::source_location where) {
  return registerUserFormula(op, std::move(backward), std::move(setup_context), {}, allow_override, where);
}
RegistrationHandleRAII register_autograd(std::string_view op, BackwardFn backward, SetupContextKwFn setup_context,
                                         bool allow_override, std::source_location where) {
  return registerUserFormula(op, std::move(backward), {}, std::move(setup_context), allow_override, where);
}
void register_autograd(std::string_view op, BackwardFn backward, SetupContextFn setup_context, Library& lib,
                       bool allow_override, std::source_location where) {
  lib.keep(register_autograd(op, std::move(backward), std::move(setup_context), allow_override, where));
}
void register_autograd(std::string_view op, BackwardFn backward, SetupContextKwFn setup_context, Library& lib,
                       bool allow_override, std::source_location where) {
  lib.keep(register_autograd(op, std::move(backward), std::move(setup_context), allow_override, where));
}

// --- The engine ----------------------------------------------------------------------------

namespace {

struct NodeOrder {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

struct Capture {
  Node* node;
  uint32_t input_nr;
};

// Adds g to buffer[i], checking it against what the node expects.
void accumulateInto(std::vector<Tensor>& buffer, const Node& to, uint32_t i, Tensor g, const std::string& from,
                    size_t from_index) {
  const auto& metas = to.input_metadata();
  if (i < metas.size()) {
    const Node::InputMeta& m = metas[i];
    if (!std::equal(g.sizes().begin(), g.sizes().end(), m.sizes.begin(), m.sizes.end())) {
      STRATA_FAIL(Value, "Function ", from, " returned an invalid gradient at index ", from_index, " - got ",
                  shapeStr(g.sizes()), " but expected shape compatible with ", shapeStr(m.sizes));
    }
    if (g.dtype() != m.dtype && isFloatingType(m.dtype)) g = ops::to(g, m.dtype);
  }
  if (buffer.size() <= i) buffer.resize(i + 1);
  buffer[i] = buffer[i].defined() ? ops::add(buffer[i], g) : std::move(g);
}

// Runs the graph from roots. captures (grad()): the gradients flowing into these
// (node, input) pairs are returned, and only the nodes leading to them run, with no
// accumulation into leaves.
std::vector<Tensor> runEngine(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads, bool keep_graph,
                              bool create_graph, const std::vector<Capture>* captures) {
  // Dependencies: how many gradients each node waits for.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> order;  // DFS post-order, for the "needed" pass
  {
    std::vector<std::pair<Node*, size_t>> stack;
    for (const Edge& r : roots) {
      if (r.valid() && seen.insert(r.function.get()).second) stack.push_back({r.function.get(), 0});
      while (!stack.empty()) {
        auto& [n, i] = stack.back();
        if (i < n->next_edges().size()) {
          const Edge& e = n->next_edges()[i++];
          if (!e.valid()) continue;
          Node* m = e.function.get();
          if (seen.insert(m).second) stack.push_back({m, 0});
        } else {
          order.push_back(n);
          stack.pop_back();
        }
      }
    }
  }
  std::unordered_set<Node*> needed;
  if (captures != nullptr) {
    std::unordered_set<Node*> targets;
    for (const Capture& c : *captures) targets.insert(c.node);
    for (Node* n : order) {  // children before parents
      bool need = targets.count(n) != 0;
      for (const Edge& e : n->next_edges()) need = need || (e.valid() && needed.count(e.function.get()) != 0);
      if (need) needed.insert(n);
    }
  }
  auto isNeeded = [&](Node* n) { return captures == nullptr || needed.count(n) != 0; };
  for (Node* n : order) {
    if (!isNeeded(n)) continue;
    for (const Edge& e : n->next_edges()) {
      if (e.valid() && isNeeded(e.function.get())) ++deps[e.function.get()];
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;  // nodes alive while queued
  for (size_t i = 0; i < roots.size(); ++i) {
    const Edge& r = roots[i];
    if (!r.valid()) continue;
    keep[r.function.get()] = r.function;
    accumulateInto(buffers[r.function.get()], *r.function, r.input_nr, root_grads[i], "backward's grad_tensors", i);
  }
  std::priority_queue<Node*, std::vector<Node*>, NodeOrder> ready;
  std::unordered_set<Node*> queued;
  for (const Edge& r : roots) {
    Node* n = r.function.get();
    if (n != nullptr && isNeeded(n) && deps[n] == 0 && queued.insert(n).second) ready.push(n);
  }
  std::vector<Tensor> captured(captures != nullptr ? captures->size() : 0);
  AutoGradMode mode(create_graph);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::shared_ptr<Node> hold = keep[n];
    std::vector<Tensor> inputs = std::move(buffers[n]);
    buffers.erase(n);
    inputs.resize(std::max(inputs.size(), n->input_metadata().size()));
    bool is_capture = false;
    if (captures != nullptr) {
      for (size_t c = 0; c < captures->size(); ++c) {
        if ((*captures)[c].node == n) {
          is_capture = true;
          const uint32_t k = (*captures)[c].input_nr;
          if (k < inputs.size()) captured[c] = inputs[k];
        }
      }
      // grad() touches no .grad: a leaf's accumulator is only a capture point, and a
      // captured node runs only when a gradient of another input lies beyond it.
      if (is_capture) {
        bool leads_on = false;
        for (const Edge& e : n->next_edges()) leads_on = leads_on || (e.valid() && needed.count(e.function.get()) != 0);
        if (!leads_on || dynamic_cast<detail::AccumulateGrad*>(n) != nullptr) {
          keep.erase(n);
          continue;
        }
      }
    }
    std::vector<Tensor> outs = n->apply(std::move(inputs));
    if (!keep_graph) n->release_variables();
    const auto& edges = n->next_edges();
    STRATA_CHECK(outs.size() == edges.size() || edges.empty(), Value, "Function ", n->name(), " returned ",
                 outs.size(), " gradient(s), expected ", edges.size());
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* m = e.function.get();
      if (!isNeeded(m)) continue;
      if (i < outs.size() && outs[i].defined()) {
        accumulateInto(buffers[m], *m, e.input_nr, std::move(outs[i]), n->name(), i);
      }
      keep[m] = e.function;
      if (--deps[m] == 0 && queued.insert(m).second) ready.push(m);
    }
    keep.erase(n);
  }
  return captured;
}

std::vector<Tensor> rootGrads(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads, const char* api) {
  STRATA_CHECK(grads.empty() || grads.size() == outputs.size(), Value, api, ": got ", outputs.size(),
               " output(s) but ", grads.size(), " gradient(s)");
  std::vector<Tensor> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    STRATA_CHECK(o.defined(), Value, api, ": output ", i, " is undefined");
    STRATA_CHECK(o.requires_grad(), Value, "element ", i, " of tensors does not require grad and does not have a "
                 "grad_fn");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      STRATA_CHECK(o.numel() == 1, Value, "grad can be implicitly created only for scalar outputs (output ", i,
                   " has shape ", shapeStr(o.sizes()), ")");
      g = ops::ones(std::vector<int64_t>(o.sizes().begin(), o.sizes().end()), o.dtype(), o.device());
    } else {
      STRATA_CHECK(std::equal(g.sizes().begin(), g.sizes().end(), o.sizes().begin(), o.sizes().end()), Value,
                   "Mismatch in shape: grad_output[", i, "] has a shape of ", shapeStr(g.sizes()),
                   " and output[", i, "] has a shape of ", shapeStr(o.sizes()));
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads, bool retain_graph,
              bool create_graph) {
  initialize();
  const std::vector<Tensor> gs = rootGrads(outputs, grads, "backward");
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(gradient_edge(o));
  runEngine(roots, gs, retain_graph || create_graph, create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  initialize();
  const std::vector<Tensor> gs = rootGrads(outputs, grad_outputs, "grad");
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(gradient_edge(o));
  std::vector<Capture> captures;
  std::vector<Edge> input_edges;  // holds the accumulators alive for the run
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRATA_CHECK(inputs[i].defined() && inputs[i].requires_grad(), Value, "grad: input ", i,
                 " does not require grad: One of the differentiated Tensors does not require grad");
    input_edges.push_back(gradient_edge(inputs[i]));
    captures.push_back({input_edges.back().function.get(), input_edges.back().input_nr});
  }
  std::vector<Tensor> out = runEngine(roots, gs, retain_graph.value_or(create_graph), create_graph, &captures);
  for (size_t i = 0; i < out.size(); ++i) {
    STRATA_CHECK(out[i].defined() || allow_unused, Value, "grad: input ", i, " (", typeStr(inputs[i]),
                 "): One of the differentiated Tensors appears to not have been used in the graph. Set "
                 "allow_unused=True if this is the desired behavior.");
    if (out[i].defined() && !create_graph && out[i].requires_grad()) out[i] = out[i].detach();
  }
  return out;
}

// --- The SDK's hooks ----------------------------------------------------------------------

namespace {
class Hooks final : public AutogradHooks {
 public:
  void onRequiresGrad(TensorImpl& impl) const override {
    initialize();
    std::lock_guard<std::mutex> lock(detail::g_create_meta_mu);
    if (impl.autograd_meta() == nullptr) impl.set_autograd_meta(std::make_unique<AutogradMeta>());
  }
  void backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph) const override {
    modes::backward({root}, gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{}, retain_graph,
                    create_graph);
  }
};
const Hooks g_hooks;
// Installed when the library loads: a tensor marked requires_grad then brings the
// layer up before it reaches an op.
const bool g_installed = (setAutogradHooks(&g_hooks), true);
}  // namespace

void initialize_autograd() { initialize(); }

}  // namespace strata::modes
