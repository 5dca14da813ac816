// vmap: in_dims / out_dims and PyTorch's errors, batched tensors and levels (nested
// vmaps, escapes), randomness, chunk_size, register_vmap, the for-loop fallback and
// its warning, the core:: ops' rules against a loop, and the seeds' examples. Each
// test defines its ops in its own namespace; its Library objects and rules die with
// it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../dispatch/test_util.h"
#include "vmap_test_util.h"
#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/log_mode.h"
#include "strata/modes/vmap.h"
#include "strata/ops.h"
#include "strata/sym_int.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using modes::Dim;
using modes::DimEntry;
using modes::InDims;
using modes::VmapInfo;
using modes::VmapResult;
using modes::vmap;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using strata::testing::errorOf;

using vmaptest::rnd;
using vmaptest::same;

// The per-example loop: fn on each slice of the mapped inputs, stacked at dim 0.
Tensor loop(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& in,
            const std::vector<Dim>& dims) {
  int64_t b = -1;
  for (size_t i = 0; i < in.size(); ++i) {
    if (dims[i]) b = in[i].size(*dims[i]);
  }
  std::vector<Tensor> outs;
  for (int64_t k = 0; k < b; ++k) {
    std::vector<Tensor> slice;
    for (size_t i = 0; i < in.size(); ++i) slice.push_back(dims[i] ? in[i].select(*dims[i], k) : in[i]);
    outs.push_back(fn(slice));
  }
  return ops::stack(outs, 0);
}

// A warning sink for a test's scope.
class WarningsCaught {
 public:
  WarningsCaught() {
    modes::set_warning_sink([this](std::string_view line) { lines.emplace_back(line); });
  }
  ~WarningsCaught() { modes::set_warning_sink(nullptr); }
  std::vector<std::string> lines;
};

// --- vmap(): in_dims, out_dims and their errors. --------------------------------

TEST(VmapApi, MapsATensorFunctionOverDimZero) {
  const Tensor x = rnd({5, 3});
  const Tensor y = vmap([](const Tensor& t) { return ops::sin(t); })(x);
  EXPECT_TRUE(same(y, ops::sin(x)));
  EXPECT_FALSE(modes::is_batched(y));
  EXPECT_EQ(modes::vmap_depth(), 0u);
  EXPECT_FALSE(tls_local_dispatch_key_set().included.has(DispatchKey::Batched));
}

TEST(VmapApi, TheFunctionSeesTheLogicalShape) {
  std::vector<int64_t> seen;
  const Tensor x = rnd({4, 2, 3});
  vmap([&](const Tensor& t) {
    seen.assign(t.sizes().begin(), t.sizes().end());
    EXPECT_TRUE(modes::is_batched(t));
    EXPECT_EQ(modes::maybe_get_bdim(t), Dim(1));
    return t;
  }, 1)(x);
  EXPECT_THAT(seen, ElementsAre(4, 3));
}

TEST(VmapApi, InDimsPerArgumentWithNoneAndNonTensors) {
  const Tensor x = rnd({6, 3}), w = rnd({3});
  auto f = [](const Tensor& a, const Tensor& b, double c) { return ops::add(ops::mul(a, b), c); };
  const Tensor y = vmap(f, {0, std::nullopt, std::nullopt})(x, w, 2.0);
  EXPECT_TRUE(same(y, ops::add(ops::mul(x, w), 2.0)));
}

TEST(VmapApi, NegativeInDimsAreNormalized) {
  const Tensor x = rnd({3, 5});
  auto f = [](const Tensor& t) { return ops::mul(t, 2.0); };
  EXPECT_TRUE(same(vmap(f, -1)(x), vmap(f, 1)(x)));
  EXPECT_TRUE(same(vmap(f, -1)(x), ops::transpose(ops::mul(x, 2.0), 0, 1)));
}

TEST(VmapApi, OutDimsMoveTheBatchDim) {
  const Tensor x = rnd({5, 3});
  auto f = [](const Tensor& t) { return ops::exp(t); };
  const Tensor y = vmap(f, 0, 1)(x);
  EXPECT_THAT(std::vector<int64_t>(y.sizes().begin(), y.sizes().end()), ElementsAre(3, 5));
  EXPECT_TRUE(same(y, ops::transpose(ops::exp(x), 0, 1)));
  EXPECT_TRUE(same(vmap(f, 0, -1)(x), y));
}

TEST(VmapApi, TupleOutputsWithOutDimsPerOutput) {
  const Tensor x = rnd({4, 2});
  auto f = [](const Tensor& t) { return std::make_tuple(ops::sin(t), ops::cos(t)); };
  auto [s, c] = vmap(f, 0, {1, 0})(x);
  EXPECT_TRUE(same(s, ops::transpose(ops::sin(x), 0, 1)));
  EXPECT_TRUE(same(c, ops::cos(x)));
  auto [s2, c2] = vmap([](const Tensor& t) { return std::make_pair(ops::neg(t), t); })(x);
  EXPECT_TRUE(same(s2, ops::neg(x)));
  EXPECT_TRUE(same(c2, x));
}

TEST(VmapApi, ListsInAndOut) {
  const Tensor a = rnd({3, 2}), b = rnd({2, 3});
  auto f = [](const std::vector<Tensor>& ts) { return std::vector<Tensor>{ops::add(ts[0], ts[1]), ts[0]}; };
  const std::vector<Tensor> out = vmap(f, {std::vector<Dim>{0, 1}})(std::vector<Tensor>{a, b});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(same(out[0], ops::add(a, ops::transpose(b, 0, 1))));
  EXPECT_TRUE(same(out[1], a));
}

TEST(VmapApi, AnUnbatchedOutputIsExpandedOrPassedWithNone) {
  const Tensor x = rnd({4, 2}), w = rnd({2});
  auto f = [&](const Tensor&) { return w; };
  const Tensor y = vmap(f)(x);
  EXPECT_TRUE(same(y, ops::expand(ops::unsqueeze(w, 0), {4, 2})));
  EXPECT_TRUE(same(vmap(f, 0, std::nullopt)(x), w));
}

TEST(VmapApi, ErrorsArePyTorchs) {
  const Tensor x = rnd({3, 2}), y = rnd({4, 2});
  auto add = [](const Tensor& a, const Tensor& b) { return ops::add(a, b); };
  EXPECT_THAT(errorOf([&] { vmap(add)(x, y); }),
              HasSubstr("Expected all tensors to have the same size in the mapped dimension, got sizes [3, 4] for "
                        "the mapped dimension"));
  EXPECT_THAT(errorOf([&] { vmap(add, std::nullopt)(x, y); }), HasSubstr("Expected at least one Tensor to vmap over"));
  EXPECT_THAT(errorOf([&] { vmap(add, {0, 2})(x, y); }),
              AllOf(HasSubstr("Got in_dim=2 for some input (argument 1)"),
                    HasSubstr("Tensor of dimensionality 2 so expected in_dim to satisfy -2 <= in_dim < 2")));
  EXPECT_THAT(errorOf([&] { vmap(add, {0, 0, 0})(x, x); }),
              AllOf(HasSubstr("in_dims is not compatible with the structure of `inputs`"),
                    HasSubstr("in_dims has 3 entries but inputs has 2 arguments")));
  auto scale = [](const Tensor& a, double c) { return ops::mul(a, c); };
  EXPECT_THAT(errorOf([&] { vmap(scale)(x, 2.0); }),
              AllOf(HasSubstr("Got in_dim=0 for an input (argument 1) but the input is of type double"),
                    HasSubstr("please use None as the respective in_dim")));
  EXPECT_THAT(errorOf([] { vmap([] { return Tensor(); })(); }), HasSubstr("got no inputs"));
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& t) { return t; }, 0, std::nullopt)(x); }),
              HasSubstr("can not return a BatchedTensor when out_dim is None"));
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& t) { return std::make_tuple(t, 1.5); })(x); }),
              AllOf(HasSubstr("must only return Tensors, got type double (output 1)"),
                    HasSubstr("Did you mean to set out_dims= to None for output?")));
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& t) { return std::make_tuple(t, t); }, 0, {0, 0, 0})(x); }),
              AllOf(HasSubstr("out_dims is not compatible with the structure of `outputs`"),
                    HasSubstr("out_dims has 3 entries but outputs has 2 outputs")));
  EXPECT_THAT(errorOf([&] {
                vmap([](const Tensor& t) { return t; }, 0, {DimEntry(std::vector<Dim>{0, 0})})(x);
              }),
              HasSubstr("out_dim [0, 0] has 2 entries for output 0, which is a Tensor"));
  EXPECT_THAT(errorOf([&] {
                vmap([](const Tensor& t) { return std::vector<Tensor>{t, t}; }, 0,
                     {DimEntry(std::vector<Dim>{0}), 0})(x);
              }),
              HasSubstr("out_dim [0] has 1 entries for output 0, which is a Tensor"));
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& t) { return t; }, 0, 3)(x); }),
              HasSubstr("Dimension out of range (expected to be in range of [-2, 1], but got 3)"));
  EXPECT_THAT(errorOf([&] { vmap(add, 0, 0, "sometimes"); }),
              HasSubstr("Only allowed values for randomness are 'error', 'different', or 'same'. Got sometimes"));
  EXPECT_THAT(errorOf([&] { vmap(add, 0, 0, "error", 0); }),
              HasSubstr("vmap: chunk_size should be None or greater than 0. (got 0)"));
  // A failed call leaves no level behind.
  EXPECT_EQ(modes::vmap_depth(), 0u);
  EXPECT_FALSE(tls_local_dispatch_key_set().included.has(DispatchKey::Batched));
}

TEST(VmapApi, AnExceptionInsideLeavesNoLevelBehind) {
  const Tensor x = rnd({3, 2});
  EXPECT_THROW(vmap([](const Tensor& t) -> Tensor { STRATA_FAIL(Value, "boom ", t.dim()); })(x), Error);
  EXPECT_EQ(modes::vmap_depth(), 0u);
  EXPECT_FALSE(tls_local_dispatch_key_set().included.has(DispatchKey::Batched));
}

TEST(VmapApi, TheStepsABundleBuiltForABI42InlinedStillWork) {
  // SDK ABI 4.2's vmap() made its usual call in VmapCall's three steps; a bundle built
  // then still calls them.
  const Tensor x = rnd({3, 4}), y = rnd({3, 4});
  const modes::Dims in_dims(0), out_dims(1);
  modes::detail::VmapCall call(in_dims, out_dims, modes::Randomness::error, std::nullopt, 2);
  const Tensor* inputs[] = {&x, &y};
  Tensor out;
  {
    std::array<Tensor, 2> wrapped;
    call.enterTensors(inputs, wrapped.data(), 2);
    EXPECT_EQ(modes::vmap_depth(), 1u);
    EXPECT_TRUE(modes::is_batched(wrapped[0]));
    out = ops::add(wrapped[0], wrapped[1]);
    call.exitTensors(wrapped.data(), 2);
  }
  const Tensor result = call.finishTensor(std::move(out));
  EXPECT_TRUE(same(result, ops::transpose(ops::add(x, y), 0, 1)));
  EXPECT_FALSE(modes::is_batched(result));
  EXPECT_EQ(modes::vmap_depth(), 0u);
}

// A function of Tensors returning one Tensor, without chunk_size, takes vmap()'s short
// path (detail::VmapTensorsCall); the same function returning a tuple
// takes the general one. Both give the same results and errors for every out_dim and
// every kind of result: batched with its batch dim moved or not, unbatched (expanded),
// an input returned as it is, an outer level's tensor, an escaped one.
TEST(VmapApi, TheOneTensorPathAndTheGeneralPathAgree) {
  const Tensor x = rnd({3, 4, 2}), y = rnd({4, 3});
  using F = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, F>> fns = {
      {"batched", [](const Tensor& a, const Tensor& b) { return ops::add(a, ops::unsqueeze(ops::transpose(b, 0, 0), 1)); }},
      {"moved", [](const Tensor& a, const Tensor&) { return ops::movedim(a, 0, 1); }},
      {"input", [](const Tensor& a, const Tensor&) { return a; }},
      {"unbatched", [](const Tensor&, const Tensor&) { return ops::ones({2, 2}); }},
  };
  for (const auto& [name, fn] : fns) {
    for (const modes::Dims& out_dims : {modes::Dims(0), modes::Dims(1), modes::Dims(-1), modes::Dims(2),
                                        modes::Dims(3), modes::Dims(-4), modes::Dims({DimEntry(1)})}) {
      SCOPED_TRACE(name + ", out_dims " + out_dims.str());
      const modes::Dims tuple_out = out_dims.is_tuple() ? out_dims : modes::Dims({out_dims.all()});
      auto shortPath = [&] { return vmap(fn, {0, 1}, out_dims)(x, y); };
      auto general = [&] {
        return std::get<0>(
            vmap([&](const Tensor& a, const Tensor& b) { return std::make_tuple(fn(a, b)); }, {0, 1}, tuple_out)(x, y));
      };
      Tensor a, b;
      const std::string ea = errorOf([&] { a = shortPath(); }), eb = errorOf([&] { b = general(); });
      if (out_dims.str() == "3" || out_dims.str() == "-4") {
        EXPECT_THAT(ea, HasSubstr("Dimension out of range (expected to be in range of [-3, 2]"));
      }
      if (ea.empty() || eb.empty()) {
        EXPECT_EQ(ea.empty(), eb.empty()) << ea << eb;
        if (ea.empty() && eb.empty()) EXPECT_TRUE(same(a, b));
        EXPECT_FALSE(modes::is_batched(a));
      } else {
        // The messages differ only in how out_dims is printed: "1" or "(1,)".
        EXPECT_THAT(eb, HasSubstr(ea.substr(ea.find("): ") + 3)));
      }
      EXPECT_EQ(modes::vmap_depth(), 0u);
    }
  }
  // Bad inputs: the short path hands them to the general path's checks, so the
  // errors are the same, argument named and all.
  const std::vector<std::tuple<std::string, modes::Dims, Tensor, Tensor>> bad = {
      {"one in_dim for two inputs", modes::Dims({DimEntry(0)}), x, y},
      {"a list in_dim for a tensor", modes::Dims({DimEntry(0), DimEntry(std::vector<Dim>{0})}), x, y},
      {"an undefined tensor", modes::Dims(0), x, Tensor()},
      {"in_dim out of range", modes::Dims({DimEntry(0), DimEntry(5)}), x, y},
      {"negative in_dim out of range", modes::Dims({DimEntry(-4), DimEntry(0)}), x, y},
      {"sizes differ", modes::Dims(0), x, y},
      {"nothing mapped", modes::Dims({DimEntry(std::nullopt), DimEntry(std::nullopt)}), x, y},
      {"a 0-dim tensor mapped", modes::Dims(0), x, ops::ones({})},
  };
  for (const auto& [name, in_dims, p, q] : bad) {
    SCOPED_TRACE(name);
    auto fn = [](const Tensor& a, const Tensor&) { return a; };
    const std::string short_error = errorOf([&] { vmap(fn, in_dims)(p, q); });
    const std::string general_error =
        errorOf([&] { vmap([&](const Tensor& a, const Tensor& b) { return std::make_tuple(fn(a, b)); }, in_dims)(p, q); });
    EXPECT_FALSE(short_error.empty());
    EXPECT_EQ(short_error, general_error);
    EXPECT_EQ(modes::vmap_depth(), 0u);
  }
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& a, const Tensor&) { return a; })(x, y); }),
              HasSubstr("Expected all tensors to have the same size in the mapped dimension, got sizes [3, 4]"));
  // A symbolic batch size (meta tensors of a traced shape): one symbol mapped twice is
  // one batch size; a symbol and a number differ, on both paths alike.
  const int64_t s0 = sym::newSymbol("s_batch", 2);
  const Tensor sx = empty_strided(std::vector<int64_t>{s0, 3}, std::vector<int64_t>{3, 1}, TensorOptions().with_device(kMeta));
  const Tensor sy = empty_strided(std::vector<int64_t>{s0, 3}, std::vector<int64_t>{3, 1}, TensorOptions().with_device(kMeta));
  const Tensor s4 = empty({4, 3}, TensorOptions().with_device(kMeta));
  auto first = [](const Tensor& a, const Tensor&) { return a; };
  auto first_tuple = [](const Tensor& a, const Tensor&) { return std::make_tuple(a); };
  const Tensor sym_short = vmap(first)(sx, sy);
  const Tensor sym_general = std::get<0>(vmap(first_tuple)(sx, sy));
  EXPECT_EQ(sym::shapeStr(sym_short.sizes()), sym::shapeStr(sym_general.sizes()));
  EXPECT_EQ(sym_short.sizes()[0], s0);
  const std::string mixed = errorOf([&] { vmap(first)(sx, s4); });
  EXPECT_THAT(mixed, HasSubstr("Expected all tensors to have the same size in the mapped dimension"));
  EXPECT_EQ(mixed, errorOf([&] { vmap(first_tuple)(sx, s4); }));
  EXPECT_EQ(errorOf([&] { vmap(first)(s4, sx); }), errorOf([&] { vmap(first_tuple)(s4, sx); }));
  EXPECT_EQ(modes::vmap_depth(), 0u);
  // Under an outer vmap, the inner short path passes the outer level's tensors
  // through and returns an outer tensor expanded.
  const Tensor z = rnd({2, 3, 4});
  auto inner = [](const Tensor& outer_t) {
    return vmap([&outer_t](const Tensor& t) { return ops::add(t, outer_t); })(outer_t);
  };
  auto inner_general = [](const Tensor& outer_t) {
    return std::get<0>(vmap([&outer_t](const Tensor& t) { return std::make_tuple(ops::add(t, outer_t)); })(outer_t));
  };
  const Tensor nested = vmap(inner)(z);
  EXPECT_THAT(std::vector<int64_t>(nested.sizes().begin(), nested.sizes().end()), ElementsAre(2, 3, 3, 4));
  EXPECT_TRUE(same(nested, vmap(inner_general)(z)));
  // nested[b, i, j] = z[b, i] + z[b, j]; here b = 1, j = 2, every i.
  EXPECT_TRUE(same(ops::select(ops::select(nested, 0, 1), 1, 2),
                   ops::add(ops::select(z, 0, 1), ops::select(ops::select(z, 0, 1), 0, 2))));
  auto escaping = vmap([](const Tensor& t) {
    return vmap([&t](const Tensor&) { return t; }, 0, 0)(ops::ones({5}));
  });
  const Tensor expanded = escaping(z);
  EXPECT_THAT(std::vector<int64_t>(expanded.sizes().begin(), expanded.sizes().end()), ElementsAre(2, 5, 3, 4));
  // A batched tensor kept from an earlier call is an escape, on both paths.
  Tensor kept;
  (void)vmap([&kept](const Tensor& t) { kept = t; return t; })(x);
  EXPECT_THAT(errorOf([&] { vmap([&kept](const Tensor&) { return kept; })(x); }),
              HasSubstr("it escaped its own vmap"));
  EXPECT_THAT(errorOf([&] { vmap([&kept](const Tensor&) { return std::make_tuple(kept); })(x); }),
              HasSubstr("it escaped its own vmap"));
  // Unmapped arguments, and an outer level's tensor passed unmapped to an inner vmap.
  const Tensor u = rnd({3});
  EXPECT_TRUE(same(vmap([](const Tensor& a, const Tensor& c) { return ops::mul(a, c); }, {0, std::nullopt})(y, u),
                   ops::mul(y, u)));
  const Tensor outer_unmapped = vmap([&u](const Tensor& row) {
    return vmap([](const Tensor& a, const Tensor& c) { return ops::add(a, c); }, {std::nullopt, 0})(row, u);
  })(y);
  EXPECT_THAT(std::vector<int64_t>(outer_unmapped.sizes().begin(), outer_unmapped.sizes().end()), ElementsAre(4, 3, 3));
  EXPECT_TRUE(same(ops::select(outer_unmapped, 1, 1), ops::add(y, ops::select(u, 0, 1))));
  // Other signatures: Tensors by value and by reference, a reference returned.
  EXPECT_TRUE(same(vmap([](Tensor a, Tensor& c) { return ops::mul(a, c); })(x, x), ops::mul(x, x)));
  EXPECT_TRUE(same(vmap([](const Tensor& a) -> const Tensor& { return a; }, 0, 1)(x), ops::movedim(x, 0, 1)));
  // A batch of 0.
  const Tensor none = vmap([](const Tensor& a) { return ops::mul(a, a); })(ops::zeros({0, 3}));
  EXPECT_THAT(std::vector<int64_t>(none.sizes().begin(), none.sizes().end()), ElementsAre(0, 3));
  // A throw while the inputs are wrapped (the second one's logical count does not fit
  // once its batch dim of 0 is hidden), and fn throwing while it keeps an input: no
  // level is left behind and the next call works.
  const Tensor huge =
      empty_strided(std::vector<int64_t>{0, int64_t{1} << 40, int64_t{1} << 40}, std::vector<int64_t>{0, 0, 0});
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& a, const Tensor&) { return a; })(ops::zeros({0, 2}), huge); }),
              HasSubstr("hold more elements than fit in 64 bits"));
  EXPECT_EQ(modes::vmap_depth(), 0u);
  Tensor held;
  EXPECT_THAT(errorOf([&] {
                vmap([&held](const Tensor& a) -> Tensor {
                  held = a;
                  return vmap([](const Tensor& b) -> Tensor { STRATA_FAIL(Value, "inner boom ", b.dim()); })(a);
                })(z);
              }),
              HasSubstr("inner boom 1"));
  EXPECT_EQ(modes::vmap_depth(), 0u);
  EXPECT_FALSE(tls_local_dispatch_key_set().included.has(DispatchKey::Batched));
  EXPECT_THAT(errorOf([&] { (void)ops::add(held, held); }), HasSubstr("whose vmap has returned"));
  held = Tensor();
  EXPECT_TRUE(same(vmap([](const Tensor& a) { return ops::mul(a, a); })(z), ops::mul(z, z)));
}

// --- Batched tensors and levels. -------------------------------------------------

TEST(VmapLevels, NestedVmapsWithDifferentInDims) {
  const Tensor x = rnd({2, 3, 4});  // map dim 0 outside, dim 1 (of the rest) inside
  auto inner = vmap([](const Tensor& t) { return ops::sum(ops::mul(t, t)); }, 1);
  const Tensor y = vmap(inner, 0)(x);
  EXPECT_THAT(std::vector<int64_t>(y.sizes().begin(), y.sizes().end()), ElementsAre(2, 4));
  EXPECT_TRUE(same(y, ops::sum(ops::mul(x, x), std::vector<int64_t>{1})));
  // A thread takes its level ids in blocks; across a block's end the outer level is
  // still the outer one.
  const Tensor z = rnd({2, 2});
  const auto outer = vmap(vmap([](const Tensor& t) { return ops::mul(t, t); }));
  for (int i = 0; i < 1500; ++i) {
    ASSERT_TRUE(same(outer(z), ops::mul(z, z))) << "call " << i;
  }
}

TEST(VmapLevels, ARuleSeesOnlyItsLevel) {
  Library lib(Library::DEF, "vmaplevels");
  lib.def("pair(Tensor a, Tensor b) -> Tensor");
  Library cpu(Library::IMPL, "vmaplevels", DispatchKey::CPU);
  cpu.impl("pair", [](const Tensor& a, const Tensor& b) { return ops::add(a, b); });
  struct Seen {
    int64_t batch;
    InDims in_dims;
    bool a_batched;
    std::optional<uint64_t> a_level;
  };
  std::vector<Seen> seen;
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("vmaplevels::pair");
  auto rule = modes::register_vmap("vmaplevels::pair", [&](const VmapInfo& info, const InDims& in_dims, Stack& args) {
    seen.push_back({info.batch_size, in_dims, modes::is_batched(args[0].toTensor()),
                    modes::maybe_get_level(args[0].toTensor())});
    Tensor a = modes::move_bdim_to_front(args[0].toTensor(), in_dims[0], info.batch_size);
    Tensor b = modes::move_bdim_to_front(args[1].toTensor(), in_dims[1], info.batch_size);
    Stack s{a, b};
    op.callBoxed(s);
    return VmapResult{{s[0]}, {0}};
  });
  const Tensor X = rnd({2, 3}), Y = rnd({5, 3});
  auto call = [&](const Tensor& a, const Tensor& b) {
    Stack s{a, b};
    op.callBoxed(s);
    return s[0].toTensor();
  };
  // x is batched at the outer level only; the inner rule sees it as a plain tensor.
  const Tensor out = vmap([&](const Tensor& x) { return vmap([&](const Tensor& y) { return call(x, y); })(Y); })(X);
  EXPECT_THAT(std::vector<int64_t>(out.sizes().begin(), out.sizes().end()), ElementsAre(2, 5, 3));
  EXPECT_TRUE(same(out, ops::add(ops::unsqueeze(X, 1), ops::unsqueeze(Y, 0))));
  ASSERT_EQ(seen.size(), 2u);
  // Inner level first: batch 5, x not mapped here (it is the outer level's batched tensor).
  EXPECT_EQ(seen[0].batch, 5);
  EXPECT_EQ(seen[0].in_dims, (InDims{std::nullopt, 0}));
  EXPECT_TRUE(seen[0].a_batched);
  // Then the outer level, when the inner rule's call reached it: batch 2.
  EXPECT_EQ(seen[1].batch, 2);
  EXPECT_EQ(seen[1].in_dims, (InDims{0, std::nullopt}));
  EXPECT_FALSE(seen[1].a_batched);
}

TEST(VmapLevels, AnEscapedBatchedTensorIsAnError) {
  Tensor leaked;
  const Tensor x = rnd({3, 2});
  vmap([&](const Tensor& t) {
    leaked = t;
    return t;
  })(x);
  ASSERT_TRUE(modes::is_batched(leaked));
  EXPECT_THAT(errorOf([&] { ops::sin(leaked); }),
              AllOf(HasSubstr("core::sin got a batched tensor of vmap level"), HasSubstr("whose vmap has returned")));
  EXPECT_THAT(errorOf([&] { leaked.data_ptr(); }),
              AllOf(HasSubstr("data_ptr() needs a tensor's data"), HasSubstr("a batched tensor (vmap level")));
  EXPECT_THAT(leaked.str(), HasSubstr("BatchedTensor(lvl="));
  // Returned from an inner vmap into an outer one: also an escape.
  EXPECT_THAT(errorOf([&] {
                vmap([&](const Tensor& t) {
                  Tensor inner_leak;
                  vmap([&](const Tensor& u) {
                    inner_leak = u;
                    return u;
                  })(t);
                  return inner_leak;
                })(rnd({2, 3, 4}));
              }),
              HasSubstr("escaped its own vmap"));
}

// Note [Reusing wrapper tensors]: a vmap's spent batched tensors are reused by the next
// one on the thread; one the function kept is not, and a spent one holds no data.
TEST(VmapLevels, SpentBatchedTensorsAreReusedHoldNoDataAndKeptOnesStayAsTheyWere) {
  const Tensor x = rnd({3, 2});
  const uint32_t x_storage_owners = x.storage()->use_count();
  vmap([](const Tensor& t) { return ops::mul(t, 2.0); })(x);  // leaves its input and output spent
  const size_t spares = modes::vmap_spare_batched_tensors();
  ASSERT_GE(spares, 2u);
  const TensorImpl* seen_in[2] = {};
  const TensorImpl* seen_out[2] = {};
  for (int call = 0; call < 2; ++call) {
    const Tensor y = vmap([&](const Tensor& t) {
      EXPECT_EQ(modes::vmap_spare_batched_tensors(), spares - 1) << "the input was made anew";
      seen_in[call] = t.unsafeGetTensorImpl();
      Tensor r = ops::mul(t, 2.0);
      EXPECT_EQ(modes::vmap_spare_batched_tensors(), spares - 2) << "the output was made anew";
      seen_out[call] = r.unsafeGetTensorImpl();
      return r;
    })(x);
    EXPECT_EQ(modes::vmap_spare_batched_tensors(), spares);
    EXPECT_TRUE(same(y, ops::mul(x, 2.0)));
    EXPECT_FALSE(modes::is_batched(y));
    EXPECT_EQ(x.storage()->use_count(), x_storage_owners) << "a spent batched tensor holds its value's data";
  }
  EXPECT_THAT((std::vector<const TensorImpl*>{seen_in[1], seen_out[1]}),
              ::testing::UnorderedElementsAre(seen_in[0], seen_out[0]));

  // Reused with other shapes, dtypes, batch dims and devices, the results are the loop's.
  const Tensor a = ops::to(ops::mul(rnd({2, 5, 4}), 10.0), ScalarType::Long);
  const auto sum0 = [](const Tensor& t) { return ops::sum(t, std::vector<int64_t>{0}); };
  const Tensor s = vmap(sum0, 1)(a);
  EXPECT_EQ(s.dtype(), ScalarType::Long);
  EXPECT_TRUE(s.equal(loop([&](const std::vector<Tensor>& v) { return sum0(v[0]); }, {a}, {1})));
  const Tensor m = empty({4}, TensorOptions(ScalarType::Double).with_device(kMeta));
  const Tensor mm = vmap([](const Tensor& t) { return ops::unsqueeze(t, 0); })(m);
  EXPECT_TRUE(mm.is_meta());
  EXPECT_THAT(std::vector<int64_t>(mm.sizes().begin(), mm.sizes().end()), ElementsAre(4, 1));
  const Tensor w = rnd({2, 3, 1, 2, 1, 2, 2});  // more dims than a tensor keeps in place
  EXPECT_TRUE(same(vmap([](const Tensor& t) { return ops::mul(t, t); }, 3, 3)(w), ops::mul(w, w)));

  // A batched tensor the function kept is not reused: it stays what it was.
  Tensor kept;
  vmap([&](const Tensor& t) {
    kept = t;
    return ops::add(t, 1.0);
  })(x);
  const auto kept_level = modes::maybe_get_level(kept);
  for (int i = 0; i < 3; ++i) {
    vmap([&](const Tensor& t) {
      EXPECT_NE(t.unsafeGetTensorImpl(), kept.unsafeGetTensorImpl());
      return ops::add(t, 1.0);
    })(rnd({5, 7}));
  }
  EXPECT_EQ(modes::maybe_get_level(kept), kept_level);
  EXPECT_LE(modes::vmap_spare_batched_tensors(), 16u);
  EXPECT_EQ(modes::maybe_get_bdim(kept), Dim(0));
  EXPECT_THAT(std::vector<int64_t>(kept.sizes().begin(), kept.sizes().end()), ElementsAre(2));
  EXPECT_TRUE(modes::get_unwrapped(kept).equal(x));
}

// A detached thread's objects are nobody's to reuse (Note [Biased reference counts]):
// its vmaps make and free their batched tensors, and leave the spares as they were.
TEST(VmapLevels, ADetachedThreadReusesNothingAndVmapsAsBefore) {
  const Tensor x = rnd({3, 2});
  const auto twice = vmap([](const Tensor& t) { return ops::mul(t, 2.0); });
  twice(x);
  const size_t spares = modes::vmap_spare_batched_tensors();
  ASSERT_GE(spares, 2u);
  {
    DetachedScope detached;
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(same(twice(x), ops::mul(x, 2.0))) << "call " << i;
    EXPECT_EQ(modes::vmap_spare_batched_tensors(), spares);
  }
  EXPECT_TRUE(same(twice(x), ops::mul(x, 2.0)));
  EXPECT_EQ(modes::vmap_spare_batched_tensors(), spares);
}

TEST(VmapLevels, ABatchedTensorFromAnotherThreadIsAnError) {
  Tensor leaked;
  std::thread([&] {
    vmap([&](const Tensor& t) {
      leaked = t;
      return t;
    })(rnd({4, 3}));
  }).join();
  // Level ids are unique in the process: this thread's level is never taken for it.
  EXPECT_THAT(errorOf([&] { vmap([&](const Tensor& u) { return ops::add(u, leaked); })(rnd({4, 3})); }),
              AllOf(HasSubstr("got a batched tensor of vmap level"), HasSubstr("or runs on another thread")));
}

TEST(VmapLevels, TensorMethodsOnBatchedTensorsGoThroughTheOps) {
  const Tensor x = rnd({4, 2, 3});
  const Tensor y = vmap([](const Tensor& t) { return t.transpose(0, 1).contiguous().reshape({6}).select(0, 1); })(x);
  EXPECT_TRUE(same(y, ops::select(ops::reshape(ops::contiguous(ops::transpose(x, 1, 2)), {4, 6}), 1, 1)));
  EXPECT_TRUE(same(vmap([](const Tensor& t) { return t.permute({1, 0}); })(x), ops::permute(x, {0, 2, 1})));
  // fill_ and zero_ are ops with rules: the value into every slice.
  const Tensor z = ops::clone(x);
  vmap([](const Tensor& t) { return t.fill_(2.0); })(z);
  EXPECT_TRUE(same(z, ops::full({4, 2, 3}, 2.0)));
  vmap([](const Tensor& t) { return t.zero_(); }, 2)(z);
  EXPECT_TRUE(same(z, ops::zeros({4, 2, 3})));
}

// Outputs are flattened as PyTorch flattens a pytree: a tuple nested in an output and
// an optional tensor are unwrapped too, and a batched tensor never leaves a vmap
// through an out_dim of None, whichever vmap batched it.
TEST(VmapLevels, NestedOutputsAreUnwrappedAndNoneOutDimsKeepNothingBatched) {
  const Tensor x = rnd({3, 2});
  auto f = [](const Tensor& t) { return std::make_tuple(t, std::make_tuple(ops::sin(t), ops::mul(t, 2.0))); };
  const auto r = vmap(f)(x);
  EXPECT_FALSE(modes::is_batched(std::get<0>(std::get<1>(r))));
  EXPECT_TRUE(same(std::get<0>(std::get<1>(r)), ops::sin(x)));
  EXPECT_TRUE(same(std::get<1>(std::get<1>(r)), ops::mul(x, 2.0)));
  EXPECT_THAT(errorOf([&] { vmap(f, 0, {0, std::nullopt})(x); }),
              HasSubstr("can not return a BatchedTensor when out_dim is None (output 1)"));
  const auto o = vmap([](const Tensor& t) { return std::optional<Tensor>(ops::cos(t)); })(x);
  ASSERT_TRUE(o.has_value());
  EXPECT_TRUE(same(*o, ops::cos(x)));
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& t) { return std::optional<Tensor>(t); }, 0, std::nullopt)(x); }),
              HasSubstr("can not return a BatchedTensor when out_dim is None"));
  // nullopt is PyTorch's None: no leaves, returned as it is.
  const auto none = vmap([](const Tensor& t) { return std::make_tuple(ops::sin(t), std::optional<Tensor>()); })(x);
  EXPECT_FALSE(std::get<1>(none).has_value());
  EXPECT_TRUE(same(std::get<0>(none), ops::sin(x)));
  // An inner vmap's None out_dim and a tensor the outer vmap batched.
  const Tensor y = rnd({5, 2});
  EXPECT_THAT(errorOf([&] {
                vmap([&](const Tensor& a) { return vmap([&](const Tensor&) { return a; }, 0, std::nullopt)(y); })(x);
              }),
              HasSubstr("(output 0, batched by an outer vmap)"));
}

// --- randomness and chunk_size. -------------------------------------------------

TEST(VmapRandomness, ErrorSameAndDifferent) {
  const Tensor x = ops::zeros({4, 3});
  auto f = [](const Tensor& t) { return ops::add(t, ops::rand({3})); };
  EXPECT_THAT(errorOf([&] { vmap(f)(x); }),
              HasSubstr("vmap: called random operation while in randomness error mode"));
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& t) { return ops::rand_like(t); })(x); }),
              HasSubstr("randomness error mode"));
  const Tensor same_rows = vmap(f, 0, 0, "same")(x);
  const Tensor diff_rows = vmap(f, 0, 0, "different")(x);
  for (int64_t i = 1; i < 4; ++i) {
    EXPECT_TRUE(same_rows.select(0, i).equal(same_rows.select(0, 0)));
    EXPECT_FALSE(diff_rows.select(0, i).equal(diff_rows.select(0, 0)));
  }
  const Tensor like_same = vmap([](const Tensor& t) { return ops::rand_like(t); }, 0, 0, "same")(x);
  const Tensor like_diff = vmap([](const Tensor& t) { return ops::rand_like(t); }, 0, 0, "different")(x);
  EXPECT_TRUE(like_same.select(0, 3).equal(like_same.select(0, 0)));
  EXPECT_FALSE(like_diff.select(0, 3).equal(like_diff.select(0, 0)));
  EXPECT_THAT(std::vector<int64_t>(like_diff.sizes().begin(), like_diff.sizes().end()), ElementsAre(4, 3));
  // "same" holds across chunks too: every chunk starts from the same generator state.
  const Tensor chunked = vmap(f, 0, 0, "same", 2)(x);
  for (int64_t i = 1; i < 4; ++i) EXPECT_TRUE(chunked.select(0, i).equal(chunked.select(0, 0))) << i;
}

TEST(VmapRandomness, TheRuleSeesTheRandomness) {
  Library lib(Library::DEF, "vmaprand");
  lib.def("noise(Tensor x) -> Tensor");
  Library cpu(Library::IMPL, "vmaprand", DispatchKey::CPU);
  cpu.impl("noise", [](const Tensor& x) { return ops::clone(x); });
  std::vector<modes::Randomness> seen;
  auto rule = modes::register_vmap("vmaprand::noise", [&](const VmapInfo& info, const InDims& d, Stack& args) {
    seen.push_back(info.randomness);
    return VmapResult{{args[0]}, {d[0]}};
  });
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("vmaprand::noise");
  auto f = [&](const Tensor& t) {
    Stack s{t};
    op.callBoxed(s);
    return s[0].toTensor();
  };
  vmap(f, 0, 0, "different")(rnd({2, 2}));
  vmap(f, 0, 0, "same")(rnd({2, 2}));
  EXPECT_THAT(seen, ElementsAre(modes::Randomness::different, modes::Randomness::same));
}

// Note [Random ops without a batching rule]: the op's tag tells the fallback it draws.
TEST(VmapRandomness, AnOpTaggedNondeterministicSeededFollowsTheRandomnessWithoutARule) {
  Library lib(Library::DEF, "vmaprandtag");
  lib.def("noisy(Tensor x) -> Tensor", {Tag::nondeterministic_seeded});
  lib.def("quiet(Tensor x) -> Tensor");
  Library cpu(Library::IMPL, "vmaprandtag", DispatchKey::CPU);
  cpu.impl("noisy", [](const Tensor& x) { return ops::add(x, ops::rand_like(x)); });
  cpu.impl("quiet", [](const Tensor& x) { return ops::add(x, ops::rand_like(x)); });  // draws, untagged
  auto call = [](const char* name) {
    const auto op = Dispatcher::singleton().findSchemaOrThrow(name).typed<Tensor(const Tensor&)>();
    return [op](const Tensor& t) { return op.call(t); };
  };
  WarningsCaught warnings;  // the fallback warns once per op
  const Tensor x = ops::zeros({4, 3});
  EXPECT_THAT(errorOf([&] { vmap(call("vmaprandtag::noisy"))(x); }),
              AllOf(HasSubstr("vmaprandtag::noisy, tagged nondeterministic_seeded"),
                    HasSubstr("randomness error mode")));
  vmap(call("vmaprandtag::quiet"))(x);  // untagged: the fallback takes it as deterministic
  const Tensor same_rows = vmap(call("vmaprandtag::noisy"), 0, 0, "same")(x);
  const Tensor diff_rows = vmap(call("vmaprandtag::noisy"), 0, 0, "different")(x);
  for (int64_t i = 1; i < 4; ++i) {
    EXPECT_TRUE(same_rows.select(0, i).equal(same_rows.select(0, 0))) << i;
    EXPECT_FALSE(diff_rows.select(0, i).equal(diff_rows.select(0, 0))) << i;
  }
  // Nothing batched: "different" still gives each element its own draws, "same" one.
  const Tensor c = ops::zeros({3});
  auto on_c = [&](const Tensor& t) { return ops::add(call("vmaprandtag::noisy")(c), ops::mul(t, 0.0)); };
  const Tensor diff_c = vmap(on_c, 0, 0, "different")(x);
  const Tensor same_c = vmap(on_c, 0, 0, "same")(x);
  EXPECT_FALSE(diff_c.select(0, 1).equal(diff_c.select(0, 0)));
  EXPECT_TRUE(same_c.select(0, 1).equal(same_c.select(0, 0)));
}

TEST(VmapChunks, ChunkSizeEqualsTheUnchunkedResult) {
  const Tensor x = rnd({7, 3}), w = rnd({3, 2});
  auto f = [&](const Tensor& t) { return std::make_tuple(ops::matmul(t, w), ops::sum(t)); };
  auto [full_a, full_b] = vmap(f, 0, {1, 0})(x);
  for (int64_t chunk : {1, 2, 3, 7, 100}) {
    auto [a, b] = vmap(f, 0, {1, 0}, "error", chunk)(x);
    EXPECT_TRUE(same(a, full_a)) << "chunk_size " << chunk;
    EXPECT_TRUE(same(b, full_b)) << "chunk_size " << chunk;
  }
}

// --- register_vmap. -----------------------------------------------------------------

struct ScaleOp {
  Library def{Library::DEF, "vmapscale"};
  Library cpu{Library::IMPL, "vmapscale", DispatchKey::CPU};
  int calls = 0;
  OperatorHandle op = define();
  OperatorHandle define() {
    def.def("scale(Tensor x, float s) -> Tensor");
    def.def("scale_(Tensor(a!) x, Tensor y) -> Tensor(a!)");
    def.def("same(Tensor x, Tensor y) -> bool");
    def.def("alias(Tensor(a) x) -> Tensor(a)");
    def.def("fresh_(Tensor(a!) x) -> Tensor");
    cpu.impl("scale", [this](const Tensor& x, double s) {
      ++calls;
      return ops::mul(x, s);
    });
    cpu.impl("scale_", [this](Tensor& x, const Tensor& y) -> Tensor& {
      ++calls;
      ops::copy_(x, ops::mul(x, y));
      return x;
    });
    cpu.impl("same", [](const Tensor& x, const Tensor& y) { return x.equal(y); });
    cpu.impl("alias", [](const Tensor& x) { return x; });
    cpu.impl("fresh_", [](Tensor& x) {
      ops::copy_(x, ops::zeros({}));
      return ops::ones({1});
    });
    return Dispatcher::singleton().findSchemaOrThrow("vmapscale::scale");
  }
  Tensor operator()(const Tensor& x, double s) const {
    Stack st{x, s};
    op.callBoxed(st);
    return st[0].toTensor();
  }
};

TEST(RegisterVmap, TheRuleRunsOnceForTheBatch) {
  ScaleOp scale;
  std::vector<VmapInfo> infos;
  auto rule = modes::register_vmap("vmapscale::scale", [&](const VmapInfo& info, const InDims& d, Stack& args) {
    infos.push_back(info);
    EXPECT_EQ(d, (InDims{1, std::nullopt}));
    EXPECT_FALSE(modes::is_batched(args[0].toTensor()));
    Stack s{args[0], args[1]};
    scale.op.callBoxed(s);
    return VmapResult{{s[0]}, {1}};
  });
  const Tensor x = rnd({3, 8});
  const Tensor y = vmap([&](const Tensor& t) { return scale(t, 2.0); }, 1)(x);
  EXPECT_TRUE(same(y, ops::transpose(ops::mul(x, 2.0), 0, 1)));
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].batch_size, 8);
  EXPECT_EQ(infos[0].randomness, modes::Randomness::error);
  EXPECT_EQ(scale.calls, 1);
}

TEST(RegisterVmap, AnOpWithNoBatchedArgumentRunsPlainly) {
  ScaleOp scale;
  int rule_calls = 0;
  auto rule = modes::register_vmap("vmapscale::scale", [&](const VmapInfo&, const InDims& d, Stack& args) {
    ++rule_calls;
    return VmapResult{{args[0]}, {d[0]}};
  });
  const Tensor w = rnd({3});
  const Tensor y = vmap([&](const Tensor& t) { return ops::add(t, scale(w, 3.0)); })(rnd({4, 3}));
  EXPECT_EQ(rule_calls, 0);
  EXPECT_EQ(scale.calls, 1);
  EXPECT_THAT(std::vector<int64_t>(y.sizes().begin(), y.sizes().end()), ElementsAre(4, 3));
}

TEST(RegisterVmap, WhatTheRuleReturnsIsChecked) {
  ScaleOp scale;
  const Tensor x = rnd({4, 3});
  auto f = [&](const Tensor& t) { return scale(t, 2.0); };
  {
    auto rule = modes::register_vmap("vmapscale::scale", [](const VmapInfo&, const InDims&, Stack& args) {
      return VmapResult{{args[0], args[0]}, {0, 0}};
    });
    EXPECT_THAT(errorOf([&] { vmap(f)(x); }),
                HasSubstr("the batching rule for vmapscale::scale returned 2 outputs, but the op has 1"));
  }
  {
    auto rule = modes::register_vmap("vmapscale::scale", [](const VmapInfo&, const InDims&, Stack& args) {
      return VmapResult{{args[0]}, {5}};
    });
    EXPECT_THAT(errorOf([&] { vmap(f)(x); }),
                HasSubstr("the batching rule for vmapscale::scale returned out_dim 5 for output 0, a tensor of "
                          "dimensionality 2, so expected -2 <= out_dim < 2"));
  }
  {
    auto rule = modes::register_vmap("vmapscale::scale", [](const VmapInfo&, const InDims&, Stack& args) {
      return VmapResult{{args[0]}, {}};
    });
    EXPECT_THAT(errorOf([&] { vmap(f)(x); }), HasSubstr("returned 0 out_dims for 1 output"));
  }
  EXPECT_EQ(modes::vmap_depth(), 0u);
}

TEST(RegisterVmap, ARuleMustNotCaptureOrReturnBatchedTensorsOfItsLevel) {
  ScaleOp scale;
  Tensor captured;  // a batched tensor of the vmap's level, reached by a way other than the rule's arguments
  auto returns_captured = modes::register_vmap("vmapscale::scale", [&](const VmapInfo&, const InDims&, Stack&) {
    return VmapResult{{captured}, {std::nullopt}};
  });
  auto f = [&](const Tensor& t) {
    captured = t;
    return scale(t, 2.0);
  };
  EXPECT_THAT(errorOf([&] { vmap(f)(rnd({3, 2})); }),
              AllOf(HasSubstr("the batching rule for vmapscale::scale returned (output 0) a batched tensor of vmap "
                              "level"),
                    HasSubstr("a rule returns the values of its level")));
  auto calls_with_captured = modes::register_vmap(
      "vmapscale::scale",
      [&](const VmapInfo&, const InDims& d, Stack&) { return VmapResult{{ops::neg(captured)}, {d[0]}}; },
      /*allow_override=*/true);
  EXPECT_THAT(errorOf([&] { vmap(f)(rnd({3, 2})); }),
              AllOf(HasSubstr("core::neg got a batched tensor of vmap level"),
                    HasSubstr("a rule must not capture batched tensors")));
  EXPECT_EQ(modes::vmap_depth(), 0u);
}

TEST(RegisterVmap, ANonTensorOutputHasNoOutDim) {
  Library lib(Library::DEF, "vmapflag");
  lib.def("flag(Tensor x) -> (Tensor, int)");
  Library cpu(Library::IMPL, "vmapflag", DispatchKey::CPU);
  cpu.impl("flag", [](const Tensor& x) { return std::make_tuple(x, int64_t{1}); });
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("vmapflag::flag");
  auto rule = modes::register_vmap("vmapflag::flag", [](const VmapInfo&, const InDims& d, Stack& args) {
    return VmapResult{{args[0], int64_t{1}}, {d[0], 0}};
  });
  EXPECT_THAT(errorOf([&] {
                vmap([&](const Tensor& t) {
                  Stack s{t};
                  op.callBoxed(s);
                  return s[0].toTensor();
                })(rnd({3, 2}));
              }),
              HasSubstr("returned out_dim 0 for output 1, which is not a tensor (int); its out_dim must be None"));
  EXPECT_THAT(errorOf([] { (void)modes::register_vmap("vmapflag::flag", modes::VmapRule()); }),
              HasSubstr("register_vmap(vmapflag::flag): the rule is empty"));
  EXPECT_THAT(errorOf([] { modes::get_unwrapped(rnd({2})); }),
              HasSubstr("get_unwrapped: the tensor is not a batched tensor"));
}

TEST(RegisterVmap, ASecondRuleNeedsAllowOverride) {
  ScaleOp scale;
  auto id = [](const VmapInfo&, const InDims& d, Stack& args) { return VmapResult{{args[0]}, {d[0]}}; };
  RegistrationHandleRAII first;
  {
    RegistrationOwnerGuard owner("first_bundle@1.0.0");
    first = modes::register_vmap("vmapscale::scale", id);
  }
  EXPECT_THAT(errorOf([&] { (void)modes::register_vmap("vmapscale::scale", id); }),
              AllOf(HasSubstr("vmapscale::scale already has a batching rule, registered by 'first_bundle@1.0.0'"),
                    HasSubstr("Pass allow_override")));
  EXPECT_THAT(errorOf([&] { (void)modes::register_vmap("vmapscale::nope", id); }),
              HasSubstr("no operator named vmapscale::nope has a schema"));
  auto second = modes::register_vmap("vmapscale::scale", id, /*allow_override=*/true);
  EXPECT_THAT(dump("vmapscale::scale"), HasSubstr("vmap batching rule"));
}

TEST(RegisterVmap, RemovingOrDisablingTheRuleFallsBackToTheLoop) {
  ScaleOp scale;
  int rule_calls = 0;
  auto f = [&](const Tensor& t) { return scale(t, 2.0); };
  const Tensor x = rnd({4, 3});
  WarningsCaught warnings;
  modes::reset_vmap_fallback_warnings();
  {
    auto rule = modes::register_vmap("vmapscale::scale", [&](const VmapInfo&, const InDims& d, Stack& args) {
      ++rule_calls;
      Stack s{args[0], args[1]};
      scale.op.callBoxed(s);
      return VmapResult{{s[0]}, {d[0]}};
    });
    EXPECT_TRUE(same(vmap(f)(x), ops::mul(x, 2.0)));
    EXPECT_EQ(rule_calls, 1);
    const OperatorName name = parseOperatorName("vmapscale::scale");
    Dispatcher::singleton().setKernelEnabled(name, DispatchKey::Batched, false);
    scale.calls = 0;
    EXPECT_TRUE(same(vmap(f)(x), ops::mul(x, 2.0)));
    EXPECT_EQ(rule_calls, 1);
    EXPECT_EQ(scale.calls, 4);  // the loop: one call per batch element
    Dispatcher::singleton().setKernelEnabled(name, DispatchKey::Batched, true);
    vmap(f)(x);
    EXPECT_EQ(rule_calls, 2);
  }
  scale.calls = 0;
  EXPECT_TRUE(same(vmap(f)(x), ops::mul(x, 2.0)));
  EXPECT_EQ(scale.calls, 4);
}

// --- The for-loop fallback. --------------------------------------------------------

TEST(VmapFallback, LoopsWarnsOnceAndCanBeTurnedOff) {
  ScaleOp scale;
  WarningsCaught warnings;
  modes::reset_vmap_fallback_warnings();
  const Tensor x = rnd({5, 3});
  auto f = [&](const Tensor& t) { return scale(t, 3.0); };
  EXPECT_TRUE(same(vmap(f)(x), ops::mul(x, 3.0)));
  EXPECT_TRUE(same(vmap(f, 1)(ops::transpose(x, 0, 1)), ops::mul(x, 3.0)));
  EXPECT_EQ(scale.calls, 10);
  EXPECT_THAT(warnings.lines,
              ElementsAre("vmap: no batching rule for vmapscale::scale; running a slow for-loop fallback, 5 calls"));
  modes::set_vmap_fallback_enabled(false);
  const std::string err = errorOf([&] { vmap(f)(x); });
  modes::set_vmap_fallback_enabled(true);
  EXPECT_THAT(err, AllOf(HasSubstr("Batching rule not implemented for vmapscale::scale"),
                         HasSubstr("We could not generate a fallback")));
  EXPECT_TRUE(modes::is_vmap_fallback_enabled());
}

TEST(VmapFallback, InPlaceWritesEachSlice) {
  ScaleOp scale;
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("vmapscale::scale_");
  Tensor x = rnd({4, 3});
  const Tensor before = ops::clone(x), y = rnd({4, 3});
  auto f = [&](const Tensor& a, const Tensor& b) {
    Stack s{a, b};
    op.callBoxed(s);
    EXPECT_TRUE(modes::is_batched(s[0].toTensor()));  // the same batched self comes back
    return s[0].toTensor();
  };
  const Tensor out = vmap(f)(x, y);
  EXPECT_TRUE(same(x, ops::mul(before, y)));
  EXPECT_TRUE(same(out, x));
  EXPECT_EQ(scale.calls, 4);
  // self not batched, other batched: PyTorch's error.
  const Tensor w = rnd({3});
  EXPECT_THAT(errorOf([&] { vmap(f, {std::nullopt, 0})(w, y); }),
              AllOf(HasSubstr("vmap: vmapscale::scale_(x, *extra_args) is not possible"),
                    HasSubstr("`other` being vmapped over but `x` not being vmapped over")));
}

TEST(VmapFallback, RefusesWhatItCannotDo) {
  ScaleOp scale;
  const OperatorHandle same_op = Dispatcher::singleton().findSchemaOrThrow("vmapscale::same");
  const OperatorHandle alias_op = Dispatcher::singleton().findSchemaOrThrow("vmapscale::alias");
  const Tensor x = rnd({3, 2});
  EXPECT_THAT(errorOf([&] {
                vmap([&](const Tensor& t) {
                  Stack s{t, t};
                  same_op.callBoxed(s);
                  return t;
                })(x);
              }),
              AllOf(HasSubstr("Batching rule not implemented for vmapscale::same"),
                    HasSubstr("returns something else")));
  EXPECT_THAT(errorOf([&] {
                vmap([&](const Tensor& t) {
                  Stack s{t};
                  alias_op.callBoxed(s);
                  return s[0].toTensor();
                })(x);
              }),
              HasSubstr("the fallback path doesn't work on out= or view ops"));
  // An in-place op whose result is not its written argument: refused before any
  // slice is written.
  const OperatorHandle fresh = Dispatcher::singleton().findSchemaOrThrow("vmapscale::fresh_");
  Tensor y = ops::ones({3, 2});
  EXPECT_THAT(errorOf([&] {
                vmap([&](const Tensor& t) {
                  Stack s{t};
                  fresh.callBoxed(s);
                  return s[0].toTensor();
                })(y);
              }),
              HasSubstr("its output 0 is not one of them"));
  EXPECT_TRUE(y.equal(ops::ones({3, 2})));
  // core::allclose returns a bool: no rule, and the fallback cannot stack bools.
  EXPECT_THAT(errorOf([&] {
                vmap([&](const Tensor& t) {
                  ops::allclose(t, t);
                  return t;
                })(x);
              }),
              HasSubstr("Batching rule not implemented for core::allclose"));
}

TEST(VmapFallback, ABatchOfZeroHasNothingToStack) {
  ScaleOp scale;
  EXPECT_THAT(errorOf([&] { vmap([&](const Tensor& t) { return scale(t, 2.0); })(ops::zeros({0, 3})); }),
              HasSubstr("the for-loop fallback for vmapscale::scale cannot run a batch of size 0"));
  // A rule has no such limit.
  EXPECT_EQ(vmap([](const Tensor& t) { return ops::mul(t, 2.0); })(ops::zeros({0, 3})).numel(), 0);
}

TEST(VmapFallback, ExplainSaysRuleOrFallback) {
  ScaleOp scale;
  const Tensor x = rnd({3, 2});
  std::string seen;
  vmap([&](const Tensor& t) {
    const Explanation ex = explain(scale.op, Stack{t, 2.0});
    seen = ex.str();
    return t;
  })(x);
  EXPECT_THAT(seen, AllOf(HasSubstr("Batched"), HasSubstr("vmap for-loop fallback"),
                          HasSubstr("no batching rule for vmapscale::scale; for-loop fallback, 3 calls")));
  auto rule = modes::register_vmap("vmapscale::scale", [&](const VmapInfo&, const InDims& d, Stack& args) {
    Stack s{args[0], args[1]};
    scale.op.callBoxed(s);
    return VmapResult{{s[0]}, {d[0]}};
  });
  vmap([&](const Tensor& t) {
    seen = explain(scale.op, Stack{t, 2.0}).str();
    return t;
  })(x);
  EXPECT_THAT(seen, AllOf(HasSubstr("vmap batching rule"), HasSubstr("batching rule with in_dims (0, None)"),
                          HasSubstr("out_dims (0,)")));
}

// --- The core:: ops' rules agree with a loop, the batch dim at every position. ----

struct RuleCase {
  std::string name;
  std::vector<std::vector<int64_t>> shapes;  // logical shapes
  std::vector<bool> mapped;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  ScalarType dtype = ScalarType::Float;
  std::vector<ScalarType> dtypes = {};  // per input, when they differ
  bool view_only_at_front = false;      // core::view: a non-contiguous slice cannot be viewed
};

void PrintTo(const RuleCase& c, std::ostream* os) { *os << c.name; }

class CoreBatchingRules : public ::testing::TestWithParam<RuleCase> {};

TEST_P(CoreBatchingRules, AgreeWithTheLoop) {
  const RuleCase& c = GetParam();
  constexpr int64_t B = 3;
  int64_t max_rank = 0;
  for (const auto& s : c.shapes) max_rank = std::max<int64_t>(max_rank, static_cast<int64_t>(s.size()));
  for (int64_t p = 0; p <= max_rank; ++p) {
    std::vector<Tensor> in;
    std::vector<Dim> dims;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      std::vector<int64_t> shape = c.shapes[i];
      const ScalarType dt = c.dtypes.empty() ? c.dtype : c.dtypes[i];
      if (!c.mapped[i]) {
        in.push_back(isFloatingType(dt) ? ops::add(rnd(shape, dt), 0.5) : ops::to(ops::mul(rnd(shape), 10.0), dt));
        dims.push_back(std::nullopt);
        continue;
      }
      const int64_t at = std::min<int64_t>(p, static_cast<int64_t>(shape.size()));
      shape.insert(shape.begin() + at, B);
      in.push_back(isFloatingType(dt) ? ops::add(rnd(shape, dt), 0.5) : ops::to(ops::mul(rnd(shape), 10.0), dt));
      dims.push_back(at);
    }
    const Tensor want_or_error = [&] {
      try {
        return loop(c.fn, in, dims);
      } catch (const Error&) {
        return Tensor();
      }
    }();
    modes::set_vmap_fallback_enabled(false);  // a rule must serve: the fallback would throw
    Tensor got;
    std::string err;
    try {
      got = vmap([&](const std::vector<Tensor>& ts) { return c.fn(ts); }, {DimEntry(dims)})(in);
    } catch (const Error& e) {
      err = e.what();
    }
    modes::set_vmap_fallback_enabled(true);
    if (!want_or_error.defined()) {
      EXPECT_FALSE(err.empty()) << c.name << ": the loop failed at batch dim " << p << " but vmap did not";
      EXPECT_TRUE(c.view_only_at_front) << c.name << ": an unexpected failure of the loop at batch dim " << p;
      continue;
    }
    ASSERT_TRUE(err.empty()) << c.name << " at batch dim " << p << ": " << err;
    EXPECT_TRUE(same(got, want_or_error)) << c.name << " at batch dim " << p << ":\n"
                                          << got.str() << "\nvs the loop:\n" << want_or_error.str();
  }
}

using V = const std::vector<Tensor>&;
const RuleCase kRuleCases[] = {
    {"add", {{2, 4}, {2, 4}}, {true, true}, [](V t) { return ops::add(t[0], t[1], 2); }},
    {"add_broadcast", {{2, 4}, {4}}, {true, true}, [](V t) { return ops::add(t[0], t[1]); }},
    {"add_unbatched_other", {{2, 4}, {4}}, {true, false}, [](V t) { return ops::add(t[0], t[1]); }},
    {"sub_rank_mismatch", {{4}, {3, 4}}, {true, true}, [](V t) { return ops::sub(t[0], t[1]); }},
    {"mul", {{3}, {3}}, {true, false}, [](V t) { return ops::mul(t[0], t[1]); }},
    {"div", {{2, 2}, {2, 2}}, {false, true}, [](V t) { return ops::div(t[0], t[1]); }},
    {"mul_zero_dim_promotion", {{}, {3}}, {true, true}, [](V t) { return ops::mul(t[0], t[1]); },
     ScalarType::Float, {ScalarType::Double, ScalarType::Float}},
    {"add_int_float", {{3}, {3}}, {true, true}, [](V t) { return ops::add(t[0], t[1]); }, ScalarType::Float,
     {ScalarType::Long, ScalarType::Float}},
    {"add_scalar", {{2, 3}}, {true}, [](V t) { return ops::add(t[0], 1.5); }},
    {"sub_scalar", {{2, 3}}, {true}, [](V t) { return ops::sub(t[0], 1.5, 2); }},
    {"mul_scalar", {{2, 3}}, {true}, [](V t) { return ops::mul(t[0], 3.0); }},
    {"div_scalar", {{2, 3}}, {true}, [](V t) { return ops::div(t[0], 4.0); }},
    {"neg", {{2, 3}}, {true}, [](V t) { return ops::neg(t[0]); }},
    {"sin", {{2, 3}}, {true}, [](V t) { return ops::sin(t[0]); }},
    {"cos", {{3}}, {true}, [](V t) { return ops::cos(t[0]); }},
    {"exp", {{}}, {true}, [](V t) { return ops::exp(t[0]); }},
    {"sum", {{2, 3}}, {true}, [](V t) { return ops::sum(t[0]); }},
    {"sum_0d", {{}}, {true}, [](V t) { return ops::sum(t[0]); }},
    {"sum_int", {{4}}, {true}, [](V t) { return ops::sum(t[0]); }, ScalarType::Int},
    {"sum_dim", {{2, 3, 4}}, {true}, [](V t) { return ops::sum(t[0], std::vector<int64_t>{-1, 0}); }},
    {"sum_dim_keepdim", {{2, 3}}, {true}, [](V t) { return ops::sum(t[0], std::vector<int64_t>{1}, true); }},
    {"sum_dim_none", {{2, 3}}, {true}, [](V t) { return ops::sum(t[0], std::nullopt, false, ScalarType::Double); }},
    {"matmul_dot", {{3}, {3}}, {true, true}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"matmul_mv", {{2, 3}, {3}}, {true, true}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"matmul_vm", {{3}, {3, 2}}, {true, true}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"matmul_mm", {{2, 3}, {3, 4}}, {true, true}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"matmul_mm_unbatched_w", {{2, 3}, {3, 4}}, {true, false}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"matmul_unbatched_x", {{2, 3}, {3, 4}}, {false, true}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"matmul_bmm_broadcast", {{5, 2, 3}, {3, 4}}, {true, true}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"matmul_vec_batched_mat", {{3}, {2, 3, 4}}, {false, true}, [](V t) { return ops::matmul(t[0], t[1]); }},
    {"t", {{2, 3}}, {true}, [](V t) { return ops::t(t[0]); }},
    {"t_1d", {{3}}, {true}, [](V t) { return ops::t(t[0]); }},
    {"transpose", {{2, 3, 4}}, {true}, [](V t) { return ops::transpose(t[0], 0, -1); }},
    {"movedim", {{2, 3, 4}}, {true}, [](V t) { return ops::movedim(t[0], 2, 0); }},
    {"unsqueeze", {{2, 3}}, {true}, [](V t) { return ops::unsqueeze(t[0], -1); }},
    {"squeeze", {{1, 3, 1}}, {true}, [](V t) { return ops::squeeze(t[0]); }},
    {"squeeze_dim", {{2, 1}}, {true}, [](V t) { return ops::squeeze(t[0], 1); }},
    {"select", {{4, 3}}, {true}, [](V t) { return ops::select(t[0], 1, -1); }},
    {"narrow", {{5, 3}}, {true}, [](V t) { return ops::narrow(t[0], 0, 1, 3); }},
    {"expand", {{3, 1}}, {true}, [](V t) { return ops::expand(t[0], {2, 3, 4}); }},
    {"reshape", {{2, 3}}, {true}, [](V t) { return ops::reshape(t[0], {3, -1}); }},
    {"view", {{2, 3}}, {true}, [](V t) { return ops::view(t[0], {6}); }, ScalarType::Float, {}, true},
    {"stack", {{2, 3}, {2, 3}}, {true, false}, [](V t) { return ops::stack({t[0], t[1]}, 1); }},
    {"cat", {{2, 3}, {2, 1}}, {false, true}, [](V t) { return ops::cat({t[0], t[1]}, -1); }},
    {"to_dtype", {{2, 3}}, {true}, [](V t) { return ops::to(t[0], ScalarType::Double); }},
    {"contiguous", {{2, 3}}, {true}, [](V t) { return ops::contiguous(ops::transpose(t[0], 0, 1)); }},
    {"clone", {{2, 3}}, {true}, [](V t) { return ops::clone(t[0]); }},
    // As integers: uninitialized floats may hold NaN or inf, which times 0 stays NaN.
    {"empty_like_zeroed", {{2, 3}}, {true},
     [](V t) { return ops::mul(ops::empty_like(t[0], ScalarType::Long), Scalar(int64_t{0})); }},
    {"copy_into_clone", {{2, 3}, {3}}, {true, true},
     [](V t) {
       Tensor dst = ops::clone(t[0]);
       ops::copy_(dst, t[1]);
       return dst;
     }},
    {"copy_unbatched_src_into_clone", {{2, 3}, {2, 1}}, {true, false},
     [](V t) {
       Tensor dst = ops::clone(t[0]);
       ops::copy_(dst, t[1]);
       return dst;
     }},
    {"add_bool_int", {{3}, {3}}, {true, false}, [](V t) { return ops::add(t[0], t[1]); }, ScalarType::Float,
     {ScalarType::Bool, ScalarType::Int}},
    {"mul_int_zero_dim_bool", {{}, {3}}, {true, true}, [](V t) { return ops::mul(t[0], t[1]); }, ScalarType::Float,
     {ScalarType::Long, ScalarType::Bool}},
    {"fill_into_clone", {{2, 3}}, {true},
     [](V t) {
       Tensor dst = ops::clone(t[0]);
       ops::fill_(dst, 4.5);
       return ops::add(dst, t[0]);
     }},
    {"zero_into_clone", {{2, 3}}, {true},
     [](V t) {
       Tensor dst = ops::clone(t[0]);
       ops::zero_(dst);
       return ops::add(dst, t[0]);
     }},
};

INSTANTIATE_TEST_SUITE_P(EveryCoreOp, CoreBatchingRules, ::testing::ValuesIn(kRuleCases),
                         [](const ::testing::TestParamInfo<RuleCase>& info) { return info.param.name; });

// Where each example's call fails, vmap fails with the same message: a rule must not
// make a call valid that is not (torch.vmap is the loop, stacked).
TEST(CoreBatchingRules, FailWhereTheLoopFailsWithItsMessage) {
  struct Case {
    std::string name;
    std::vector<Tensor> in;
    std::vector<Dim> dims;
    std::function<Tensor(const std::vector<Tensor>&)> fn;
  };
  auto copy_into_clone = [](V t) {
    Tensor dst = ops::clone(t[0]);
    ops::copy_(dst, t[1]);
    return dst;
  };
  const Tensor bools = from_vector<bool>({true, false, true});
  const Case cases[] = {
      // An unbatched src with one dim more than each example's self: its first dim
      // lines up with the batch, which the physical [B, 3] self would take.
      {"copy_src_of_more_dims",
       {ops::zeros({2, 3}), from_vector<float>({1, 2}, std::vector<int64_t>{2, 1})},
       {0, std::nullopt},
       copy_into_clone},
      {"copy_src_into_zero_dim", {ops::zeros({3}), from_vector<float>({1, 2, 3})}, {0, std::nullopt}, copy_into_clone},
      {"copy_batched_src_of_more_dims", {ops::zeros({2, 3}), ops::ones({2, 4, 3})}, {0, 0}, copy_into_clone},
      {"copy_batched_src_mismatch", {ops::zeros({2, 3}), ops::ones({2, 2})}, {0, 0}, copy_into_clone},
      // sub refuses a bool operand; the rule's promotion must not hide it.
      {"sub_bool_int", {bools, from_vector<int32_t>({3, -2, 1})}, {0, 0},
       [](V t) { return ops::sub(t[0], t[1]); }},
      {"sub_bool_float_unbatched", {bools.reshape({3, 1}), from_vector<float>({1, 2})}, {0, std::nullopt},
       [](V t) { return ops::sub(t[0], t[1]); }},
  };
  for (const Case& c : cases) {
    std::string want;
    try {
      loop(c.fn, c.in, c.dims);
    } catch (const Error& e) {
      want = e.what();
    }
    ASSERT_FALSE(want.empty()) << c.name << ": the loop did not fail";
    modes::set_vmap_fallback_enabled(false);  // the rule must be what fails
    std::string got;
    try {
      vmap([&](const std::vector<Tensor>& ts) { return c.fn(ts); }, {DimEntry(c.dims)})(c.in);
    } catch (const Error& e) {
      got = e.what();
    }
    modes::set_vmap_fallback_enabled(true);
    EXPECT_EQ(got, want) << c.name;
  }
}

TEST(CoreBatchingRulesList, EveryCoreOpWithATensorArgumentHasARuleButAllclose) {
  std::vector<std::string> without;
  const std::vector<std::string> with = modes::core_ops_with_batching_rules();
  for (const OperatorName& name : Dispatcher::singleton().operatorNames()) {
    if (name.name.rfind("core::", 0) != 0) continue;  // NOLINT
    const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow(name.str());
    bool has_tensor = false;
    for (const Argument& a : op.schema().arguments()) has_tensor = has_tensor || a.type->str().find("Tensor") != std::string::npos;
    if (!has_tensor && name.str() != "core::rand") continue;
    if (std::find(with.begin(), with.end(), name.str()) == with.end()) without.push_back(name.str());
  }
  // allclose returns a bool per batch element: no rule, and the fallback refuses it
  // (VmapFallback.RefusesWhatItCannotDo).
  EXPECT_THAT(without, ElementsAre("core::allclose"));
}

TEST(CoreBatchingRulesList, ExpandRefusesMinusOneInANewDim) {
  EXPECT_THAT(errorOf([] { vmap([](const Tensor& t) { return ops::expand(t, {-1, 3}); })(rnd({4, 3})); }),
              HasSubstr("isn't allowed in a leading, non-existing dimension 0"));
}

// cat skips an element whose logical shape is [0], batched or not, as the plain op
// does; sum over a 0-d slice's one dim given twice is the plain op's error.
TEST(CoreBatchingRulesList, CatSkipsLegacyEmptyTensorsAndSumChecksRepeatedDims) {
  const Tensor x = rnd({3, 2, 4});
  const Tensor r = vmap([](const Tensor& t) { return ops::cat({t, ops::zeros({0})}, 0); })(x);
  EXPECT_TRUE(same(r, x));
  const Tensor empties = ops::zeros({3, 0});
  const Tensor r2 = vmap([](const Tensor& t, const Tensor& e) { return ops::cat({e, t}, 1); })(x, empties);
  EXPECT_TRUE(same(r2, x));
  // A skipped element still takes part in the result's dtype.
  const Tensor r3 = vmap([](const Tensor& t) { return ops::cat({t, ops::zeros({0}, ScalarType::Double)}, 0); })(x);
  EXPECT_EQ(r3.dtype(), ScalarType::Double);
  EXPECT_EQ(ops::cat({x.select(0, 0), ops::zeros({0}, ScalarType::Double)}, 0).dtype(), ScalarType::Double);
  const Tensor s = rnd({3});
  EXPECT_THAT(errorOf([&] { vmap([](const Tensor& t) { return ops::sum(t, std::vector<int64_t>{0, -1}); })(s); }),
              HasSubstr("dim 0 appears multiple times"));
  EXPECT_TRUE(same(vmap([](const Tensor& t) { return ops::sum(t, std::vector<int64_t>{0}); })(s), s));
}

TEST(CoreBatchingRulesList, FactoriesGiveUnbatchedResults) {
  const Tensor y = vmap([](const Tensor& t) { return ops::add(t, ops::ones({3})); })(ops::zeros({2, 3}));
  EXPECT_TRUE(same(y, ops::ones({2, 3})));
}

// --- The seeds' examples. -------------------------------------------------------------

TEST(VmapSeeds, NumpyCubeHasTwoOutputsAndItsRuleMovesTheBatchDim) {
  Library lib(Library::DEF, "vmapseed");
  lib.def("numpy_cube(Tensor x) -> (Tensor, Tensor)");
  Library cpu(Library::IMPL, "vmapseed", DispatchKey::CPU);
  cpu.impl("numpy_cube", [](const Tensor& x) {
    return std::make_tuple(ops::mul(ops::mul(x, x), x), ops::mul(ops::mul(x, x), 3.0));
  });
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("vmapseed::numpy_cube");
  auto call = [op](const Tensor& x) {
    Stack s{x};
    op.callBoxed(s);
    return std::make_tuple(s[0].toTensor(), s[1].toTensor());
  };
  // def numpy_cube_vmap(info, in_dims, x): return numpy_cube(x), (in_dims[0], in_dims[0])
  auto rule = modes::register_vmap("vmapseed::numpy_cube", [&](const VmapInfo&, const InDims& in_dims, Stack& args) {
    auto [a, b] = call(args[0].toTensor());
    return VmapResult{{a, b}, {in_dims[0], in_dims[0]}};
  });
  const Tensor x = rnd({3});
  auto [cube, dx] = vmap(call)(x);
  EXPECT_TRUE(same(cube, ops::mul(ops::mul(x, x), x)));
  EXPECT_TRUE(same(dx, ops::mul(ops::mul(x, x), 3.0)));
  const Tensor x2 = rnd({2, 3});  // mapped over dim 1: the rule keeps it there, vmap moves it to 0
  auto [c2, d2] = vmap(call, 1)(x2);
  EXPECT_TRUE(same(c2, ops::transpose(ops::mul(ops::mul(x2, x2), x2), 0, 1)));
  EXPECT_TRUE(same(d2, ops::transpose(ops::mul(ops::mul(x2, x2), 3.0), 0, 1)));
}

TEST(VmapSeeds, NumpyMulMovesAndUnsqueezes) {
  Library lib(Library::DEF, "vmapseed2");
  lib.def("numpy_mul(Tensor x, Tensor y) -> Tensor");
  Library cpu(Library::IMPL, "vmapseed2", DispatchKey::CPU);
  int kernel_calls = 0;
  cpu.impl("numpy_mul", [&](const Tensor& x, const Tensor& y) {
    ++kernel_calls;
    return ops::mul(x, y);
  });
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("vmapseed2::numpy_mul");
  // x = x.movedim(x_bdim, -1) if x_bdim is not None else x.unsqueeze(-1); the same
  // for y; result = (x * y).movedim(-1, 0); return result, 0
  auto rule = modes::register_vmap("vmapseed2::numpy_mul", [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    Tensor x = args[0].toTensor(), y = args[1].toTensor();
    x = in_dims[0] ? ops::movedim(x, *in_dims[0], -1) : ops::unsqueeze(x, -1);
    y = in_dims[1] ? ops::movedim(y, *in_dims[1], -1) : ops::unsqueeze(y, -1);
    return VmapResult{{ops::movedim(ops::mul(x, y), -1, 0)}, {0}};
  });
  auto call = [op](const Tensor& x, const Tensor& y) {
    Stack s{x, y};
    op.callBoxed(s);
    return s[0].toTensor();
  };
  const Tensor x = rnd({3}), y = rnd({3});
  EXPECT_TRUE(same(vmap(call)(x, y), ops::mul(x, y)));
  const Tensor w = rnd({4});
  EXPECT_TRUE(same(vmap(call, {0, std::nullopt})(x, w), ops::mul(ops::unsqueeze(x, 1), w)));
  EXPECT_EQ(kernel_calls, 0);  // the rule computes with core ops, not the kernel
}

}  // namespace
}  // namespace strata
