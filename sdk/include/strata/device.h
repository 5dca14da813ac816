// Devices a tensor can live on.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "strata/export.h"

namespace strata {

// The values are PyTorch's c10::DeviceType codes.
enum class DeviceType : int8_t {
  CPU = 0,
  CUDA = 1,
  Meta = 9,           // sizes and dtype only, no data
  PrivateUse1 = 20,   // a device a plugin brings
};

STRATA_API const char* toString(DeviceType t);  // "cpu", "cuda", "meta", "privateuse1"

// A device type plus an index; index -1 means "the current device" for CUDA and is
// the only index CPU and Meta have.
struct STRATA_API Device {
  DeviceType type = DeviceType::CPU;
  int8_t index = -1;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int8_t i = -1) : type(t), index(i) {}  // NOLINT
  // Parses "cpu", "meta", "cuda", "cuda:1", "privateuse1[:N]".
  // Throws strata::Error(Value) naming the string and the reason.
  explicit Device(std::string_view spec);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_meta() const { return type == DeviceType::Meta; }
  bool has_index() const { return index >= 0; }

  std::string str() const;  // "cpu", "cuda:0", "meta"
  friend bool operator==(const Device&, const Device&) = default;
};

STRATA_API std::ostream& operator<<(std::ostream& os, const Device& d);

inline constexpr Device kCPU{DeviceType::CPU};
inline constexpr Device kMeta{DeviceType::Meta};

}  // namespace strata
