#include "strata/dispatch_key.h"

namespace strata {

const char* toString(DispatchKey k) {
  switch (k) {
    case DispatchKey::Undefined: return "Undefined";
    case DispatchKey::CPU: return "CPU";
    case DispatchKey::CUDA: return "CUDA";
    case DispatchKey::PrivateUse1: return "PrivateUse1";
    case DispatchKey::Meta: return "Meta";
    case DispatchKey::Mode: return "Mode";
    case DispatchKey::AutogradMeta: return "AutogradMeta";
    case DispatchKey::AutogradCPU: return "AutogradCPU";
    case DispatchKey::AutogradCUDA: return "AutogradCUDA";
    case DispatchKey::AutocastCPU: return "AutocastCPU";
    case DispatchKey::AutocastCUDA: return "AutocastCUDA";
    case DispatchKey::Batched: return "Batched";
  }
  return "UnknownKey";
}

std::string DispatchKeySet::str() const {
  std::string s = "DispatchKeySet(";
  DispatchKeySet rest = *this;
  bool first = true;
  while (!rest.empty()) {
    const DispatchKey k = rest.highestPriorityKey();
    if (!first) s += ", ";
    first = false;
    s += toString(k);
    rest = rest.remove(k);
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, DispatchKeySet ks) { return os << ks.str(); }
std::ostream& operator<<(std::ostream& os, DispatchKey k) { return os << toString(k); }

}  // namespace strata
