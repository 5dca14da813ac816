// DLPack: zero-copy import/export and who frees what.
#include "strata/dlpack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A foreign producer: owns a buffer and counts how often its deleter runs.
struct Producer {
  std::vector<float> data{1, 2, 3, 4, 5, 6};
  std::vector<int64_t> shape{2, 3};
  std::vector<int64_t> strides{3, 1};
  int deleted = 0;
  DLManagedTensor managed{};

  DLManagedTensor* make() {
    managed.dl_tensor.data = data.data();
    managed.dl_tensor.device = {kDLCPU, 0};
    managed.dl_tensor.ndim = 2;
    managed.dl_tensor.dtype = {kDLFloat, 32, 1};
    managed.dl_tensor.shape = shape.data();
    managed.dl_tensor.strides = strides.data();
    managed.dl_tensor.byte_offset = 0;
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* self) { ++static_cast<Producer*>(self->manager_ctx)->deleted; };
    return &managed;
  }
};

TEST(DLPackTest, ImportSharesMemoryAndCallsTheDeleterOnceWhenTheLastViewDies) {
  Producer p;
  {
    Tensor t = fromDLPack(p.make());
    EXPECT_EQ(t.data_ptr<float>(), p.data.data());  // no copy
    EXPECT_THAT(t.to_vector<float>(), ElementsAre(1, 2, 3, 4, 5, 6));
    Tensor view = t.transpose(0, 1);
    t = Tensor();  // the view still holds the memory
    EXPECT_EQ(p.deleted, 0);
    view.select(0, 0).fill_(9);  // writes reach the producer's buffer
    EXPECT_EQ(p.data[0], 9);
    EXPECT_EQ(p.data[3], 9);
  }
  EXPECT_EQ(p.deleted, 1);
}

TEST(DLPackTest, ImportWithoutStridesAndWithByteOffset) {
  Producer p;
  p.shape = {2, 2};
  DLManagedTensor* m = p.make();
  m->dl_tensor.strides = nullptr;  // compact row-major
  m->dl_tensor.byte_offset = 2 * sizeof(float);
  {
    const Tensor t = fromDLPack(m);
    EXPECT_THAT(t.to_vector<float>(), ElementsAre(3, 4, 5, 6));
  }
  EXPECT_EQ(p.deleted, 1);
}

TEST(DLPackTest, RejectedImportLeavesOwnershipWithTheCaller) {
  Producer p;
  DLManagedTensor* m = p.make();
  m->dl_tensor.dtype = {kDLFloat, 32, 4};  // vectorized lanes
  EXPECT_THROW(fromDLPack(m), Error);
  m->dl_tensor.dtype = {kDLComplex, 64, 1};
  try {
    fromDLPack(m);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Type);
    EXPECT_THAT(e.what(), HasSubstr("has no strata equivalent"));
  }
  m->dl_tensor.dtype = {kDLFloat, 32, 1};
  m->dl_tensor.device = {kDLOpenCL, 0};
  EXPECT_THROW(fromDLPack(m), Error);
  m->dl_tensor.device = {kDLCPU, 0};
  m->dl_tensor.byte_offset = 3;
  EXPECT_THROW(fromDLPack(m), Error);
  m->dl_tensor.byte_offset = 0;
  p.strides = {-3, 1};
  EXPECT_THROW(fromDLPack(m), Error);
  EXPECT_THROW(fromDLPack(nullptr), Error);
  EXPECT_EQ(p.deleted, 0);  // nothing was taken
}

TEST(DLPackTest, ExportKeepsStorageAliveUntilTheConsumerDeletes) {
  DLManagedTensor* m = nullptr;
  const void* data = nullptr;
  {
    const Tensor t = arange(6, kFloat32).view({2, 3}).slice(1, 1, 3);
    data = t.data_ptr();
    m = toDLPack(t);
  }
  // Every strata handle is gone; the export still owns the storage.
  EXPECT_EQ(m->dl_tensor.data, data);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.shape[0], 2);
  EXPECT_EQ(m->dl_tensor.shape[1], 2);
  EXPECT_EQ(m->dl_tensor.strides[0], 3);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(static_cast<const float*>(m->dl_tensor.data)[0], 1.0f);
  m->deleter(m);  // LeakSanitizer proves this frees everything
}

TEST(DLPackTest, RoundTripSharesDataForEveryDtype) {
  for (ScalarType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt8, kUInt8, kBool}) {
    const Tensor a = ones({3}, t);
    const Tensor b = fromDLPack(toDLPack(a));
    EXPECT_EQ(b.dtype(), t) << toString(t);
    EXPECT_EQ(b.data_ptr(), a.data_ptr());
    EXPECT_TRUE(b.equal(a));
  }
  EXPECT_EQ(toDLDataType(kBool).code, kDLBoolCode);
}

TEST(DLPackTest, MetaAndUndefinedCannotBeExported) {
  EXPECT_THROW(toDLPack(empty({2}, TensorOptions(kMeta))), Error);
  EXPECT_THROW(toDLPack(Tensor()), Error);
}

}  // namespace
}  // namespace strata
