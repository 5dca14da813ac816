// Devices, dtypes and dispatch key sets: the small value types.
#include "strata/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/dispatch_key.h"
#include "strata/scalar_type.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, ParsesAndPrints) {
  EXPECT_EQ(Device("cpu"), kCPU);
  EXPECT_EQ(Device("meta"), kMeta);
  EXPECT_EQ(Device("cuda"), Device(DeviceType::CUDA, -1));
  EXPECT_EQ(Device("cuda:3"), Device(DeviceType::CUDA, 3));
  EXPECT_EQ(Device("cuda:3").str(), "cuda:3");
  EXPECT_EQ(Device("cpu:0"), kCPU);  // torch accepts cpu:0 and it means cpu
  EXPECT_EQ(Device("privateuse1:1").str(), "privateuse1:1");
}

TEST(DeviceTest, BadSpecsNameTheStringAndTheReason) {
  for (const char* bad : {"gpu", "", "cuda:", "cuda:x", "cuda:-1", "cuda:200", "cuda:1x", "cpu:1", "meta:2"}) {
    try {
      Device d{std::string_view(bad)};
      ADD_FAILURE() << "parsed " << bad << " as " << d;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Value);
      EXPECT_THAT(e.what(), HasSubstr(std::string("invalid device '") + bad + "'"));
    }
  }
}

TEST(DeviceTest, DevicesWithoutAnAllocatorRefuse) {
  try {
    empty({2}, TensorOptions(Device(DeviceType::PrivateUse1, 0)));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_THAT(e.what(), HasSubstr("no allocator is registered"));
  }
}

TEST(ScalarTypeTest, NamesSizesAndCodes) {
  EXPECT_STREQ(toString(kBFloat16), "bfloat16");
  EXPECT_EQ(scalarTypeFromString("float"), kFloat32);
  EXPECT_EQ(scalarTypeFromString("half"), kFloat16);
  EXPECT_EQ(scalarTypeFromString("long"), kInt64);
  EXPECT_EQ(scalarTypeFromString("complex64"), std::nullopt);
  EXPECT_EQ(elementSize(kBool), 1u);
  EXPECT_EQ(elementSize(kBFloat16), 2u);
  EXPECT_EQ(elementSize(kFloat64), 8u);
  EXPECT_EQ(static_cast<int>(kFloat32), 6);  // PyTorch's codes
  EXPECT_TRUE(isValidScalarTypeCode(15));
  EXPECT_FALSE(isValidScalarTypeCode(2));  // int16: not a strata dtype
  EXPECT_TRUE(isFloatingType(kFloat16));
  EXPECT_FALSE(isFloatingType(kInt8));
}

TEST(DispatchKeySetTest, HighestBitRunsInPyTorchsOrder) {
  // See Note [Dispatch key order]: each key outranks every key after it.
  const DispatchKey order[] = {DispatchKey::Batched, DispatchKey::AutocastPrivateUse1, DispatchKey::AutocastCUDA, DispatchKey::AutocastCPU,
                               DispatchKey::AutogradCUDA, DispatchKey::AutogradCPU, DispatchKey::AutogradMeta,
                               DispatchKey::Mode,        DispatchKey::Meta,         DispatchKey::PrivateUse1,
                               DispatchKey::CUDA,        DispatchKey::CPU};
  DispatchKeySet all;
  for (DispatchKey k : order) all = all.add(k);
  for (DispatchKey k : order) {
    EXPECT_EQ(all.highestPriorityKey(), k);
    all = all.remove(k);
  }
  EXPECT_TRUE(all.empty());
  EXPECT_EQ(all.highestPriorityKey(), DispatchKey::Undefined);
}

TEST(DispatchKeySetTest, SetAlgebraAndPrinting) {
  constexpr DispatchKeySet cpu_grad{DispatchKey::CPU, DispatchKey::AutogradCPU};
  static_assert(cpu_grad.has(DispatchKey::CPU) && !cpu_grad.has(DispatchKey::CUDA));
  EXPECT_EQ(cpu_grad.str(), "DispatchKeySet(AutogradCPU, CPU)");
  EXPECT_EQ((cpu_grad - DispatchKeySet(DispatchKey::AutogradCPU)), DispatchKeySet(DispatchKey::CPU));
  EXPECT_EQ((cpu_grad & DispatchKeySet(DispatchKey::CPU)).highestPriorityKey(), DispatchKey::CPU);
  // Everything at or below Mode: the mask a Mode-level kernel redispatches under.
  const DispatchKeySet below = DispatchKeySet::fullUpTo(DispatchKey::Mode);
  EXPECT_TRUE(below.has(DispatchKey::Mode));
  EXPECT_TRUE(below.has(DispatchKey::CPU));
  EXPECT_FALSE(below.has(DispatchKey::AutogradMeta));
  EXPECT_EQ(DispatchKeySet(DispatchKey::Undefined), DispatchKeySet());
  EXPECT_EQ(backendKey(DeviceType::Meta), DispatchKey::Meta);
  EXPECT_EQ(autogradKey(DeviceType::CUDA), DispatchKey::AutogradCUDA);
}

}  // namespace
}  // namespace strata
