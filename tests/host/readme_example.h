// The README's "Write a bundle" example: its files, as the README shows them between
// `<!-- bundle-example: FILE -->` markers. Tests build exactly what a newcomer copies.
#pragma once

#include <fstream>
#include <map>
#include <string>

namespace strata::test {

inline std::map<std::string, std::string> readmeBundleExample(const std::string& readme) {
  std::ifstream in(readme);
  std::map<std::string, std::string> files;
  std::string line, name;
  bool in_block = false;
  const std::string marker = "<!-- bundle-example: ";
  while (std::getline(in, line)) {
    if (line.rfind(marker, 0) == 0) {
      name = line.substr(marker.size(), line.find(" -->") - marker.size());
    } else if (!name.empty() && !in_block && line.rfind("```", 0) == 0) {
      in_block = true;
      files[name];
    } else if (in_block && line.rfind("```", 0) == 0) {
      in_block = false;
      name.clear();
    } else if (in_block) {
      files[name] += line + "\n";
    }
  }
  return files;
}

}  // namespace strata::test
