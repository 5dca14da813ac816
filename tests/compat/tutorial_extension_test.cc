// PyTorch's custom C++/CUDA ops tutorial, built unchanged but for its #include lines.
//
// The tutorial's muladd.cpp and muladd.cu are extracted at test time from the seed
// (shared/seeds/004_fdb97969ef789113.txt, plain text) by anchors and brace matching,
// given only #include lines, built as a bundle against this build tree with
// strata::torch_compat beside a Qt root object that registers nothing itself, and
// loaded by the real host. Its TORCH_LIBRARY blocks must run inside the bundle's load
// transaction, owned by the bundle, and the op must pass the tutorial's checks: for
// its sample inputs, result == a * b + c (assert_close) and opcheck, after the
// tutorial's Python registrations (register_fake, register_autograd) are made, here
// in C++. The CUDA source is compiled whenever Strata is built with CUDA; its checks
// run only on a machine with a device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "plugin_host.h"
#include "strata/cuda.h"
#include "strata/dispatcher.h"
#include "strata/modes/autograd.h"
#include "strata/modes/fake.h"
#include "strata/modes/opcheck.h"
#include "strata/ops.h"
#include "strata/plugin.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

constexpr const char* kBundle = "extension_cpp@1.0.0";

std::optional<std::string> readFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The block that starts at `anchor` (at the start of a line) and ends at the brace
// that closes the first '{' after it, skipping braces in comments, strings and
// character literals. `last`: the anchor's last occurrence (the tutorial shows its
// TORCH_LIBRARY blocks twice, the second time complete). "" when the anchor is
// missing or its braces never balance.
std::string extractBlock(const std::string& text, const std::string& anchor, bool last = false) {
  size_t at = std::string::npos;
  for (size_t from = 0;;) {
    const size_t i = text.find(anchor, from);
    if (i == std::string::npos) break;
    if (i == 0 || text[i - 1] == '\n') {
      at = i;
      if (!last) break;
    }
    from = i + 1;
  }
  if (at == std::string::npos) return "";
  enum { Code, LineComment, BlockComment, String, Char } state = Code;
  int depth = 0;
  bool opened = false;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    switch (state) {
      case LineComment:
        if (c == '\n') state = Code;
        continue;
      case BlockComment:
        if (c == '*' && next == '/') state = Code, ++i;
        continue;
      case String:
      case Char:
        if (c == '\\') ++i;
        else if (c == (state == String ? '"' : '\'')) state = Code;
        continue;
      case Code:
        break;
    }
    if (c == '/' && next == '/') state = LineComment, ++i;
    else if (c == '/' && next == '*') state = BlockComment, ++i;
    else if (c == '"') state = String;
    else if (c == '\'') state = Char;
    else if (c == '{') ++depth, opened = true;
    else if (c == '}' && --depth == 0 && opened) return text.substr(at, i + 1 - at);
  }
  return "";
}

struct TutorialSources {
  std::string cpp, cu;
  std::vector<std::string> blocks;  // each as it stands in the seed
  std::string missing;              // the anchors that found nothing
};

// The includes are the only lines that are not the seed's: those of the
// extension-cpp repository's muladd.cpp and muladd.cu (plus CUDAContext.h, so the
// shim's CUDA headers are built too).
constexpr const char* kCppIncludes = "#include <ATen/Operators.h>\n#include <torch/all.h>\n#include <torch/library.h>\n\n";
constexpr const char* kCuIncludes =
    "#include <ATen/Operators.h>\n#include <torch/all.h>\n#include <torch/library.h>\n\n"
    "#include <cuda.h>\n#include <cuda_runtime.h>\n#include <ATen/cuda/CUDAContext.h>\n\n";

TutorialSources assemble(const std::string& seed) {
  TutorialSources s;
  auto take = [&](std::string& into, const char* anchor, bool last) {
    const std::string b = extractBlock(seed, anchor, last);
    if (b.empty()) {
      s.missing += std::string(" '") + anchor + "'";
      return;
    }
    s.blocks.push_back(b);
    into += b + "\n\n";
  };
  s.cpp = kCppIncludes;
  take(s.cpp, "at::Tensor mymuladd_cpu(", false);
  take(s.cpp, "at::Tensor mymul_cpu(", false);
  take(s.cpp, "TORCH_LIBRARY(extension_cpp, m)", /*last=*/true);
  take(s.cpp, "TORCH_LIBRARY_IMPL(extension_cpp, CPU, m)", /*last=*/true);
  s.cu = kCuIncludes;
  take(s.cu, "__global__ void muladd_kernel(", false);
  take(s.cu, "at::Tensor mymuladd_cuda(", false);
  take(s.cu, "TORCH_LIBRARY_IMPL(extension_cpp, CUDA, m)", false);
  return s;
}

// The bundle's root object and metadata: the tutorial's registrations are its
// TORCH_LIBRARY blocks, so registerAll adds nothing.
constexpr const char* kBundleCc = R"(#include <QObject>

#include <strata/plugin.h>

class TutorialExtension : public QObject, public strata::Bundle {
  Q_OBJECT
  Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "bundle.json")
  Q_INTERFACES(strata::Bundle)

 public:
  void registerAll(strata::BundleRegistrar&) override {}
};

#include "bundle.moc"
)";
std::string bundleJson() {
  return "{\"name\": \"extension_cpp\", \"version\": \"1.0.0\", \"abi\": {\"major\": " +
         std::to_string(STRATA_SDK_ABI_MAJOR) + ", \"minor\": " + std::to_string(STRATA_SDK_ABI_MINOR) +
         "},\n \"description\": \"PyTorch's custom ops tutorial, built with strata::torch_compat\",\n"
         " \"defines\": [\"extension_cpp\"], \"implements\": []}\n";
}
constexpr const char* kCMakeLists = R"(cmake_minimum_required(VERSION 3.25)
project(extension_cpp LANGUAGES CXX)
find_package(strata REQUIRED)
set(sources bundle.cc muladd.cpp)
set(libs strata::torch_compat)
if(WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  list(APPEND sources muladd.cu)
  list(APPEND libs CUDA::cudart_static)
endif()
strata_add_bundle(extension_cpp SOURCES ${sources} LIBS ${libs})
)";

bool cudaBuilt() {
#ifdef STRATA_CUDA_COMPILER
  return true;
#else
  return false;
#endif
}

int run(const std::string& cmd, std::string* out) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  return pclose(p);
}

// A built tutorial bundle in its own temporary directory, and a plugin directory
// holding only it.
struct Built {
  QTemporaryDir tmp;
  std::string src = tmp.path().toStdString() + "/extension_cpp";
  QString plugins = tmp.path() + "/plugins";
  std::string library;  // the .so, in `plugins`
  std::string log;
};

// Writes the sources and builds them; `built.library` is empty (and `log` says why)
// when the build failed.
void buildTutorial(const TutorialSources& sources, Built& built) {
  std::filesystem::create_directories(built.src);
  QDir().mkpath(built.plugins);
  std::ofstream(built.src + "/muladd.cpp") << sources.cpp;
  std::ofstream(built.src + "/muladd.cu") << sources.cu;
  std::ofstream(built.src + "/bundle.cc") << kBundleCc;
  std::ofstream(built.src + "/bundle.json") << bundleJson();
  std::ofstream(built.src + "/CMakeLists.txt") << kCMakeLists;
  std::string configure = "'" STRATA_CMAKE "' -S " + built.src + " -B " + built.src + "/build -G Ninja" +
                          " -DCMAKE_CXX_COMPILER='" STRATA_CXX "' -Dstrata_DIR=" STRATA_BUILD_DIR "/sdk";
#ifdef STRATA_CUDA_COMPILER
  std::string archs = STRATA_CUDA_ARCHITECTURES;  // the build's, ','-separated
  std::replace(archs.begin(), archs.end(), ',', ';');
  configure += " -DWITH_CUDA=ON -DCMAKE_CUDA_COMPILER='" STRATA_CUDA_COMPILER "' '-DCMAKE_CUDA_ARCHITECTURES=" + archs + "'";
#endif
  if (run(configure, &built.log) != 0 || run("'" STRATA_CMAKE "' --build " + built.src + "/build", &built.log) != 0) {
    return;
  }
  const std::string so = built.src + "/build/libextension_cpp_1_0_0.so";
  const std::string to = built.plugins.toStdString() + "/libextension_cpp_1_0_0.so";
  if (!QFile::copy(QString::fromStdString(so), QString::fromStdString(to))) {
    built.log += "\nno " + so;
    return;
  }
  built.library = to;
}

// The seed, or why the test cannot run.
std::optional<std::string> seedOrSkipReason(std::string* why) {
  auto seed = readFile(STRATA_TUTORIAL_SEED);
  if (!seed) *why = "the tutorial seed " STRATA_TUTORIAL_SEED " is absent (CI clones shared/ beside the repository)";
  return seed;
}

// The tutorial's Python-side registrations (torch.library.register_fake and
// register_autograd, with the backward calling mymul), made after the C++ library
// is loaded, as the tutorial says they must be.
std::vector<RegistrationHandleRAII> registerPythonSide() {
  std::vector<RegistrationHandleRAII> handles;
  handles.push_back(modes::register_fake("extension_cpp::mymuladd", [](const Tensor& a, const Tensor& b, double) {
    STRATA_CHECK(std::vector<int64_t>(a.sizes().begin(), a.sizes().end()) ==
                     std::vector<int64_t>(b.sizes().begin(), b.sizes().end()), Value, "a.shape != b.shape");
    STRATA_CHECK(a.dtype() == ScalarType::Float && b.dtype() == ScalarType::Float, Value, "expected float");
    STRATA_CHECK(a.device() == b.device(), Value, "a.device != b.device");
    return ops::empty_like(a);
  }));
  const auto mymul =
      Dispatcher::singleton().findSchemaOrThrow("extension_cpp::mymul").typed<Tensor(const Tensor&, const Tensor&)>();
  handles.push_back(modes::register_autograd(
      "extension_cpp::mymuladd",
      [mymul](modes::AutogradContext& ctx, const std::vector<Tensor>& grads) {
        const std::vector<Tensor> saved = ctx.saved_tensors();  // (saved_a, saved_b)
        std::vector<IValue> out(3);
        if (ctx.needs_input_grad(0)) out[0] = mymul.call(grads[0], saved[1]);
        if (ctx.needs_input_grad(1)) out[1] = mymul.call(grads[0], saved[0]);
        return out;
      },
      [](modes::AutogradContext& ctx, const Stack& inputs, const Stack&) {
        Tensor saved_a, saved_b;
        if (ctx.needs_input_grad(0)) saved_b = inputs[1].toTensor();
        if (ctx.needs_input_grad(1)) saved_a = inputs[0].toTensor();
        ctx.save_for_backward({saved_a, saved_b});
      }));
  return handles;
}

// The tutorial's sample_inputs(device, requires_grad=...): randn is rand here.
std::vector<Stack> sampleInputs(Device device, bool requires_grad) {
  auto make = [&](std::vector<int64_t> size) {
    return ops::rand(size, std::nullopt, device).set_requires_grad(requires_grad);
  };
  auto nondiff = [&](std::vector<int64_t> size) { return ops::rand(size, std::nullopt, device); };
  return {{make({3}), make({3}), int64_t{1}},
          {make({20}), make({20}), 3.14},
          {make({20}), nondiff({20}), int64_t{-123}},
          {nondiff({2, 3}), make({2, 3}), -0.3}};
}

// The tutorial's "Testing an operator": correctness against a * b + c, and opcheck.
void runTutorialChecks(Device device) {
  const OperatorHandle op = Dispatcher::singleton().findSchemaOrThrow("extension_cpp::mymuladd");
  std::vector<Stack> samples = sampleInputs(device, /*requires_grad=*/true);
  for (Stack& s : sampleInputs(device, /*requires_grad=*/false)) samples.push_back(std::move(s));
  for (size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    const Stack& args = samples[i];
    Stack stack = args;
    op.callBoxed(stack);
    ASSERT_EQ(stack.size(), 1u);
    const Tensor result = stack[0].toTensor();
    EXPECT_EQ(result.device().type, device.type);
    const Tensor a = args[0].toTensor().detach(), b = args[1].toTensor().detach();
    const Tensor expected = ops::add(ops::mul(a, b), args[2].isInt() ? Scalar(args[2].toInt()) : Scalar(args[2].toDouble()));
    EXPECT_NO_THROW(modes::assert_close(result.detach().to(kCPU), expected.to(kCPU)));
    const modes::OpcheckResults r = modes::opcheck("extension_cpp::mymuladd", args, modes::opcheck_default_tests(),
                                                   /*raise_exception=*/false);
    for (const auto& [test, outcome] : r) {
      // The op has no vmap or autocast rule (those two skip), and the autograd test
      // needs an input that requires grad; the others apply.
      const bool grad = args[0].toTensor().requires_grad() || args[1].toTensor().requires_grad();
      const bool may_skip = test == "test_vmap" || test == "test_autocast" || (test == "test_autograd_registration" && !grad);
      EXPECT_TRUE(outcome == "SUCCESS" || (may_skip && outcome.rfind("SKIPPED", 0) == 0)) << test << ": " << outcome;
    }
    EXPECT_EQ(r.count("test_faketensor"), 1u);
  }
  // Training, as the tutorial's register_autograd sets it up: d(a*b+c)/da = b. Its
  // backward calls mymul, which the tutorial gives a CPU kernel only.
  if (!device.is_cpu()) return;
  const Tensor a = ops::rand({5}, std::nullopt, device).set_requires_grad(true);
  const Tensor b = ops::rand({5}, std::nullopt, device);
  Stack stack{a, b, 2.0};
  op.callBoxed(stack);
  ops::sum(stack[0].toTensor()).backward();
  ASSERT_TRUE(a.grad().defined());
  EXPECT_NO_THROW(modes::assert_close(a.grad().to(kCPU), b.to(kCPU)));
}

TEST(TutorialExtension, SeedYieldsTheTutorialSourcesWithOnlyIncludesAdded) {
  std::string why;
  const auto seed = seedOrSkipReason(&why);
  if (!seed) GTEST_SKIP() << why;
  const TutorialSources s = assemble(*seed);
  ASSERT_EQ(s.missing, "") << "anchors not found in the seed";
  ASSERT_EQ(s.blocks.size(), 7u);
  // Every line but the includes is the seed's own text, in blocks as the seed has them.
  for (const std::string& b : s.blocks) EXPECT_NE(seed->find(b), std::string::npos) << b;
  for (const std::string* file : {&s.cpp, &s.cu}) {
    std::istringstream lines(*file);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line.rfind("#include <", 0) == 0) continue;
      EXPECT_NE(seed->find(line), std::string::npos) << "not the seed's: " << line;
    }
  }
  EXPECT_THAT(s.cpp, HasSubstr("m.def(\"mymul(Tensor a, Tensor b) -> Tensor\");"));
  EXPECT_THAT(s.cu, HasSubstr("muladd_kernel<<<(numel+255)/256, 256>>>(numel, a_ptr, b_ptr, c, result_ptr);"));
  // The brace matcher skips braces in comments and strings.
  EXPECT_EQ(extractBlock("x\nf() { // }\n  g(\"}\", '{'); /* { */ }\nrest", "f()"),
            "f() { // }\n  g(\"}\", '{'); /* { */ }");
  EXPECT_EQ(extractBlock("f() { {", "f()"), "");
}

TEST(TutorialExtension, BuildsLoadsInTheTransactionAndPassesTheTutorialChecksOnCpu) {
  std::string why;
  const auto seed = seedOrSkipReason(&why);
  if (!seed) GTEST_SKIP() << why;
  Built built;
  buildTutorial(assemble(*seed), built);
  ASSERT_FALSE(built.library.empty()) << "building the tutorial's sources failed:\n" << built.log;

  db::Store store((built.tmp.path() + "/strata.db").toStdString());
  auto host = std::make_unique<host::PluginHost>(built.plugins, &store);
  host->sync();
  ASSERT_EQ(host->loaded().count("extension_cpp"), 1u) << [&] {
    std::string rows;
    for (const auto& b : store.bundles()) rows += b.name + " " + b.state + ": " + b.reason + "\n";
    return rows;
  }();

  // The TORCH_LIBRARY blocks ran in the load transaction: every registration of the
  // namespace is the bundle's, and none was refused at library load.
  auto& d = Dispatcher::singleton();
  for (const char* name : {"extension_cpp::mymuladd", "extension_cpp::mymul"}) {
    const auto regs = d.registrations(parseOperatorName(name));
    EXPECT_FALSE(regs.empty()) << name;
    for (const auto& r : regs) EXPECT_EQ(r.owner, kBundle) << name << " " << r.kind << " " << r.debug;
  }
  EXPECT_EQ(get_kernel("extension_cpp::mymuladd", "cpu").owner(), kBundle);
  EXPECT_EQ(get_kernel("extension_cpp::mymul", "cpu").owner(), kBundle);
  if (cudaBuilt()) EXPECT_EQ(get_kernel("extension_cpp::mymuladd", "cuda").owner(), kBundle);
  EXPECT_THAT(d.dump(parseOperatorName("extension_cpp::mymuladd")), HasSubstr("muladd.cpp"));
  EXPECT_TRUE(detail::staticRegistrationErrors().empty());

  // The real CLI sees the same owner.
  std::string out;
  const std::string opts = " --plugins " + built.plugins.toStdString() + " --db " + built.tmp.path().toStdString() + "/cli.db";
  EXPECT_EQ(run("'" STRATA_CLI "' dump extension_cpp::mymuladd" + opts, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr(kBundle));

  {
    auto python_side = registerPythonSide();
    runTutorialChecks(kCPU);
  }

  // The shim's TORCH_CHECKs are the kernel's errors, with PyTorch's messages.
  auto mymuladd = d.findSchemaOrThrow("extension_cpp::mymuladd").typed<Tensor(const Tensor&, const Tensor&, double)>();
  try {
    mymuladd.call(ops::ones({3}), ops::ones({4}), 1.0);
    ADD_FAILURE() << "mismatched sizes did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Expected a.sizes() == b.sizes() to be true, but got false."));
  }
  try {
    mymuladd.call(ops::ones({3}, ScalarType::Double), ops::ones({3}, ScalarType::Double), 1.0);
    ADD_FAILURE() << "float64 did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Expected a.dtype() == at::kFloat to be true, but got false."));
  }

  // Unloading is deregistration: the bundle's ops go with it.
  ASSERT_TRUE(QFile::remove(QString::fromStdString(built.library)));
  host->sync();
  EXPECT_EQ(host->loaded().count("extension_cpp"), 0u);
  EXPECT_FALSE(d.findOp(parseOperatorName("extension_cpp::mymuladd")).has_value());
}

TEST(TutorialExtension, PassesTheTutorialChecksOnCuda) {
  if (!cudaBuilt()) GTEST_SKIP() << "strata was built without CUDA: muladd.cu is not compiled";
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  std::string why;
  const auto seed = seedOrSkipReason(&why);
  if (!seed) GTEST_SKIP() << why;
  Built built;
  buildTutorial(assemble(*seed), built);
  ASSERT_FALSE(built.library.empty()) << "building the tutorial's sources failed:\n" << built.log;
  db::Store store((built.tmp.path() + "/strata.db").toStdString());
  host::PluginHost host(built.plugins, &store);
  host.sync();
  ASSERT_EQ(host.loaded().count("extension_cpp"), 1u);
  EXPECT_EQ(get_kernel("extension_cpp::mymuladd", "cuda").owner(), kBundle);
  auto python_side = registerPythonSide();
  runTutorialChecks(Device(DeviceType::CUDA, 0));
}

}  // namespace
}  // namespace strata
