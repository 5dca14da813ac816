// libFuzzer target for the store opening an arbitrary file: the input is written to
// a fresh file, opened as a Strata store, then read and written the way the host and
// the admin commands do. Every failure must be a StoreError naming the file; a crash,
// a sanitizer report or any other exception is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <typeinfo>

#include "strata/db/store.h"

namespace {

std::string scratchPath() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/strata-store-fuzz-" + std::to_string(getpid()) +
         ".db";
}

void removeAll(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = scratchPath();
  removeAll(path);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    strata::db::Store store(path);
    (void)store.schemaVersion();
    (void)store.bundles();
    (void)store.operators();
    (void)store.registrations();
    (void)store.kernelStates();
    (void)store.pins();
    (void)store.disabledBundles();
    (void)store.hosts();
    (void)store.auditLog();
    (void)store.latestChange();
    store.setKernelState("fuzz::op", "CPU", false, "fuzzing", "fuzzer");
    (void)store.auditLog("", "fuzz::op");
  } catch (const strata::db::StoreError& e) {
    if (std::string(e.what()).find(path) == std::string::npos) {
      std::fprintf(stderr, "a store error that does not name the file: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "opening a store threw a %s, not a StoreError: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  removeAll(path);
  return 0;
}
