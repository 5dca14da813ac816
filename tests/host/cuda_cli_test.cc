// strata cuda and the CUDA lines of strata call --explain, as a user runs them. On a
// machine without a GPU they say why CUDA is unavailable (and the allocator's
// figures, all zero); with one, the device and what its allocator did.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Result {
  int status;
  std::string out;
};

// `strata ARGS`, stderr joined to stdout, with a store of its own and no plugins.
Result run(const std::string& args) {
  const std::string cmd = "STRATA_DB=" + ::testing::TempDir() + "/strata_cuda_cli.db " + std::string(STRATA_CLI) +
                          " " + args + " 2>&1 < /dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool gpu() { return run("cuda").out.rfind("CUDA is not available", 0) != 0; }

TEST(CudaCommand, SaysWhetherCudaIsAvailableAndWhatTheAllocatorHolds) {
  const Result r = run("cuda");
  EXPECT_EQ(r.status, 0) << r.out;
  if (!gpu()) {
    EXPECT_THAT(r.out, StartsWith("CUDA is not available: "));
    EXPECT_THAT(r.out, HasSubstr("\nallocator: allocated 0 B (peak 0 B), reserved 0 B (peak 0 B) in 0 segments; "
                                 "0 allocations, 0 cudaMalloc, 0 cudaFree, 0 out of memory\n"));
  } else {
    EXPECT_THAT(r.out, StartsWith("cuda:0 "));
    EXPECT_THAT(r.out, HasSubstr(" SMs, "));
    EXPECT_THAT(r.out, HasSubstr("  allocator: allocated 0 B"));
  }
  const Result j = run("cuda --json");
  EXPECT_EQ(j.status, 0) << j.out;
  EXPECT_THAT(j.out, HasSubstr("\"available\": " + std::string(gpu() ? "true" : "false")));
  EXPECT_THAT(j.out, HasSubstr("\"device_mallocs\": 0"));
  EXPECT_EQ(run("cuda extra").status, 2);
}

TEST(CudaCommand, ExplainShowsTheAllocatorOnACudaCall) {
  const Result r = run("call core::add 'ones(4):cuda' 'ones(4):cuda' --explain --plugins " + ::testing::TempDir());
  if (!gpu()) {
    EXPECT_EQ(r.status, 1);
    EXPECT_THAT(r.out, HasSubstr("CUDA is not available: "));
    return;
  }
  EXPECT_EQ(r.status, 0) << r.out;
  // Each allocation under the CUDA kernel says where its memory came from.
  EXPECT_THAT(r.out, HasSubstr("cuda:0 caching allocator: 16 B for the default stream of cuda:0"));
  EXPECT_THAT(r.out, HasSubstr("cudaMalloc"));
  EXPECT_THAT(r.out, HasSubstr("tensor([2., 2., 2., 2.], device='cuda:0')"));
}

}  // namespace
