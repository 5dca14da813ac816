// The CPU a run was measured on, in Google Benchmark's JSON context ("cpu_model"), so
// that every result file names its machine: ratios hold only on the machine they
// were measured on, and Intel and AMD VMs give different ones for the same code.
#pragma once

#include <benchmark/benchmark.h>

#include <fstream>
#include <string>

namespace strata::bench {

// "AMD EPYC (AuthenticAMD, family 26, model 2)", from /proc/cpuinfo's first CPU (what
// `lscpu` prints as Model name, Vendor ID, CPU family and Model); "unknown" where
// there is no /proc/cpuinfo or it names none of them.
inline std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, vendor, family, model;
  auto value = [&line] {
    const auto colon = line.find(':');
    std::string v = colon == std::string::npos ? std::string() : line.substr(colon + 1);
    const auto first = v.find_first_not_of(" \t");
    const auto last = v.find_last_not_of(" \t\r");
    return first == std::string::npos ? std::string() : v.substr(first, last - first + 1);
  };
  auto key_is = [&line](const char* key) {
    const std::string k(key);
    return line.compare(0, k.size(), k) == 0 && line.find_first_not_of(" \t", k.size()) == line.find(':');
  };
  while (std::getline(in, line)) {
    if (line.empty()) break;  // the first CPU's block ends here
    if (key_is("model name")) name = value();
    else if (key_is("vendor_id")) vendor = value();
    else if (key_is("cpu family")) family = value();
    else if (key_is("model")) model = value();
  }
  std::string details = vendor;
  if (!family.empty()) details += (details.empty() ? "" : ", ") + std::string("family ") + family;
  if (!model.empty()) details += (details.empty() ? "" : ", ") + std::string("model ") + model;
  if (name.empty()) return details.empty() ? "unknown" : details;
  return details.empty() ? name : name + " (" + details + ")";
}

// Call once, before the benchmarks run (a namespace-scope initializer will do).
inline bool addCpuContext() {
  benchmark::AddCustomContext("cpu_model", cpuModel());
  return true;
}

}  // namespace strata::bench
