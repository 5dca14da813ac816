// PyTorch's own schema parser and printer, as an oracle for strata's.
//
// Not part of the build: it needs Debian's libtorch-dev (PyTorch 1.13).
//   apt-get install -y libtorch-dev
//   g++ -std=c++17 -O1 tests/tools/torch_schema_oracle.cc -o /tmp/torch_schema_oracle \
//       -I/usr/include/torch/csrc/api/include -ltorch -ltorch_cpu -lc10
//
//   /tmp/torch_schema_oracle dump    every registered operator's schema, as PyTorch
//                                    prints it (regenerates the header-less body of
//                                    tests/sdk/data/torch_1_13_registered_schemas.txt)
//   /tmp/torch_schema_oracle parse   one schema per stdin line -> PyTorch's canonical
//                                    form, or "ERROR <message>", or "ERROR CRASH
//                                    signal N" (PyTorch 1.13 segfaults on some bad
//                                    input, so each line is parsed in a child)
//
// Differential check: feed the same lines to `strata schema` and compare.
#include <ATen/core/function_schema.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <set>
#include <string>

namespace {

std::string parseInChild(const std::string& line) {
  int fds[2];
  if (pipe(fds) != 0) return "ERROR pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    try {
      out = c10::toString(torch::jit::parseSchema(line));
    } catch (const std::exception& e) {
      const std::string what = e.what();
      out = "ERROR " + what.substr(0, what.find('\n'));
    }
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "ERROR CRASH signal " + std::to_string(WTERMSIG(status));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "dump";
  if (mode == "dump") {
    std::set<std::string> schemas;
    for (const auto& op : torch::jit::getAllOperators()) schemas.insert(c10::toString(op->schema()));
    for (const auto& s : schemas) std::cout << s << "\n";
    return 0;
  }
  if (mode != "parse") {
    std::cerr << "usage: torch_schema_oracle [dump|parse]\n";
    return 2;
  }
  for (std::string line; std::getline(std::cin, line);) {
    if (!line.empty()) std::cout << parseInChild(line) << "\n";
  }
  return 0;
}
