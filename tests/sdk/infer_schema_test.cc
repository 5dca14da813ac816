// infer_schema: C++ kernel types to schemas.
#include "strata/infer_schema.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

Tensor muladd(const Tensor& a, const Tensor&, double) { return a; }

TEST(InferSchemaTest, PlainKernel) {
  EXPECT_EQ(infer_schema<decltype(muladd)>("mylib::muladd").str(),
            "mylib::muladd(Tensor _0, Tensor _1, float _2) -> Tensor");
  EXPECT_EQ(infer_schema_of(&muladd).signatureStr(), "(Tensor _0, Tensor _1, float _2) -> Tensor");
}

TEST(InferSchemaTest, EverySupportedType) {
  using Sig = std::tuple<Tensor, int64_t>(Tensor, const Tensor&, Tensor&, int64_t, double, bool, std::string,
                                          std::string_view, Scalar, ScalarType, Device, std::optional<Tensor>,
                                          std::optional<int64_t>, std::vector<int64_t>, ArrayRef<double>,
                                          const std::vector<Tensor>&, std::vector<std::optional<Tensor>>, Tensor&);
  EXPECT_EQ(infer_schema<Sig>("mylib::all").str(),
            "mylib::all(Tensor _0, Tensor _1, Tensor(a!) _2, int _3, float _4, bool _5, str _6, str _7, "
            "Scalar _8, ScalarType _9, Device _10, Tensor? _11, int? _12, int[] _13, float[] _14, Tensor[] _15, "
            "Tensor?[] _16, Tensor(b!) _17) -> (Tensor, int)");
}

TEST(InferSchemaTest, VoidReturnsNothingAndMutationIsRecorded) {
  const FunctionSchema s = infer_schema<void(Tensor&, const Tensor&)>("mylib::add_");
  EXPECT_EQ(s.str(), "mylib::add_(Tensor(a!) _0, Tensor _1) -> ()");
  EXPECT_TRUE(s.is_mutable());
}

TEST(InferSchemaTest, LambdasFunctorsAndALeadingKeySet) {
  auto lambda = [](const Tensor& x, int64_t) { return x; };
  EXPECT_EQ(infer_schema_of(lambda).signatureStr(), "(Tensor _0, int _1) -> Tensor");
  struct Functor {
    int64_t state = 0;
    Tensor operator()(DispatchKeySet, const Tensor& x) const { return x; }
  };
  EXPECT_EQ(infer_schema<Functor>().signatureStr(), "(Tensor _0) -> Tensor");
}

TEST(InferSchemaTest, InferredSchemasParseBack) {
  const FunctionSchema s = infer_schema<std::tuple<Tensor, Tensor>(const Tensor&, std::optional<double>)>("m::f");
  EXPECT_EQ(parseSchema(s.str()), s);
}

}  // namespace
}  // namespace strata
