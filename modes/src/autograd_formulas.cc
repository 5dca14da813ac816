// The core:: ops' autograd formulas (owner "builtin"), PyTorch's derivatives.yaml for
// the ops Strata has. Each is a setup_context and a backward, the contract
// register_autograd gives users (Note [Autograd metadata]); the backwards are made of
// core:: ops, so with create_graph they are differentiable in turn. Every formula is
// checked by gradcheck in tests/modes/autograd_test.cc.
#include <algorithm>
#include <numeric>

#include "autograd_internal.h"
#include "registered_at.h"
#include "strata/ops.h"

namespace strata::modes::detail {

namespace {

using Grads = std::vector<Tensor>;
using Out = std::vector<IValue>;

std::vector<int64_t> sizesOf(const Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); }
std::vector<int64_t> sizesOf(const IValue& v) { return sizesOf(v.toTensor()); }
const std::vector<int64_t>& intsOf(const AutogradContext& ctx, const char* name) { return ctx.get(name).toIntList(); }

int64_t wrap(int64_t d, int64_t n) {
  const int64_t m = std::max<int64_t>(n, 1);
  return d < 0 ? d + m : d;
}

bool isOne(const Scalar& s) { return s.isIntegral() ? s.to<int64_t>() == 1 : s.to<double>() == 1.0; }

Tensor zerosLike(const std::vector<int64_t>& shape, const Tensor& like) {
  return ops::zeros(shape, like.dtype(), like.device());
}

// g placed at [start, start + g.size(d)) of a zero tensor of shape along dim d:
// differentiable (a cat), so double backward works.
Tensor padAlong(const Tensor& g, const std::vector<int64_t>& shape, int64_t d, int64_t start) {
  const int64_t len = g.size(d);
  const int64_t after = shape[static_cast<size_t>(d)] - start - len;
  std::vector<Tensor> parts;
  if (start > 0) {
    auto s = shape;
    s[static_cast<size_t>(d)] = start;
    parts.push_back(zerosLike(s, g));
  }
  parts.push_back(g);
  if (after > 0) {
    auto s = shape;
    s[static_cast<size_t>(d)] = after;
    parts.push_back(zerosLike(s, g));
  }
  return parts.size() == 1 ? g : ops::cat(parts, d);
}

void saveSizes(AutogradContext& ctx, const Stack& in, const char* name = "self_sizes", size_t i = 0) {
  ctx.set(name, IValue(sizesOf(in[i])));
}

struct Def {
  const char* op;
  const char* node;
  SetupContextFn setup;
  BackwardFn backward;
  bool nondifferentiable = false;
  const char* (*node_name_for)(const Stack& inputs, const Stack& outputs) = nullptr;
};

// The node PyTorch 1.13's composite matmul records last, by the operands' ranks:
// dot, mv and mm for vectors and matrices, the squeeze after a vector-matrix mm,
// and a fold's or a batched bmm's final view (a copy for a matrix times a batch).
const char* matmulNodeName(const Stack& in, const Stack&) {
  const int64_t d1 = in[0].toTensor().dim(), d2 = in[1].toTensor().dim();
  if (d1 == 1 && d2 == 1) return "DotBackward0";
  if (d1 == 2 && d2 == 1) return "MvBackward0";
  if (d1 == 1 && d2 == 2) return "SqueezeBackward3";
  if (d1 == 2 && d2 == 2) return "MmBackward0";
  if (d1 == 2) return "CloneBackward0";
  return "UnsafeViewBackward0";
}

// reshape is a view when the sizes allow one (PyTorch 1.13's _reshape_alias), else
// a copy viewed (_unsafe_view).
const char* reshapeNodeName(const Stack& in, const Stack& out) {
  const Tensor& self = in[0].toTensor();
  const Tensor& result = out[0].toTensor();
  return result.storage().get() == self.storage().get() ? "ReshapeAliasBackward0" : "UnsafeViewBackward0";
}

Out none(size_t n) { return Out(n); }

std::vector<Def> coreFormulas() {
  std::vector<Def> d;
  // --- Elementwise ---
  auto binarySizes = [](AutogradContext& ctx, const Stack& in, const Stack&) {
    saveSizes(ctx, in, "self_sizes", 0);
    saveSizes(ctx, in, "other_sizes", 1);
    if (in.size() > 2) ctx.set("alpha", in[2]);
  };
  d.push_back({"core::add.Tensor", "AddBackward0", binarySizes, [](AutogradContext& ctx, const Grads& g) {
                 Out out = none(3);
                 if (ctx.needs_input_grad(0)) out[0] = sumTo(g[0], intsOf(ctx, "self_sizes"));
                 if (ctx.needs_input_grad(1)) {
                   const Scalar a = ctx.get("alpha").toScalar();
                   out[1] = sumTo(isOne(a) ? g[0] : ops::mul(g[0], a), intsOf(ctx, "other_sizes"));
                 }
                 return out;
               }});
  d.push_back({"core::sub.Tensor", "SubBackward0", binarySizes, [](AutogradContext& ctx, const Grads& g) {
                 Out out = none(3);
                 if (ctx.needs_input_grad(0)) out[0] = sumTo(g[0], intsOf(ctx, "self_sizes"));
                 if (ctx.needs_input_grad(1)) {
                   const Scalar a = ctx.get("alpha").toScalar();
                   out[1] = sumTo(ops::neg(isOne(a) ? g[0] : ops::mul(g[0], a)), intsOf(ctx, "other_sizes"));
                 }
                 return out;
               }});
  d.push_back({"core::add.Scalar", "AddBackward1", {}, [](AutogradContext&, const Grads& g) {
                 return Out{g[0], IValue(), IValue()};
               }});
  d.push_back({"core::sub.Scalar", "SubBackward1", {}, [](AutogradContext&, const Grads& g) {
                 return Out{g[0], IValue(), IValue()};
               }});
  d.push_back({"core::mul.Tensor", "MulBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 saveSizes(ctx, in, "self_sizes", 0);
                 saveSizes(ctx, in, "other_sizes", 1);
                 // Only what the other input's gradient needs (the tutorial's pattern).
                 ctx.save_for_backward({ctx.needs_input_grad(1) ? in[0].toTensor() : Tensor(),
                                        ctx.needs_input_grad(0) ? in[1].toTensor() : Tensor()});
               },
               [](AutogradContext& ctx, const Grads& g) {
                 const auto saved = ctx.saved_tensors();
                 Out out = none(2);
                 if (ctx.needs_input_grad(0)) out[0] = sumTo(ops::mul(g[0], saved[1]), intsOf(ctx, "self_sizes"));
                 if (ctx.needs_input_grad(1)) out[1] = sumTo(ops::mul(g[0], saved[0]), intsOf(ctx, "other_sizes"));
                 return out;
               }});
  d.push_back({"core::mul.Scalar", "MulBackward1",
               [](AutogradContext& ctx, const Stack& in, const Stack&) { ctx.set("other", in[1]); },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::mul(g[0], ctx.get("other").toScalar()), IValue()};
               }});
  d.push_back({"core::div.Tensor", "DivBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 saveSizes(ctx, in, "self_sizes", 0);
                 saveSizes(ctx, in, "other_sizes", 1);
                 ctx.save_for_backward({ctx.needs_input_grad(1) ? in[0].toTensor() : Tensor(), in[1].toTensor()});
               },
               [](AutogradContext& ctx, const Grads& g) {
                 const auto saved = ctx.saved_tensors();
                 const Tensor& self = saved[0];
                 const Tensor& other = saved[1];
                 Out out = none(2);
                 if (ctx.needs_input_grad(0)) out[0] = sumTo(ops::div(g[0], other), intsOf(ctx, "self_sizes"));
                 if (ctx.needs_input_grad(1)) {
                   // d(a/b)/db = -a / b^2, computed as PyTorch does, -g * ((a / b) / b): b^2
                   // and g * a overflow or underflow where the quotients do not (a float16 b
                   // of 300, a float32 b of 1e20).
                   out[1] = sumTo(ops::neg(ops::mul(g[0], ops::div(ops::div(self, other), other))),
                                  intsOf(ctx, "other_sizes"));
                 }
                 return out;
               }});
  d.push_back({"core::div.Scalar", "DivBackward1",
               [](AutogradContext& ctx, const Stack& in, const Stack&) { ctx.set("other", in[1]); },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::div(g[0], ctx.get("other").toScalar()), IValue()};
               }});
  d.push_back({"core::neg", "NegBackward0", {}, [](AutogradContext&, const Grads& g) { return Out{ops::neg(g[0])}; }});
  auto saveSelf = [](AutogradContext& ctx, const Stack& in, const Stack&) { ctx.save_for_backward({in[0].toTensor()}); };
  d.push_back({"core::sin", "SinBackward0", saveSelf, [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::mul(g[0], ops::cos(ctx.saved_tensors()[0]))};
               }});
  d.push_back({"core::cos", "CosBackward0", saveSelf, [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::neg(ops::mul(g[0], ops::sin(ctx.saved_tensors()[0])))};
               }});
  // exp saves its result, as PyTorch does: d exp(x) = exp(x) dx.
  d.push_back({"core::exp", "ExpBackward0",
               [](AutogradContext& ctx, const Stack&, const Stack& out) { ctx.save_for_backward({out[0].toTensor()}); },
               [](AutogradContext& ctx, const Grads& g) { return Out{ops::mul(g[0], ctx.saved_tensors()[0])}; }});

  // --- Reductions and linear algebra ---
  d.push_back({"core::sum", "SumBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) { saveSizes(ctx, in); },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::expand(g[0], intsOf(ctx, "self_sizes")), IValue()};
               }});
  d.push_back({"core::sum.dim_IntList", "SumBackward1",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 saveSizes(ctx, in);
                 const int64_t nd = in[0].toTensor().dim();
                 std::vector<int64_t> dims;
                 if (!in[1].isNone()) dims = in[1].toIntList();
                 if (nd == 0) dims.clear();  // a 0-d input: nothing to unsqueeze back
                 if (dims.empty()) {
                   dims.resize(static_cast<size_t>(nd));
                   std::iota(dims.begin(), dims.end(), 0);
                 }
                 for (int64_t& x : dims) x = wrap(x, nd);
                 std::sort(dims.begin(), dims.end());
                 ctx.set("dims", IValue(dims));
                 ctx.set("keepdim", in[2]);
               },
               [](AutogradContext& ctx, const Grads& g) {
                 const auto& shape = intsOf(ctx, "self_sizes");
                 Tensor x = g[0];
                 if (!ctx.get("keepdim").toBool()) {
                   for (int64_t d : intsOf(ctx, "dims")) {
                     if (d <= x.dim()) x = ops::unsqueeze(x, d);
                   }
                 }
                 return Out{ops::expand(x, shape), IValue(), IValue(), IValue()};
               }});
  d.push_back({"core::matmul", "MatmulBackward0",  // named by matmulNodeName
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 // Each operand is saved only for the other's gradient (as PyTorch's mm
                 // saves), so writing one whose gradient is not needed is no error.
                 saveSizes(ctx, in, "self_sizes", 0);
                 saveSizes(ctx, in, "other_sizes", 1);
                 ctx.save_for_backward({ctx.needs_input_grad(1) ? in[0].toTensor() : Tensor(),
                                        ctx.needs_input_grad(0) ? in[1].toTensor() : Tensor()});
               },
               [](AutogradContext& ctx, const Grads& g) {
                 const auto saved = ctx.saved_tensors();
                 const std::vector<int64_t>& self_sizes = intsOf(ctx, "self_sizes");
                 const std::vector<int64_t>& other_sizes = intsOf(ctx, "other_sizes");
                 // Promote 1-d operands to matrices, as matmul does, and the gradient with them.
                 std::vector<int64_t> a_sizes = self_sizes, b_sizes = other_sizes;
                 if (self_sizes.size() == 1) a_sizes.insert(a_sizes.begin(), 1);
                 if (other_sizes.size() == 1) b_sizes.push_back(1);
                 Tensor G = g[0];
                 if (other_sizes.size() == 1) G = ops::unsqueeze(G, G.dim());
                 if (self_sizes.size() == 1) G = ops::unsqueeze(G, G.dim() - 1);
                 Out out = none(2);
                 if (ctx.needs_input_grad(0)) {
                   const Tensor& other = saved[1];
                   const Tensor b = other.dim() == 1 ? ops::unsqueeze(other, 1) : other;
                   out[0] = ops::reshape(sumTo(ops::matmul(G, ops::transpose(b, -1, -2)), a_sizes), self_sizes);
                 }
                 if (ctx.needs_input_grad(1)) {
                   const Tensor& self = saved[0];
                   const Tensor a = self.dim() == 1 ? ops::unsqueeze(self, 0) : self;
                   out[1] = ops::reshape(sumTo(ops::matmul(ops::transpose(a, -1, -2), G), b_sizes), other_sizes);
                 }
                 return out;
               },
               false, &matmulNodeName});

  // --- Shapes and views ---
  d.push_back({"core::t", "TBackward0", {}, [](AutogradContext&, const Grads& g) { return Out{ops::t(g[0])}; }});
  d.push_back({"core::transpose.int", "TransposeBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 ctx.set("dim0", in[1]);
                 ctx.set("dim1", in[2]);
               },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::transpose(g[0], ctx.get("dim0").toInt(), ctx.get("dim1").toInt()), IValue(), IValue()};
               }});
  d.push_back({"core::movedim.int", "PermuteBackward0",  // PyTorch's movedim is a permute
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 ctx.set("source", in[1]);
                 ctx.set("destination", in[2]);
               },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::movedim(g[0], ctx.get("destination").toInt(), ctx.get("source").toInt()), IValue(),
                            IValue()};
               }});
  d.push_back({"core::permute", "PermuteBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 const int64_t nd = in[0].toTensor().dim();
                 const auto& dims = in[1].toIntList();
                 std::vector<int64_t> inv(dims.size());
                 for (size_t i = 0; i < dims.size(); ++i) inv[static_cast<size_t>(wrap(dims[i], nd))] = static_cast<int64_t>(i);
                 ctx.set("inverse", IValue(inv));
               },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::permute(g[0], intsOf(ctx, "inverse")), IValue()};
               }});
  d.push_back({"core::unsqueeze", "UnsqueezeBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 ctx.set("dim", IValue(wrap(in[1].toInt(), in[0].toTensor().dim() + 1)));
               },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::squeeze(g[0], ctx.get("dim").toInt()), IValue()};
               }});
  auto reshapeBack = [](size_t nargs) {
    return [nargs](AutogradContext& ctx, const Grads& g) {
      Out out = none(nargs);
      out[0] = ops::reshape(g[0], intsOf(ctx, "self_sizes"));
      return out;
    };
  };
  auto keepSizes = [](AutogradContext& ctx, const Stack& in, const Stack&) { saveSizes(ctx, in); };
  d.push_back({"core::squeeze", "SqueezeBackward0", keepSizes, reshapeBack(1)});
  d.push_back({"core::squeeze.dim", "SqueezeBackward1", keepSizes, reshapeBack(2)});
  d.push_back({"core::reshape", "ReshapeAliasBackward0", keepSizes, reshapeBack(2), false, &reshapeNodeName});
  d.push_back({"core::view", "ViewBackward0", keepSizes, reshapeBack(2)});
  d.push_back({"core::expand", "ExpandBackward0", keepSizes, [](AutogradContext& ctx, const Grads& g) {
                 return Out{sumTo(g[0], intsOf(ctx, "self_sizes")), IValue(), IValue()};
               }});
  d.push_back({"core::select.int", "SelectBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 saveSizes(ctx, in);
                 const Tensor& t = in[0].toTensor();
                 const int64_t dim = wrap(in[1].toInt(), t.dim());
                 int64_t index = in[2].toInt();
                 if (index < 0) index += t.size(dim);
                 ctx.set("dim", IValue(dim));
                 ctx.set("index", IValue(index));
               },
               [](AutogradContext& ctx, const Grads& g) {
                 const int64_t dim = ctx.get("dim").toInt();
                 return Out{padAlong(ops::unsqueeze(g[0], dim), intsOf(ctx, "self_sizes"), dim,
                                     ctx.get("index").toInt()),
                            IValue(), IValue()};
               }});
  d.push_back({"core::narrow", "SliceBackward0",  // PyTorch's narrow is a slice
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 saveSizes(ctx, in);
                 const Tensor& t = in[0].toTensor();
                 const int64_t dim = wrap(in[1].toInt(), t.dim());
                 int64_t start = in[2].toInt();
                 if (start < 0) start += t.size(dim);
                 ctx.set("dim", IValue(dim));
                 ctx.set("start", IValue(start));
               },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{padAlong(g[0], intsOf(ctx, "self_sizes"), ctx.get("dim").toInt(), ctx.get("start").toInt()),
                            IValue(), IValue(), IValue()};
               }});
  d.push_back({"core::stack", "StackBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 const auto& ts = in[0].toTensorList();
                 const int64_t nd = ts.empty() ? 0 : ts[0].dim();
                 ctx.set("dim", IValue(wrap(in[1].toInt(), nd + 1)));
                 ctx.set("n", IValue(static_cast<int64_t>(ts.size())));
               },
               [](AutogradContext& ctx, const Grads& g) {
                 std::vector<Tensor> gs;
                 const int64_t dim = ctx.get("dim").toInt();
                 for (int64_t i = 0; i < ctx.get("n").toInt(); ++i) gs.push_back(ops::select(g[0], dim, i));
                 return Out{IValue(std::move(gs)), IValue()};
               }});
  d.push_back({"core::cat", "CatBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack& out) {
                 const auto& ts = in[0].toTensorList();
                 const int64_t dim = wrap(in[1].toInt(), out[0].toTensor().dim());
                 std::vector<int64_t> lens;
                 for (const Tensor& t : ts) {
                   // A 1-d empty tensor is skipped by cat (legacy): it gets no gradient.
                   lens.push_back(t.dim() == 1 && t.numel() == 0 && out[0].toTensor().dim() != 1 ? -1 : t.size(dim));
                 }
                 ctx.set("dim", IValue(dim));
                 ctx.set("lens", IValue(lens));
               },
               [](AutogradContext& ctx, const Grads& g) {
                 std::vector<Tensor> gs;
                 const int64_t dim = ctx.get("dim").toInt();
                 int64_t offset = 0;
                 for (int64_t len : intsOf(ctx, "lens")) {
                   if (len < 0) {
                     gs.emplace_back();
                     continue;
                   }
                   gs.push_back(ops::narrow(g[0], dim, offset, len));
                   offset += len;
                 }
                 return Out{IValue(std::move(gs)), IValue()};
               }});

  // --- Copies and casts ---
  d.push_back({"core::clone", "CloneBackward0", {}, [](AutogradContext&, const Grads& g) { return Out{g[0]}; }});
  d.push_back({"core::contiguous", "CloneBackward0", {}, [](AutogradContext&, const Grads& g) { return Out{g[0]}; }});
  d.push_back({"core::to.dtype", "ToCopyBackward0",
               [](AutogradContext& ctx, const Stack& in, const Stack&) {
                 ctx.set("self_dtype", IValue(in[0].toTensor().dtype()));
               },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{ops::to(g[0], ctx.get("self_dtype").toScalarType()), IValue(), IValue(), IValue()};
               }});
  // copy_ overwrites self: its old value gets no gradient; src gets all of it.
  d.push_back({"core::copy_", "CopyBackwards",
               [](AutogradContext& ctx, const Stack& in, const Stack&) { saveSizes(ctx, in, "src_sizes", 1); },
               [](AutogradContext& ctx, const Grads& g) {
                 return Out{IValue(), sumTo(g[0], intsOf(ctx, "src_sizes")), IValue()};  // src may broadcast
               }});

  // fill_ and zero_ overwrite self: what it held gets no gradient (PyTorch's
  // zeros_like(grad); an undefined gradient is zero to the engine).
  d.push_back({"core::fill_.Scalar", "FillBackward2", {},
               [](AutogradContext&, const Grads&) { return Out{IValue(), IValue()}; }});
  d.push_back({"core::zero_", "ZeroBackward0", {}, [](AutogradContext&, const Grads&) { return Out{IValue()}; }});

  // --- Not differentiable: results never require grad. ---
  for (const char* op : {"core::empty_like", "core::rand_like", "core::allclose"}) {
    d.push_back({op, "", {}, {}, true});
  }
  return d;
}

}  // namespace

void registerCoreFormulas(std::vector<RegistrationHandleRAII>& keep) {
  const std::string debug = registeredAt(std::source_location::current());
  for (Def& def : coreFormulas()) {
    auto f = std::make_shared<Formula>();
    f->op = def.op;
    f->node_name = def.node;
    f->setup = std::move(def.setup);
    f->backward = std::move(def.backward);
    f->nondifferentiable = def.nondifferentiable;
    f->node_name_for = def.node_name_for;
    f->builtin = true;
    keep.push_back(registerFormula(std::move(f), false, debug));
  }
}

}  // namespace strata::modes::detail

namespace strata::modes {
std::vector<std::string> core_autograd_ops() {
  std::vector<std::string> out;
  for (const auto& d : detail::coreFormulas()) {
    if (!d.nondifferentiable) out.emplace_back(d.op);
  }
  return out;
}
}  // namespace strata::modes
