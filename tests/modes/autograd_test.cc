// Autograd: leaves and grad_fn, backward and grad over shared subexpressions, the
// errors PyTorch gives (second backward, in-place on leaves and saved tensors, unused
// inputs), grad modes, create_graph, gradcheck on every core:: formula,
// register_autograd with the seeds' numpy_sin and numpy_mul, the tutorial's mymuladd
// with a backward calling mymul, opcheck and the broken registrations it catches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../dispatch/test_util.h"
#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/modes/autocast.h"
#include "strata/modes/log_mode.h"
#include "strata/modes/autograd.h"
#include "strata/modes/custom_op.h"
#include "strata/modes/fake.h"
#include "strata/modes/opcheck.h"
#include "strata/modes/vmap.h"
#include "strata/ops.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using strata::testing::errorOf;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

Tensor leaf(std::vector<double> v, std::vector<int64_t> sizes) {
  Tensor t = from_vector(v, sizes).to(ScalarType::Float);
  t.set_requires_grad(true);
  return t;
}
Tensor leaf64(std::vector<double> v, std::vector<int64_t> sizes) {
  Tensor t = from_vector(v, sizes);
  t.set_requires_grad(true);
  return t;
}
std::vector<float> vals(const Tensor& t) { return t.detach().to(ScalarType::Float).contiguous().to_vector<float>(); }

TEST(Autograd, LeavesCarryTheKeyAndResultsCarryTheirNode) {
  const Tensor plain = ones({3});
  EXPECT_FALSE(plain.key_set().has(DispatchKey::AutogradCPU));
  EXPECT_TRUE(plain.is_leaf());
  const Tensor x = leaf({1, 2, 3}, {3});
  EXPECT_TRUE(x.key_set().has(DispatchKey::AutogradCPU));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  const Tensor y = ops::mul(x, x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn_name(), "MulBackward0");
  EXPECT_THAT(y.str(), HasSubstr("grad_fn=<MulBackward0>"));
  EXPECT_THAT(x.str(), HasSubstr("requires_grad=True"));
  // A result of plain tensors records nothing.
  EXPECT_FALSE(ops::mul(plain, plain).requires_grad());
  // Only a leaf's flag may be cleared; only floating tensors may require grad.
  EXPECT_THAT(errorOf([&] { y.set_requires_grad(false); }), HasSubstr("only change requires_grad flags of leaf"));
  EXPECT_THAT(errorOf([&] { arange(3).set_requires_grad(true); }), HasSubstr("floating point"));
  // detach shares data, not history.
  const Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_alias_of(y));
}

TEST(Autograd, BackwardAccumulatesIntoLeaves) {
  const Tensor x = leaf({1, 2, 3}, {3});
  ops::sum(ops::mul(x, x)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{2, 4, 6}));
  // A second graph adds to .grad, as PyTorch does.
  ops::sum(x).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{3, 5, 7}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_THAT(errorOf([&] { x.set_grad(ones({2})); }), HasSubstr("different size"));
  EXPECT_THAT(errorOf([&] { x.set_grad(ones({3}, ScalarType::Double)); }),
              HasSubstr("assigned grad has data of a different type: the tensor is float32, the grad float64"));
  EXPECT_THAT(errorOf([&] { x.set_grad(ops::empty({3}, ScalarType::Float, kMeta)); }),
              HasSubstr("assigned grad has data on a different device: the tensor is on cpu, the grad on meta"));
}

TEST(Autograd, SharedSubexpressionsAndManyOutputs) {
  const Tensor x = leaf({1, 2}, {2});
  const Tensor y = leaf({3, 4}, {2});
  const Tensor z = ops::mul(x, y);        // used three times below
  const Tensor a = ops::add(z, z);        // da/dx = 2y
  const Tensor b = ops::mul(z, x);        // db/dx = 2xy, db/dy = x^2
  modes::backward({ops::sum(a), ops::sum(b)});
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{2 * 3 + 2 * 1 * 3, 2 * 4 + 2 * 2 * 4}));
  EXPECT_EQ(vals(y.grad()), (std::vector<float>{2 * 1 + 1, 2 * 2 + 4}));
  // Explicit gradients for non-scalar outputs.
  const Tensor w = leaf({1, 1}, {2});
  modes::backward({ops::mul(w, 3.0)}, {from_vector<float>({1, 2})});
  EXPECT_EQ(vals(w.grad()), (std::vector<float>{3, 6}));
}

TEST(Autograd, BackwardErrorsArePyTorchs) {
  const Tensor x = leaf({1, 2}, {2});
  const Tensor y = ops::mul(x, x);
  EXPECT_THAT(errorOf([&] { y.backward(); }), HasSubstr("grad can be implicitly created only for scalar outputs"));
  EXPECT_THAT(errorOf([&] { ones({1}).backward(); }),
              HasSubstr("element 0 of tensors does not require grad and does not have a grad_fn"));
  EXPECT_THAT(errorOf([&] { modes::backward({y}, {ones({3})}); }), HasSubstr("Mismatch in shape"));
  const Tensor s = ops::sum(y);
  s.backward();
  EXPECT_THAT(errorOf([&] { s.backward(); }), HasSubstr("Trying to backward through the graph a second time"));
  // retain_graph keeps what the formulas saved.
  const Tensor x2 = leaf({1, 2}, {2});
  const Tensor s2 = ops::sum(ops::mul(x2, x2));
  s2.backward(Tensor(), /*retain_graph=*/true);
  s2.backward();
  EXPECT_EQ(vals(x2.grad()), (std::vector<float>{4, 8}));
}

TEST(Autograd, GradReturnsGradientsWithoutTouchingDotGrad) {
  const Tensor x = leaf({1, 2}, {2});
  const Tensor y = leaf({5, 6}, {2});
  const Tensor h = ops::mul(x, 2.0);  // a non-leaf input
  const Tensor out = ops::sum(ops::mul(h, h));
  auto gs = modes::grad({out}, {x, h}, {}, true);
  EXPECT_EQ(vals(gs[0]), (std::vector<float>{8, 16}));
  EXPECT_EQ(vals(gs[1]), (std::vector<float>{4, 8}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_THAT(errorOf([&] { modes::grad({out}, {y}, {}, true); }),
              HasSubstr("appears to not have been used in the graph"));
  auto unused = modes::grad({out}, {x, y}, {}, true, false, /*allow_unused=*/true);
  EXPECT_TRUE(unused[0].defined());
  EXPECT_FALSE(unused[1].defined());
}

TEST(Autograd, CreateGraphGivesDifferentiableGradients) {
  const Tensor x = leaf64({1, 2, 3}, {3});
  const Tensor y = ops::sum(ops::mul(ops::mul(x, x), x));  // sum x^3
  auto g = modes::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_TRUE(g[0].requires_grad());
  EXPECT_EQ(vals(g[0]), (std::vector<float>{3, 12, 27}));
  auto gg = modes::grad({ops::sum(g[0])}, {x});
  EXPECT_EQ(vals(gg[0]), (std::vector<float>{6, 12, 18}));
  // exp saves its result: double backward goes through the saved output.
  const Tensor e = ops::sum(ops::exp(x));
  auto ge = modes::grad({e}, {x}, {}, std::nullopt, true);
  auto gge = modes::grad({ops::sum(ge[0])}, {x});
  EXPECT_NEAR(vals(gge[0])[1], std::exp(2.0), 1e-4);
}

TEST(Autograd, GradModesRecordNothing) {
  const Tensor x = leaf({1, 2}, {2});
  {
    modes::NoGradGuard no_grad;
    EXPECT_FALSE(modes::is_grad_enabled());
    EXPECT_FALSE(ops::mul(x, x).requires_grad());
    EXPECT_FALSE(x.transpose(0, 0).requires_grad());
    {
      modes::AutoGradMode on(true);
      EXPECT_TRUE(ops::mul(x, x).requires_grad());
    }
  }
  EXPECT_TRUE(modes::is_grad_enabled());
  {
    modes::InferenceMode inference;
    EXPECT_TRUE(modes::InferenceMode::is_enabled());
    const Tensor y = ops::mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  EXPECT_FALSE(modes::InferenceMode::is_enabled());
  EXPECT_TRUE(ops::mul(x, x).requires_grad());
}

TEST(Autograd, InPlaceErrorsFollowVersionCounters) {
  const Tensor x = leaf({1, 2}, {2});
  Tensor xm = x;
  EXPECT_THAT(errorOf([&] { ops::copy_(xm, ones({2})); }),
              HasSubstr("a leaf Variable that requires grad is being used in an in-place operation"));
  EXPECT_THAT(errorOf([&] { x.fill_(1.0); }), HasSubstr("a leaf Variable that requires grad"));
  // A tensor saved for backward and then modified.
  Tensor w = from_vector<float>({3, 4});
  const uint32_t v0 = w._version();
  const Tensor y = ops::sum(ops::mul(x, w));
  w.copy_(from_vector<float>({0, 0}));
  EXPECT_EQ(w._version(), v0 + 1);
  EXPECT_THAT(errorOf([&] { y.backward(); }),
              HasSubstr("one of the variables needed for gradient computation has been modified by an inplace "
                        "operation"));
  // Views share the counter.
  const Tensor base = from_vector<float>({1, 2, 3, 4});
  const Tensor view = base.view({2, 2});
  base.fill_(0.0);
  EXPECT_EQ(view._version(), base._version());
  // copy_ into a plain tensor from one that requires grad gives it history.
  Tensor dst = zeros({2});
  ops::copy_(dst, ops::mul(x, 2.0));
  EXPECT_EQ(dst.grad_fn_name(), "CopyBackwards");
  ops::sum(dst).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{2, 2}));
}

// fill_ and zero_ are ops (core::fill_.Scalar, core::zero_), so each layer sees them:
// under no_grad they initialize a leaf that requires grad (PyTorch's parameter init);
// on a non-leaf they are recorded with PyTorch's nodes, and the gradient to what it
// held is zero.
TEST(Autograd, FillAndZeroFollowGradMode) {
  const Tensor w = leaf({1, 2, 3}, {3});
  {
    modes::NoGradGuard no_grad;
    w.fill_(0.5);
    EXPECT_EQ(vals(w), (std::vector<float>{0.5f, 0.5f, 0.5f}));
    w.zero_();
  }
  EXPECT_EQ(vals(w), (std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_THAT(errorOf([&] { w.zero_(); }), HasSubstr("a leaf Variable that requires grad"));
  const Tensor x = leaf({1, 2}, {2});
  const Tensor y = ops::mul(x, 3.0);
  y.fill_(7.0);
  EXPECT_EQ(vals(y), (std::vector<float>{7, 7}));
  EXPECT_EQ(y.grad_fn_name(), "FillBackward2");  // PyTorch 1.13's node for fill_.Scalar
  ops::sum(ops::add(y, x)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{1, 1}));  // through x only: y's old value is gone
  const Tensor z = ops::mul(x, 3.0);
  z.zero_();
  EXPECT_EQ(z.grad_fn_name(), "ZeroBackward0");
  EXPECT_EQ(vals(z), (std::vector<float>{0, 0}));
}

// Note [Version counters]: one write, one bump, whichever layers the write passed.
// A recorded fill_/copy_/zero_ (whose kernel calls the tensor method, which counts a
// plain write) moves the counter by one, as PyTorch's; so does an op of one's own that
// writes through data_ptr with autograd above it, and one called on a plain tensor.
TEST(Autograd, AWriteUnderAutogradCountsOnce) {
  const Tensor x = leaf({1, 2}, {2});
  const Tensor y = ops::mul(x, 3.0);
  const uint32_t v = y._version();
  y.fill_(7.0);
  EXPECT_EQ(y._version(), v + 1);
  y.zero_();
  EXPECT_EQ(y._version(), v + 2);
  Tensor ym = y;
  ops::copy_(ym, ones({2}));
  EXPECT_EQ(y._version(), v + 3);
  // A mutating op of one's own, through data_ptr: the autograd layer's bump is the one.
  Library lib(Library::DEF, "ag_bump");
  lib.def("twice_(Tensor(a!) self) -> Tensor(a!)");
  lib.impl("twice_", [](Tensor& self) -> Tensor& {
    float* p = self.data_ptr<float>();
    for (int64_t i = 0; i < self.numel(); ++i) p[i] *= 2;
    return self;
  }, DispatchKey::CPU);
  const auto twice = Dispatcher::singleton().findSchemaOrThrow("ag_bump::twice_").typed<Tensor&(Tensor&)>();
  Tensor z = ops::mul(x, 1.0);
  const uint32_t vz = z._version();
  twice.call(z);
  EXPECT_EQ(z._version(), vz + 1);
  EXPECT_EQ(vals(z), (std::vector<float>{2, 4}));
  // No autograd above (a plain tensor): the call's entry point counts the write, typed
  // or boxed, as PyTorch's ADInplaceOrView counts it for every tensor.
  Tensor plain = ones({2});
  twice.call(plain);
  EXPECT_EQ(plain._version(), 1u);
  Stack s{plain};
  twice.callBoxed(s);
  EXPECT_EQ(plain._version(), 2u);
  EXPECT_EQ(vals(plain), (std::vector<float>{4, 4}));
  // A call that throws counts nothing.
  Tensor ints = ones({2}, kInt64);
  EXPECT_THAT(errorOf([&] { twice.call(ints); }), HasSubstr("float"));
  EXPECT_EQ(ints._version(), 0u);
  // So a tensor saved for backward and then written by such an op is caught at backward,
  // where the gradient would otherwise silently use the new values: a plain one ...
  const Tensor a = leaf({1, 2}, {2});
  Tensor w = ones({2});
  const Tensor y1 = ops::sum(ops::mul(a, w));
  twice.call(w);
  EXPECT_THAT(errorOf([&] { y1.backward(); }),
              HasSubstr("one of the variables needed for gradient computation has been modified by an inplace "
                        "operation"));
  // ... and a parameter updated under no_grad (an optimizer step of one's own).
  const Tensor p = leaf({3, 4}, {2});
  const Tensor y2 = ops::sum(ops::mul(p, p));
  {
    modes::NoGradGuard no_grad;
    Tensor pm = p;
    twice.call(pm);
  }
  EXPECT_THAT(errorOf([&] { y2.backward(); }), HasSubstr("modified by an inplace operation"));
  // A Tensor& on an argument the schema does not write is not counted: the schema says
  // what is written, not the C++ reference.
  lib.def("peek(Tensor x) -> Tensor");
  lib.impl("peek", [](Tensor& x) { return x.clone(); }, DispatchKey::CPU);
  const auto peek = Dispatcher::singleton().findSchemaOrThrow("ag_bump::peek").typed<Tensor(Tensor&)>();
  Tensor read = ones({2});
  peek.call(read);
  EXPECT_EQ(read._version(), 0u);
  // A written Tensor?[] (a generic list on the stack) is counted on a boxed call.
  lib.def("twice_all_(Tensor(a!)?[] xs) -> ()");
  lib.impl("twice_all_", CppFunction::makeFromBoxedFunctor([](const OperatorHandle&, DispatchKeySet, Stack& stack) {
    for (const IValue& e : stack[0].toList()) {
      if (e.isNone()) continue;
      float* q = e.toTensor().data_ptr<float>();
      for (int64_t i = 0; i < e.toTensor().numel(); ++i) q[i] *= 2;
    }
    stack.clear();
  }), DispatchKey::CPU);
  Tensor l0 = ones({1}), l1 = ones({1});
  Stack ls{IValue(std::vector<IValue>{IValue(l0), IValue(), IValue(l1)})};
  Dispatcher::singleton().findSchemaOrThrow("ag_bump::twice_all_").callBoxed(ls);
  EXPECT_EQ(vals(l1), (std::vector<float>{2}));
  EXPECT_EQ(l0._version(), 1u);
  EXPECT_EQ(l1._version(), 1u);
}

// A meta tensor's write is a write: its counter moves, whether through the method or
// the op, as PyTorch's (ADInplaceOrView is in a meta tensor's keys too).
TEST(Autograd, AMetaTensorsWriteCountsToo) {
  const Tensor m = empty({2}, TensorOptions(kFloat32).with_device(kMeta));
  m.fill_(1.0);
  EXPECT_EQ(m._version(), 1u);
  m.zero_();
  EXPECT_EQ(m._version(), 2u);
  m.copy_(empty({2}, TensorOptions(kFloat32).with_device(kMeta)));
  EXPECT_EQ(m._version(), 3u);
  Tensor mm = m;
  ops::fill_(mm, 2.0);
  EXPECT_EQ(m._version(), 4u);
}

// The divisor's gradient, -g * ((a / b) / b) as PyTorch computes it: -g * a / b^2
// overflows or underflows at b^2 where the quotients do not.
TEST(Autograd, TheDivisorsGradientAvoidsSquaringIt) {
  const Tensor a = leaf({1}, {1});
  const Tensor b = from_vector<float>({1e20f}).set_requires_grad(true);
  ops::sum(ops::div(a, b)).backward();
  EXPECT_LT(std::abs(vals(b.grad())[0] + 1e-40f), 1e-42f);  // a subnormal float, not 0 (b^2 is inf)
  const Tensor c = from_vector<float>({1e-30f}).set_requires_grad(true);
  ops::sum(ops::div(from_vector<float>({1e-30f}), c)).backward();
  EXPECT_FLOAT_EQ(vals(c.grad())[0], -1e30f);  // not -inf (c^2 is 0)
}

// .grad accumulates into itself, as PyTorch's does without create_graph: a reference
// taken before (an optimizer's) sees the sum.
TEST(Autograd, GradAccumulatesInPlace) {
  const Tensor x = leaf({1, 2}, {2});
  ops::sum(ops::mul(x, 3.0)).backward();
  const Tensor g = x.grad();
  ops::sum(ops::mul(x, 2.0)).backward();
  EXPECT_EQ(vals(g), (std::vector<float>{5, 5}));
  EXPECT_TRUE(g.is_alias_of(x.grad()));
  // A .grad whose elements overlap (an expanded tensor) is summed out of place: each
  // element its own sum.
  x.set_grad(ops::expand(ops::zeros({1}), {2}));
  ops::sum(ops::mul(x, from_vector<float>({1, 2}))).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{1, 2}));
}

// Note [The layout of .grad]: a dense leaf's .grad has the leaf's strides, as
// PyTorch's (a transposed weight's gradient is transposed too); a leaf that is not
// dense gets a contiguous one. Both accumulate in place afterwards.
TEST(Autograd, GradTakesTheLayoutOfADenseLeaf) {
  const Tensor w = from_vector<float>({1, 2, 3, 4, 5, 6}, std::vector<int64_t>{2, 3}).transpose(0, 1);
  w.set_requires_grad(true);
  ops::sum(ops::mul(w, w)).backward();
  EXPECT_THAT(w.grad().strides(), ElementsAre(1, 3));
  EXPECT_EQ(vals(w.grad()), vals(ops::mul(w, 2.0)));
  const Tensor g = w.grad();
  ops::sum(w).backward();
  EXPECT_TRUE(g.is_alias_of(w.grad()));
  EXPECT_THAT(w.grad().strides(), ElementsAre(1, 3));
  EXPECT_EQ(vals(w.grad()), vals(ops::add(ops::mul(w, 2.0), 1.0)));
  // A permuted 3-d leaf with a size-1 dim: its strides too.
  const Tensor p = ops::zeros({2, 1, 3}).permute({2, 1, 0});
  p.set_requires_grad(true);
  ops::sum(ops::mul(p, 2.0)).backward();
  EXPECT_THAT(p.grad().strides(), ElementsAre(1, 3, 3));
  // A strided slice is not dense: its .grad is contiguous.
  const Tensor s = ops::zeros({4, 3}).slice(0, 0, 4, 2);
  s.set_requires_grad(true);
  ops::sum(ops::mul(s, 2.0)).backward();
  EXPECT_THAT(s.grad().strides(), ElementsAre(3, 1));
  // A .grad set to a strided slice (not dense, not overlapping) is summed into itself.
  const Tensor buffer = ops::zeros({4, 3});
  s.set_grad(buffer.slice(0, 0, 4, 2));
  ops::sum(ops::mul(s, 2.0)).backward();
  EXPECT_TRUE(s.grad().is_alias_of(buffer));
  EXPECT_EQ(vals(buffer), (std::vector<float>{2, 2, 2, 0, 0, 0, 2, 2, 2, 0, 0, 0}));
}

// matmul saves each operand only for the other's gradient: a weight that needs none,
// changed under no_grad before backward, is no error (as in PyTorch).
TEST(Autograd, MatmulSavesOnlyWhatTheNeededGradientsUse) {
  const Tensor w = from_vector<float>({1, 2, 3, 4}, std::vector<int64_t>{2, 2});
  const Tensor x = leaf({1, 1}, {2});
  const Tensor y = ops::sum(ops::matmul(w, x));
  w.copy_(from_vector<float>({0, 0, 0, 0}, std::vector<int64_t>{2, 2}));
  EXPECT_THAT(errorOf([&] { y.backward(); }), HasSubstr("modified by an inplace operation"));
  const Tensor w2 = leaf({1, 2, 3, 4}, {2, 2});
  const Tensor c = from_vector<float>({1, 1});
  const Tensor y2 = ops::sum(ops::matmul(w2, c));
  {
    modes::NoGradGuard no_grad;
    w2.fill_(0.0);  // w2's own gradient needs c only
  }
  y2.backward();
  EXPECT_EQ(vals(w2.grad()), (std::vector<float>{1, 1, 1, 1}));
}

// A value that requires grad written in place into a plain tensor whose storage
// another tensor shares would leave that other tensor without history: refused, never
// a silently lost gradient (PyTorch rebases the views instead).
TEST(Autograd, WritingIntoAStorageAnotherTensorSharesIsRefused) {
  const Tensor a = leaf({1, 2, 3, 4}, {4});
  const Tensor d = zeros({2, 2});
  Tensor dv = d.view({4});
  EXPECT_THAT(errorOf([&] { ops::copy_(dv, a); }),
              AllOf(HasSubstr("argument 'self' shares its storage with another tensor"), HasSubstr("detach()")));
  Tensor f = zeros({4});
  const Tensor fv = f.view({2, 2});
  EXPECT_THAT(errorOf([&] { ops::copy_(f, a); }), HasSubstr("shares its storage with another tensor"));
  EXPECT_FALSE(f.requires_grad());  // nothing was written, nothing recorded
  EXPECT_EQ(vals(f), (std::vector<float>{0, 0, 0, 0}));
  // A tensor of its own takes the value and its history.
  Tensor g = zeros({4});
  ops::copy_(g, a);
  EXPECT_EQ(g.grad_fn_name(), "CopyBackwards");
}

// The node names PyTorch 1.13 records for the same calls (read from libtorch 1.13):
// a composite op is named by the op it ends in.
TEST(Autograd, NodesAreNamedAsPyTorchNamesThem) {
  auto rg = [](std::vector<int64_t> shape) { return ops::ones(shape).set_requires_grad(true); };
  struct Case {
    std::vector<int64_t> a, b;
    const char* name;
  };
  for (const Case& c : std::vector<Case>{{{4}, {4}, "DotBackward0"},
                                         {{3, 4}, {4}, "MvBackward0"},
                                         {{4}, {4, 5}, "SqueezeBackward3"},
                                         {{3, 4}, {4, 5}, "MmBackward0"},
                                         {{5, 3}, {2, 3, 4}, "CloneBackward0"},
                                         {{2, 3, 4}, {4}, "UnsafeViewBackward0"},
                                         {{2, 3, 4}, {4, 5}, "UnsafeViewBackward0"},
                                         {{3}, {2, 3, 4}, "UnsafeViewBackward0"},
                                         {{2, 2, 3, 4}, {2, 4, 5}, "UnsafeViewBackward0"}}) {
    EXPECT_EQ(ops::matmul(rg(c.a), rg(c.b)).grad_fn_name(), c.name) << c.a.size() << "-d @ " << c.b.size() << "-d";
  }
  const Tensor x = rg({2, 3, 4});
  EXPECT_EQ(ops::reshape(x, {6, 4}).grad_fn_name(), "ReshapeAliasBackward0");
  EXPECT_EQ(ops::reshape(ops::transpose(x, 0, 1), {6, 4}).grad_fn_name(), "UnsafeViewBackward0");
  EXPECT_EQ(ops::narrow(x, 1, 0, 2).grad_fn_name(), "SliceBackward0");
  EXPECT_EQ(ops::movedim(x, 0, 2).grad_fn_name(), "PermuteBackward0");
  EXPECT_EQ(ops::sum(x).grad_fn_name(), "SumBackward0");
  // A result starts at version 0 whatever its history, as PyTorch's.
  EXPECT_EQ(x.clone()._version(), 0u);
  EXPECT_EQ(ops::cat({x, x}, 0)._version(), 0u);
}

TEST(Autograd, TensorMethodsAreRecorded) {
  const Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(x.transpose(0, 1).grad_fn_name(), "TransposeBackward0");
  EXPECT_EQ(x.view({3, 2}).grad_fn_name(), "ViewBackward0");
  EXPECT_EQ(x.permute({1, 0}).grad_fn_name(), "PermuteBackward0");
  EXPECT_EQ(x.select(0, 1).grad_fn_name(), "SelectBackward0");
  EXPECT_EQ(x.slice(1, 0, 2).grad_fn_name(), "SliceBackward0");
  EXPECT_EQ(x.clone().grad_fn_name(), "CloneBackward0");
  EXPECT_EQ(x.to(ScalarType::Double).grad_fn_name(), "ToCopyBackward0");
  // contiguous() of a contiguous tensor, and to() of its own dtype, are the tensor
  // itself, as in PyTorch: nothing recorded, the leaf stays the leaf.
  const Tensor c = x.contiguous();
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(c.is_leaf());
  EXPECT_EQ(c.unsafeGetTensorImpl(), x.unsafeGetTensorImpl());
  EXPECT_EQ(x.to(ScalarType::Float).unsafeGetTensorImpl(), x.unsafeGetTensorImpl());
  EXPECT_EQ(x.transpose(0, 1).contiguous().grad_fn_name(), "CloneBackward0");
  EXPECT_THAT(errorOf([&] { x.slice(1, 0, 3, 2); }), HasSubstr("slice() with a step of a tensor that requires grad"));
  EXPECT_THAT(errorOf([&] { x.as_strided({2}, {1}); }), HasSubstr("as_strided() of a tensor that requires grad"));
  ops::sum(ops::mul(x.transpose(0, 1).select(0, 2), 5.0)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{0, 0, 5, 0, 0, 5}));
}

// --- gradcheck on every core:: formula --------------------------------------------

struct Case {
  const char* op;
  Fn fn;
  std::vector<Tensor> inputs;
  double eps = 1e-6;  // a float32 round trip needs a larger step
};

std::vector<Case> coreCases() {
  auto r = [](std::vector<int64_t> s, double lo = -1.0) {
    Tensor t = ops::add(ops::mul(ops::rand(s, ScalarType::Double), 2.0), lo);
    t.set_requires_grad(true);
    return t;
  };
  auto pos = [&](std::vector<int64_t> s) { return r(s, 0.5); };
  return {
      {"core::add.Tensor", [](auto x) { return std::vector{ops::add(x[0], x[1], 2.5)}; }, {r({2, 3}), r({3})}},
      {"core::add.Scalar", [](auto x) { return std::vector{ops::add(x[0], Scalar(2.0))}; }, {r({3})}},
      {"core::sub.Tensor", [](auto x) { return std::vector{ops::sub(x[0], x[1], 1.5)}; }, {r({2, 1}), r({2, 3})}},
      {"core::sub.Scalar", [](auto x) { return std::vector{ops::sub(x[0], Scalar(2.0))}; }, {r({3})}},
      {"core::mul.Tensor", [](auto x) { return std::vector{ops::mul(x[0], x[1])}; }, {r({2, 3}), r({1, 3})}},
      {"core::mul.Scalar", [](auto x) { return std::vector{ops::mul(x[0], Scalar(-3.0))}; }, {r({3})}},
      {"core::div.Tensor", [](auto x) { return std::vector{ops::div(x[0], x[1])}; }, {r({2, 3}), pos({3})}},
      {"core::div.Scalar", [](auto x) { return std::vector{ops::div(x[0], Scalar(4.0))}; }, {r({3})}},
      {"core::neg", [](auto x) { return std::vector{ops::neg(x[0])}; }, {r({3})}},
      {"core::sin", [](auto x) { return std::vector{ops::sin(x[0])}; }, {r({2, 2})}},
      {"core::cos", [](auto x) { return std::vector{ops::cos(x[0])}; }, {r({2, 2})}},
      {"core::exp", [](auto x) { return std::vector{ops::exp(x[0])}; }, {r({2, 2})}},
      {"core::sum", [](auto x) { return std::vector{ops::sum(x[0])}; }, {r({2, 3})}},
      {"core::sum.dim_IntList", [](auto x) { return std::vector{ops::sum(x[0], std::vector<int64_t>{-1}, false)}; },
       {r({2, 3})}},
      {"core::matmul", [](auto x) { return std::vector{ops::matmul(x[0], x[1])}; }, {r({2, 3}), r({3, 2})}},
      {"core::t", [](auto x) { return std::vector{ops::t(x[0])}; }, {r({2, 3})}},
      {"core::transpose.int", [](auto x) { return std::vector{ops::transpose(x[0], 0, 2)}; }, {r({2, 1, 3})}},
      {"core::movedim.int", [](auto x) { return std::vector{ops::movedim(x[0], 0, -1)}; }, {r({2, 1, 3})}},
      {"core::permute", [](auto x) { return std::vector{ops::permute(x[0], {2, 0, 1})}; }, {r({2, 1, 3})}},
      {"core::unsqueeze", [](auto x) { return std::vector{ops::unsqueeze(x[0], -1)}; }, {r({2, 3})}},
      {"core::squeeze", [](auto x) { return std::vector{ops::squeeze(x[0])}; }, {r({2, 1, 3})}},
      {"core::squeeze.dim", [](auto x) { return std::vector{ops::squeeze(x[0], 1)}; }, {r({2, 1, 3})}},
      {"core::select.int", [](auto x) { return std::vector{ops::select(x[0], 1, -1)}; }, {r({2, 3})}},
      {"core::narrow", [](auto x) { return std::vector{ops::narrow(x[0], 1, 1, 2)}; }, {r({2, 4})}},
      {"core::expand", [](auto x) { return std::vector{ops::expand(x[0], {2, 2, 3})}; }, {r({1, 3})}},
      {"core::reshape", [](auto x) { return std::vector{ops::reshape(x[0], {3, 2})}; }, {r({2, 3})}},
      {"core::view", [](auto x) { return std::vector{ops::view(x[0], {6})}; }, {r({2, 3})}},
      {"core::stack", [](auto x) { return std::vector{ops::stack({x[0], x[1]}, 1)}; }, {r({2, 3}), r({2, 3})}},
      {"core::cat", [](auto x) { return std::vector{ops::cat({x[0], x[1]}, 1)}; }, {r({2, 3}), r({2, 1})}},
      {"core::clone", [](auto x) { return std::vector{ops::clone(x[0])}; }, {r({3})}},
      {"core::contiguous", [](auto x) { return std::vector{ops::contiguous(ops::t(x[0]))}; }, {r({2, 3})}},
      {"core::to.dtype", [](auto x) { return std::vector{ops::to(ops::to(x[0], ScalarType::Float), ScalarType::Double)}; },
       {r({3})}, 1e-2},
      {"core::copy_", [](auto x) {
         Tensor dst = zeros({3}, ScalarType::Double);
         ops::copy_(dst, x[0]);
         return std::vector{ops::mul(dst, 2.0)};
       },
       {r({3})}},
      // What fill_ and zero_ overwrite gets no gradient: x's is add's alone.
      {"core::fill_.Scalar", [](auto x) {
         Tensor y = ops::mul(x[0], 2.0);
         ops::fill_(y, 3.0);
         return std::vector{ops::add(y, x[0])};
       },
       {r({3})}},
      {"core::zero_", [](auto x) {
         Tensor y = ops::mul(x[0], 2.0);
         ops::zero_(y);
         return std::vector{ops::add(y, x[0])};
       },
       {r({3})}},
  };
}

TEST(Autograd, GradcheckPassesOnEveryCoreFormula) {
  ops::manual_seed(7);
  std::vector<std::string> checked;
  for (const Case& c : coreCases()) {
    SCOPED_TRACE(c.op);
    const modes::GradcheckResult r = modes::gradcheck(c.fn, c.inputs, c.eps, 1e-5, 1e-3, false);
    EXPECT_TRUE(r.ok) << r.message;
    checked.push_back(c.op);
  }
  // Every op with a formula has a case here.
  for (const std::string& op : modes::core_autograd_ops()) {
    EXPECT_NE(std::find(checked.begin(), checked.end(), op), checked.end()) << op << " has no gradcheck case";
  }
}

TEST(Autograd, MatmulShapesAndBroadcastGradients) {
  ops::manual_seed(3);
  auto r = [](std::vector<int64_t> s) {
    Tensor t = ops::rand(s, ScalarType::Double);
    t.set_requires_grad(true);
    return t;
  };
  Fn mm = [](const std::vector<Tensor>& x) { return std::vector{ops::matmul(x[0], x[1])}; };
  for (auto shapes : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{3}, {3}}, {{2, 3}, {3}}, {{3}, {3, 2}}, {{2, 2, 3}, {3, 2}}, {{2, 1, 2, 3}, {2, 3, 1}}}) {
    const modes::GradcheckResult res = modes::gradcheck(mm, {r(shapes.first), r(shapes.second)}, 1e-6, 1e-5, 1e-3, false);
    EXPECT_TRUE(res.ok) << res.message;
  }
}

TEST(Autograd, GradcheckReportsTheFirstMismatch) {
  // A formula that is wrong on purpose: d sin = sin (not cos).
  Library lib(Library::DEF, "ag_wrong");
  lib.def("wsin(Tensor x) -> Tensor");
  lib.impl("wsin", [](const Tensor& x) { return ops::sin(x); }, DispatchKey::CompositeExplicitAutograd);
  modes::register_autograd(
      "ag_wrong::wsin",
      [](modes::AutogradContext& ctx, const std::vector<Tensor>& g) -> std::vector<IValue> {
        return {ops::mul(g[0], ops::sin(ctx.saved_tensors()[0]))};
      },
      [](modes::AutogradContext& ctx, const Stack& in, const Stack&) { ctx.save_for_backward({in[0].toTensor()}); },
      lib);
  const auto op = Dispatcher::singleton().findSchemaOrThrow("ag_wrong::wsin").typed<Tensor(const Tensor&)>();
  Fn f = [&](const std::vector<Tensor>& x) { return std::vector{op.call(x[0])}; };
  const modes::GradcheckResult r = modes::gradcheck(f, {leaf64({0.5, 1.0}, {2})}, 1e-6, 1e-5, 1e-3, false);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.message, HasSubstr("output 0 with respect to input 0, at output index (0) and input index (0): "
                                   "numerical 0.877583, analytical 0.479426"));
  EXPECT_THAT(errorOf([&] { modes::gradcheck(f, {leaf64({0.5}, {1})}); }), HasSubstr("Jacobian mismatch"));
  EXPECT_THAT(errorOf([&] { modes::gradcheck(f, {from_vector<double>({0.5})}); }), HasSubstr("no input requires grad"));
}

// --- register_autograd ---------------------------------------------------------------

Tensor numpySinKernel(const Tensor& x) {
  std::vector<double> v = x.to(ScalarType::Double).to_vector<double>();
  for (double& e : v) e = std::sin(e);
  return from_vector(v, std::vector<int64_t>(x.sizes().begin(), x.sizes().end())).to(x.dtype());
}

TEST(RegisterAutograd, TheSeedsNumpySin) {
  auto numpy_sin = modes::custom_op("ag_seed::numpy_sin", &numpySinKernel, {"x"}, {});
  numpy_sin.register_autograd(
      [](modes::AutogradContext& ctx, const std::vector<Tensor>& grads) -> std::vector<IValue> {
        const Tensor x = ctx.saved_tensors()[0];
        return {ops::mul(grads[0], ops::cos(x))};
      },
      [](modes::AutogradContext& ctx, const Stack& inputs, const Stack&) {
        ctx.save_for_backward({inputs[0].toTensor()});
      });
  const Tensor x = leaf({0.1, 0.2, 0.3}, {3});
  const Tensor y = numpy_sin(x);
  EXPECT_EQ(y.grad_fn_name(), "NumpySinBackward");
  auto gx = modes::grad({y}, {x}, {ops::empty_like(y).fill_(1.0)});
  modes::assert_close(gx[0], ops::cos(x.detach()));
  EXPECT_TRUE(modes::gradcheck([&](const std::vector<Tensor>& in) { return std::vector{numpy_sin(in[0])}; },
                               {leaf64({0.1, 0.7}, {2})})
                  .ok);
}

TEST(RegisterAutograd, TheSeedsNumpyMulWithAKeywordOnlyArgument) {
  auto numpy_mul = modes::custom_op(
      "ag_seed::numpy_mul", [](const Tensor& x, double val) { return ops::mul(x.detach(), val); }, {"x", "val"}, {},
      {}, "(Tensor x, *, float val) -> Tensor");
  EXPECT_THAT(errorOf([&] {
                numpy_mul.register_autograd(
                    [](modes::AutogradContext&, const std::vector<Tensor>& g) -> std::vector<IValue> { return {g[0]}; },
                    modes::SetupContextFn([](modes::AutogradContext&, const Stack&, const Stack&) {}));
              }),
              HasSubstr("keyword-only arguments, so setup_context must take (ctx, inputs, keyword_only_inputs, output)"));
  numpy_mul.register_autograd(
      [](modes::AutogradContext& ctx, const std::vector<Tensor>& grads) -> std::vector<IValue> {
        return {ops::mul(grads[0], ctx.get("val").toDouble())};
      },
      modes::SetupContextKwFn([](modes::AutogradContext& ctx, const Stack& inputs,
                                 const std::map<std::string, IValue>& kw, const Stack&) {
        EXPECT_EQ(inputs.size(), 1u);
        ctx.set("val", kw.at("val"));
      }));
  const Tensor x = leaf({1, 2, 3}, {3});
  const Tensor y = numpy_mul(x, 3.14);
  auto gx = modes::grad({y}, {x}, {ops::ones({3})});
  modes::assert_close(gx[0], ops::full({3}, 3.14, ScalarType::Float));
}

// (op, backward, lib), as register_fake and register_vmap take: nothing to save.
TEST(RegisterAutograd, TheLibraryFormTakesNoSetupContext) {
  Library lib(Library::DEF, "ag_libform");
  lib.def("twice(Tensor a) -> Tensor");
  lib.impl("twice", [](const Tensor& a) { return ops::mul(a.detach(), 2.0); }, DispatchKey::CompositeExplicitAutograd);
  modes::register_autograd(
      "ag_libform::twice",
      [](modes::AutogradContext&, const std::vector<Tensor>& g) -> std::vector<IValue> { return {ops::mul(g[0], 2.0)}; },
      lib);
  const Tensor x = leaf({1, 2}, {2});
  ops::sum(Dispatcher::singleton().findSchemaOrThrow("ag_libform::twice").typed<Tensor(const Tensor&)>().call(x))
      .backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{2, 2}));
}

TEST(RegisterAutograd, ErrorsNameTheOp) {
  Library lib(Library::DEF, "ag_errs");
  lib.def("inplace(Tensor(a!) x) -> ()");
  lib.def("two(Tensor a, Tensor b) -> Tensor");
  lib.def("noformula(Tensor a) -> Tensor");
  lib.impl("two", [](const Tensor& a, const Tensor& b) { return ops::add(a.detach(), b.detach()); },
           DispatchKey::CompositeExplicitAutograd);
  lib.impl("noformula", [](const Tensor& a) { return ops::mul(a.detach(), 2.0); }, DispatchKey::CompositeExplicitAutograd);
  auto bw = [](modes::AutogradContext&, const std::vector<Tensor>& g) -> std::vector<IValue> { return {g[0]}; };
  EXPECT_THAT(errorOf([&] { (void)modes::register_autograd("ag_errs::inplace", bw); }),
              HasSubstr("cannot register an autograd formula for non-functional operator ag_errs::inplace"));
  EXPECT_THAT(errorOf([&] { (void)modes::register_autograd("ag_errs::missing", bw); }), HasSubstr("ag_errs::missing"));
  EXPECT_THAT(errorOf([&] { (void)modes::register_autograd("ag_errs::two", modes::BackwardFn{}); }),
              HasSubstr("register_autograd(ag_errs::two): backward is empty"));
  // Backward returning one gradient for two inputs.
  auto h = modes::register_autograd("ag_errs::two", bw);
  const auto two = Dispatcher::singleton().findSchemaOrThrow("ag_errs::two").typed<Tensor(const Tensor&, const Tensor&)>();
  const Tensor a = leaf({1, 2}, {2});
  const Tensor b = leaf({3, 4}, {2});
  EXPECT_THAT(errorOf([&] { ops::sum(two.call(a, b)).backward(); }),
              HasSubstr("ag_errs::two: the backward formula returned 1 gradient(s), but the op has 2 positional input(s)"));
  EXPECT_THAT(errorOf([&] { (void)modes::register_autograd("ag_errs::two", bw); }), HasSubstr("already has an autograd formula"));
  // A gradient of the wrong shape.
  auto h2 = modes::register_autograd(
      "ag_errs::two",
      [](modes::AutogradContext&, const std::vector<Tensor>&) -> std::vector<IValue> {
        return {ops::ones({3}), IValue()};
      },
      modes::SetupContextFn{}, /*allow_override=*/true);
  EXPECT_THAT(errorOf([&] { ops::sum(two.call(a, b)).backward(); }),
              HasSubstr("ag_errs::two: the backward formula returned a gradient of shape [3] for input 0 (a), which "
                        "has shape [2]"));
  // One the input broadcasts to is summed down to it, as PyTorch's engine does.
  auto h3 = modes::register_autograd(
      "ag_errs::two",
      [](modes::AutogradContext&, const std::vector<Tensor>&) -> std::vector<IValue> {
        return {ops::ones({3, 2}), IValue()};
      },
      modes::SetupContextFn{}, /*allow_override=*/true);
  const Tensor a2 = leaf({1, 2}, {2});
  ops::sum(two.call(a2, b)).backward();
  EXPECT_EQ(vals(a2.grad()), (std::vector<float>{3, 3}));
  // A keyword-only tensor argument would get no gradient: refused, naming it.
  lib.def("kwt(Tensor x, *, Tensor y) -> Tensor");
  EXPECT_THAT(errorOf([&] { (void)modes::register_autograd("ag_errs::kwt", bw); }),
              AllOf(HasSubstr("register_autograd(ag_errs::kwt)"), HasSubstr("keyword-only tensor argument 'y'")));
  // An op that returns nothing is not functional (PyTorch's is_functional_schema).
  lib.def("returns_nothing(Tensor x) -> ()");
  EXPECT_THAT(errorOf([&] { (void)modes::register_autograd("ag_errs::returns_nothing", bw); }),
              HasSubstr("non-functional operator ag_errs::returns_nothing"));
  // No formula at all: the outputs require grad, the backward raises.
  const auto nf = Dispatcher::singleton().findSchemaOrThrow("ag_errs::noformula").typed<Tensor(const Tensor&)>();
  const Tensor y = nf.call(a);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_THAT(errorOf([&] { ops::sum(y).backward(); }),
              HasSubstr("trying to backward through ag_errs::noformula but no autograd formula was registered"));
}

TEST(RegisterAutograd, ContextErrorsNameTheAttributeAndTheInput) {
  Library lib(Library::DEF, "ag_ctx");
  lib.def("f(Tensor x, float s) -> Tensor");
  lib.impl("f", [](const Tensor& x, double s) { return ops::mul(x.detach(), s); }, DispatchKey::CompositeExplicitAutograd);
  std::string missing, range;
  modes::register_autograd(
      "ag_ctx::f",
      [&](modes::AutogradContext& ctx, const std::vector<Tensor>& g) -> std::vector<IValue> {
        missing = errorOf([&] { ctx.get("scale"); });
        range = errorOf([&] { ctx.needs_input_grad(5); });
        EXPECT_TRUE(ctx.has("s"));
        EXPECT_FALSE(ctx.needs_input_grad(1));
        return {ops::mul(g[0], ctx.get("s").toDouble()), IValue()};
      },
      modes::SetupContextFn([](modes::AutogradContext& ctx, const Stack& in, const Stack&) { ctx.set("s", in[1]); }),
      lib);
  const auto f = Dispatcher::singleton().findSchemaOrThrow("ag_ctx::f").typed<Tensor(const Tensor&, double)>();
  const Tensor x = leaf({1, 2}, {2});
  ops::sum(f.call(x, 4.0)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{4, 4}));
  EXPECT_THAT(missing, HasSubstr("ag_ctx::f: the autograd context has no attribute 'scale' (setup_context set: s)"));
  EXPECT_THAT(range, HasSubstr("needs_input_grad(5) is out of range: the op has 2 input(s)"));
}

TEST(RegisterAutograd, AFormulaIsARegistrationLikeAnyOther) {
  Library lib(Library::DEF, "ag_reg");
  lib.def("f(Tensor x) -> Tensor");
  lib.impl("f", [](const Tensor& x) { return ops::mul(x.detach(), 3.0); }, DispatchKey::CompositeExplicitAutograd);
  std::optional<RegistrationHandleRAII> h;
  {
    RegistrationOwnerGuard owner("acme@1.0.0");
    h.emplace(modes::register_autograd(
        "ag_reg::f", [](modes::AutogradContext&, const std::vector<Tensor>& g) -> std::vector<IValue> {
          return {ops::mul(g[0], 3.0)};
        }));
  }
  const OperatorName name = parseOperatorName("ag_reg::f");
  const std::string dump = Dispatcher::singleton().dump(name);
  EXPECT_THAT(dump, HasSubstr("acme@1.0.0"));
  EXPECT_THAT(dump, HasSubstr("autograd formula (register_autograd)"));
  const auto f = Dispatcher::singleton().findSchemaOrThrow("ag_reg::f").typed<Tensor(const Tensor&)>();
  const Tensor x = leaf({1}, {1});
  ops::sum(f.call(x)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<float>{3}));
  {
    // Switched off: the op has no formula for the scope.
    KernelEnabledScope off("ag_reg::f", "autograd", false);
    EXPECT_THAT(errorOf([&] { ops::sum(f.call(x)).backward(); }),
                HasSubstr("no autograd formula was registered (its formula is switched off"));
  }
  {
    // The forward ran while it was off, the backward after it came back: the graph
    // has no formula, and the message says when it was missing.
    Tensor y;
    {
      KernelEnabledScope off("ag_reg::f", "autograd", false);
      y = ops::sum(f.call(x));
    }
    EXPECT_THAT(errorOf([&] { y.backward(); }),
                HasSubstr("no autograd formula was registered when its forward ran (its formula was switched off or "
                          "not yet registered then; run the forward again)"));
  }
  h.reset();
  EXPECT_THAT(errorOf([&] { ops::sum(f.call(x)).backward(); }), HasSubstr("no autograd formula was registered"));
}

TEST(RegisterAutograd, AutocastSitsAboveAutograd) {
  const Tensor a = leaf({1, 2, 3, 4}, {2, 2});
  const Tensor b = leaf({1, 0, 0, 1}, {2, 2});
  Tensor y;
  {
    modes::AutocastGuard autocast(DeviceType::CPU, ScalarType::BFloat16);
    y = ops::matmul(a, b);
  }
  EXPECT_EQ(y.dtype(), ScalarType::BFloat16);
  ops::sum(y).backward();
  // The casts were recorded: the leaves get float32 gradients.
  EXPECT_EQ(a.grad().dtype(), ScalarType::Float);
  EXPECT_EQ(vals(a.grad()), (std::vector<float>{1, 1, 1, 1}));
}

// --- The tutorial: mymuladd with a backward that calls mymul --------------------------

Tensor mymulCpu(const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.sizes().size() == b.sizes().size(), Value, "mymul: shapes differ");
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = empty(a.sizes(), ScalarType::Float);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] * pb[i];
  return out;
}
Tensor mymuladdCpu(const Tensor& a, const Tensor& b, double c) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = empty(a.sizes(), ScalarType::Float);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] * pb[i] + static_cast<float>(c);
  return out;
}

struct Tutorial {
  Library def{Library::DEF, "ag_tut"};
  Library cpu{Library::IMPL, "ag_tut", DispatchKey::CPU};
  Tutorial() {
    def.def("mymuladd(Tensor a, Tensor b, float c) -> Tensor");
    def.def("mymul(Tensor a, Tensor b) -> Tensor");
    cpu.impl("mymuladd", &mymuladdCpu);
    cpu.impl("mymul", &mymulCpu);
    modes::register_fake("ag_tut::mymuladd", [](const Tensor& a, const Tensor&, double) { return ops::empty_like(a); }, def);
    modes::register_fake("ag_tut::mymul", [](const Tensor& a, const Tensor&) { return ops::empty_like(a); }, def);
    static const auto mymul =
        Dispatcher::singleton().findSchemaOrThrow("ag_tut::mymul").typed<Tensor(const Tensor&, const Tensor&)>();
    modes::register_autograd(
        "ag_tut::mymuladd",
        [](modes::AutogradContext& ctx, const std::vector<Tensor>& grads) -> std::vector<IValue> {
          const auto saved = ctx.saved_tensors();
          std::vector<IValue> out(3);
          if (ctx.needs_input_grad(0)) out[0] = mymul.call(grads[0], saved[1]);
          if (ctx.needs_input_grad(1)) out[1] = mymul.call(grads[0], saved[0]);
          return out;
        },
        [](modes::AutogradContext& ctx, const Stack& inputs, const Stack&) {
          ctx.save_for_backward({ctx.needs_input_grad(1) ? inputs[0].toTensor() : Tensor(),
                                 ctx.needs_input_grad(0) ? inputs[1].toTensor() : Tensor()});
        },
        def);
  }
};

std::vector<Stack> sampleInputs(bool requires_grad) {
  auto make = [&](std::vector<int64_t> s) { return ops::rand(s).set_requires_grad(requires_grad); };
  auto nondiff = [](std::vector<int64_t> s) { return ops::rand(s); };
  return {{make({3}), make({3}), 1.0},
          {make({20}), make({20}), 3.14},
          {make({20}), nondiff({20}), -123.0},
          {nondiff({2, 3}), make({2, 3}), -0.3}};
}

TEST(Tutorial, MymuladdTrainsAndPassesOpcheckAndGradcheck) {
  Tutorial t;
  ops::manual_seed(0);
  const auto op = Dispatcher::singleton().findSchemaOrThrow("ag_tut::mymuladd").typed<Tensor(const Tensor&, const Tensor&, double)>();
  auto samples = sampleInputs(true);
  for (Stack& s : sampleInputs(false)) samples.push_back(std::move(s));
  for (const Stack& args : samples) {
    const Tensor& a = args[0].toTensor();
    const Tensor& b = args[1].toTensor();
    const double c = args[2].toDouble();
    const Tensor result = op.call(a, b, c);
    const Tensor expected = ops::add(ops::mul(a, b), c);  // reference_muladd
    modes::assert_close(result, expected);
    const modes::OpcheckResults r = modes::opcheck("ag_tut::mymuladd", args);
    EXPECT_TRUE(modes::opcheck_passed(r));
    EXPECT_EQ(r.at("test_schema"), "SUCCESS");
    EXPECT_EQ(r.at("test_faketensor"), "SUCCESS");
    if (a.requires_grad() || b.requires_grad()) {
      EXPECT_EQ(r.at("test_autograd_registration"), "SUCCESS");
      auto fn = [&](const std::vector<Tensor>& x) {
        return std::vector{op.call(ops::to(x[0], ScalarType::Float), ops::to(x[1], ScalarType::Float), c)};
      };
      const modes::GradcheckResult g = modes::gradcheck(fn, {a, b}, 1e-2, 1e-2, 1e-2, false);
      EXPECT_TRUE(g.ok) << g.message;
      // The backward ran mymul.
      const Tensor y = op.call(a, b, c);
      EXPECT_EQ(y.grad_fn_name(), "MymuladdBackward");
    }
  }
}

// What PyTorch's cross-checks catch and allow beyond one test per kind: outputs that
// alias each other, a fake that aliases where the kernel does not (or the reverse), a
// storage offset that differs, a Tensor?[] argument mutated; and a data-dependent
// size, which a fake impl gives as a symbol, matches any real size in its range.
TEST(Opcheck, AliasesOffsetsOptionalTensorListsAndSymbolicSizes) {
  Library lib(Library::DEF, "ag_more");
  lib.def("pair(Tensor x) -> (Tensor, Tensor)");
  lib.impl("pair", [](const Tensor& x) {
    Tensor y = x.clone();
    return std::make_tuple(y, y.view({-1}));
  }, DispatchKey::CPU);
  modes::register_fake("ag_more::pair", [](const Tensor& x) {
    return std::make_tuple(ops::empty_like(x), ops::empty_like(x));
  }, lib);
  lib.def("fakealias(Tensor x) -> Tensor");
  lib.impl("fakealias", [](const Tensor& x) { return x.clone(); }, DispatchKey::CPU);
  modes::register_fake("ag_more::fakealias", [](const Tensor& x) { return x; }, lib);
  lib.def("offset(Tensor x) -> Tensor");
  lib.impl("offset", [](const Tensor& x) { return ops::narrow(x.clone(), 0, 1, 2); }, DispatchKey::CPU);
  modes::register_fake("ag_more::offset", [](const Tensor& x) { return ops::empty({x.size(0) - 1}); }, lib);
  lib.def("optlist(Tensor?[] xs) -> Tensor");
  lib.impl("optlist", [](const std::vector<std::optional<Tensor>>& xs) {
    xs[0]->fill_(42.0);
    return xs[0]->clone();
  }, DispatchKey::CPU);
  lib.def("nonzero(Tensor x) -> Tensor");
  lib.impl("nonzero", [](const Tensor& x) {
    std::vector<int64_t> idx;
    const std::vector<float> v = x.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] != 0) idx.push_back(static_cast<int64_t>(i));
    }
    return from_vector(idx, std::vector<int64_t>{static_cast<int64_t>(idx.size()), 1});
  }, DispatchKey::CPU);
  modes::register_fake("ag_more::nonzero", [](const Tensor& x) {
    return ops::empty({modes::get_ctx().new_dynamic_size(0, x.numel()), 1}, ScalarType::Long);
  }, lib);
  lib.def("small(Tensor x) -> Tensor");
  lib.impl("small", [](const Tensor&) { return from_vector<int64_t>({0, 1, 2}, std::vector<int64_t>{3, 1}); },
           DispatchKey::CPU);
  modes::register_fake("ag_more::small", [](const Tensor&) {
    return ops::empty({modes::get_ctx().new_dynamic_size(0, 2), 1}, ScalarType::Long);
  }, lib);

  const Tensor x = from_vector<float>({1, 0, 3});
  auto results = modes::opcheck("ag_more::pair", {x}, {"test_schema", "test_faketensor"}, false);
  EXPECT_THAT(results.at("test_schema"), HasSubstr("outputs 0 and 1 alias each other"));
  EXPECT_THAT(results.at("test_faketensor"),
              HasSubstr("outputs 0 and 1 share storage in the real kernel's results but not the fake impl's"));
  results = modes::opcheck("ag_more::fakealias", {x}, {"test_faketensor"}, false);
  EXPECT_THAT(results.at("test_faketensor"),
              HasSubstr("output 0: the fake impl returns an alias of an input (a tensor sharing its storage) and the "
                        "real kernel a fresh tensor"));
  results = modes::opcheck("ag_more::offset", {x}, {"test_faketensor"}, false);
  EXPECT_THAT(results.at("test_faketensor"), HasSubstr("the fake impl gives storage offset 0, the real kernel 1"));
  const Tensor mine = from_vector<float>({1, 2, 3});
  results = modes::opcheck("ag_more::optlist", {IValue(std::vector<IValue>{IValue(mine), IValue()})},
                           {"test_schema"}, false);
  EXPECT_THAT(results.at("test_schema"), HasSubstr("argument 'xs' was mutated"));
  EXPECT_EQ(mine.to_vector<float>(), (std::vector<float>{1, 2, 3}));  // opcheck worked on a copy
  results = modes::opcheck("ag_more::nonzero", {x}, {"test_schema", "test_faketensor"}, false);
  EXPECT_EQ(results.at("test_faketensor"), "SUCCESS");
  // Out of the symbol's range: named with the range.
  results = modes::opcheck("ag_more::small", {x}, {"test_faketensor"}, false);
  EXPECT_THAT(results.at("test_faketensor"),
              AllOf(HasSubstr("the fake impl gives sizes [u0, 1], the real kernel [3, 1]"), HasSubstr("u0 in [0, 2]")));
}

TEST(Opcheck, CatchesWhatIsBrokenOneTestEach) {
  Library lib(Library::DEF, "ag_broken");
  // Mutates its input, though the schema says it does not.
  lib.def("sneaky(Tensor x) -> Tensor");
  lib.impl("sneaky", [](const Tensor& x) { x.fill_(0.0); return x.clone(); }, DispatchKey::CPU);
  // A fake impl with the wrong shape.
  lib.def("badfake(Tensor x) -> Tensor");
  lib.impl("badfake", [](const Tensor& x) { return x.clone(); }, DispatchKey::CPU);
  modes::register_fake("ag_broken::badfake", [](const Tensor& x) { return ops::empty({x.numel() + 1}); }, lib);
  // Returns its input though the schema promises a fresh tensor.
  lib.def("alias(Tensor x) -> Tensor");
  lib.impl("alias", [](const Tensor& x) { return x.view({-1}); }, DispatchKey::CPU);
  // No autograd formula.
  lib.def("nograd(Tensor x) -> Tensor");
  lib.impl("nograd", [](const Tensor& x) { return x.clone(); }, DispatchKey::CPU);
  modes::register_fake("ag_broken::nograd", [](const Tensor& x) { return ops::empty_like(x); }, lib);
  // A batching rule that disagrees with the loop.
  lib.def("badvmap(Tensor x) -> Tensor");
  lib.impl("badvmap", [](const Tensor& x) { return ops::mul(x, 2.0); }, DispatchKey::CPU);
  modes::register_vmap("ag_broken::badvmap",
                       [](const modes::VmapInfo&, const modes::InDims& in_dims, Stack& args) -> modes::VmapResult {
                         return {{IValue(ops::mul(args[0].toTensor(), 3.0))}, {in_dims[0]}};
                       },
                       lib);

  const Tensor x = from_vector<float>({1, 2, 3});
  auto results = modes::opcheck("ag_broken::sneaky", {x}, {"test_schema"}, false);
  EXPECT_THAT(results.at("test_schema"), HasSubstr("argument 'x' was mutated but the schema"));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3}));  // opcheck ran on copies
  EXPECT_THAT(errorOf([&] { modes::opcheck("ag_broken::sneaky", {x}); }),
              HasSubstr("opcheck(ag_broken::sneaky): test_schema failed"));
  results = modes::opcheck("ag_broken::badfake", {x}, {"test_faketensor"}, false);
  EXPECT_THAT(results.at("test_faketensor"), HasSubstr("the fake impl gives sizes [4], the real kernel [3]"));
  results = modes::opcheck("ag_broken::alias", {x}, {"test_schema"}, false);
  EXPECT_THAT(results.at("test_schema"), HasSubstr("output 0 aliases an input"));
  const Tensor xg = from_vector<float>({1, 2, 3}).set_requires_grad(true);
  results = modes::opcheck("ag_broken::nograd", {xg}, modes::opcheck_default_tests(), false);
  EXPECT_THAT(results.at("test_autograd_registration"), HasSubstr("has no autograd formula"));
  EXPECT_EQ(results.at("test_schema"), "SUCCESS");
  {
    // One that has a formula, switched off: says so, and how to turn it on.
    KernelEnabledScope off("core::neg", "autograd", false);
    results = modes::opcheck("core::neg", {xg}, {"test_autograd_registration"}, false);
    EXPECT_THAT(results.at("test_autograd_registration"),
                AllOf(HasSubstr("core::neg's autograd formula is switched off"),
                      HasSubstr("strata kernel enable core::neg autograd")));
  }
  // test_vmap runs the loop to compare with the rule: no "no batching rule" warning
  // for an op that has one, and a real fallback afterwards still warns.
  std::vector<std::string> warnings;
  modes::set_warning_sink([&](std::string_view w) { warnings.emplace_back(w); });
  modes::reset_vmap_fallback_warnings();
  results = modes::opcheck("ag_broken::badvmap", {x}, {"test_vmap"}, false);
  EXPECT_THAT(results.at("test_vmap"), HasSubstr("the batching rule and the for-loop fallback differ"));
  EXPECT_TRUE(warnings.empty()) << (warnings.empty() ? "" : warnings.front());
  {
    const auto op = Dispatcher::singleton().findSchemaOrThrow("ag_broken::badvmap").typed<Tensor(const Tensor&)>();
    KernelEnabledScope off("ag_broken::badvmap", "batched", false);
    modes::vmap([&](const Tensor& t) { return op.call(t); })(ops::stack({x, x}, 0));
  }
  modes::set_warning_sink(nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("no batching rule for ag_broken::badvmap"));
  // Tolerances go together; unknown tests are named.
  EXPECT_THAT(errorOf([&] { modes::opcheck("ag_broken::nograd", {x}, modes::opcheck_default_tests(), true, 1e-3); }),
              HasSubstr("atol and rtol must both be given"));
  EXPECT_THAT(errorOf([&] { modes::opcheck("ag_broken::nograd", {x}, {"test_everything"}); }),
              HasSubstr("unknown test 'test_everything'"));
}

TEST(Opcheck, CoreOpsPassAndAutocastRulesAreChecked) {
  const Tensor a = from_vector<float>({1, 2, 3, 4}, std::vector<int64_t>{2, 2}).set_requires_grad(true);
  for (const char* op : {"core::matmul", "core::mul.Tensor", "core::add.Tensor"}) {
    SCOPED_TRACE(op);
    const auto r = modes::opcheck(op, {a, a}, modes::opcheck_default_tests(), false);
    EXPECT_TRUE(modes::opcheck_passed(r));
    EXPECT_EQ(r.at("test_autocast"), "SUCCESS");
    EXPECT_EQ(r.at("test_vmap"), "SUCCESS");
  }
}

}  // namespace
}  // namespace strata
