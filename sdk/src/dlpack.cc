#include "strata/dlpack.h"

#include <vector>

#include "tensor_internal.h"

namespace strata {

DLDataType toDLDataType(ScalarType t) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(elementSize(t) * 8);
  switch (t) {
    case ScalarType::Byte: d.code = kDLUInt; break;
    case ScalarType::Char:
    case ScalarType::Int:
    case ScalarType::Long: d.code = kDLInt; break;
    case ScalarType::Half:
    case ScalarType::Float:
    case ScalarType::Double: d.code = kDLFloat; break;
    case ScalarType::BFloat16: d.code = kDLBfloat; break;
    case ScalarType::Bool: d.code = kDLBoolCode; break;
  }
  return d;
}

ScalarType fromDLDataType(DLDataType d) {
  STRATA_CHECK(d.lanes == 1, Value, "DLPack tensors with ", d.lanes, " lanes are not supported (need 1)");
  const int code = d.code;
  switch (code) {
    case kDLUInt:
      if (d.bits == 8) return ScalarType::Byte;
      break;
    case kDLInt:
      if (d.bits == 8) return ScalarType::Char;
      if (d.bits == 32) return ScalarType::Int;
      if (d.bits == 64) return ScalarType::Long;
      break;
    case kDLFloat:
      if (d.bits == 16) return ScalarType::Half;
      if (d.bits == 32) return ScalarType::Float;
      if (d.bits == 64) return ScalarType::Double;
      break;
    case kDLBfloat:
      if (d.bits == 16) return ScalarType::BFloat16;
      break;
    case kDLBoolCode:
      if (d.bits == 8) return ScalarType::Bool;
      break;
    default:
      break;
  }
  STRATA_FAIL(Type, "DLPack dtype (code ", code, ", bits ", static_cast<int>(d.bits),
              ") has no strata equivalent");
}

namespace {

// What an exported DLManagedTensor owns: a reference to the tensor plus the
// shape and stride arrays the DLTensor points into.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

void deleteExport(DLManagedTensor* self) { delete static_cast<ExportContext*>(self->manager_ctx); }

void releaseImport(void* ctx) {
  auto* managed = static_cast<DLManagedTensor*>(ctx);
  if (managed->deleter) managed->deleter(managed);
}

Device fromDLDevice(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory: readable from the CPU
      return kCPU;
    case kDLCUDA:
      STRATA_CHECK(d.device_id >= 0 && d.device_id <= 127, Value, "DLPack CUDA device id ", d.device_id,
                   " is out of range");
      return Device(DeviceType::CUDA, static_cast<int8_t>(d.device_id));
    default:
      STRATA_FAIL(Device, "DLPack device type ", static_cast<int>(d.device_type),
                  " is not supported (strata has cpu and cuda)");
  }
}

}  // namespace

DLManagedTensor* toDLPack(const Tensor& t) {
  STRATA_CHECK(t.defined(), Value, "toDLPack: the tensor is undefined");
  STRATA_CHECK(!t.is_meta(), Device, "toDLPack: a meta tensor has no data to share");
  DLDevice device{};
  if (t.is_cpu()) {
    device = {kDLCPU, 0};
  } else {
    STRATA_CHECK(t.is_cuda(), Device, "toDLPack: device ", t.device().str(), " has no DLPack equivalent");
    device = {kDLCUDA, t.device().index};
  }
  auto* ctx = new ExportContext{t, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                                std::vector<int64_t>(t.strides().begin(), t.strides().end()), {}};
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = t.data_ptr();  // already includes the storage offset, as torch exports it
  dl.device = device;
  dl.ndim = static_cast<int32_t>(t.dim());
  dl.dtype = toDLDataType(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &deleteExport;
  return &ctx->managed;
}

Tensor fromDLPack(DLManagedTensor* managed) {
  STRATA_CHECK(managed != nullptr, Value, "fromDLPack: the DLManagedTensor is null");
  const DLTensor& dl = managed->dl_tensor;
  STRATA_CHECK(dl.ndim >= 0, Value, "fromDLPack: negative ndim ", dl.ndim);
  STRATA_CHECK(dl.ndim == 0 || dl.shape != nullptr, Value, "fromDLPack: shape is null for ndim ", dl.ndim);
  const ScalarType dtype = fromDLDataType(dl.dtype);
  const Device device = fromDLDevice(dl.device);
  const size_t es = elementSize(dtype);
  STRATA_CHECK(dl.byte_offset % es == 0, Value, "fromDLPack: byte_offset ", dl.byte_offset,
               " is not a multiple of the element size ", es);
  std::vector<int64_t> sizes(dl.shape, dl.shape + dl.ndim);
  std::vector<int64_t> strides =
      dl.strides != nullptr ? std::vector<int64_t>(dl.strides, dl.strides + dl.ndim) : contiguousStrides(sizes);
  const int64_t offset = static_cast<int64_t>(dl.byte_offset / es);
  // Validates sizes and strides (no negatives, no overflow) before anything is owned.
  const size_t nbytes = detail::requiredStorageBytes(sizes, strides, offset, es);
  STRATA_CHECK(nbytes == 0 || dl.data != nullptr, Value, "fromDLPack: data is null for a non-empty tensor");
  Storage storage = make_intrusive<StorageImpl>(DataPtr{dl.data, managed, &releaseImport}, nbytes, device);
  return Tensor(make_intrusive<TensorImpl>(std::move(storage), dtype, std::move(sizes), std::move(strides), offset));
}

}  // namespace strata
