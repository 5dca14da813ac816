#include "strata/dispatch_key.h"

#include <optional>

#include "strata/error.h"

namespace strata {

const char* toString(DispatchKey k) {
  switch (k) {
    case DispatchKey::Undefined: return "Undefined";
    case DispatchKey::CPU: return "CPU";
    case DispatchKey::CUDA: return "CUDA";
    case DispatchKey::PrivateUse1: return "PrivateUse1";
    case DispatchKey::Meta: return "Meta";
    case DispatchKey::Fake: return "Fake";
    case DispatchKey::Mode: return "Mode";
    case DispatchKey::AutogradMeta: return "AutogradMeta";
    case DispatchKey::AutogradCPU: return "AutogradCPU";
    case DispatchKey::AutogradCUDA: return "AutogradCUDA";
    case DispatchKey::AutocastCPU: return "AutocastCPU";
    case DispatchKey::AutocastCUDA: return "AutocastCUDA";
    case DispatchKey::AutocastPrivateUse1: return "AutocastPrivateUse1";
    case DispatchKey::Batched: return "Batched";
    case DispatchKey::CompositeExplicitAutograd: return "CompositeExplicitAutograd";
    case DispatchKey::CompositeImplicitAutograd: return "CompositeImplicitAutograd";
    case DispatchKey::Autograd: return "Autograd";
  }
  return "UnknownKey";
}

DispatchKey parseDispatchKey(std::string_view name) {
  static constexpr DispatchKey kNamed[] = {
      DispatchKey::CPU,          DispatchKey::CUDA,         DispatchKey::PrivateUse1,
      DispatchKey::Meta,         DispatchKey::Fake,         DispatchKey::Mode,         DispatchKey::AutogradMeta,
      DispatchKey::AutogradCPU,  DispatchKey::AutogradCUDA, DispatchKey::AutocastCPU,
      DispatchKey::AutocastCUDA, DispatchKey::AutocastPrivateUse1, DispatchKey::Batched,
      DispatchKey::CompositeExplicitAutograd,
      DispatchKey::CompositeImplicitAutograd, DispatchKey::Autograd};
  for (DispatchKey k : kNamed) {
    if (name == toString(k)) return k;
  }
  if (name == "cpu") return DispatchKey::CPU;
  if (name == "cuda") return DispatchKey::CUDA;
  if (name == "meta") return DispatchKey::Meta;
  if (name == "privateuse1") return DispatchKey::PrivateUse1;
  if (name == "default") return DispatchKey::CompositeExplicitAutograd;
  if (name == "batched" || name == "vmap") return DispatchKey::Batched;
  if (name == "fake") return DispatchKey::Fake;
  if (name == "autograd") return DispatchKey::Autograd;  // every Autograd<Backend> key, as torch.library
  // A layer's key of a device type: "autocast:cpu", "autograd:cuda".
  if (const size_t colon = name.find(':'); colon != std::string_view::npos) {
    const std::string_view layer = name.substr(0, colon), device = name.substr(colon + 1);
    std::optional<DeviceType> type;
    for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA, DeviceType::Meta, DeviceType::PrivateUse1}) {
      if (device == toString(t)) type = t;
    }
    DispatchKey k = DispatchKey::Undefined;
    if (type && layer == "autocast") k = autocastKey(*type);
    if (type && layer == "autograd") k = autogradKey(*type);
    if (k != DispatchKey::Undefined) return k;
    STRATA_FAIL(Value, "unknown dispatch key '", detail::shortened(name), "': a layer's key is autocast:DEVICE (cpu, cuda, privateuse1) "
                "or autograd:DEVICE (cpu, cuda, meta)");
  }
  std::string known;
  for (DispatchKey k : kNamed) known += std::string(known.empty() ? "" : ", ") + toString(k);
  STRATA_FAIL(Value, "unknown dispatch key or device type '", detail::shortened(name),
               "': expected a device type (cpu, cuda, meta, privateuse1), 'default', 'batched', a layer's key of a device type "
               "(autocast:cpu, autograd:cuda, ...), or one of ", known);
}

std::string DispatchKeySet::str() const {
  std::string s = "DispatchKeySet(";
  bool first = true;
  for (int bit = 63; bit >= 0; --bit) {
    if ((repr_ & (uint64_t{1} << bit)) == 0) continue;
    if (!first) s += ", ";
    first = false;
    const auto k = static_cast<DispatchKey>(bit);
    s += isRuntimeKey(k) ? std::string(toString(k)) : "bit" + std::to_string(bit);
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, DispatchKeySet ks) { return os << ks.str(); }
std::ostream& operator<<(std::ostream& os, DispatchKey k) { return os << toString(k); }

}  // namespace strata
