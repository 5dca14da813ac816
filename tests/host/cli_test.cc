// The strata CLI as a user runs it: a real process, its output and exit status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "readme_example.h"
#include "strata/db/store.h"
#include "strata/plugin.h"  // STRATA_SDK_ABI_MAJOR / MINOR

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Result {
  int status;
  std::string out;
};

// Runs `strata ARGS` with stdin from a file holding input; stderr joins stdout.
Result run(const std::string& args, const std::string& input = "", const std::string& env = "") {
  // One file per test process: ctest -j runs tests of this binary side by side.
  const std::string in_path = ::testing::TempDir() + "/strata_cli_stdin." + std::to_string(::getpid()) + ".txt";
  std::ofstream(in_path) << input;
  // Each test its own store: a command given no --db uses $STRATA_DB, never a
  // strata.db that tests running side by side would share.
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string own_db = ::testing::TempDir() + "/strata_cli." + std::to_string(::getpid()) + "." +
                             (test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() : "none") +
                             ".db";
  const std::string cmd = "STRATA_DB=" + own_db + " " + (env.empty() ? "" : env + " ") + std::string(STRATA_CLI) +
                          " " + args + " < " + in_path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  std::remove(in_path.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Shell-quotes one argument.
std::string q(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

const char* kExamples[] = {
    "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
    "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
    "aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
    "aten::_unpack_dual(Tensor(a) dual, int level) -> (Tensor(a) primal, Tensor tangent)",
    "aten::avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, bool ceil_mode=False, "
    "bool count_include_pad=True) -> Tensor",
    "aten::slogdet.out(Tensor self, *, Tensor(a!) sign, Tensor(b!) logabsdet) -> (Tensor(a!) sign, Tensor(b!) logabsdet)",
    "aten::rand.names_out(int[] size, *, str[]? names, Tensor(a!) out) -> Tensor(a!)",
    "aten::_backward(Tensor self, Tensor[] inputs, Tensor? gradient=None, bool? retain_graph=None, bool "
    "create_graph=False) -> ()",
    "extension_cpp::mymuladd(Tensor a, Tensor b, float c) -> Tensor",
};

TEST(CliSchemaTest, RoundTripsTheExamplesFromArguments) {
  std::string args = "schema";
  std::string expected;
  for (const char* s : kExamples) {
    args += " " + q(s);
    expected += std::string(s) + "\n";
  }
  const Result r = run(args);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, expected);
  // A byte order mark before the first line (as editors on Windows save) is not part of it.
  const Result bom = run("schema", "\xEF\xBB\xBF" + std::string(kExamples[0]) + "\n");
  EXPECT_EQ(bom.status, 0) << bom.out;
  EXPECT_EQ(bom.out, std::string(kExamples[0]) + "\n");
}

TEST(CliSchemaTest, RoundTripsTheExamplesFromStdin) {
  std::string input;
  input += "# comment lines and blank lines are not inputs\n";
  for (const char* s : kExamples) input += std::string(s) + "\n\n";
  const Result r = run("schema", input);
  EXPECT_EQ(r.status, 0);
  std::string expected;
  for (const char* s : kExamples) expected += std::string(s) + "\n";
  EXPECT_EQ(r.out, expected);
}

TEST(CliSchemaTest, InvalidInputPrintsTheColumnAndExitsOne) {
  const Result r = run("schema", "aten::f(Tensor x) -> Tensor\naten::add(Tensr self) -> Tensor\nmylib::g(int x=\"s\") -> ()\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out,
            "aten::f(Tensor x) -> Tensor\n"
            "error: 11: unknown type 'Tensr'; common types are Tensor, SymInt, int, float, bool, str, Scalar, "
            "ScalarType, Device\n"
            "error: 16: expected a default of type int, got a string ('\"s\"')\n");
  // A line that is not UTF-8 is refused by its number; CRLF lines read as lines.
  const Result bytes = run("schema", "a::c(str x='\xc3\x28') -> ()\r\na::d(Tensor x) -> Tensor\r\n");
  EXPECT_EQ(bytes.status, 1);
  EXPECT_EQ(bytes.out, "error: line 1 is not valid UTF-8\na::d(Tensor x) -> Tensor\n");
  const Result json = run("schema --json", "a::c(str x='\xc3\x28') -> ()\n");
  EXPECT_EQ(json.status, 1);
  EXPECT_EQ(json.out, "{\"error\":{\"reason\":\"not valid UTF-8\"},\"line\":1,\"ok\":false}\n");
}

TEST(CliSchemaTest, GarbageNeverCrashes) {
  std::string input;
  for (const char* s : {"(((((", "))))", "aten::", "::", "a::b.c.d", "a(Tensor(a!)[](b)?[3]?", "\x01\x02\x7f",
                        "a(int x=[[[[1]]]]) -> ()", "a(Dict(Dict(str,str),Union()) x) -> ()", "'", "\"\\"}) {
    input += std::string(s) + "\n";
  }
  const Result r = run("schema", input);
  EXPECT_EQ(r.status, 1);
  size_t lines = 0;
  for (char c : r.out) lines += c == '\n';
  EXPECT_EQ(lines, 11u);
  EXPECT_THAT(r.out, StartsWith("error: "));
}

TEST(CliSchemaTest, HugeAndDeepInputsAreErrorsNotCrashes) {
  std::string deep = "a(";
  for (int i = 0; i < 200000; ++i) deep += "Dict(str, ";
  const Result r = run("schema", deep + "\n" + std::string(1 << 20, 'x') + "\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("error: 638: types nest more than 64 levels deep\n"));
  EXPECT_THAT(r.out, HasSubstr("error: 1048577: expected '(' and an argument list after the operator name\n"));
}

TEST(CliSchemaTest, JsonDescribesTheParsedStructure) {
  const Result r = run("schema --json " + q("aten::add.out(Tensor self, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)") +
                       " " + q("bad("));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("\"name\":\"aten::add\""));
  EXPECT_THAT(r.out, HasSubstr("\"overload\":\"out\""));
  EXPECT_THAT(r.out, HasSubstr("\"default\":\"1\""));
  EXPECT_THAT(r.out, HasSubstr("\"kwarg_only\":true"));
  EXPECT_THAT(r.out, HasSubstr("\"write\":true"));
  EXPECT_THAT(r.out, HasSubstr("\"ok\":false"));
  EXPECT_THAT(r.out, HasSubstr("\"column\":5"));
}

TEST(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(run("").status, 2);
  EXPECT_EQ(run("frobnicate").status, 2);
  const Result r = run("schema --no-such-flag x");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("Unknown option 'no-such-flag'"));
  EXPECT_EQ(run("--help").status, 0);
  const Result h = run("schema --help");
  EXPECT_EQ(h.status, 0);
  EXPECT_THAT(h.out, HasSubstr("--json"));
  EXPECT_THAT(h.out, StartsWith("Usage: strata schema [options] [SCHEMA...]"));
  // A path variable that is not UTF-8 would name another file: refused, as such an argument is.
  const Result env = run("audit", "", "STRATA_DB=\"$(printf 'x\\377.db')\"");
  EXPECT_EQ(env.status, 2) << env.out;
  EXPECT_THAT(env.out, HasSubstr("$STRATA_DB is not valid UTF-8"));
  // --help-all, which every command's help lists, is help too: the command does not run.
  char tmpl[] = "/tmp/strata-helpall-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  EXPECT_EQ(run("--help-all").status, 0);
  const Result all = run("kernel disable core::add.Tensor cpu --help-all --db " + dir + "/s.db");
  EXPECT_EQ(all.status, 0);
  EXPECT_THAT(all.out, StartsWith("Usage: strata kernel [options] disable|enable OP DEVICE_OR_KEY"));
  EXPECT_THAT(all.out, Not(HasSubstr("disabled core::add.Tensor")));
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.db"));
  std::filesystem::remove_all(dir);
}

// Note [Reaping bundle caches]: a process that loads bundles copies them to a cache
// it keeps locked; one killed leaves the cache behind, unlocked, and the next process
// removes it, and only it: not one whose lock is held, nor one without a lock file.
TEST(CliTest, ABundleCacheLeftByADeadProcessIsRemovedByTheNext) {
  char tmpl[] = "/tmp/strata-reap-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string tmp = dir + "/tmp", plugins = dir + "/plugins";
  std::filesystem::create_directories(tmp);
  std::filesystem::create_directories(plugins);
  std::filesystem::copy_file(STRATA_PLUGIN_BUILD_DIR "/libmylib.so", plugins + "/libmylib.so");
  const std::string stale = tmp + "/strata-bundles-123-AbC123";  // its process is gone: the lock is free
  const std::string held = tmp + "/strata-bundles-456-AbC123";   // alive (this test holds its lock)
  const std::string unlocked = tmp + "/strata-bundles-789-AbC123";  // no lock file: not ours to judge
  for (const auto& d : {stale, held, unlocked}) {
    std::filesystem::create_directories(d);
    std::ofstream(d + "/copy.so") << "bytes";
  }
  std::ofstream(stale + "/.lock") << "";
  const int held_fd = ::open((held + "/.lock").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(held_fd, 0);
  ASSERT_EQ(::flock(held_fd, LOCK_EX | LOCK_NB), 0);
  const Result r = run("plugins list --plugins " + plugins + " --db " + dir + "/s.db", "", "TMPDIR=" + tmp);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("mylib"));
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(held + "/copy.so"));
  EXPECT_TRUE(std::filesystem::exists(unlocked + "/copy.so"));
  size_t left = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp)) left += e.is_directory();
  EXPECT_EQ(left, 2u);  // the command's own cache went with it
  ::close(held_fd);
  std::filesystem::remove_all(dir);
}

TEST(CliTest, DemoRuns) {
  const Result r = run("demo");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("extension_cpp::mymuladd(Tensor a, Tensor b, float c) -> Tensor"));
  EXPECT_THAT(r.out, HasSubstr("DispatchKeySet(AutogradCPU, CPU)"));
}

}  // namespace

TEST(CliCheck, MuladdPassesAndTheBrokenBundleFailsOneTestPerOp) {
  const std::string tmp = ::testing::TempDir() + "/strata_check." + std::to_string(::getpid());
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp + "/plugins");
  const Result ok = run("check muladd --db " + q(tmp + "/a.db"));
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_THAT(ok.out, HasSubstr("extension_cpp::mymuladd"));
  EXPECT_THAT(ok.out, HasSubstr("gradcheck"));
  EXPECT_THAT(ok.out, HasSubstr("test_faketensor"));
  // A skipped row says so once: the result column, then the why alone.
  EXPECT_THAT(ok.out, ::testing::ContainsRegex("test_vmap +sample 0 +skipped +no batching rule\n"));
  EXPECT_THAT(ok.out, Not(HasSubstr("SKIPPED")));
  EXPECT_THAT(ok.out, HasSubstr("muladd@1.1.0: "));
  EXPECT_THAT(ok.out, HasSubstr(", 0 failed\n"));
  std::filesystem::copy_file(std::string(STRATA_BUILD_DIR) + "/tests/bundles/libbroken_check.so",
                             tmp + "/plugins/libbroken_check.so");
  const Result bad = run("check broken_check --json --plugins " + q(tmp + "/plugins") + " --db " + q(tmp + "/b.db"));
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("\"result\": \"fail\""));
  const Result table = run("check broken_check --plugins " + q(tmp + "/plugins") + " --db " + q(tmp + "/b.db"));
  EXPECT_EQ(table.status, 1);
  EXPECT_THAT(table.out, HasSubstr(", 3 failed\n"));
  const Result bad_policy = run("serve --check=sometimes --db " + q(tmp + "/a.db"));
  EXPECT_EQ(bad_policy.status, 2);
  EXPECT_THAT(bad_policy.out, HasSubstr("--check takes 'record' or 'enforce', got 'sometimes'"));
  const Result unknown = run("check nosuch --db " + q(tmp + "/a.db"));
  EXPECT_EQ(unknown.status, 1);
  EXPECT_THAT(unknown.out, HasSubstr("error: no loaded bundle or operator named 'nosuch'"));
  // A bundle the host saw and refused: the check says why there is nothing to check.
  std::filesystem::copy_file(std::string(STRATA_BUILD_DIR) + "/tests/bundles/libstatic_throws.so",
                             tmp + "/plugins/libstatic_throws.so");
  const Result refused = run("check static_throws --plugins " + q(tmp + "/plugins") + " --db " + q(tmp + "/b.db"));
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_THAT(refused.out,
              HasSubstr("error: bundle static_throws@1.0.0 is not loaded, so it has nothing to check: it was rejected: "));
  std::filesystem::remove_all(tmp);
}

// A kernel's throw of something that is not a std::exception is an error of the
// command (exit 1, saying so), not std::terminate; and output that cannot be written
// (a full disk) is an error, not a silent success.
TEST(CliTest, AForeignThrowAndAnUnwritableOutputAreErrors) {
  const std::string tmp = ::testing::TempDir() + "/strata_cli_throw." + std::to_string(::getpid());
  std::filesystem::create_directories(tmp + "/plugins");
  std::filesystem::copy_file(std::string(STRATA_BUILD_DIR) + "/tests/bundles/libkernel_throws_int.so",
                             tmp + "/plugins/libkernel_throws_int.so",
                             std::filesystem::copy_options::overwrite_existing);
  const Result r = run("call kthrow::f 'ones(2)' --plugins " + q(tmp + "/plugins") + " --db " + q(tmp + "/s.db"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("threw an exception that is not a std::exception"));
  const Result many = run("call kthrow::many 'ones(2)' --plugins " + q(tmp + "/plugins") + " --db " + q(tmp + "/s.db"));
  EXPECT_EQ(many.status, 1) << many.out;
  EXPECT_THAT(many.out, HasSubstr("kthrow::many: its kernel returned 2 value(s), but the schema"));
  if (std::filesystem::exists("/dev/full")) {
    const std::string cmd = "STRATA_DB=" + q(tmp + "/s.db") + " " + std::string(STRATA_CLI) + " ops > /dev/full 2> " +
                            q(tmp + "/err.txt");
    const int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
    std::stringstream err;
    err << std::ifstream(tmp + "/err.txt").rdbuf();
    EXPECT_THAT(err.str(), HasSubstr("cannot write the output: No space left on device"));
  }
  std::filesystem::remove_all(tmp);
}

// A bundle that makes its op in registerAll and does not keep it loads with a warning,
// and a call of the op says why it may be missing; a second DEF library of one
// namespace is refused naming the bundle that made both.
TEST(CliTest, AnOpNotKeptAndASecondDefLibraryAreExplained) {
  const std::string tmp = ::testing::TempDir() + "/strata_cli_unkept." + std::to_string(::getpid());
  std::filesystem::create_directories(tmp + "/plugins");
  for (const char* b : {"libunkept.so", "libtwo_defs.so"}) {
    std::filesystem::copy_file(std::string(STRATA_BUILD_DIR) + "/tests/bundles/" + b, tmp + "/plugins/" + b,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::ofstream(tmp + "/plugins/libjunk.so") << "junk";  // read, and found no bundle: not "refused unread"
  const std::string where = " --plugins " + q(tmp + "/plugins") + " --db " + q(tmp + "/s.db");
  const Result r = run("call unkept::f 'ones(2)'" + where);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("unkept@1.0.0 defined unkept::f in registerAll and dropped it before registerAll "
                               "returned"));
  EXPECT_THAT(r.out, HasSubstr("no operator named unkept::f (bundle unkept@1.0.0 defined unkept::f in registerAll and "
                               "dropped it before registerAll returned"));
  EXPECT_THAT(r.out, HasSubstr("r.keep(std::move(op)), or r.library(...) for a library"));
  EXPECT_THAT(r.out, Not(HasSubstr("refused before")));
  // A bundle that keeps its ops (the bundled ones) draws no such warning.
  const Result fine = run("ops mylib:: --plugins " STRATA_PLUGIN_BUILD_DIR " --db " + q(tmp + "/s.db"));
  EXPECT_THAT(fine.out, Not(HasSubstr("dropped")));
  const Result list = run("plugins list" + where);
  EXPECT_THAT(list.out, HasSubstr("Only a single STRATA_LIBRARY"));
  EXPECT_THAT(list.out, HasSubstr("Previous STRATA_LIBRARY: registered by r.library() in bundle two_defs@1.0.0"));
  std::filesystem::remove_all(tmp);
}

TEST(CliOpsTest, ListsTheCoreOpsAndFilters) {
  const Result r = run("ops");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("core::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n"));
  EXPECT_THAT(r.out, HasSubstr("core::matmul(Tensor self, Tensor other) -> Tensor\n"));
  const Result f = run("ops core::sin");
  EXPECT_EQ(f.out, "core::sin(Tensor self) -> Tensor\n");
  const Result j = run("ops --json core::sin");
  EXPECT_EQ(j.status, 0);
  EXPECT_THAT(j.out, HasSubstr("\"owner\": \"builtin\""));
  EXPECT_THAT(j.out, HasSubstr("\"key\": \"Meta\""));
}

TEST(CliDumpTest, PrintsTheTableAndRejectsUnknownOps) {
  const Result r = run("dump core::sin");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("schema: core::sin(Tensor self) -> Tensor\ntags: core, pointwise\n"
                               "alias analysis: FROM_SCHEMA\n"));
  EXPECT_THAT(r.out, HasSubstr("CPU                  kernel [unboxed, owner builtin"));
  EXPECT_THAT(r.out, HasSubstr("AutogradCPU          autograd kernel [boxed at Autograd, owner builtin, autograd "
                               "formula SinBackward0"));
  const Result j = run("dump --json core::sin");
  EXPECT_EQ(j.status, 0);
  EXPECT_THAT(j.out, HasSubstr("\"source\": \"fallthrough\""));  // the autocast keys
  EXPECT_THAT(j.out, HasSubstr("\"tags\": [\n        \"core\",\n        \"pointwise\"\n    ]"));
  EXPECT_THAT(j.out, HasSubstr("\"alias_analysis\": \"FROM_SCHEMA\""));
  const Result bad = run("dump nope::nothing");
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.out, HasSubstr("error: no operator named nope::nothing"));
  EXPECT_EQ(run("dump 'not a name'").status, 1);
  EXPECT_EQ(run("dump").status, 2);
}

// Rules read as what they are: a mode's torch_dispatch rule names the mode type, and
// a long name still leaves a space before the owner column; the sample-inputs rule,
// which has no target type, shows as its kind alone.
TEST(CliDumpTest, RulesAreReadableAndKeepTheOwnerColumn) {
  const Result r = run("dump extension_cpp::mymuladd");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\nrules:\n"));
  EXPECT_THAT(r.out, HasSubstr("\n  sample_inputs" + std::string(14, ' ') + "owner=muladd@1.1.0   registered at "));
  EXPECT_THAT(r.out, HasSubstr("\n  torch_dispatch[(anonymous namespace)::FlopCounterMode] owner=flop_counter@1.0.0 "));
  EXPECT_THAT(r.out, Not(HasSubstr("SampleInputsRule")));
  EXPECT_THAT(r.out, Not(HasSubstr("]owner=")));
  // The registrations keep their columns.
  EXPECT_THAT(r.out, HasSubstr("\n  CPU                        unboxed     owner=muladd@1.1.0   registered at "));
  const Result show = run("plugins show muladd");
  EXPECT_EQ(show.status, 0) << show.out;
  EXPECT_THAT(show.out, HasSubstr("  extension_cpp::mymuladd  sample_inputs  rule  owner=muladd@1.1.0\n"));
  EXPECT_THAT(show.out, Not(HasSubstr("SampleInputsRule")));
}

TEST(CliCallTest, RunsOpsOnLiteralArguments) {
  Result r = run("call core::add 'ones(2,3)' '[1,2,3]' alpha=2");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([[3., 5., 7.],\n        [3., 5., 7.]])\n");
  r = run("call core::mul '[[1,2],[3,4]]:f16' -1.5");
  EXPECT_EQ(r.out, "tensor([[-1.5000, -3.0000],\n        [-4.5000, -6.0000]], dtype=float16)\n");
  r = run("call core::sum '[[1,2],[3,4]]' dim=1 keepdim=true");
  EXPECT_EQ(r.out, "tensor([[3],\n        [7]])\n");
  r = run("call core::zeros '[2,3]' device=meta");
  EXPECT_THAT(r.out, HasSubstr("device='meta'"));
  r = run("call core::allclose 'randn(4)' 'randn(4)' --seed 3");  // two draws
  EXPECT_EQ(r.out, "False\n");
  r = run("call core::allclose 'randn(4)' 'randn(4):f64' --seed 3");  // as torch.allclose: one dtype
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "error: core::allclose: float32 did not match float64\n");
  r = run("call core::neg '[true,2]'");  // bools are 0 and 1 among ints, as in torch.tensor
  EXPECT_EQ(r.out, "tensor([-1, -2])\n");
  r = run("call core::neg '[9007199254740993]'");  // 2^53 + 1: int64 literals do not pass through double
  EXPECT_EQ(r.out, "tensor([-9007199254740993])\n");
  // A float64 literal is read as a double, not rounded through float32 first.
  r = run("call core::sub '[0.1,1e300]:f64' 0.1");
  EXPECT_EQ(r.out, "tensor([ 0.0000e+00, 1.0000e+300], dtype=float64)\n");
  r = run("call core::clone '[9223372036854775807,0.5]:i64'");  // integers exact beside a float
  EXPECT_EQ(r.out, "tensor([9223372036854775807,                   0])\n");
  r = run("call core::cat '[ones(2),[1,2]]'");
  EXPECT_EQ(r.out, "tensor([1., 1., 1., 2.])\n");
  r = run("call core::matmul 'arange(6):f32' '[1.5]'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("shapes cannot be multiplied"));
}

TEST(CliCallTest, ExplainSaysWhyEachLayerRan) {
  const Result r = run("call core::mul '[1.,2.]:requires_grad' 2 --explain");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("self: DispatchKeySet(AutogradCPU, CPU)"));
  EXPECT_THAT(r.out, HasSubstr("final key set: DispatchKeySet(AutogradCPU, CPU)"));
  EXPECT_THAT(r.out, HasSubstr("chosen: AutogradCPU -> autograd kernel (boxed, owner builtin, autograd formula "
                               "MulBackward1"));
  EXPECT_THAT(r.out, HasSubstr("redispatch core::mul.Scalar (boxed)  keys=DispatchKeySet(CPU) -> CPU: kernel"));
  EXPECT_THAT(r.out, HasSubstr("result:\ntensor([2., 4.], grad_fn=<MulBackward1>)"));
}

TEST(CliCallTest, BadArgumentsAreClearErrors) {
  Result r = run("call core::sin '[1,2'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("argument 'self' (position 0, Tensor): '[1,2': unbalanced brackets"));
  r = run("call core::sin '[[1,2],[3]]'");
  EXPECT_THAT(r.out, HasSubstr("ragged"));
  // Methods cannot take a literal past the dims a literal may have.
  std::string tall = "'ones(2)";
  for (int i = 0; i < 70; ++i) tall += ".unsqueeze(0)";
  r = run("call core::clone " + tall + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr(".unsqueeze(...) makes 65 dims (a tensor literal has at most 64 dims)"));
  // A number and a list at one depth, in either order, as torch.tensor refuses them.
  for (const char* ragged : {"'[1,[2]]'", "'[[1],2]'", "'[1,[2,3]]'", "'[[[1]],2]'", "'[[[]],1]'"}) {
    r = run(std::string("call core::clone ") + ragged);
    EXPECT_EQ(r.status, 1) << ragged << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("a ragged nested list (numbers and lists at the same depth)")) << ragged;
  }
  // randn and rand make floats, as torch.randn(3, dtype=torch.int64) refuses to make ints.
  r = run("call core::clone 'randn(3):i64'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("'randn(3):i64': randn makes floating-point values, and int64 is not a floating-point "
                               "type (convert after: randn(..).to(int64))"));
  EXPECT_EQ(run("call core::clone 'rand(2):bool'").status, 1);
  EXPECT_EQ(run("call core::clone 'rand(2):f64'").status, 0);
  // An integer dtype takes only the values it holds, as torch.tensor's does.
  for (const char* lit : {"'[300]:u8'", "'[-0.5]:u8'", "'[255.5]:u8'", "'[-256]:u8'", "'[1e10]:i32'", "'[nan]:i64'",
                          "'[inf]:i32'", "'[1,128]:i8'"}) {
    r = run(std::string("call core::clone ") + lit);
    EXPECT_EQ(r.status, 1) << lit << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("without overflow")) << lit;
  }
  r = run("call core::clone '[255,-1,true]:u8'");  // -1 wraps, as PyTorch's uint8 lets it
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([255, 255,   1], dtype=uint8)\n");
  r = run("call core::clone '[2.5,0.5]:u8'");  // a float in range rounds toward 0
  EXPECT_EQ(r.out, "tensor([2, 0], dtype=uint8)\n");
  r = run("call core::clone '[[],[]]'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([], size=(2, 0))\n");
  r = run("call core::add 'ones(2)' abc");
  EXPECT_THAT(r.out, HasSubstr("no overload of core::add takes these arguments"));
  r = run("call core::sin 'ones(2)' 'ones(2)'");
  EXPECT_THAT(r.out, HasSubstr("one too many"));
  r = run("call core::sin");
  EXPECT_THAT(r.out, HasSubstr("missing argument 'self'"));
  r = run("call core::sin nope=1");
  EXPECT_THAT(r.out, HasSubstr("no argument named 'nope'"));
  r = run("call core::sin 'ones(2):f17'");
  EXPECT_THAT(r.out, HasSubstr("unknown modifier 'f17'"));
  r = run("call nope::x");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no operator named nope::x"));
  EXPECT_EQ(run("call").status, 2);
  EXPECT_EQ(run("call core::sin 'ones(2)' --seed x").status, 2);
}

// The modes layers register fallbacks that shadow the builtin ones at the same keys
// (allow_override keeps both): "no kernel" lists each key once, as it serves.
TEST(CliCallTest, NoKernelListsEachBackendFallbackOnce) {
  const Result r = run("call mylib::sin 'ones(3).to(\"meta\")'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("mylib::sin: no kernel for dispatch key Meta"));
  const size_t at = r.out.find(". Backend fallbacks:");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string listed = r.out.substr(at);
  for (const char* key : {" AutogradMeta (", " AutogradCPU (", " Fake (", " Mode (", " AutocastCPU ("}) {
    size_t n = 0;
    for (size_t i = listed.find(key); i != std::string::npos; i = listed.find(key, i + 1)) ++n;
    EXPECT_EQ(n, 1u) << key << " in " << listed;
  }
}

// Literals have a documented cap (64 dims, 2^24 elements): deep nesting and huge or
// overflowing sizes are refused with the reason, never a stack overflow or a 4 GB
// allocation; a result of 40,000 dims prints its size.
TEST(CliCallTest, DeepAndHugeLiteralsAreRefusedWithTheCap) {
  Result r = run("call core::sin " + q(std::string(20000, '[') + "1" + std::string(20000, ']')));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("lists nest more than 64 deep (a tensor literal has at most 64 dims)"));
  EXPECT_LT(r.out.size(), 400u);  // the message quotes the start of the literal, not all of it
  for (const char* huge : {"ones(1000000000)", "randn(100000,100000)", "ones(4294967296,4294967296)",
                           "arange(9223372036854775807)"}) {
    r = run(std::string("call core::sin '") + huge + "'");
    EXPECT_EQ(r.status, 1) << huge;
    EXPECT_THAT(r.out, HasSubstr("more than 16777216 elements, the most a command-line tensor literal may have"))
        << huge;
  }
  EXPECT_EQ(run("call core::sin 'zeros(0,9223372036854775807)'").status, 0);  // empty: nothing to allocate
  std::string shape = "[1";
  for (int i = 1; i < 40000; ++i) shape += ",1";
  r = run("call core::reshape 'ones(1)' '" + shape + "]'");
  EXPECT_EQ(r.status, 0) << r.out.substr(0, 300);
  EXPECT_THAT(r.out, HasSubstr("tensor(..., size=(1, 1, 1,"));
}

// Every subcommand, fed unknown options, missing and bad values, huge values and
// bytes that are not UTF-8: exit 2 (usage) or 1 (bad input) with a message, never a
// crash, and a non-UTF-8 path never becomes another file.
TEST(CliEveryCommand, BadCommandLinesGiveUsageOrInputErrorsNeverACrash) {
  char tmpl[] = "/tmp/strata-sweep-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = " --db " + dir + "/s.db --plugins " + dir;
  const std::string huge = "99999999999999999999999999999999";
  const std::string long_arg(100000, 'a');
  const char* commands[] = {"serve", "plugins", "kernel", "audit", "schema", "ops",  "dump",
                            "call",  "check",   "modes",  "bench", "demo",   "hosts"};
  const std::vector<std::string> tails = {
      "--no-such-option",       "--db",          "--plugins",       "--since",       "--wait",
      "--check=sometimes",      "--filter",      "--mode nosuch",   "--seed x",      "--seed " + huge,
      "--wait -1",              "--wait " + huge, "frobnicate",       huge,            "-" + huge,
      long_arg,                 "''",            "--json --json",   "'\xff\xfe'",    "--db '/tmp/\xff.db'",
      "--vmap 0,,1",            "--autocast x",  "--repetitions " + huge, "--host",
      "--host nosuchhost",      "--all-hosts --host x",
  };
  for (const char* c : commands) {
    for (const std::string& t : tails) {
      if (std::string(c) == "serve" && (t == "''" || t == "--json --json")) continue;  // these would serve
      const Result r = run(std::string(c) + " " + t + db, "", "timeout 20");
      EXPECT_TRUE(r.status == 1 || r.status == 2 || r.status == 0) << c << " " << t.substr(0, 40) << ": " << r.out;
      if (r.status != 0) EXPECT_FALSE(r.out.empty()) << c << " " << t.substr(0, 40);
      EXPECT_THAT(r.out, ::testing::Not(HasSubstr("Segmentation"))) << c;
    }
  }
  // Not UTF-8: refused by name, and no file with a replacement character appears.
  Result r = run("audit --db '" + dir + "/\xff.db'");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("is not valid UTF-8"));
  EXPECT_THAT(r.out, HasSubstr("\\xff.db"));
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    files += e.path().filename().string().find("\xef\xbf\xbd") != std::string::npos;  // U+FFFD
  }
  EXPECT_EQ(files, 0u);
  EXPECT_FALSE(std::filesystem::exists("/tmp/\xef\xbf\xbd.db"));
  std::system(("rm -rf " + dir).c_str());
}

TEST(CliCallTest, TheTraceSwitchLogsEveryDispatchStep) {
  const Result r = run("call core::add 'ones(2)' '[1.,2.]'", "", "STRATA_DISPATCH_TRACE=1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("[strata dispatch] call core::add.Tensor (boxed)  keys=DispatchKeySet(CPU) -> CPU: kernel"));
  EXPECT_THAT(run("call core::add 'ones(2)' '[1.,2.]'").out, ::testing::Not(HasSubstr("[strata dispatch]")));
}

TEST(CliCallTest, GarbageArgumentsNeverCrash) {
  for (const char* a : {"'['", "']'", "'[[[[[['", "'ones('", "'ones(-1)'", "'ones(99999999999999999999)'", "'[1,,2]'",
                        "'[1e999]'", "'randn(2):'", "'::'", "'[true,1.5]'", "'arange(1,2,3)'", "'[]:meta'",
                        "'ones(2):cuda:x'", "'\x01\x02'", "'[[1],[2,3]]'", "'%s%s%n'"}) {
    const Result r = run(std::string("call core::sin ") + a);
    EXPECT_TRUE(r.status == 0 || r.status == 1) << a << ": " << r.out;
    if (r.status == 1) EXPECT_THAT(r.out, StartsWith("error: ")) << a;
  }
  for (const char* a : {"'x=1'", "'=1'", "'alpha='", "'--'", "'-'"}) {
    const Result r = run(std::string("call core::add 'ones(1)' 'ones(1)' ") + a);
    EXPECT_TRUE(r.status == 0 || r.status == 1 || r.status == 2) << a << ": " << r.out;
  }
}

namespace strata_e2e {

// `strata serve` as a child process on a plugin dir and a store; its stdout and
// stderr go to DIR/serve.log.
struct ServeProcess {
  std::string dir;
  pid_t pid = -1;
  ServeProcess(const std::string& dir, const std::string& plugins, const std::string& db,
               const char* logging_rules = nullptr, const char* extra_option = nullptr)
      : dir(dir) {
    pid = fork();
    if (pid == 0) {
      if (logging_rules != nullptr) setenv("QT_LOGGING_RULES", logging_rules, 1);
      const std::string log = dir + "/serve.log";
      // Both in append mode: each write lands at the end, so neither overwrites the other.
      if (FILE* f = fopen(log.c_str(), "w")) fclose(f);
      freopen(log.c_str(), "a", stdout);
      freopen(log.c_str(), "a", stderr);
      execl(STRATA_CLI, STRATA_CLI, "serve", "--plugins", plugins.c_str(), "--db", db.c_str(), extra_option,
            nullptr);
      _exit(127);
    }
  }
  std::string log() const {
    std::ifstream f(dir + "/serve.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Polls the log every 50 ms, up to tries times, for text.
  void waitFor(const std::string& text, int tries) const {
    for (int i = 0; i < tries && log().find(text) == std::string::npos; ++i) usleep(50000);
  }
  // SIGTERM, then the exit status (-1 if it did not exit normally).
  int stop() {
    if (pid <= 0 || kill(pid, SIGTERM) != 0) return -1;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~ServeProcess() {
    if (pid > 0) stop();
  }
};

// A live host serving with --check=enforce refuses a bundle; a local command, whose
// scan checks nothing, runs it and says which host refused it. Once that host stops,
// the note goes.
TEST(ServeEndToEnd, ALocalCommandSaysItLoadedABundleALiveHostRefused) {
  char tmpl[] = "/tmp/strata-enforce-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " && cp " + std::string(STRATA_BUILD_DIR) +
                         "/tests/bundles/libbroken_check.so " + plugins).c_str()),
            0);
  const std::string opts = " --plugins " + plugins + " --db " + db;
  {
    ServeProcess serve(dir, plugins, db, nullptr, "--check=enforce");
    serve.waitFor("ready.", 200);
    ASSERT_THAT(serve.log(), HasSubstr("rejected   broken_check@1.0.0  (strata check failed"));
    const Result local = run("call broken_check::sneaky 'ones(2)'" + opts);
    EXPECT_THAT(local.out, HasSubstr("note: this command loaded broken_check@1.0.0, which host "));
    EXPECT_THAT(local.out, HasSubstr(" refused (strata check failed: "));
  }
  const Result after = run("call broken_check::sneaky 'ones(2)'" + opts);
  EXPECT_THAT(after.out, Not(HasSubstr("which host")));
  std::filesystem::remove_all(dir);
}

// Two idle hosts on one store: each one's heartbeats and records are commits the other
// sees, but only an admin change makes a host sync (re-hash every bundle and write),
// so idle hosts never wake each other.
TEST(ServeEndToEnd, TwoIdleHostsOnOneStoreDoNotWakeEachOther) {
  char tmpl[] = "/tmp/strata-idle-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " " + dir + "/a " + dir + "/b && cp " STRATA_PLUGIN_BUILD_DIR
                         "/libmylib.so " + plugins).c_str()),
            0);
  const char* rules = "strata.host.debug=true";
  ServeProcess a(dir + "/a", plugins, db, rules);
  ServeProcess b(dir + "/b", plugins, db, rules);
  a.waitFor("ready.", 100);
  b.waitFor("ready.", 100);
  usleep(2500000);  // 50 polls and 2 heartbeats each
  auto syncs = [](const std::string& log) {
    size_t n = 0;
    for (size_t at = log.find("sync: "); at != std::string::npos; at = log.find("sync: ", at + 1)) ++n;
    return n;
  };
  const size_t idle_a = syncs(a.log()), idle_b = syncs(b.log());
  EXPECT_LE(idle_a, 2u) << a.log();
  EXPECT_LE(idle_b, 2u) << b.log();
  // An admin change still reaches both.
  EXPECT_EQ(run("kernel disable mylib::sin cpu --wait --db " + db).status, 0);
  EXPECT_GT(syncs(a.log()), idle_a);
  EXPECT_GT(syncs(b.log()), idle_b);
  EXPECT_EQ(a.stop(), 0);
  EXPECT_EQ(b.stop(), 0);
  std::system(("rm -rf " + dir).c_str());
}

// `plugins pin --wait` to a version that fails to load: applied by the host (exit 0),
// with a warning naming the host, the version and why it does not run.
TEST(ServeEndToEnd, APinToAVersionThatFailsSaysSoOnceApplied) {
  char tmpl[] = "/tmp/strata-pinfail-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " " + dir + "/a && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_1_0.so " +
                         STRATA_BUILD_DIR + "/tests/bundles/libmuladd_1_2_0_broken.so " + plugins)
                            .c_str()),
            0);
  ServeProcess a(dir + "/a", plugins, db, "");
  a.waitFor("ready.", 100);
  const Result r = run("plugins pin muladd 1.2.0 --wait --db " + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("applied the pin but does not run muladd 1.2.0 (rejected: registration failed: muladd "
                               "1.2.0 is broken)"));
  const Result ok = run("plugins pin muladd 1.1.0 --wait --db " + db);
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_THAT(ok.out, Not(HasSubstr("does not run")));
  EXPECT_EQ(a.stop(), 0);
  std::system(("rm -rf " + dir).c_str());
}

// The id a serve log names ("strata serve: host ID").
std::string hostIdIn(const std::string& log) {
  const std::string mark = "strata serve: host ";
  const size_t at = log.find(mark);
  if (at == std::string::npos) return "";
  return log.substr(at + mark.size(), log.find('\n', at) - at - mark.size());
}

// Note [What each host runs]: two hosts on one store, each with its own directory,
// each report what they run; the CLI's own scans, even of a mistyped directory,
// change nothing a host recorded; a running host answers dump; a stopped one says so.
TEST(HostsView, EachHostReportsWhatItRunsAndOnlyItWritesIt) {
  char tmpl[] = "/tmp/strata-hosts-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/pa " + dir + "/pb " + dir + "/a " + dir + "/b && cp " STRATA_PLUGIN_BUILD_DIR
                         "/libmuladd_1_1_0.so " + dir + "/pa && cp " STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + dir + "/pb")
                            .c_str()),
            0);
  ServeProcess a(dir + "/a", dir + "/pa", db);
  ServeProcess b(dir + "/b", dir + "/pb", db);
  a.waitFor("ready.", 200);
  b.waitFor("ready.", 200);
  ASSERT_THAT(a.log(), HasSubstr("ready.")) << a.log();
  ASSERT_THAT(b.log(), HasSubstr("ready.")) << b.log();
  const std::string ida = hostIdIn(a.log()), idb = hostIdIn(b.log());
  ASSERT_FALSE(ida.empty()) << a.log();
  ASSERT_FALSE(idb.empty()) << b.log();
  // serve's hints carry its own store and directory.
  EXPECT_THAT(a.log(), HasSubstr("--wait --db " + db + "\n"));
  EXPECT_THAT(a.log(), HasSubstr("--plugins " + dir + "/pa --db " + db + "\n"));
  EXPECT_THAT(a.log(), HasSubstr("strata dump extension_cpp::mymuladd --host " + ida + " --db " + db + "\n"));

  Result r = run("hosts --db " + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(ida + "  live, heartbeat "));
  EXPECT_THAT(r.out, HasSubstr("plugins " + dir + "/pa;"));
  EXPECT_THAT(r.out, HasSubstr("loaded: muladd@1.1.0\n"));
  EXPECT_THAT(r.out, HasSubstr("loaded: mylib@1.0.0\n"));
  r = run("hosts --json --db " + db);
  EXPECT_THAT(r.out, HasSubstr("\"id\": \"" + ida + "\""));
  EXPECT_THAT(r.out, HasSubstr("\"state\": \"live\""));
  EXPECT_THAT(r.out, HasSubstr("\"version\": \"0.1.0 (SDK ABI 4.4"));

  r = run("plugins list --host " + ida + " --db " + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("muladd           1.1.0    loaded"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("mylib")));
  r = run("plugins list --all-hosts --json --db " + db);
  EXPECT_THAT(r.out, HasSubstr("\"bundles\": ["));
  EXPECT_THAT(r.out, HasSubstr("\"name\": \"mylib\""));
  EXPECT_THAT(r.out, HasSubstr("\"name\": \"muladd\""));
  r = run("plugins list --host nosuch --db " + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no host 'nosuch' on the store"));
  r = run("hosts --db " + dir + "/typo.db");  // reading never creates a store
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no store at " + dir + "/typo.db"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/typo.db"));

  // A mistyped directory is an error, and a scan writes nothing a host recorded.
  r = run("plugins list --plugins " + dir + "/typo --db " + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("the plugin directory " + dir + "/typo does not exist"));
  r = run("plugins list --plugins " + dir + "/a --db " + db);  // exists, holds no bundle
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("local scan of " + dir + "/a by this command"));
  EXPECT_EQ(std::system(("test \"$(sqlite3 -cmd '.timeout 10000' " + db + " \"SELECT COUNT(*) FROM bundles WHERE state = 'removed'\")\" = 0")
                            .c_str()),
            0);
  EXPECT_THAT(run("plugins list --host " + idb + " --db " + db).out, HasSubstr("mylib            1.0.0    loaded"));

  // A running host answers for its own table; its own errors come back.
  r = run("dump mylib::sin --host " + idb + " --db " + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("host " + idb + " (plugins " + dir + "/pb):\nname: mylib::sin"));
  r = run("dump mylib::sin --json --host " + idb + " --db " + db);
  EXPECT_THAT(r.out, HasSubstr("\"owner\": \"mylib@1.0.0\""));
  r = run("dump mylib::sin --host " + ida + " --db " + db);  // host a has no mylib
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("host " + ida + ": no operator named mylib::sin"));

  EXPECT_EQ(a.stop(), 0);
  r = run("hosts --db " + db);
  EXPECT_THAT(r.out, HasSubstr(ida + "  stopped at "));
  r = run("dump core::sin --host " + ida + " --db " + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("only a running host can answer"));
  EXPECT_THAT(run("plugins list --host " + ida + " --db " + db).out, HasSubstr("(stopped at "));

  // A host silent for long is dead, then forgotten: hidden after a day, and deleted
  // with its view when the next host starts.
  ASSERT_EQ(std::system(("sqlite3 -cmd '.timeout 10000' " + db + " \"INSERT INTO hosts (id, pid, heartbeat) VALUES ('gone:1', 1, "
                         "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds')), ('ancient:2', 2, "
                         "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 days')); INSERT INTO host_bundles VALUES "
                         "('ancient:2', 'x', 'x', '1.0.0', '/x', 'loaded', '')\"").c_str()),
            0);
  ASSERT_EQ(std::system(("sqlite3 -cmd '.timeout 10000' " + db + " \"INSERT INTO hosts (id, pid, heartbeat) VALUES "
                         "('skewed:3', 3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+3 hours'))\"").c_str()),
            0);
  r = run("hosts --db " + db);
  EXPECT_THAT(r.out, HasSubstr("gone:1  dead: no heartbeat for "));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ancient:2")));
  EXPECT_THAT(r.out, HasSubstr("skewed:3  live, heartbeat 2 h in the future (its clock, or the store, is wrong)"));
  ASSERT_EQ(std::system(("sqlite3 -cmd '.timeout 10000' " + db + " \"DELETE FROM hosts WHERE id = 'skewed:3'\"").c_str()), 0);
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/c").c_str()), 0);
  ServeProcess c(dir + "/c", dir + "/pa", db);
  c.waitFor("ready.", 200);
  ASSERT_THAT(c.log(), HasSubstr("ready.")) << c.log();
  EXPECT_EQ(std::system(("test \"$(sqlite3 -cmd '.timeout 10000' " + db + " \"SELECT COUNT(*) FROM hosts WHERE id = 'ancient:2'; "
                         "SELECT COUNT(*) FROM host_bundles WHERE host = 'ancient:2'\")\" = \"$(printf '0\\n0')\"")
                            .c_str()),
            0);
  EXPECT_EQ(c.stop(), 0);
  EXPECT_EQ(b.stop(), 0);
  std::system(("rm -rf " + dir).c_str());
}

// serve: a missing directory is an error (never created); each log line once, with
// a timestamp and a category.
TEST(ServeEndToEnd, RefusesAMissingDirectoryAndLogsEachChangeOnceWithATime) {
  char tmpl[] = "/tmp/strata-log-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = dir + "/s.db";
  Result r = run("serve --plugins " + dir + "/typo --db " + db, "", "timeout 20");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("the plugin directory " + dir + "/typo does not exist"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/typo"));

  ASSERT_EQ(std::system(("mkdir -p " + dir + "/p && cp " STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + dir + "/p").c_str()), 0);
  ServeProcess serve(dir, dir + "/p", db);
  serve.waitFor("ready.", 100);
  ASSERT_EQ(std::system(("cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_1_0.so " + dir + "/p").c_str()), 0);
  serve.waitFor("loaded muladd@1.1.0", 60);
  usleep(300000);
  EXPECT_EQ(serve.stop(), 0);
  const std::string log = serve.log();
  auto count = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("strata.host loaded muladd@1.1.0"), 1u) << log;
  EXPECT_EQ(count("strata.host loaded mylib@1.0.0"), 1u) << log;
  EXPECT_EQ(count("strata.host unloaded mylib@1.0.0"), 1u) << log;
  // "2026-11-25T10:00:00.123 strata.host loaded muladd@1.1.0 from ..."
  const size_t line = log.rfind('\n', log.find("loaded muladd@1.1.0")) + 1;
  const std::string head = log.substr(line, 36);
  EXPECT_TRUE(head.size() == 36 && head[4] == '-' && head[10] == 'T' && head[19] == '.' &&
              head.substr(24, 12) == "strata.host ")
      << head;
  std::system(("rm -rf " + dir).c_str());
}

// Note [A store removed while open]: a serving host whose store file is deleted says
// so once and keeps running on the file it opened; no new store is made over the
// old one's -wal and -shm files, and the error says why and what to do.
TEST(ServeEndToEnd, AStoreRemovedUnderAHostIsSaidAndNotRecreatedOverItsLog) {
  char tmpl[] = "/tmp/strata-gone-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/p && cp " STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + dir + "/p").c_str()), 0);
  ServeProcess serve(dir, dir + "/p", db);
  serve.waitFor("ready.", 100);
  ASSERT_EQ(::unlink(db.c_str()), 0);
  serve.waitFor("is no longer the file this host opened (it was removed)", 60);
  const Result r = run("kernel disable mylib::sin cpu --db " + db);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("store " + db + ": cannot create it: " + db + "-wal and " + db +
                               "-shm are left from a store removed while a process had it open"));
  EXPECT_FALSE(std::filesystem::exists(db));
  EXPECT_EQ(serve.stop(), 0);
  std::system(("rm -rf " + dir).c_str());
}

// What a copy in two steps and a directory removed and made again look like to a
// serving host: the file first rejected (half written) loads once the rest arrives,
// and the host watches the directory made again.
TEST(ServeEndToEnd, AFileStillBeingCopiedAndADirectoryMadeAgainAreSeen) {
  char tmpl[] = "/tmp/strata-watch-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/p", db = dir + "/s.db";
  std::filesystem::create_directories(plugins);
  ServeProcess serve(dir, plugins, db);
  serve.waitFor("ready.", 100);
  ASSERT_THAT(serve.log(), HasSubstr("ready."));
  std::ifstream in(STRATA_PLUGIN_BUILD_DIR "/libmylib.so", std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  {
    std::ofstream out(plugins + "/libmylib.so", std::ios::binary);
    out.write(bytes.data(), 4096);
    out.flush();
    serve.waitFor("rejected", 60);
    EXPECT_THAT(serve.log(), HasSubstr("libmylib.so")) << serve.log();
    out.write(bytes.data() + 4096, static_cast<std::streamsize>(bytes.size() - 4096));
  }
  serve.waitFor("loaded mylib@1.0.0", 100);
  EXPECT_THAT(serve.log(), HasSubstr("loaded mylib@1.0.0")) << serve.log();
  std::filesystem::remove_all(plugins);
  serve.waitFor("unloaded mylib@1.0.0", 100);
  EXPECT_THAT(serve.log(), HasSubstr("is gone; waiting for it to return")) << serve.log();
  std::filesystem::create_directories(plugins);
  std::filesystem::copy_file(STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_1_0.so", plugins + "/libmuladd_1_1_0.so");
  serve.waitFor("loaded muladd@1.1.0", 100);
  EXPECT_THAT(serve.log(), HasSubstr("is back; rescanning"));
  EXPECT_THAT(serve.log(), HasSubstr("loaded muladd@1.1.0")) << serve.log();
  EXPECT_EQ(serve.stop(), 0);
  // Unreadable: refused with the reason, not served as an empty directory.
  if (::geteuid() != 0) {
    std::filesystem::permissions(plugins, std::filesystem::perms::none);
    const Result r = run("plugins list --plugins " + plugins + " --db " + db);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr("cannot be read by this user"));
    std::filesystem::permissions(plugins, std::filesystem::perms::owner_all);
  }
  std::filesystem::remove_all(dir);
}

TEST(CliTest, VersionNamesTheSdkAbiAndTheStoreSchema) {
  const Result r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "strata 0.1.0 (SDK ABI 4.4, store schema 5)\n");
}

// A failing call still explains itself, up to the step that failed.
TEST(CliCallTest, ExplainOfAFailingCallPrintsTheStepsUpToTheFailure) {
  Result r = run("call core::mul 'ones(2):requires_grad' 'ones(3)' --explain");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("chosen: AutogradCPU -> autograd kernel"));
  EXPECT_THAT(r.out, HasSubstr("redispatch core::mul.Tensor (boxed)  keys=DispatchKeySet(CPU) -> CPU: kernel"));
  EXPECT_THAT(r.out, HasSubstr("failed at the last step above\n"));
  EXPECT_THAT(r.out, HasSubstr("error: The size of tensor a (2) must match the size of tensor b (3)"));
  r = run("call core::mul 'ones(2,2)' 'ones(2,3)' --explain --vmap 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("failed at the last step above\n"));
}

// The method-style literals PyTorch users type; an unknown method lists them all.
TEST(CliCallTest, TensorLiteralsTakePyTorchsMethods) {
  Result r = run("call core::neg 'arange(4).reshape(2,2)'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([[ 0, -1],\n        [-2, -3]])\n");
  r = run("call core::neg 'ones(2,3).to(f16)'");
  EXPECT_EQ(r.out, "tensor([[-1., -1., -1.],\n        [-1., -1., -1.]], dtype=float16)\n");
  r = run("call core::add 'arange(6).view(2,3).T' 'ones(3,2).to(dtype=torch.int64)'");
  EXPECT_EQ(r.out, "tensor([[1, 4],\n        [2, 5],\n        [3, 6]])\n");
  r = run("call core::neg 'arange(4):f32.reshape(2,2).requires_grad_()'");
  EXPECT_THAT(r.out, HasSubstr("grad_fn=<NegBackward0>"));
  r = run("call core::cat '[arange(2).float(),ones(2).unsqueeze(0).squeeze(0)]'");
  EXPECT_EQ(r.out, "tensor([0., 1., 1., 1.])\n");
  r = run("call core::neg 'ones(2).frobnicate()'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("unknown method '.frobnicate' (the methods are .reshape(2,3)"));
  r = run("call core::neg 'ones(1).expand(100000000)'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("more than 16777216 elements"));
  r = run("call core::neg 'ones(2).reshape(3)'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("shape [3] is invalid for input of size 2"));
  r = run("call core::neg 'ones(2).to(warp)'");
  EXPECT_THAT(r.out, HasSubstr("'warp' is neither a dtype"));
}

// strata modes lists the mode types bundles bring, as call --mode finds them.
TEST(CliModes, ListsTheModesBundlesBring) {
  const Result r = run("modes --plugins " STRATA_PLUGIN_BUILD_DIR);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("flop_counter "));
  EXPECT_THAT(r.out, HasSubstr("[owner flop_counter@1.0.0]"));
  EXPECT_THAT(r.out, HasSubstr("trace "));
}

// The admin commands' bad input: each a clear error naming the thing, with its exit code.
TEST(AdminCommands, BadInputIsAClearErrorWithTheRightExitCode) {
  char tmpl[] = "/tmp/strata-admin-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = " --db " + dir + "/s.db";
  Result r = run("kernel disable 'not an op' cpu" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("not an op"));
  r = run("kernel disable a::b warpdrive" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("warpdrive"));
  r = run("kernel disable a::b autogradcpu" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("did you mean AutogradCPU?"));
  r = run("kernel disable a::b CUDAA" + db);
  EXPECT_THAT(r.out, ::testing::HasSubstr("did you mean cuda?"));
  r = run("kernel frobnicate a::b cpu" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, ::testing::HasSubstr("expected disable|enable OP DEVICE_OR_KEY"));
  r = run("kernel disable a::b cpu extra" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("strata kernel: disable takes OP DEVICE_OR_KEY; 'extra' is one argument too many"));
  r = run("kernel disable a::b cpu --wait soon" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, ::testing::HasSubstr("--wait expects a number of seconds"));
  r = run("plugins frobnicate" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, ::testing::HasSubstr("unknown action 'frobnicate'"));
  r = run("plugins pin muladd" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, ::testing::HasSubstr("pin: expected 2 argument(s), got 1"));
  r = run("plugins show nosuchbundle --plugins " + dir + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("no bundle named 'nosuchbundle'"));
  r = run("audit --since yesterdayish" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, ::testing::HasSubstr("--since 'yesterdayish' is not an ISO 8601 time"));
  std::ofstream(dir + "/junk.db") << "not a database, only text, long enough to fill an SQLite header page.....";
  r = run("audit --db " + dir + "/junk.db");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr(dir + "/junk.db"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("not a database"));
  // Paths that are empty (an unset shell variable) or a directory; numbers astray.
  r = run("audit --db ''");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--db was given an empty path"));
  r = run("plugins list --plugins ''" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--plugins was given an empty path"));
  r = run("kernel disable a::b cpu --db " + dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("store " + dir + ": a directory, not a store file"));
  r = run("kernel disable a::b cpu 5" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("'5' is a number of seconds, which goes with --wait (--wait 5)"));
  r = run("kernel disable a::b cpu --wait -1" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("('-1' is read as an option: a number here cannot be negative)"));
  r = run("demo extra");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("takes no arguments"));
  r = run("bench --filter '('");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--filter '(' is not a regular expression"));
  r = run("call core::sin 'ones(2)' --autocast cpu:int8");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, Not(HasSubstr("--autocast cpu:int8: --autocast")));
  EXPECT_THAT(r.out, HasSubstr("strata call: --autocast cpu:int8: the dtype must be bf16 (bfloat16) or f16 (float16), "
                               "not 'int8'"));
  std::system(("rm -rf " + dir).c_str());
}

// A command that only reads makes no store (a mistyped --db says so and runs on
// none); a malformed time, op or flag is named; a disabled kernel's error says who
// disabled it and how to turn it on.
TEST(AdminCommands, ReadingMakesNoStoreAndMalformedFlagsAreNamed) {
  char tmpl[] = "/tmp/strata-reads-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  for (const std::string& cmd : std::vector<std::string>{"plugins list --plugins " + dir, "ops core::neg", "dump core::neg",
                                "call core::neg '[1]'"}) {
    const Result r = run(cmd + " --db " + dir + "/typo.db");
    EXPECT_EQ(r.status, 0) << cmd << "\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("note: no store at " + dir + "/typo.db; running with nothing disabled")) << cmd;
    EXPECT_FALSE(std::filesystem::exists(dir + "/typo.db")) << cmd;
  }
  // A local scan's JSON has each bundle's description from its own metadata.
  const Result listed = run("plugins list --json --plugins " STRATA_PLUGIN_BUILD_DIR " --db " + dir + "/typo.db");
  EXPECT_THAT(listed.out, HasSubstr("\"description\": \"the torch.library examples: mylib::sin (cpu)"));
  const std::string db = " --db " + dir + "/s.db";
  ASSERT_EQ(run("kernel disable 'core:: neg' cpu --reason 'wrong sign'" + db).status, 0);
  Result r = run("call core::neg '[1]'" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no kernel for dispatch key CPU (call key set DispatchKeySet(CPU)): its CPU kernel is "
                               "disabled (set_kernel_enabled)"));
  EXPECT_THAT(r.out, HasSubstr("core::neg CPU was disabled by "));
  // The hint carries the command's --db, so that run as it is it turns the kernel on.
  EXPECT_THAT(r.out, HasSubstr(" (wrong sign): `strata kernel enable core::neg CPU --db " + dir + "/s.db` turns it on"));
  // --explain says at the step itself which kernel the switch took away.
  r = run("call core::neg '[1]' --explain" + db);
  EXPECT_THAT(r.out, ::testing::ContainsRegex("-> CPU: missing\n +its CPU kernel is disabled \\(set_kernel_enabled\\): "
                                              "unboxed, owner builtin, registered at "));
  // Only the disabled kernel that would have served the call is named: one at an
  // alias key ("default") too, and not another key's of the same op.
  ASSERT_EQ(run("kernel disable core::neg AutogradCPU" + db).status, 0);
  r = run("call core::neg '[1]'" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("core::neg CPU was disabled by "));
  EXPECT_THAT(r.out, Not(HasSubstr("core::neg AutogradCPU was disabled")));
  // A "default" kernel that would have served: for a call with no tensors too.
  for (const auto& [op, args] : {std::pair{"core::ones", "'[2]'"}, std::pair{"core::rand_like", "'[1.]'"}}) {
    ASSERT_EQ(run(std::string("kernel disable ") + op + " default" + db).status, 0);
    r = run(std::string("call ") + op + " " + args + db);
    EXPECT_EQ(r.status, 1) << op;
    EXPECT_THAT(r.out, HasSubstr("its CompositeExplicitAutograd kernel is disabled (set_kernel_enabled)")) << op;
    EXPECT_THAT(r.out, HasSubstr(std::string(op) + " CompositeExplicitAutograd was disabled by ")) << op;
  }
  r = run("audit --op 'core:: neg'" + db);  // an op written as `kernel` takes it
  EXPECT_THAT(r.out, HasSubstr("kernel.disable  core::neg CPU: enabled -> disabled"));
  r = run("audit --since 2026-11-27T25:00" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--since '2026-11-27T25:00' is not an ISO 8601 time"));
  EXPECT_EQ(run("audit --since 2026-11-27" + db).status, 0);
  r = run("call core::neg '[1]' --vmap zz");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("strata call: --vmap zz: 'zz' is not an in_dim (an integer or None)"));
  r = run("call core::neg '[1]' --vmap 0 --vmap 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--vmap given 2 times"));
  r = run("call core::neg '[1]' --json");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--json prints the graph --mode trace records"));
  r = run("call core::neg '[1]' --autocast cpu --autocast cpu:f16");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--autocast names cpu twice"));
  r = run("call a::b.c.d");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("invalid operator name 'a::b.c.d': an overload name has no '.' in it"));
  r = run("call '\xc3\xa9::x'");
  EXPECT_THAT(r.out, HasSubstr("expected an operator name, got '\xc3\xa9'"));
  r = run("dump 'a::b c'");
  EXPECT_THAT(r.out, HasSubstr("invalid operator name 'a::b c': 'c' after the operator name"));
  // A long value is quoted by its start and its length, not echoed whole.
  const std::string zs(5000, 'z');
  // Usage errors exit 2, bad input 1 (the README's exit statuses).
  for (const auto& [cmd, status] : std::vector<std::pair<std::string, int>>{
           {"call core::add '[1.]' '[1.]' alpha=" + zs, 1}, {"call a::" + zs, 1}, {"dump " + q("a::" + zs + "("), 1},
           {"call core::neg '[1]' " + zs, 1}, {"dump a:" + zs, 1}, {"kernel disable a::b " + zs + db, 1},
           {"kernel disable " + zs + " cpu" + db, 1}, {"plugins show " + zs, 1}, {"plugins pin mylib " + zs + db, 1},
           {"audit --since " + zs + db, 2}, {"call core::neg '[1]' --mode " + zs, 1},
           {"call core::neg '[1]' --autocast " + zs, 2}, {"check " + zs, 1}, {"plugins untrust " + zs + db, 1},
           {"plugins list --host " + zs + db, 1}}) {
    r = run(cmd);
    EXPECT_EQ(r.status, status) << cmd.substr(0, 40) << "\n" << r.out.substr(0, 300);
    EXPECT_LT(r.out.size(), 800u) << cmd.substr(0, 40) << "\n" << r.out.substr(0, 400);
    EXPECT_THAT(r.out, HasSubstr("zzz...")) << r.out.substr(0, 400);
  }
  std::system(("rm -rf " + dir).c_str());
}

// A toggle to the state a kernel is already in (same reason) changes nothing: it says
// so, and no audit row or change is written; a new reason is a change.
TEST(AdminCommands, AToggleToTheStateAKernelIsInChangesNothing) {
  char tmpl[] = "/tmp/strata-noop-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = " --db " + dir + "/s.db";
  Result r = run("kernel enable core::add.Tensor cpu" + db);  // no store yet: none is made
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("core::add.Tensor CPU is enabled: there is no store at " + dir +
                               "/s.db, so nothing is disabled; nothing was changed"));
  r = run("kernel enable core::nosuch cpu" + db);  // the same check as with a store
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("error: core::nosuch is not one of the host's core:: operators"));
  r = run("plugins enable mylib --json" + db);
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("{\"action\":\"enable\",\"bundle\":\"mylib\",\"change\":null,\"not_applied_by\":[]}"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.db"));
  for (const char* undo : {"plugins enable mylib", "plugins unpin mylib"}) {
    r = run(std::string(undo) + db);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("no store at " + dir + "/s.db, so nothing is "));
  }
  EXPECT_EQ(run("plugins untrust mylib" + db).status, 1);
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.db"));
  ASSERT_EQ(run("kernel disable core::add.Tensor cpu --reason slow" + db).status, 0);
  r = run("kernel enable core::add.Tensor cpu --reason slow" + db);
  EXPECT_THAT(r.out, HasSubstr("enabled core::add.Tensor CPU (change"));
  r = run("kernel enable core::add.Tensor cpu --reason slow" + db);
  EXPECT_THAT(r.out, HasSubstr("core::add.Tensor CPU is already enabled; nothing was changed"));
  ASSERT_EQ(run("kernel disable core::add.Tensor cpu --reason slow" + db).status, 0);
  r = run("kernel disable core::add.Tensor cpu --reason slow" + db);
  EXPECT_THAT(r.out, HasSubstr("is already disabled; nothing was changed"));
  r = run("kernel disable core::add.Tensor cpu --reason wrong" + db);
  EXPECT_THAT(r.out, HasSubstr("disabled core::add.Tensor CPU (change"));
  r = run("audit --json" + db);
  size_t rows = 0;
  for (size_t at = r.out.find("kernel."); at != std::string::npos; at = r.out.find("kernel.", at + 1)) ++rows;
  EXPECT_EQ(rows, 4u) << r.out;  // the three disables and the enable, not the no-ops
  std::system(("rm -rf " + dir).c_str());
}

// An op of a bundle an admin disabled is missing, and the error says why.
TEST(AdminCommands, AnOpOfADisabledBundleIsMissingAndTheErrorSaysWhy) {
  char tmpl[] = "/tmp/strata-disabled-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/p && cp " STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + dir + "/p").c_str()),
            0);
  const std::string args = " --plugins " + dir + "/p --db " + dir + "/s.db";
  ASSERT_EQ(run("plugins disable mylib --reason 'wrong on AVX-512' --db " + dir + "/s.db").status, 0);
  const Result r = run("call mylib::sin 'ones(2)'" + args);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no operator named mylib::sin (an admin disabled bundle mylib: wrong on AVX-512, which "
                               "defines namespace mylib; `strata plugins enable mylib` loads it again)"));
  // An admin's reason is free text: one that names another namespace does not make
  // the disabled bundle that namespace's.
  ASSERT_EQ(run("plugins disable mylib --reason \"clashes with namespace 'acme'\" --db " + dir + "/s.db").status, 0);
  const Result other = run("call acme::relu 'ones(2)'" + args);
  EXPECT_EQ(other.status, 1) << other.out;
  EXPECT_THAT(other.out, HasSubstr("error: no operator named acme::relu\n"));
  std::system(("rm -rf " + dir).c_str());
}

// An op of a bundle rejected for defining a namespace its bundle.json does not list:
// the error names the bundle and the reason, not only the missing op.
TEST(AdminCommands, AnOpOfABundleRejectedForAnUnlistedNamespaceSaysWhy) {
  char tmpl[] = "/tmp/strata-unlisted-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/p && cp " STRATA_BUILD_DIR "/tests/bundles/libstatic_undeclared.so " +
                         dir + "/p")
                            .c_str()),
            0);
  const std::string args = " --plugins " + dir + "/p --db " + dir + "/s.db";
  Result r = run("call not_in_metadata::sneaky 'ones(2)'" + args);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no operator named not_in_metadata::sneaky (bundle static_undeclared@1.0.0 was "
                               "rejected: it defines operators in namespace 'not_in_metadata', which bundle.json does "
                               "not list in \"defines\")"));
  // The namespace it lists: the same bundle, said to define it.
  r = run("call static_undeclared::ok 'ones(2)'" + args);
  EXPECT_THAT(r.out, HasSubstr("no operator named static_undeclared::ok (bundle static_undeclared@1.0.0, which defines "
                               "namespace static_undeclared, was rejected: "));
  // A namespace something loaded serves: a missing op there is a typo, not that bundle's.
  ASSERT_EQ(std::system(("cp " STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + dir + "/p").c_str()), 0);
  r = run("call mylib::sinn 'ones(2)'" + args);
  EXPECT_THAT(r.out, HasSubstr("error: no operator named mylib::sinn; did you mean mylib::sin?\n"));
  std::system(("rm -rf " + dir).c_str());
}

// `strata audit --verify`: the chain holds after honest changes, and an edit made with
// the sqlite3 shell around the triggers is named by its row, exit code 1.
TEST(AdminCommands, AuditVerifyFindsAnEditMadeWithTheSqliteShell) {
  char tmpl[] = "/tmp/strata-verify-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string file = dir + "/s.db";
  const std::string db = " --db " + file;
  ASSERT_EQ(run("kernel disable core::add.Tensor cpu --actor ann" + db).status, 0);
  ASSERT_EQ(run("kernel enable core::add.Tensor cpu --actor ann" + db).status, 0);
  ASSERT_EQ(run("plugins pin muladd 1.0.0 --actor bob" + db).status, 0);
  Result r = run("audit --verify" + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("3 row(s), the chain holds; head "));
  r = run("audit --verify --op core::add.Tensor" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--verify checks the whole log"));
  ASSERT_EQ(std::system(("sqlite3 " + file +
                         " \"DROP TRIGGER audit_no_update; UPDATE audit SET actor = 'mallory' WHERE id = 2\"")
                            .c_str()),
            0);
  r = run("audit --verify" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("the chain breaks at row 2: its content does not match its hash (edited)"));
  r = run("audit --verify --json" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("\"first_bad_id\": 2"));
  std::system(("rm -rf " + dir).c_str());
}

// Answers that never mislead: a toggle names a namespace, a pin a version, --wait a
// live host; an op no bundle defines is accepted with a warning; names a user
// types without an overload, or misspells, get the closest ones.
TEST(AdminCommands, TogglesAndPinsCheckTheirNamesAndSayWhatWillHappen) {
  char tmpl[] = "/tmp/strata-honest-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = " --db " + dir + "/s.db";
  Result r = run("kernel disable add cpu" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("'add' has no namespace"));
  EXPECT_THAT(r.out, HasSubstr("did you mean core::add.Scalar or core::add.Tensor?"));
  r = run("kernel disable acme::relu7 cpu --actor ann" + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("warning: no bundle recorded in " + dir + "/s.db defines acme::relu7 (a serving host "
                               "records what it loads there: strata serve, or an application that embeds the host)"));
  EXPECT_THAT(r.out, HasSubstr("applies wherever a bundle that defines it loads with this store"));
  EXPECT_THAT(r.out, HasSubstr("disabled acme::relu7 CPU"));
  r = run("kernel disable core::add.Tensor cpu --actor ann" + db);  // a builtin op: no warning
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("warning")));
  // core:: is the host's: an op that is not among its operators never will be.
  r = run("kernel disable core::add cpu --actor ann" + db);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("error: core::add is not one of the host's core:: operators; nothing was changed"));
  EXPECT_THAT(r.out, HasSubstr("core::add.Tensor"));
  // A known op with nothing at that key: kept, and said so, with the keys it has.
  r = run("kernel disable core::add.Tensor fake --actor ann" + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("warning: core::add.Tensor has no kernel at Fake (it has: "));
  EXPECT_THAT(r.out, HasSubstr("CPU"));
  EXPECT_THAT(r.out, HasSubstr("its Meta kernel: toggle it with 'meta'"));
  r = run("kernel enable core::add.Tensor cpu --wait 1" + db);  // no host serves this store
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("--wait: no live host uses the store"));
  EXPECT_THAT(r.out, HasSubstr("nothing was changed"));
  r = run("audit --op core::add.Tensor" + db);
  EXPECT_THAT(r.out, HasSubstr("kernel.disable"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("kernel.enable")));  // the refused --wait recorded nothing
  // A mistyped --db with --wait: refused, and no store is left at the typo.
  const std::string typo = ::testing::TempDir() + "/strata_cli_typo." + std::to_string(::getpid()) + ".db";
  r = run("kernel disable core::add.Tensor cpu --wait 1 --db " + typo);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("--wait: no store at " + typo));
  EXPECT_THAT(r.out, HasSubstr("nothing was changed"));
  EXPECT_FALSE(std::filesystem::exists(typo));
  // A scan that only tightens the trust checks records nothing.
  const size_t audit_rows = run("audit --json" + db).out.size();
  r = run("plugins list --require-trusted" + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(run("audit --json" + db).out.size(), audit_rows);
  r = run("plugins pin muladd latest" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("cannot pin muladd to 'latest': not a semantic version"));
  // Reading a store that is not there is an error, not a new empty store vouched for.
  const std::string missing = " --db " + dir + "/typo.db";
  for (const char* read : {"audit", "audit --verify", "plugins trusted"}) {
    r = run(std::string(read) + missing);
    EXPECT_EQ(r.status, 1) << read << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("no store at " + dir + "/typo.db")) << read;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/typo.db"));
  // What someone typed prints as one line: a newline cannot forge an audit row, nor
  // an escape sequence reach the terminal.
  r = run("kernel disable core::mul.Tensor cpu --actor " + q("eve\n2026-01-01T00:00:00.000Z  alice\x1b[2J") +
          " --reason " + q("a\tb") + db);
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("audit --op core::mul.Tensor" + db);
  EXPECT_THAT(r.out, HasSubstr("eve\\n2026-01-01T00:00:00.000Z  alice\\x1b[2J"));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  r = run("plugins enable nosuchbundle --actor ann" + db);  // unpin and enable are checked too
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("warning: no host on "));
  EXPECT_THAT(r.out, HasSubstr("has seen a bundle named nosuchbundle; the change is kept"));
  r = run("plugins pin 'mul add' 1.0.0" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("is not a bundle name"));
  EXPECT_EQ(run("plugins pin muladd 1.0.0" + db).status, 0);
  // The audit log names the actor, never a bare uid when the uid has a name.
  r = run("audit" + db, "", "env -u USER -u LOGNAME");
  EXPECT_THAT(r.out, HasSubstr("ann"));
  r = run("plugins unpin muladd" + db, "", "env -u USER -u LOGNAME");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("audit --json" + db);
  EXPECT_THAT(r.out, HasSubstr("bundle.unpin"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("uid:")));
  // dump and call: a name without its overload lists the overloads; a typo the closest.
  r = run("dump core::add" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no operator named core::add; did you mean core::add.Scalar or core::add.Tensor?"));
  r = run("dump core::mull.Tensor" + db);
  EXPECT_THAT(r.out, HasSubstr("did you mean core::mul.Tensor?"));
  r = run("call core::sine 'ones(2)'" + db);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no operator named core::sine; did you mean core::sin?"));
  std::system(("rm -rf " + dir).c_str());
}

// Modes from the command line on the bundled ops: the trace prints the recorded
// graph; the flop_counter mode a bundle brings counts by its rule for mymuladd.
TEST(CallModes, TraceAndABundlesModeOnTheMulAddOps) {
  char tmpl[] = "/tmp/strata-modes-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string opts = " --plugins " STRATA_PLUGIN_BUILD_DIR " --db " + dir + "/s.db";
  Result r = run("call extension_cpp::mymuladd 'ones(3)' 'ones(3)' 2.0 --mode trace" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("tensor([3., 3., 3.])\ntrace (1 op):\n"
                                          "graph(%0 : float32[3] cpu, %1 : float32[3] cpu):\n"
                                          "  %2 : float32[3] cpu = extension_cpp::mymuladd(%0, %1, 2"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("  return (%2)\n"));
  r = run("call extension_cpp::mymuladd 'ones(3)' 'ones(3)' 2.0 --mode flop_counter" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("flop_counter: 6 flops\n  extension_cpp::mymuladd: 6"));
  r = run("call extension_cpp::mymuladd 'ones(3)' 'ones(3)' 2.0 --mode nope" + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("no mode type named 'nope'; known: fake, flop_counter, log, passthrough, trace"));
  std::system(("rm -rf " + dir).c_str());
}

// --wait names the live hosts that have not applied the change when it times out.
TEST(AdminCommands, WaitTimesOutNamingTheHostsBehind) {
  char tmpl[] = "/tmp/strata-wait-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = dir + "/s.db";
  { strata::db::Store made(db); }  // an empty store
  // A host on another machine that heartbeats but never applies anything.
  ASSERT_EQ(std::system(("sqlite3 " + db + " \"INSERT INTO hosts (id, pid) VALUES ('elsewhere:42', 42)\"").c_str()), 0);
  Result r = run("kernel disable a::b cpu --wait 0.3 --db " + db);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("not applied within 0.3 s by: elsewhere:42"));
  // The change itself was recorded and audited.
  r = run("audit --op a::b --db " + db);
  EXPECT_THAT(r.out, ::testing::HasSubstr("kernel.disable"));
  std::system(("rm -rf " + dir).c_str());
}

// Bundle changes wait as kernel toggles do (Note [Waiting for hosts] in
// admin_commands.cc): with no live host, nothing is recorded (exit 1); with no store
// at --db, none is created; a live host that does not apply the change in time is
// named (exit 3), and the change stays recorded.
TEST(AdminCommands, BundleChangesWaitLikeKernelToggles) {
  char tmpl[] = "/tmp/strata-bwait-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string db = " --db " + dir + "/s.db";
  { strata::db::Store made(dir + "/s.db"); }  // an empty store
  for (const char* change : {"pin muladd 1.0.0", "unpin muladd", "disable mylib --reason r", "enable mylib"}) {
    const Result r = run(std::string("plugins ") + change + " --wait 1" + db);
    EXPECT_EQ(r.status, 1) << change << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("--wait: no live host uses the store")) << change;
    EXPECT_THAT(r.out, HasSubstr("nothing was changed")) << change;
  }
  EXPECT_THAT(run("audit" + db).out, Not(HasSubstr("bundle.")));  // the refused changes recorded nothing
  const std::string typo = dir + "/typo.db";
  Result r = run("plugins disable mylib --wait --db " + typo);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--wait: no store at " + typo));
  EXPECT_FALSE(std::filesystem::exists(typo));
  r = run("plugins list --wait" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--wait goes with pin, unpin, disable and enable"));
  r = run("plugins unpin muladd --wait soon" + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--wait expects a number of seconds"));
  // A host on another machine that heartbeats but never applies anything.
  ASSERT_EQ(std::system(("sqlite3 " + dir + "/s.db \"INSERT INTO hosts (id, pid) VALUES ('elsewhere:42', 42)\"").c_str()),
            0);
  r = run("plugins disable mylib --reason 'not here' --wait 0.3 --actor ann" + db);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("disable mylib: recorded (change "));
  EXPECT_THAT(r.out, HasSubstr("not applied within 0.3 s by: elsewhere:42"));
  r = run("plugins pin muladd 1.0.0 --wait 0.2 --json --actor ann" + db);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"not_applied_by\":[\"elsewhere:42\"]"));
  r = run("audit" + db);
  EXPECT_THAT(r.out, HasSubstr("bundle.disable  mylib: enabled -> disabled: not here"));
  EXPECT_THAT(r.out, HasSubstr("bundle.pin      muladd: - -> 1.0.0"));
  std::system(("rm -rf " + dir).c_str());
}

// With a live host, a bundle change with --wait returns once the host applied it: what
// the host runs is already in its view, with no polling.
TEST(ServeEndToEnd, BundleChangesWithWaitReturnOnceTheHostApplied) {
  char tmpl[] = "/tmp/strata-bwait-live-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_0_0.so " +
                         STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_1_0.so " STRATA_PLUGIN_BUILD_DIR "/libmylib.so " +
                         plugins).c_str()),
            0);
  ServeProcess serve(dir, plugins, db);
  ASSERT_GT(serve.pid, 0);
  serve.waitFor("ready.", 100);
  ASSERT_THAT(serve.log(), HasSubstr("loaded     muladd@1.1.0"));
  const std::string opts = " --db " + db + " --actor ann";
  const std::string host = " --host " + std::to_string(serve.pid);
  Result r = run("plugins pin muladd 1.0.0 --wait 10" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("pin muladd 1.0.0: recorded (change "));
  EXPECT_THAT(r.out, HasSubstr("; applied by every live host\n"));
  EXPECT_THAT(run("plugins list" + host + opts).out, HasSubstr("muladd           1.0.0    loaded"));
  EXPECT_THAT(r.out, Not(HasSubstr("warning")));
  // A version no host has: kept, with what it means until that version arrives.
  r = run("plugins pin muladd 2.0.0 --wait 10" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("warning: no host on " + db + " has muladd 2.0.0 in its plugin directory (there: "
                               "1.0.0, 1.1.0); the pin is kept and takes effect when that version arrives; until "
                               "then hosts run the highest version that loads"));
  r = run("plugins list" + host + opts);
  EXPECT_THAT(r.out, HasSubstr("muladd           1.1.0    loaded"));
  EXPECT_THAT(r.out, HasSubstr("pinned to 2.0.0, which is not in the plugin directory; muladd@1.1.0 runs instead"));
  r = run("plugins disable mylib --reason 'not needed here' --wait" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("applied by every live host"));
  r = run("plugins list" + host + opts);
  EXPECT_THAT(r.out, HasSubstr("mylib            1.0.0    disabled"));
  EXPECT_THAT(r.out, HasSubstr("an admin disabled bundle mylib: not needed here"));
  r = run("plugins enable mylib --wait 10 --json" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"not_applied_by\":[]"));
  EXPECT_THAT(run("plugins list" + host + opts).out, HasSubstr("mylib            1.0.0    loaded"));
  r = run("plugins unpin muladd --wait" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(run("plugins list" + host + opts).out, HasSubstr("muladd           1.1.0    loaded"));
  EXPECT_EQ(serve.stop(), 0) << serve.log();
  std::system(("rm -rf " + dir).c_str());
}

// Note [Plugin trust]: a host run with --require-trusted loads only what an admin
// trusted, and picks up a bundle trusted while it runs; both are audited.
TEST(ServeEndToEnd, RequireTrustedLoadsOnlyTrustedBundlesAndPicksUpNewTrust) {
  char tmpl[] = "/tmp/strata-trust-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_0_0.so " +
                         STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + plugins).c_str()),
            0);
  const std::string opts = " --plugins " + plugins + " --db " + db;
  Result r = run("plugins trust " + plugins + "/libmylib.so --actor ann" + opts);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("trust mylib@1.0.0 (sha256 "));
  r = run("plugins trusted" + opts);
  EXPECT_THAT(r.out, HasSubstr("mylib@1.0.0"));
  EXPECT_THAT(r.out, HasSubstr("by ann"));
  ServeProcess serve(dir, plugins, db, nullptr, "--require-trusted");
  ASSERT_GT(serve.pid, 0);
  serve.waitFor("ready.", 100);
  EXPECT_THAT(serve.log(), HasSubstr("loaded     mylib@1.0.0"));
  EXPECT_THAT(serve.log(), HasSubstr("rejected   muladd@1.0.0  (refused: not on the trust list"));
  r = run("plugins trust muladd@1.0.0 --actor bob" + opts);
  ASSERT_EQ(r.status, 0) << r.out;
  serve.waitFor("loaded muladd@1.0.0", 60);
  EXPECT_THAT(serve.log(), HasSubstr("loaded muladd@1.0.0"));
  EXPECT_EQ(serve.stop(), 0) << serve.log();
  r = run("audit --db " + db);
  EXPECT_THAT(r.out, HasSubstr("bundle.trust"));
  EXPECT_THAT(r.out, HasSubstr("host.require_trusted"));
  EXPECT_EQ(run("audit --verify --db " + db).status, 0);
  // Untrusting by name: the list forgets it.
  r = run("plugins untrust mylib@1.0.0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(run("plugins trusted" + opts).out, ::testing::Not(HasSubstr("mylib")));
  // What cannot be trusted says why, and changes nothing.
  r = run("plugins trust nosuch@1.0.0" + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no bundle nosuch@1.0.0 in " + plugins));
  r = run("plugins trust " + db + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("the file is not a bundle"));
  r = run("plugins trust 'mul add'" + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("nor NAME@VERSION"));
  r = run("plugins trust " + dir + "/gone.so" + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("gone.so': no such file"));
  // A sha256 in capitals names the same file.
  ASSERT_EQ(run("plugins trust " + plugins + "/libmylib.so" + opts).status, 0);
  std::string sha = run("plugins trusted --json" + opts).out;
  sha = sha.substr(sha.find("\"sha256\": \"", sha.find("\"name\": \"mylib\"")) + 11, 64);
  std::transform(sha.begin(), sha.end(), sha.begin(), [](unsigned char c) { return std::toupper(c); });
  r = run("plugins untrust " + sha + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("plugins untrust mylib@1.0.0" + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("is not on the trust list"));
  std::system(("rm -rf " + dir).c_str());
}

// A bundle in a directory anyone can write is refused by every command that loads
// plugins, with the reason in the store; --allow-insecure-plugins loads it, audited.
TEST(AdminCommands, AWorldWritablePluginDirectoryIsRefusedUnlessAllowed) {
  char tmpl[] = "/tmp/strata-insecure-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_0_0.so " + plugins +
                         " && chmod 0777 " + plugins).c_str()),
            0);
  const std::string opts = " --plugins " + plugins + " --db " + db;
  Result r = run("plugins list" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("rejected"));
  EXPECT_THAT(r.out, HasSubstr("the plugin directory " + plugins + " is writable by group and others (mode 0777)"));
  r = run("call extension_cpp::mymuladd 'ones(2)' 'ones(2)' 1.0" + opts);
  EXPECT_EQ(r.status, 1);
  // The missing op's error says that a file was refused unread, and why.
  EXPECT_THAT(r.out, HasSubstr("error: no operator named extension_cpp::mymuladd (a file in the plugin "
                               "directory was refused before it was read, " + plugins + "/libmuladd_1_0_0.so: refused: "
                               "the plugin directory"));
  r = run("call extension_cpp::mymuladd 'ones(2)' 'ones(2)' 1.0 --allow-insecure-plugins --actor eve" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tensor([2., 2.])"));
  EXPECT_THAT(r.out, HasSubstr("loaded with --allow-insecure-plugins although the plugin directory"));
  r = run("plugins list" + opts);
  EXPECT_THAT(r.out, HasSubstr("rejected"));  // without the option, refused again
  r = run("audit --db " + db);
  EXPECT_THAT(r.out, HasSubstr("eve"));
  EXPECT_THAT(r.out, HasSubstr("host.allow_insecure_plugins " + plugins));
  // Every file refused unread is counted (in an insecure directory, one that is no
  // bundle too: it could not be read to tell).
  ASSERT_EQ(std::system(("cp " STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + plugins + " && echo junk > " + plugins +
                         "/libjunk.so").c_str()),
            0);
  r = run("call extension_cpp::mymuladd 'ones(2)' 'ones(2)' 1.0" + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("(3 files in the plugin directory were refused before they were read; the first, "));
  std::system(("rm -rf " + dir).c_str());
}

// The whole host: `strata serve` as a process on a temp plugin dir and store; a
// second process disables a kernel with --wait; a new bundle version is copied in;
// SIGTERM stops the host and the store is intact.
TEST(ServeEndToEnd, DisableWithWaitPickUpANewVersionAndStopOnSigterm) {
  char tmpl[] = "/tmp/strata-e2e-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_0_0.so " +
                         STRATA_PLUGIN_BUILD_DIR "/libmylib.so " + plugins).c_str()),
            0);
  const std::string opts = " --plugins " + plugins + " --db " + db;
  ServeProcess serve(dir, plugins, db);
  ASSERT_GT(serve.pid, 0);
  auto serveLog = [&] { return serve.log(); };
  serve.waitFor("ready.", 100);
  ASSERT_THAT(serveLog(), ::testing::HasSubstr("loaded     muladd@1.0.0"));

  Result r = run("call extension_cpp::mymuladd 'ones(3)' 'ones(3)' 2.0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("tensor([3., 3., 3.])"));

  r = run("kernel disable extension_cpp::mymuladd cpu --reason e2e --actor tester --wait 5" + opts.substr(opts.find(" --db")));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("applied by every live host"));
  serve.waitFor("applied store changes up to 1", 40);
  EXPECT_THAT(serveLog(), ::testing::HasSubstr("applied store changes up to 1"));
  r = run("call extension_cpp::mymuladd 'ones(3)' 'ones(3)' 2.0" + opts);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("extension_cpp::mymuladd: no kernel"));

  ASSERT_EQ(std::system(("cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_1_0.so " + plugins).c_str()), 0);
  serve.waitFor("loaded muladd@1.1.0", 60);
  EXPECT_THAT(serveLog(), ::testing::HasSubstr("loaded muladd@1.1.0"));

  EXPECT_EQ(serve.stop(), 0) << serveLog();

  r = run("audit --op extension_cpp::mymuladd --db " + db);
  EXPECT_THAT(r.out, ::testing::HasSubstr("tester"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("kernel.disable"));
  r = run("plugins list" + opts);
  EXPECT_THAT(r.out, ::testing::HasSubstr("1.1.0    loaded"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("1.0.0    superseded"));
  // A clean stop keeps the host's row, marked stopped (Note [What each host runs]).
  EXPECT_EQ(std::system(("test \"$(sqlite3 " + db + " \"PRAGMA integrity_check; SELECT COUNT(*) FROM hosts WHERE "
                         "stopped = '';\")\" = \"$(printf 'ok\\n0')\"").c_str()),
            0);
  EXPECT_THAT(run("hosts --db " + db).out, HasSubstr("stopped at "));
  std::system(("rm -rf " + dir).c_str());
}

// Autocast through the CLI on the bundled plugins: muladd 1.1.0 brings autocast rules
// for mymuladd, 1.0.0 does not.
TEST(CallAutocast, ExplainShowsTheCastsAndTheVersionsDiffer) {
  char tmpl[] = "/tmp/strata-autocast-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string opts = " --plugins " STRATA_PLUGIN_BUILD_DIR " --db " + dir + "/s.db";
  { strata::db::Store made(dir + "/s.db"); }  // a store: no "no store" note
  const std::string call = "call extension_cpp::mymuladd '[1.,2.,3.]' '[2.,2.,2.]' 1.0";
  Result r = run(call + " --autocast cpu:bf16 --explain" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("-> AutocastCPU: kernel [boxed, owner muladd@1.1.0, autocast rule, policy "
                               "lower_precision_fp"));
  EXPECT_THAT(r.out, HasSubstr("autocast: AutocastCPU rule of extension_cpp::mymuladd (owner muladd@1.1.0, policy "
                               "lower_precision_fp)\n"));
  EXPECT_THAT(r.out, HasSubstr("a: float32 -> bfloat16\n"));
  EXPECT_THAT(r.out, HasSubstr("b: float32 -> bfloat16\n"));
  EXPECT_THAT(r.out, HasSubstr("result:\ntensor([3., 5., 7.], dtype=bfloat16)\n"));
  // The dtype follows the scope; without autocast the op runs in float32.
  r = run(call + " --autocast cpu:f16" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tensor([3., 5., 7.], dtype=float16)\n"));
  r = run(call + " --autocast cpu" + opts);
  EXPECT_THAT(r.out, HasSubstr("dtype=bfloat16"));  // the cpu default
  r = run(call + opts);
  EXPECT_EQ(r.out, "tensor([3., 5., 7.])\n");
  // Autocast for another device leaves cpu tensors alone.
  r = run(call + " --autocast cuda" + opts);
  EXPECT_EQ(r.out, "tensor([3., 5., 7.])\n");
  // dump lists the rules with their policies and owner.
  r = run("dump extension_cpp::mymuladd" + opts);
  EXPECT_THAT(r.out, HasSubstr("AutocastCPU                boxed       owner=muladd@1.1.0   autocast rule, policy "
                               "lower_precision_fp; registered at"));
  EXPECT_THAT(r.out, HasSubstr("AutocastCUDA               boxed       owner=muladd@1.1.0   autocast rule, policy "
                               "lower_precision_fp, cast_inputs=float16; registered at"));
  // muladd 1.0.0 has no rule: the same call stays float32.
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/old && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_0_0.so " + dir +
                         "/old/").c_str()),
            0);
  r = run(call + " --autocast cpu:bf16 --plugins " + dir + "/old --db " + dir + "/s.db");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([3., 5., 7.])\n");
  // Bad --autocast values are usage errors that name the value.
  r = run(call + " --autocast gpu" + opts);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--autocast gpu: autocast has no device type 'gpu': expected cpu, cuda or privateuse1"));
  r = run(call + " --autocast cpu:int8" + opts);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("the dtype must be bf16 (bfloat16) or f16 (float16), not 'int8'"));
  r = run(call + " --autocast meta" + opts);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("'meta'"));
  std::system(("rm -rf " + dir).c_str());
}

// vmap through the CLI: muladd 1.1.0 brings a batching rule for mymuladd, 1.0.0 does
// not (the for-loop fallback runs, and says so).
// --fake: a dry run under FakeTensorMode; --explain shows that only the fake impl ran.
TEST(CallFake, PrintsShapesDtypesAndDevicesAndRunsNoKernel) {
  char tmpl[] = "/tmp/strata-fake-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string opts = " --plugins " STRATA_PLUGIN_BUILD_DIR " --db " + dir + "/s.db";
  Result r = run("call extension_cpp::mymuladd 'ones(2,3)' 'ones(2,3)' 1.0 --fake" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("FakeTensor(shape=[2, 3], dtype=float32, device=cpu)\n"));
  r = run("call extension_cpp::mymuladd 'ones(2,3)' 'ones(2,3)' 1.0 --fake --explain" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("-> Meta: kernel [fake, owner muladd@1.1.0"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("-> CPU:")));
  // A core op; and an op whose fake impl refuses its inputs says why.
  r = run("call core::matmul 'ones(4,3):f64' 'ones(3,5):f64' --fake" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("FakeTensor(shape=[4, 5], dtype=float64, device=cpu)"));
  r = run("call core::matmul 'ones(4,3)' 'ones(4,5)' --fake" + opts);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("shapes cannot be multiplied"));
  // dump shows the fake impl.
  r = run("dump extension_cpp::mymuladd" + opts);
  EXPECT_THAT(r.out, HasSubstr("Meta                 kernel [fake, owner muladd@1.1.0"));
  // A dry run under vmap, as vmap under FakeTensorMode: the batching rule, or the
  // for-loop fallback, runs on fake tensors; the result is the batched shape.
  r = run("call extension_cpp::mymuladd 'ones(2,3)' 'ones(2,3)' 1.0 --fake --vmap 0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("FakeTensor(shape=[2, 3], dtype=float32, device=cpu)"));
  r = run("call core::matmul 'ones(5,2,3)' 'ones(3,4)' --fake --vmap 0,None --explain" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("batching rule with in_dims (0, None)"));
  EXPECT_THAT(r.out, HasSubstr("FakeTensor(shape=[5, 2, 4], dtype=float32, device=cpu)"));
  // A call that fails under --fake and a --mode ends the modes innermost first.
  r = run("call mylib::sin 'ones(4,2)' --fake --mode trace" + opts);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("mylib::sin has no fake implementation"));
  EXPECT_THAT(r.out, Not(HasSubstr("not on top")));
  // An in-place op hands back its input: a fake one, never the real input unchanged.
  r = run("call core::copy_ 'ones(3,2)' 'zeros(3,2)' --fake --vmap 0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("FakeTensor(shape=[3, 2], dtype=float32, device=cpu)"));
  EXPECT_THAT(r.out, Not(HasSubstr("tensor([")));
  r = run("call core::matmul 'ones(5,2,3)' 'ones(4,4)' --fake --vmap 0,None" + opts);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("shapes cannot be multiplied"));
  std::system(("rm -rf " + dir).c_str());
}

TEST(CallVmap, ExplainNamesTheRuleOrTheFallback) {
  char tmpl[] = "/tmp/strata-vmap-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string opts = " --plugins " STRATA_PLUGIN_BUILD_DIR " --db " + dir + "/s.db";
  { strata::db::Store made(dir + "/s.db"); }  // a store: no "no store" note
  const std::string call = "call extension_cpp::mymuladd '[[1.,2.],[3.,4.],[5.,6.]]' '[2.,3.]' 1.0";
  Result r = run(call + " --vmap 0,None,None --explain" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("-> Batched: kernel [unboxed, owner muladd@1.1.0, vmap batching rule (typed)"));
  EXPECT_THAT(r.out, HasSubstr("vmap level 1, batch size 3: batching rule with in_dims (0, None, None), out_dims (0,)"));
  EXPECT_THAT(r.out, HasSubstr("result:\ntensor([[ 3.,  7.],\n        [ 7., 13.],\n        [11., 19.]])\n"));
  // in_dim 1 maps a's columns; omitted trailing in_dims are None.
  r = run("call extension_cpp::mymuladd '[[1.,2.],[3.,4.]]' '[[1.,1.],[2.,2.]]' 0.0 --vmap 1,0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([[1., 3.],\n        [4., 8.]])\n");
  r = run(call + " --vmap 0,1" + opts);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("Got in_dim=1 for some input (argument 1, b), but that input is a Tensor of "
                               "dimensionality 1 so expected in_dim to satisfy -1 <= in_dim < 1."));
  // A float with an in_dim: PyTorch's error, naming the argument.
  r = run(call + " --vmap 0,None,0" + opts);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("Got in_dim=0 for an input (argument 2, c) but the input is of type float. We cannot "
                               "vmap over non-Tensor arguments"));
  r = run("call core::allclose 'ones(2,2)' 'ones(2,2)' --vmap 0" + opts);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("--vmap: core::allclose returns bool; vmap needs an op that returns Tensors"));
  r = run(call + " --vmap 0,x" + opts);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("--vmap 0,x: 'x' is not an in_dim (an integer or None)"));
  // One in_dim maps every tensor (a Scalar argument keeps its default), lists too.
  r = run("call core::add.Tensor '[[1.,2.],[3.,4.]]' '[10.,20.]' --vmap 0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([[11., 12.],\n        [23., 24.]])\n");
  r = run("call core::stack '[[[1.,2.],[3.,4.]],[[5.,6.],[7.,8.]]]' dim=1 --vmap 0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([[[1., 5.],\n         [2., 6.]],\n\n        [[3., 7.],\n         [4., 8.]]])\n");
  // dump shows the rule; 1.0.0 has none and loops.
  r = run("dump extension_cpp::mymuladd" + opts);
  EXPECT_THAT(r.out, ::testing::ContainsRegex("Batched +unboxed +owner=muladd@1.1.0 +vmap batching rule \\(typed\\)"));
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/old && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_0_0.so " + dir +
                         "/old/").c_str()),
            0);
  r = run(call + " --vmap 0,None,None --explain --plugins " + dir + "/old --db " + dir + "/old.db");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("-> Batched: backend fallback [boxed, owner builtin, vmap for-loop fallback"));
  EXPECT_THAT(r.out, HasSubstr("no batching rule for extension_cpp::mymuladd; for-loop fallback, 3 calls"));
  EXPECT_THAT(r.out, HasSubstr("vmap: no batching rule for extension_cpp::mymuladd; running a slow for-loop "
                               "fallback, 3 calls"));
  EXPECT_THAT(r.out, HasSubstr("tensor([[ 3.,  7.],\n        [ 7., 13.],\n        [11., 19.]])\n"));
  std::system(("rm -rf " + dir).c_str());
}

// A running `strata serve`; `kernel disable OP batched --wait` switches muladd's
// batching rule off: the same call then runs the fallback and gives the same numbers.
TEST(ServeEndToEnd, AnAdminSwitchesABatchingRuleOffLive) {
  char tmpl[] = "/tmp/strata-e2e-vmap-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_1_0.so " + plugins)
                            .c_str()),
            0);
  const std::string opts = " --plugins " + plugins + " --db " + db;
  ServeProcess serve(dir, plugins, db);
  ASSERT_GT(serve.pid, 0);
  serve.waitFor("ready.", 100);
  const std::string call =
      "call extension_cpp::mymuladd 'rand(8,3)' 'rand(8,3)' 2.0 --seed 7 --vmap 0,0,None --explain";
  Result with_rule = run(call + opts);
  EXPECT_EQ(with_rule.status, 0) << with_rule.out;
  EXPECT_THAT(with_rule.out, HasSubstr("-> Batched: kernel [unboxed, owner muladd@1.1.0, vmap batching rule (typed)"));
  Result r = run("kernel disable extension_cpp::mymuladd batched --reason 'try the loop' --actor tester --wait 5 --db " +
                 db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("disabled extension_cpp::mymuladd Batched"));
  EXPECT_THAT(r.out, HasSubstr("applied by every live host"));
  Result looped = run(call + opts);
  EXPECT_EQ(looped.status, 0) << looped.out;
  EXPECT_THAT(looped.out, HasSubstr("-> Batched: backend fallback [boxed, owner builtin, vmap for-loop fallback"));
  EXPECT_THAT(looped.out, HasSubstr("for-loop fallback, 8 calls"));
  auto result = [](const std::string& out) { return out.substr(out.find("result:\n")); };
  EXPECT_EQ(result(looped.out), result(with_rule.out));
  r = run("audit --op extension_cpp::mymuladd --db " + db);
  EXPECT_THAT(r.out, HasSubstr("kernel.disable"));
  EXPECT_THAT(r.out, HasSubstr("Batched"));
  EXPECT_THAT(r.out, HasSubstr("tester"));
  r = run("kernel enable extension_cpp::mymuladd batched --wait 5 --db " + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(run(call + opts).out, HasSubstr("vmap batching rule"));
  EXPECT_EQ(serve.stop(), 0) << serve.log();
  std::system(("rm -rf " + dir).c_str());
}

// A running `strata serve`; `kernel disable OP autocast:cpu --wait` from another
// process switches the rule off, audited; the same call then returns float32.
TEST(ServeEndToEnd, AnAdminSwitchesAnAutocastRuleOffLive) {
  char tmpl[] = "/tmp/strata-e2e-ac-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string plugins = dir + "/plugins", db = dir + "/s.db";
  ASSERT_EQ(std::system(("mkdir -p " + plugins + " && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_1_0.so " + plugins)
                            .c_str()),
            0);
  const std::string opts = " --plugins " + plugins + " --db " + db;
  ServeProcess serve(dir, plugins, db);
  ASSERT_GT(serve.pid, 0);
  auto serveLog = [&] { return serve.log(); };
  serve.waitFor("ready.", 100);
  ASSERT_THAT(serveLog(), HasSubstr("loaded     muladd@1.1.0"));

  const std::string call = "call extension_cpp::mymuladd 'ones(3)' 'ones(3)' 2.0 --autocast cpu:bf16";
  Result r = run(call + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([3., 3., 3.], dtype=bfloat16)\n");

  r = run("kernel disable extension_cpp::mymuladd autocast:cpu --reason 'keep fp32' --actor tester --wait 5 --db " + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("disabled extension_cpp::mymuladd AutocastCPU"));
  EXPECT_THAT(r.out, HasSubstr("applied by every live host"));
  r = run(call + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "tensor([3., 3., 3.])\n");
  r = run("dump extension_cpp::mymuladd" + opts);
  EXPECT_THAT(r.out, HasSubstr("AutocastCPU: disabled"));
  r = run("audit --op extension_cpp::mymuladd --db " + db);
  EXPECT_THAT(r.out, HasSubstr("kernel.disable"));
  EXPECT_THAT(r.out, HasSubstr("AutocastCPU"));
  EXPECT_THAT(r.out, HasSubstr("tester"));

  r = run("kernel enable extension_cpp::mymuladd autocast:cpu --wait 5 --db " + db);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(run(call + opts).out, HasSubstr("dtype=bfloat16"));

  EXPECT_EQ(serve.stop(), 0) << serveLog();
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace strata_e2e

// strata bench runs the real benchmark binary: a small filter, short runs.
#ifdef STRATA_HAVE_BENCH
TEST(BenchCommand, RunsTheSuiteShowsProgressAndWritesJsonAndSvg) {
  char tmpl[] = "/tmp/strata-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  Result r = run("bench --filter '^(direct_call|unboxed/ident|mode_stack/[012])$' --min-time 0.01 --json " + dir +
                 "/b.json --plot " + dir + "/b.svg");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("[strata 1/5] direct_call"));
  EXPECT_THAT(r.out, HasSubstr("[strata 5/5] mode_stack/2"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\nunboxed/ident +[0-9.]+ ns\n"));
  // The machine is named, as /proc/cpuinfo names it, in the output and in the JSON.
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\nmachine: [^\n]+, [0-9]+ CPUs? at [0-9]+ MHz\n"));
  std::ifstream json(dir + "/b.json");
  const std::string j((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  EXPECT_THAT(j, ::testing::ContainsRegex("\"cpu_model\": \"[^\"]+\""));
  EXPECT_THAT(j, HasSubstr("\"name\": \"unboxed/ident\""));
  EXPECT_THAT(j, HasSubstr("\"real_time\""));
  std::ifstream svg(dir + "/b.svg");
  const std::string s((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_THAT(s, StartsWith("<svg"));
  EXPECT_THAT(s, HasSubstr(">mode_stack/1</text>"));
  EXPECT_THAT(s, HasSubstr("per mode"));
  std::system(("rm -rf " + dir).c_str());
}

// A peer's results read from a file: the ratio of each scenario both ran, and the
// goals they bear on.
TEST(BenchCommand, PrintsRatiosAgainstAPeerFile) {
  char tmpl[] = "/tmp/strata-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/peer.json") << R"({"context": {}, "benchmarks": [
    {"name": "libtorch/unboxed/ident", "run_name": "libtorch/unboxed/ident", "run_type": "iteration",
     "real_time": 1000000, "cpu_time": 1000000, "time_unit": "ns"}]})";
  Result r = run("bench --filter '^unboxed/ident$' --min-time 0.01 --peer " + dir + "/peer.json --json " + dir +
                 "/b.json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("scenario +strata +peer +ratio\n"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("unboxed/ident +[0-9.]+ ns +1.0 ms +0.00\n"));
  EXPECT_THAT(r.out, HasSubstr("met     unboxed/ident at most 0.5x PyTorch's"));
  // A file that names no machine could be this one's: no warning.
  EXPECT_THAT(r.out, Not(HasSubstr("another machine")));
  std::ifstream json(dir + "/b.json");
  const std::string j((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  EXPECT_THAT(j, HasSubstr("\"ratios\""));
  EXPECT_THAT(j, HasSubstr("\"peer_ns\": 1000000"));

  // One measured on another CPU still pairs, with a warning that its ratios say little.
  std::ofstream(dir + "/other.json") << R"json({"context": {"cpu_model": "Some Other CPU (family 1, model 1)"},
    "benchmarks": [{"name": "libtorch/unboxed/ident", "run_name": "libtorch/unboxed/ident", "run_type": "iteration",
     "real_time": 1000000, "cpu_time": 1000000, "time_unit": "ns"}]})json";
  r = run("bench --filter '^unboxed/ident$' --min-time 0.01 --peer " + dir + "/other.json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("warning: --peer " + dir + "/other.json: the peer's results were measured on another "
                               "machine (cpu_model 'Some Other CPU (family 1, model 1)' against this run's '"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("unboxed/ident +[0-9.]+ ns +1.0 ms +0.00\n"));
  std::system(("rm -rf " + dir).c_str());
}
#endif

TEST(BenchCommand, BadInputIsAClearErrorWithTheRightExitCode) {
  Result r = run("bench --repetitions 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--repetitions expects a positive integer, got '0'"));
  r = run("bench --min-time soon");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--min-time expects a positive number of seconds, got 'soon'"));
  r = run("bench --plot /nonexistent/dir/b.svg");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("--plot /nonexistent/dir/b.svg: the folder /nonexistent/dir does not exist"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("[strata 1/")));  // refused before running anything
  r = run("bench --peer /nonexistent/peer.json");
  EXPECT_EQ(r.status, 1);
#ifdef STRATA_HAVE_BENCH
  EXPECT_THAT(r.out, HasSubstr("--peer cannot read /nonexistent/peer.json"));
  r = run("bench --filter 'no_such_scenario'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("matches 'no_such_scenario'"));
  char tmpl[] = "/tmp/strata-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/peer.json") << "{\"benchmarks\": 3}";
  r = run("bench --peer " + dir + "/peer.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("peer.json: not Google Benchmark output (no \"benchmarks\" array)"));
  std::system(("rm -rf " + dir).c_str());
#else
  EXPECT_THAT(r.out, HasSubstr("is not built"));
#endif
}

// The README's "Write a bundle" example, as a newcomer would use it: its three
// files written out, built against this build tree with find_package(strata), and
// loaded by the CLI.
std::map<std::string, std::string> readmeBundleExample() {
  return strata::test::readmeBundleExample(STRATA_SOURCE_DIR "/README.md");
}

TEST(ExternalBundle, BuildsAndLoadsTheReadmeExample) {
  const auto files = readmeBundleExample();
  ASSERT_EQ(files.size(), 3u) << "the README's bundle example should have CMakeLists.txt, hello.cc and bundle.json";
  char tmpl[] = "/tmp/strata-hello-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  for (const auto& [name, text] : files) std::ofstream(dir + "/" + name) << text;
  const std::string build = "'" STRATA_CMAKE "' -S " + dir + " -B " + dir + "/build -G Ninja -DCMAKE_CXX_COMPILER='" +
                            STRATA_CXX + "' -Dstrata_DIR=" STRATA_BUILD_DIR "/sdk > " + dir + "/log 2>&1 && '" +
                            STRATA_CMAKE "' --build " + dir + "/build >> " + dir + "/log 2>&1";
  if (std::system(build.c_str()) != 0) {
    std::ifstream log(dir + "/log");
    FAIL() << "building the README's bundle failed:\n" << std::string(std::istreambuf_iterator<char>(log), {});
  }
  const std::string opts = " --plugins " + dir + "/build --db " + dir + "/s.db";
  Result r = run("call hello::scale '[1,2,3]' 2.0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tensor([2., 4., 6.])"));
  r = run("call hello::scale 'ones(2,3):meta' 2.0" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("device='meta'"));
  r = run("plugins list" + opts);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("hello +1.0.0 +loaded"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/build/libhello_1_0_0.so"));  // the documented name per version

  // Only bundle.json changes (a version bump): one build makes the new version, in
  // its own file beside the old one.
  auto rebuild = [&] {
    return std::system(("'" STRATA_CMAKE "' --build " + dir + "/build > " + dir + "/log 2>&1").c_str());
  };
  auto log = [&] {  // CMake wraps its messages: every run of whitespace as one space
    std::ifstream f(dir + "/log");
    std::string text(std::istreambuf_iterator<char>(f), {}), out;
    for (char c : text) {
      const bool space = c == ' ' || c == '\n' || c == '\t';
      if (!space || out.empty() || out.back() != ' ') out += space ? ' ' : c;
    }
    return out;
  };
  std::string json = files.at("bundle.json");
  const size_t at = json.find("\"1.0.0\"");
  ASSERT_NE(at, std::string::npos);
  std::ofstream(dir + "/bundle.json") << json.replace(at, 7, "\"1.1.0\"");
  ASSERT_EQ(rebuild(), 0) << log();
  EXPECT_TRUE(std::filesystem::exists(dir + "/build/libhello_1_1_0.so")) << log();
  r = run("plugins list" + opts);
  EXPECT_THAT(r.out, ::testing::ContainsRegex("hello +1.1.0 +loaded"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("hello +1.0.0 +superseded"));

  // Invalid JSON fails the build, naming the file and the reason (moc only warns).
  std::ofstream(dir + "/bundle.json") << "{\"name\": \"hello\", \"version\": \"1.2.0\",";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: not valid JSON"));
  std::ofstream(dir + "/bundle.json") << "{\"name\": \"hello\", \"version\": \"1.2\", \"abi\": {\"major\": " << STRATA_SDK_ABI_MAJOR << ", \"minor\": " << STRATA_SDK_ABI_MINOR << "}, \"description\": \"d\"}";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"version\" '1.2' is not a semantic version"));
  EXPECT_THAT(log(), HasSubstr("strata_add_bundle(hello): "));
  // What every host requires of the file fails the build too: the namespaces, and an
  // "abi" that is the one the code is compiled against (a host refuses the others).
  const std::string head =
      R"({"name": "hello", "version": "1.2.0", "abi": {"major": )" + std::to_string(STRATA_SDK_ABI_MAJOR) + R"(, "minor": )";
  std::ofstream(dir + "/bundle.json") << head << STRATA_SDK_ABI_MINOR << R"(}, "defines": []})";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"description\" is missing (a string)"));
  // What CMake's JSON reader lets through but Qt's refuses (moc would embed nothing).
  const std::string full = head + std::to_string(STRATA_SDK_ABI_MINOR) +
                           R"(}, "description": "d, } // not a comment", "defines": ["hello"], "implements": [])";
  std::ofstream(dir + "/bundle.json") << full << ",}";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: not valid JSON: a comma before '}' or ']'"));
  std::ofstream(dir + "/bundle.json") << full << "} // the end";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: not valid JSON: it holds a comment"));
  std::ofstream(dir + "/bundle.json") << full << "} {}";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: not valid JSON: text after the object's closing '}'"));
  std::ofstream(dir + "/bundle.json") << head << STRATA_SDK_ABI_MINOR
                                      << R"(}, "description": "d", "defines": ["core"], "implements": []})";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"defines\" holds 'core', the host's own namespace"));
  std::ofstream(dir + "/bundle.json") << head << STRATA_SDK_ABI_MINOR
                                      << R"(}, "description": "d", "defines": [7], "implements": []})";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"defines\" holds a NUMBER (entry 0), which is not a namespace"));
  std::ofstream(dir + "/bundle.json") << head << STRATA_SDK_ABI_MINOR << R"(}, "description": "d"})";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"defines\" is missing; it is an array of namespaces, possibly empty"));
  std::ofstream(dir + "/bundle.json") << head << STRATA_SDK_ABI_MINOR
                                      << R"(}, "description": "d", "defines": ["a"], "implements": "b"})";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"implements\" must be an array of namespaces, possibly empty "
                               "(e.g. [\"mylib\"]), not a STRING"));
  std::ofstream(dir + "/bundle.json") << head << STRATA_SDK_ABI_MINOR
                                      << R"(}, "description": "d", "defines": ["my-lib"], "implements": []})";
  EXPECT_NE(rebuild(), 0);
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"defines\" holds 'my-lib', which is not a namespace"));
  std::ofstream(dir + "/bundle.json") << head << STRATA_SDK_ABI_MINOR + 7
                                      << R"(}, "description": "d", "defines": ["hello"], "implements": []})";
  EXPECT_NE(rebuild(), 0);
  const std::string major = std::to_string(STRATA_SDK_ABI_MAJOR) + ".";
  EXPECT_THAT(log(), HasSubstr(dir + "/bundle.json: \"abi\" is " + major + std::to_string(STRATA_SDK_ABI_MINOR + 7) +
                               ", but the bundle is compiled against SDK ABI " + major +
                               std::to_string(STRATA_SDK_ABI_MINOR)));
  // Commas, braces and slashes inside strings are text: the file builds.
  std::ofstream(dir + "/bundle.json") << full << "}";
  EXPECT_EQ(rebuild(), 0) << log();
  std::system(("rm -rf " + dir).c_str());
}
