// Dispatch keys and key sets.
//
// Note [Dispatch key order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A DispatchKeySet is a 64-bit mask with one bit per runtime key; the bit index is
// the key's enum value, and the highest set bit is the key that runs. The order is
// PyTorch's, highest priority first:
//
//   Batched (vmap) > AutocastPrivateUse1 > AutocastCUDA > AutocastCPU >
//   AutogradCUDA > AutogradCPU > AutogradMeta > Mode (dispatch modes) >
//   Fake (fake tensors) > Meta > PrivateUse1 > CUDA > CPU
//
// so vmap sees an op before autocast, autocast before autograd, and dispatch modes
// see ops after autograd and autocast have done their work. A fake tensor carries
// Fake above the backend key of the device it claims, so no backend kernel ever runs
// on it (Note [Fake tensors] in modes/fake.h). The values leave gaps
// between the groups so that keys can be added later without renumbering the ones
// users already compiled against. Undefined (0) has no bit.
#pragma once

#include <bit>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "strata/device.h"
#include "strata/export.h"

namespace strata {

enum class DispatchKey : uint8_t {
  Undefined = 0,
  // Backends.
  CPU = 4,
  CUDA = 6,
  PrivateUse1 = 8,
  Meta = 10,
  // Functionality between backends and autograd.
  Fake = 16,
  Mode = 20,
  // Autograd, one per backend.
  AutogradMeta = 28,
  AutogradCPU = 30,
  AutogradCUDA = 32,
  // Autocast, one per device type.
  AutocastCPU = 40,
  AutocastCUDA = 42,
  AutocastPrivateUse1 = 44,
  // vmap.
  Batched = 50,

  // --- Alias keys: for registration only; never in a DispatchKeySet. Each stands
  // for a set of runtime keys (runtimeKeySetFor). Values above 63 have no bit.
  // "default" in torch.library.impl. Backends only: autograd does not see through it.
  CompositeExplicitAutograd = 64,
  // Backends and autograd keys: a decomposition into other ops that autograd can
  // differentiate (the catch-all of Library::def(name, fn)).
  CompositeImplicitAutograd = 65,
  // Every Autograd<Backend> key.
  Autograd = 66,
};

// The largest runtime key value + 1: the size of a per-key dispatch table.
inline constexpr size_t kNumRuntimeKeySlots = 64;

STRATA_API const char* toString(DispatchKey k);

constexpr bool isAliasKey(DispatchKey k) { return static_cast<uint8_t>(k) >= 64; }
constexpr bool isRuntimeKey(DispatchKey k) {
  switch (k) {
    case DispatchKey::CPU:
    case DispatchKey::CUDA:
    case DispatchKey::PrivateUse1:
    case DispatchKey::Meta:
    case DispatchKey::Fake:
    case DispatchKey::Mode:
    case DispatchKey::AutogradMeta:
    case DispatchKey::AutogradCPU:
    case DispatchKey::AutogradCUDA:
    case DispatchKey::AutocastCPU:
    case DispatchKey::AutocastCUDA:
    case DispatchKey::AutocastPrivateUse1:
    case DispatchKey::Batched:
      return true;
    default:
      return false;
  }
}

// The backend key for a device type (CPU -> CPU, CUDA -> CUDA, ...).
constexpr DispatchKey backendKey(DeviceType t) {
  switch (t) {
    case DeviceType::CPU:
      return DispatchKey::CPU;
    case DeviceType::CUDA:
      return DispatchKey::CUDA;
    case DeviceType::Meta:
      return DispatchKey::Meta;
    case DeviceType::PrivateUse1:
      return DispatchKey::PrivateUse1;
  }
  return DispatchKey::Undefined;
}

// The autograd key paired with a device type. PrivateUse1 has none yet.
constexpr DispatchKey autogradKey(DeviceType t) {
  switch (t) {
    case DeviceType::CPU:
      return DispatchKey::AutogradCPU;
    case DeviceType::CUDA:
      return DispatchKey::AutogradCUDA;
    case DeviceType::Meta:
      return DispatchKey::AutogradMeta;
    case DeviceType::PrivateUse1:
      return DispatchKey::Undefined;
  }
  return DispatchKey::Undefined;
}

// The autocast key of a device type; Meta has none.
constexpr DispatchKey autocastKey(DeviceType t) {
  switch (t) {
    case DeviceType::CPU:
      return DispatchKey::AutocastCPU;
    case DeviceType::CUDA:
      return DispatchKey::AutocastCUDA;
    case DeviceType::PrivateUse1:
      return DispatchKey::AutocastPrivateUse1;
    case DeviceType::Meta:
      return DispatchKey::Undefined;
  }
  return DispatchKey::Undefined;
}

// A set of runtime keys. A value type: trivially copyable, constexpr throughout.
// See Note [Dispatch key order].
class DispatchKeySet {
 public:
  constexpr DispatchKeySet() = default;
  // Undefined and alias keys have no bit: they give the empty set.
  constexpr explicit DispatchKeySet(DispatchKey k)
      : repr_(k == DispatchKey::Undefined || static_cast<uint8_t>(k) >= 64 ? 0
                                                                          : uint64_t{1} << static_cast<uint8_t>(k)) {}
  constexpr DispatchKeySet(std::initializer_list<DispatchKey> keys) {
    for (DispatchKey k : keys) repr_ |= DispatchKeySet(k).repr_;
  }
  static constexpr DispatchKeySet fromRaw(uint64_t raw) {
    DispatchKeySet s;
    s.repr_ = raw;
    return s;
  }
  // Every key at or below k (k included): the mask a kernel at k uses to
  // redispatch to the layers beneath it is the complement of this shifted by one.
  static constexpr DispatchKeySet fullUpTo(DispatchKey k) {
    const auto bit = static_cast<uint8_t>(k);
    return fromRaw(bit >= 63 ? ~uint64_t{0} : ((uint64_t{1} << (bit + 1)) - 1) & ~uint64_t{1});
  }

  constexpr uint64_t raw() const { return repr_; }
  constexpr bool empty() const { return repr_ == 0; }
  constexpr bool has(DispatchKey k) const { return (repr_ & DispatchKeySet(k).repr_) != 0; }
  constexpr DispatchKeySet add(DispatchKey k) const { return fromRaw(repr_ | DispatchKeySet(k).repr_); }
  constexpr DispatchKeySet remove(DispatchKey k) const { return fromRaw(repr_ & ~DispatchKeySet(k).repr_); }

  constexpr DispatchKeySet operator|(DispatchKeySet o) const { return fromRaw(repr_ | o.repr_); }
  constexpr DispatchKeySet operator&(DispatchKeySet o) const { return fromRaw(repr_ & o.repr_); }
  constexpr DispatchKeySet operator-(DispatchKeySet o) const { return fromRaw(repr_ & ~o.repr_); }
  constexpr bool operator==(const DispatchKeySet&) const = default;

  // The key that runs: the highest set bit, or Undefined for the empty set.
  constexpr DispatchKey highestPriorityKey() const {
    return repr_ == 0 ? DispatchKey::Undefined
                      : static_cast<DispatchKey>(63 - std::countl_zero(repr_));
  }

  // "DispatchKeySet(AutogradCPU, CPU)", highest priority first.
  STRATA_API std::string str() const;

 private:
  uint64_t repr_ = 0;
};

// The runtime keys of each group.
inline constexpr DispatchKeySet kBackendKeys{DispatchKey::CPU, DispatchKey::CUDA, DispatchKey::PrivateUse1,
                                             DispatchKey::Meta};
inline constexpr DispatchKeySet kAutogradKeys{DispatchKey::AutogradCPU, DispatchKey::AutogradCUDA,
                                              DispatchKey::AutogradMeta};
inline constexpr DispatchKeySet kAutocastKeys{DispatchKey::AutocastCPU, DispatchKey::AutocastCUDA,
                                              DispatchKey::AutocastPrivateUse1};
inline constexpr DispatchKeySet kAllRuntimeKeys = kBackendKeys | kAutogradKeys | kAutocastKeys |
                                                  DispatchKeySet{DispatchKey::Fake, DispatchKey::Mode, DispatchKey::Batched};

// The runtime keys a registration at k fills: {k} for a runtime key, the alias's
// set for an alias key (CompositeExplicitAutograd: backends; CompositeImplicitAutograd:
// backends and autograd; Autograd: autograd).
constexpr DispatchKeySet runtimeKeySetFor(DispatchKey k) {
  switch (k) {
    case DispatchKey::CompositeExplicitAutograd: return kBackendKeys;
    case DispatchKey::CompositeImplicitAutograd: return kBackendKeys | kAutogradKeys;
    case DispatchKey::Autograd: return kAutogradKeys;
    default: return isRuntimeKey(k) ? DispatchKeySet(k) : DispatchKeySet();
  }
}

// The backend key an autograd key pairs with (AutogradCPU -> CPU), else Undefined.
constexpr DispatchKey backendOfAutogradKey(DispatchKey k) {
  switch (k) {
    case DispatchKey::AutogradCPU: return DispatchKey::CPU;
    case DispatchKey::AutogradCUDA: return DispatchKey::CUDA;
    case DispatchKey::AutogradMeta: return DispatchKey::Meta;
    default: return DispatchKey::Undefined;
  }
}

// Every key strictly above k: the keys a kernel at k masks out when it
// redispatches (see Note [Redispatch masks] in dispatcher.h).
constexpr DispatchKeySet keysAbove(DispatchKey k) { return DispatchKeySet::fromRaw(~DispatchKeySet::fullUpTo(k).raw() & ~uint64_t{1}); }
// Every key strictly below k: what `ks & keysBelow(k)` leaves for a redispatch.
constexpr DispatchKeySet keysBelow(DispatchKey k) { return DispatchKeySet::fullUpTo(k).remove(k); }

// A key from its name: the enum names ("CPU", "AutogradCPU", "CompositeExplicitAutograd",
// ...), the device types "cpu", "cuda", "meta", "privateuse1" (their backend keys),
// "default" (CompositeExplicitAutograd), as torch.library.impl accepts them,
// "batched" (vmap's key), "fake" (fake tensors' key), and a layer's key of a device type: "autocast:cpu"
// (AutocastCPU), "autograd:cuda" (AutogradCUDA), ... Throws
// strata::Error(Value) listing the accepted names for anything else.
STRATA_API DispatchKey parseDispatchKey(std::string_view name);

STRATA_API std::ostream& operator<<(std::ostream& os, DispatchKeySet ks);
STRATA_API std::ostream& operator<<(std::ostream& os, DispatchKey k);

}  // namespace strata
