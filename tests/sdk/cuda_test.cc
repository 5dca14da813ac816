// CUDA tensors. Without a device these check the "CUDA is not available" error
// and skip the rest; with one (see the README's GPU notes) they exercise it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "strata/cuda.h"
#include "strata/dlpack.h"
#include "strata/ops.h"
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

TEST(CudaTest, WithoutADeviceStreamsRefuseAndMemoryStatsAreZero) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    cuda::getCurrentStream();
    ADD_FAILURE() << "a current stream without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_THAT(e.what(), HasSubstr("CUDA is not available: "));
  }
  EXPECT_THROW(cuda::getStreamFromPool(), Error);
  EXPECT_THROW(cuda::synchronize(), Error);
  const cuda::MemoryStats st = cuda::memory_stats();
  EXPECT_EQ(st.device_mallocs, 0u);
  EXPECT_EQ(st.reserved_bytes, 0u);
  EXPECT_EQ(st.str(), "allocated 0 B (peak 0 B), reserved 0 B (peak 0 B) in 0 segments; 0 allocations, 0 cudaMalloc, "
                      "0 cudaFree, 0 out of memory");
  cuda::empty_cache();  // nothing to do, and no error
  cuda::reset_peak_memory_stats();
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

TEST_F(CudaDeviceTest, TheCurrentStreamIsPerThreadAndGuarded) {
  const cuda::Stream def = cuda::getCurrentStream(0);
  EXPECT_TRUE(def.is_default());
  EXPECT_EQ(def, cuda::getDefaultStream(0));
  const cuda::Stream s = cuda::getStreamFromPool(0);
  EXPECT_FALSE(s.is_default());
  EXPECT_EQ(s.device_index(), 0);
  {
    cuda::StreamGuard guard(s);
    EXPECT_EQ(cuda::getCurrentStream(0), s);
    std::thread([&] { EXPECT_TRUE(cuda::getCurrentStream(0).is_default()); }).join();
  }
  EXPECT_EQ(cuda::getCurrentStream(0), def);
  EXPECT_THROW(cuda::getCurrentStream(cuda::device_count()), Error);
}

TEST_F(CudaDeviceTest, OpsCastsAndCopiesRunOnTheCurrentStream) {
  const cuda::Stream s = cuda::getStreamFromPool(0);
  cuda::StreamGuard guard(s);
  constexpr int64_t n = (1 << 20) + 3;  // a tail past the last whole vector
  const Tensor a = arange(n, kFloat32).to(kCuda);
  const Tensor b = ones({n}, TensorOptions(kCuda));
  const Tensor sum = ops::add(a, b, 2);
  // The copy to the host waits for this stream (a non-blocking one: the default
  // stream would not order it).
  EXPECT_TRUE(ops::allclose(sum.to(kCPU), ops::add(arange(n, kFloat32), 2.0)));
  EXPECT_TRUE(s.query());
  const Tensor half = sum.to(kFloat16);
  EXPECT_TRUE(half.to(kFloat32).to(kCPU).equal(ops::add(arange(n, kFloat32), 2.0).to(kFloat16).to(kFloat32)));
}

TEST_F(CudaDeviceTest, KernelsTakeUnalignedViewsAndShortTails) {
  for (int64_t n : {1, 3, 4, 5, 1003}) {
    const Tensor host = ops::mul(arange(n + 1, kFloat32), 0.5);
    const Tensor dev = host.to(kCuda);
    // Starting one float in: 4-byte aligned, not 16: the one-element-at-a-time path.
    const Tensor hv = host.slice(0, 1, n + 1), dv = dev.slice(0, 1, n + 1);
    EXPECT_TRUE(ops::allclose(ops::add(dv, dv).to(kCPU), ops::add(hv, hv))) << n;
    EXPECT_TRUE(ops::allclose(ops::neg(dv).to(kCPU), ops::neg(hv))) << n;
    EXPECT_TRUE(dv.to(kFloat64).to(kCPU).equal(hv.to(kFloat64))) << n;
    EXPECT_TRUE(dev.to(kBFloat16).to(kCPU).equal(host.to(kBFloat16))) << n;
  }
}

TEST_F(CudaDeviceTest, TheAllocatorReusesMemoryInSteadyState) {
  constexpr int64_t n = 1 << 20;
  const Tensor a = ones({n}, TensorOptions(kCuda)), b = ones({n}, TensorOptions(kCuda));
  for (int i = 0; i < 3; ++i) ops::add(a, b);  // warm: the result's block is cached
  const cuda::MemoryStats before = cuda::memory_stats(0);
  for (int i = 0; i < 100; ++i) ops::add(a, b);
  cuda::synchronize(0);
  const cuda::MemoryStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.device_mallocs, before.device_mallocs);
  EXPECT_EQ(after.allocations - before.allocations, 100u);
  EXPECT_GE(after.reserved_bytes, 3 * n * sizeof(float));
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
}

TEST_F(CudaDeviceTest, OutOfMemoryIsAClearErrorNotAnAbort) {
  try {
    empty({int64_t{1} << 50}, TensorOptions(kCuda));  // 4 PiB
    ADD_FAILURE() << "allocated 4 PiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_THAT(e.what(), HasSubstr("cuda:0 out of memory: tried to allocate 4096.00 TiB (4503599627370496 bytes)"));
    EXPECT_THAT(e.what(), HasSubstr("caching allocator holds"));
  }
  EXPECT_GE(cuda::memory_stats(0).ooms, 1u);
  EXPECT_TRUE(ones({4}, TensorOptions(kCuda)).to(kCPU).equal(ones({4})));  // still usable
}

TEST_F(CudaDeviceTest, RecordStreamAndEmptyCache) {
  const cuda::Stream s = cuda::getStreamFromPool(0);
  {
    const Tensor t = ones({1 << 20}, TensorOptions(kCuda));
    cuda::record_stream(t, s);
    {
      cuda::StreamGuard guard(s);
      ops::mul(t, 2.0);  // reads t on s
    }
  }  // t's block waits for s's work before it is reused
  EXPECT_THROW(cuda::record_stream(ones({2}), s), Error);
  cuda::empty_cache();
  const cuda::MemoryStats st = cuda::memory_stats(0);
  if (st.allocated_bytes == 0) EXPECT_EQ(st.reserved_bytes, 0u);
  EXPECT_GE(st.device_frees, 1u);
}

}  // namespace
}  // namespace strata
