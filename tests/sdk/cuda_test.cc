// CUDA tensors. Without a device these check the "CUDA is not available" error
// and skip the rest; with one (see the README's GPU notes) they exercise it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/cuda.h"
#include "strata/dlpack.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const Device kCuda(DeviceType::CUDA, 0);

TEST(CudaTest, UnavailableIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(cuda::unavailable_reason().empty());
  EXPECT_EQ(cuda::device_count(), 0);
  for (auto make : {+[] { return empty({2}, TensorOptions(kCuda)); }, +[] { return zeros({2}).to(kCuda); }}) {
    try {
      make();
      ADD_FAILURE() << "allocated on CUDA without a device";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Device);
      EXPECT_THAT(e.what(), HasSubstr("CUDA is not available: " + cuda::unavailable_reason()));
    }
  }
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

TEST_F(CudaDeviceTest, FactoriesFillOnTheDevice) {
  const Tensor z = zeros({3}, TensorOptions(kCuda));
  EXPECT_TRUE(z.is_cuda());
  EXPECT_EQ(z.device().index, 0);
  EXPECT_EQ(z.key_set(), DispatchKeySet(DispatchKey::CUDA));
  EXPECT_THAT(z.to_vector<float>(), ElementsAre(0, 0, 0));
  EXPECT_THAT(full({2}, 2.5, TensorOptions(kFloat64).with_device(kCuda)).to_vector<double>(), ElementsAre(2.5, 2.5));
  EXPECT_THAT(ones({2}, TensorOptions(kFloat16).with_device(kCuda)).to(kFloat32).to_vector<float>(), ElementsAre(1, 1));
  EXPECT_THAT(arange(4, TensorOptions(kInt64).with_device(Device(DeviceType::CUDA))).to_vector<int64_t>(),
              ElementsAre(0, 1, 2, 3));
}

TEST_F(CudaDeviceTest, CopiesAcrossDevicesWithStridesAndDtypes) {
  const Tensor host = arange(6, kFloat32).view({2, 3});
  const Tensor dev = host.to(kCuda);
  EXPECT_TRUE(dev.equal(host));
  const Tensor t = dev.transpose(0, 1);  // non-contiguous device view
  EXPECT_THAT(t.to(kCPU).to_vector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(t.contiguous().to_vector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  const Tensor d2 = empty({3, 2}, TensorOptions(kFloat64).with_device(kCuda));
  d2.transpose(0, 1).copy_(host);  // non-contiguous device destination, converting
  EXPECT_THAT(d2.to_vector<double>(), ElementsAre(0, 3, 1, 4, 2, 5));
  dev.select(0, 1).fill_(7);
  EXPECT_THAT(dev.to_vector<float>(), ElementsAre(0, 1, 2, 7, 7, 7));
  EXPECT_EQ(dev.select(0, 0).select(0, 2).item().toDouble(), 2.0);
}

TEST_F(CudaDeviceTest, DLPackExportsTheDevicePointer) {
  const Tensor dev = ones({4}, TensorOptions(kCuda));
  DLManagedTensor* m = toDLPack(dev);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.data, dev.data_ptr());
  const Tensor back = fromDLPack(m);
  EXPECT_TRUE(back.is_cuda());
  EXPECT_TRUE(back.equal(dev));
}

}  // namespace
}  // namespace strata
