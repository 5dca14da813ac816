#include "strata/plugin.h"

#include <utility>

namespace strata {

namespace {
thread_local StaticRegistrations* tls_capture = nullptr;  // Note [Static registrations in bundles]
}  // namespace

namespace detail {
bool capturingStaticRegistrations() { return tls_capture != nullptr; }

RegistrationHandleRAII refuseStaticRegistration(std::string what) {
  if (tls_capture != nullptr) tls_capture->refused.push_back(std::move(what));
  return {};
}

SuspendStaticCapture::SuspendStaticCapture() : saved_(std::exchange(tls_capture, nullptr)) {}
SuspendStaticCapture::~SuspendStaticCapture() { tls_capture = static_cast<StaticRegistrations*>(saved_); }

bool deferStaticBlock(StaticLibraryBlock block) {
  if (tls_capture == nullptr) return false;
  tls_capture->blocks.push_back(std::move(block));
  return true;
}
}  // namespace detail

CaptureStaticRegistrations::CaptureStaticRegistrations(StaticRegistrations& into)
    : saved_(std::exchange(tls_capture, &into)) {}
CaptureStaticRegistrations::~CaptureStaticRegistrations() { tls_capture = saved_; }

Bundle::~Bundle() = default;

AbiVersion hostSdkAbi() { return {STRATA_SDK_ABI_MAJOR, STRATA_SDK_ABI_MINOR}; }

BundleRegistrar::BundleRegistrar(std::string name, std::string version)
    : name_(std::move(name)), version_(std::move(version)) {}

BundleRegistrar::~BundleRegistrar() { clear(); }

Library& BundleRegistrar::library(Library::Kind kind, std::string_view ns, std::optional<DispatchKey> key) {
  RegistrationOwnerGuard owner(this->owner());
  // Where the bundle made it: its registerAll, by name (the line is the bundle's, and
  // this call cannot see it); an error about the library names this.
  const std::string where = "by r.library() in bundle " + name_ + "@" + version_;
  libraries_.push_back(std::make_unique<Library>(kind, std::string(ns), key, where.c_str(), 0));
  order_.emplace_back(true, libraries_.size() - 1);
  return *libraries_.back();
}

Library& BundleRegistrar::library(Library::Kind kind, std::string_view ns, std::string_view device_or_key) {
  return library(kind, ns, parseDispatchKey(device_or_key));
}

void BundleRegistrar::runStaticBlocks(const std::vector<detail::StaticLibraryBlock>& blocks) {
  RegistrationOwnerGuard owner(this->owner());
  for (const auto& b : blocks) {
    try {
      libraries_.push_back(std::make_unique<Library>(b.kind, b.ns, b.key, b.file.c_str(), b.line));
      order_.emplace_back(true, libraries_.size() - 1);
      b.fn(*libraries_.back());
    } catch (const std::exception& e) {
      STRATA_FAIL(Value, "the ", toString(b.kind), " block for namespace ", b.ns, " at ", b.file, ":", b.line,
                  " failed: ", e.what());
    }
  }
}

void BundleRegistrar::keep(RegistrationHandleRAII registration) {
  others_.push_back(std::move(registration));
  order_.emplace_back(false, others_.size() - 1);
}

std::vector<std::pair<Library::Kind, std::string>> BundleRegistrar::libraryNamespaces() const {
  std::vector<std::pair<Library::Kind, std::string>> out;
  for (const auto& l : libraries_) {
    if (l) out.emplace_back(l->kind(), l->ns());
  }
  return out;
}

void BundleRegistrar::clear() {
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    if (it->first) libraries_[it->second].reset();
    else others_[it->second].reset();
  }
  order_.clear();
  libraries_.clear();
  others_.clear();
  detail::releaseTypedSignatures(owner());  // its code, and the handles it made, go too
}

}  // namespace strata
