// `cmake --install` and find_package(strata) as a user meets them: the build tree is
// installed to a fresh prefix, and projects built out of tree against that prefix
// alone (no build tree in sight) use every exported target: the README's example
// bundle (with a CUDA kernel when nvcc is there), and the embedding example that
// links strata::host. The installed `strata` then loads them and its own bundled
// plugins from the installed plugin directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "readme_example.h"

namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Result {
  int status;
  std::string out;
};

Result sh(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string q(const std::string& s) { return "'" + s + "'"; }

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A prefix the build tree is installed to once per test, removed after.
struct Installed {
  fs::path root;
  fs::path prefix;
  Result install;
  Installed() {
    char tmpl[] = "/tmp/strata-install-XXXXXX";
    root = mkdtemp(tmpl);
    prefix = root / "prefix";
    install = sh(q(STRATA_CMAKE) + " --install " + q(STRATA_BUILD_DIR) + " --prefix " + q(prefix.string()));
  }
  ~Installed() { fs::remove_all(root); }
  fs::path lib() const { return prefix / STRATA_INSTALL_LIBDIR; }
  std::string strata(const std::string& args) const { return q((prefix / "bin" / "strata").string()) + " " + args; }
  // Configures and builds `src` against the prefix alone. In a sanitizer build the
  // project is built with the same sanitizers: an executable linking the installed,
  // instrumented libraries must load the sanitizer's runtime first.
  Result build(const fs::path& src, const std::string& extra = "") const {
    const fs::path out = src / "build";
    const std::string sanitize = STRATA_TEST_SANITIZE;
    std::string flags;
    if (!sanitize.empty()) {
      for (const char* v : {"CMAKE_CXX_FLAGS", "CMAKE_EXE_LINKER_FLAGS", "CMAKE_MODULE_LINKER_FLAGS"}) {
        flags += std::string(" -D") + v + "=-fsanitize=" + sanitize;
      }
    }
    return sh(q(STRATA_CMAKE) + " -S " + q(src.string()) + " -B " + q(out.string()) + " -G Ninja -DCMAKE_CXX_COMPILER=" +
              q(STRATA_CXX) + " -DCMAKE_PREFIX_PATH=" + q(prefix.string()) + flags + " " + extra + " && " +
              q(STRATA_CMAKE) + " --build " + q(out.string()));
  }
};

TEST(Install, InstallsTheSdkModesHostCliBundlesAndThePackage) {
  Installed in;
  ASSERT_EQ(in.install.status, 0) << in.install.out;
  for (const fs::path& f : {in.prefix / "bin" / "strata", in.lib() / "libstrata_sdk.so", in.lib() / "libstrata_modes.so",
                            in.lib() / "libstrata_host.so", in.prefix / "include" / "strata" / "strata.h",
                            in.prefix / "include" / "strata" / "modes" / "vmap.h",
                            in.prefix / "include" / "strata" / "host" / "host.h",
                            in.lib() / "cmake" / "strata" / "strataConfig.cmake",
                            in.lib() / "cmake" / "strata" / "strataBundle.cmake",
                            in.lib() / "strata" / "plugins" / "libmuladd_1_1_0.so",
                            in.lib() / "strata" / "plugins" / "libmuladd_1_0_0.so"}) {
    EXPECT_TRUE(fs::exists(f)) << f << " was not installed";
  }
  // What find_package(strata) gives.
  write(in.root / "targets" / "CMakeLists.txt", R"cmake(cmake_minimum_required(VERSION 3.25)
project(targets LANGUAGES CXX)
find_package(strata REQUIRED)
foreach(t strata::sdk strata::modes strata::host)
  if(NOT TARGET ${t})
    message(FATAL_ERROR "find_package(strata) gives no ${t}")
  endif()
endforeach()
if(NOT COMMAND strata_add_bundle)
  message(FATAL_ERROR "find_package(strata) gives no strata_add_bundle()")
endif()
)cmake");
  const Result r = sh(q(STRATA_CMAKE) + " -S " + q((in.root / "targets").string()) + " -B " +
                      q((in.root / "targets" / "build").string()) + " -DCMAKE_PREFIX_PATH=" + q(in.prefix.string()));
  EXPECT_EQ(r.status, 0) << r.out;

  // The installed CLI finds the installed bundles by default.
  const std::string db = " --db " + q((in.root / "s.db").string());
  const Result list = sh(in.strata("plugins list" + db));
  EXPECT_EQ(list.status, 0) << list.out;
  EXPECT_THAT(list.out, ::testing::ContainsRegex("muladd +1.1.0 +loaded"));
  EXPECT_THAT(list.out, HasSubstr((in.lib() / "strata" / "plugins").string()));
  const Result call = sh(in.strata("call extension_cpp::mymuladd '[1.,2.]' '[3.,4.]' 1.0" + db));
  EXPECT_EQ(call.status, 0) << call.out;
  EXPECT_THAT(call.out, HasSubstr("tensor([4., 9.])"));
}

TEST(Install, TheReadmeBundleBuildsAgainstTheInstalledTreeAndLoads) {
  Installed in;
  ASSERT_EQ(in.install.status, 0) << in.install.out;
  const auto files = strata::test::readmeBundleExample(STRATA_SOURCE_DIR "/README.md");
  ASSERT_EQ(files.size(), 3u);
  const fs::path src = in.root / "hello";
  for (const auto& [name, text] : files) write(src / name, text);
#if defined(STRATA_TEST_HAVE_CUDA)
  // With nvcc, the same bundle with a CUDA kernel for hello::scale beside it.
  std::string cmake = files.at("CMakeLists.txt");
  const size_t at = cmake.find("LANGUAGES CXX");
  ASSERT_NE(at, std::string::npos);
  cmake.replace(at, 13, "LANGUAGES CXX CUDA");
  const size_t add = cmake.find("SOURCES hello.cc");
  ASSERT_NE(add, std::string::npos);
  cmake.replace(add, 16, "SOURCES hello.cc hello_cuda.cc hello_cuda.cu");
  write(src / "CMakeLists.txt", cmake);
  write(src / "hello_cuda.cu", R"(__global__ void scale_kernel(const float* x, float* y, long n, float f) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[i] * f;
}
void hello_scale_launch(const float* x, float* y, long n, float f) {
  scale_kernel<<<(n + 255) / 256 > 0 ? (n + 255) / 256 : 1, 256>>>(x, y, n, f);
}
)");
  write(src / "hello_cuda.cc", R"(#include <strata/library.h>
#include <strata/ops.h>

void hello_scale_launch(const float* x, float* y, long n, float f);

namespace {
strata::Tensor scale_cuda(const strata::Tensor& x, double factor) {
  const strata::Tensor xc = x.contiguous();
  strata::Tensor y = strata::ops::empty_like(xc);
  hello_scale_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), static_cast<float>(factor));
  return y;
}
}  // namespace

// Deferred by the host into the bundle's load transaction, owned by hello@1.0.0.
STRATA_LIBRARY_IMPL(hello, CUDA, m) { m.impl("scale", &scale_cuda); }
)");
#endif
#if defined(STRATA_TEST_HAVE_CUDA)
  const Result b = in.build(src, "-DCMAKE_CUDA_COMPILER=" + q(STRATA_NVCC) + " -DCMAKE_CUDA_ARCHITECTURES=90-real");
#else
  const Result b = in.build(src);
#endif
  ASSERT_EQ(b.status, 0) << b.out;
  const std::string opts = " --plugins " + q((src / "build").string()) + " --db " + q((in.root / "s.db").string());
  Result r = sh(in.strata("call hello::scale '[1,2,3]' 2.0" + opts));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tensor([2., 4., 6.])"));
  r = sh(in.strata("plugins list" + opts));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("hello +1.0.0 +loaded")) << r.out;
#if defined(STRATA_TEST_HAVE_CUDA)
  r = sh(in.strata("dump hello::scale" + opts));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("CUDA[^\n]*hello@1.0.0")) << r.out;
#endif
}

TEST(Install, TheEmbeddingExampleBuildsAgainstTheInstalledTreeAndRuns) {
  Installed in;
  ASSERT_EQ(in.install.status, 0) << in.install.out;
  const fs::path src = in.root / "embed";
  fs::create_directories(src);
  for (const char* f : {"CMakeLists.txt", "embedded_workload.cc"}) {
    fs::copy_file(fs::path(STRATA_SOURCE_DIR) / "host" / "examples" / f, src / f);
  }
  const Result b = in.build(src);
  ASSERT_EQ(b.status, 0) << b.out;
  const Result r = sh(q((src / "build" / "embedded_workload").string()) + " --plugins " +
                      q((in.lib() / "strata" / "plugins").string()) + " --db " + q((in.root / "e.db").string()) +
                      " --seconds 2.5");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("host: loaded muladd@1.1.0"));
  EXPECT_THAT(r.out, HasSubstr("extension_cpp::mymuladd -> CPU kernel, owner muladd@1.1.0"));
  EXPECT_THAT(r.out, HasSubstr("stopped"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("WRONG")));
}

}  // namespace
