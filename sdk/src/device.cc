#include "strata/device.h"

#include <charconv>

#include "strata/error.h"

namespace strata {

const char* toString(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Meta: return "meta";
    case DeviceType::PrivateUse1: return "privateuse1";
  }
  return "unknown";
}

Device::Device(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name == "cpu") type = DeviceType::CPU;
  else if (name == "cuda") type = DeviceType::CUDA;
  else if (name == "meta") type = DeviceType::Meta;
  else if (name == "privateuse1") type = DeviceType::PrivateUse1;
  else
    STRATA_FAIL(Value, "invalid device '", spec,
                "': expected cpu, cuda, meta or privateuse1, optionally followed by :INDEX");
  if (colon == std::string_view::npos) return;
  const std::string_view digits = spec.substr(colon + 1);
  int value = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  STRATA_CHECK(!digits.empty() && ec == std::errc() && end == digits.data() + digits.size() &&
                   value >= 0 && value <= 127,
               Value, "invalid device '", spec, "': the index must be an integer in [0, 127]");
  STRATA_CHECK(type == DeviceType::CUDA || type == DeviceType::PrivateUse1 || value == 0, Value,
               "invalid device '", spec, "': ", toString(type), " has only device 0");
  if (type == DeviceType::CUDA || type == DeviceType::PrivateUse1) index = static_cast<int8_t>(value);
}

std::string Device::str() const {
  std::string s = toString(type);
  if (index >= 0) s += ":" + std::to_string(index);
  return s;
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace strata
