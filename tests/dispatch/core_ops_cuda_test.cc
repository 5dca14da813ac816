// The core:: ops' CUDA kernels (elementwise ops and casts), checked against the CPU
// kernels. Skipped without a device; see the README's GPU notes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/strata.h"

namespace strata {
namespace {

const Device kCuda(DeviceType::CUDA, 0);

class CoreOpsCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

TEST(CoreOpsCuda, KernelsAreRegisteredWhenBuiltWithCuda) {
  if (!cuda::is_built()) GTEST_SKIP() << "built without CUDA";
  const auto table = Dispatcher::singleton().computedTable(parseOperatorName("core::add.Tensor"));
  bool found = false;
  for (const SlotInfo& s : table) {
    if (s.key == DispatchKey::CUDA) {
      found = true;
      EXPECT_EQ(s.source, "kernel");
      EXPECT_EQ(s.owner, "builtin");
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(CoreOpsCudaTest, ElementwiseOpsMatchTheCpu) {
  const Tensor a = arange(6, kFloat32).view({2, 3});
  const Tensor b = from_vector<float>({1.5f, -2.0f, 3.0f});
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  EXPECT_TRUE(ops::add(da, db, 2).is_cuda());
  EXPECT_TRUE(ops::allclose(ops::add(da, db, 2).to(kCPU), ops::add(a, b, 2)));
  EXPECT_TRUE(ops::allclose(ops::sub(da, 1.5).to(kCPU), ops::sub(a, 1.5)));
  EXPECT_TRUE(ops::allclose(ops::mul(da, db).to(kCPU), ops::mul(a, b)));
  EXPECT_TRUE(ops::allclose(ops::div(da, db).to(kCPU), ops::div(a, b)));
  EXPECT_TRUE(ops::allclose(ops::neg(da).to(kCPU), ops::neg(a)));
  for (auto f : {&ops::sin, &ops::cos, &ops::exp}) EXPECT_TRUE(ops::allclose(f(da).to(kCPU), f(a), 1e-5, 1e-6));
  const Tensor i = arange(4, kInt64);
  EXPECT_TRUE(ops::div(i.to(kCuda), 2).to(kCPU).equal(ops::div(i, 2)));
  EXPECT_EQ(ops::mul(ones({2}, kFloat16).to(kCuda), 2.5).dtype(), kFloat16);
}

TEST_F(CoreOpsCudaTest, CastsBetweenEveryDtype) {
  // Non-negative and in range of every dtype: a negative float to uint8 is undefined in C++.
  const Tensor x = from_vector<float>({1.5f, 0.0f, 2.25f, 100.0f});
  for (ScalarType from : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt8, kUInt8, kBool}) {
    for (ScalarType to : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt8, kUInt8, kBool}) {
      const Tensor src = x.to(from);
      EXPECT_TRUE(ops::to(src.to(kCuda), to).to(kCPU).equal(src.to(to))) << toString(from) << " -> " << toString(to);
    }
  }
}

}  // namespace
}  // namespace strata
