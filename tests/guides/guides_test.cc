// The guides run: every shell block of sdk/README.md and host/README.md, as a reader
// would type it, with the output the guide shows checked against the real output.
//
// Note [Runnable guides]
// ~~~~~~~~~~~~~~~~~~~~~~
// A guide marks what the test runs with HTML comments, which Markdown hides:
//   <!-- guide-file: PATH -->  before a fenced block: the block's text is written to
//                              PATH (relative to the guide's directory) before any
//                              block runs; several blocks for one PATH are appended
//                              in order, so a guide may show a file in pieces.
//   <!-- guide-run -->         before a ```sh block: the block runs, in order, as a
//                              bash script with -e and -o pipefail.
// Every ```sh block in a guide must be marked, so no command goes unrun. In a run
// block, a line that starts with "# " is output the guide promises: each must match
// a line of the block's output (stdout and stderr together), in order. "..." inside
// such a line stands for any text; a line that is only "# ..." stands for lines left
// out. Other comments go after a command, on its line.
//
// Each guide runs in a fresh temporary directory holding `build`, a link to the
// build tree (the guides say so), with build/bin first on PATH, no STRATA_DB or
// STRATA_PLUGIN_PATH in the environment, and CXX set to the compiler of the build.
// Each block runs in its own process group: whatever it leaves running when it ends
// fails the test and is killed, and a block that runs past its time limit is killed.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct Block {
  int line = 0;  // of the opening fence, 1-based
  std::string script;
  std::vector<std::string> expected;  // without "# "; "..." alone is an elision
};

struct Guide {
  std::map<std::string, std::string> files;
  std::vector<Block> blocks;
  std::vector<std::string> errors;  // unmarked shell blocks, markers with no block
};

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string trimRight(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

// See Note [Runnable guides].
Guide parseGuide(const std::string& text) {
  Guide g;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  enum { kNone, kFile, kRun } pending = kNone;
  std::string pending_path;
  int pending_line = 0;
  bool in_fence = false;
  bool capture = false;
  std::string fence_path;
  Block block;
  const std::string file_marker = "<!-- guide-file: ", run_marker = "<!-- guide-run -->";
  while (std::getline(in, line)) {
    ++n;
    line = trimRight(line);
    if (in_fence) {
      if (startsWith(line, "```")) {
        in_fence = false;
        if (capture && fence_path.empty()) g.blocks.push_back(block);
        capture = false;
        continue;
      }
      if (!capture) continue;
      if (!fence_path.empty()) {
        g.files[fence_path] += line + "\n";
        continue;
      }
      block.script += line + "\n";
      if (line == "#" || startsWith(line, "# ")) block.expected.push_back(line.size() > 2 ? line.substr(2) : "");
      continue;
    }
    if (startsWith(line, file_marker)) {
      pending = kFile;
      pending_path = line.substr(file_marker.size(), line.find(" -->") - file_marker.size());
      pending_line = n;
      continue;
    }
    if (line == run_marker) {
      pending = kRun;
      pending_line = n;
      continue;
    }
    if (startsWith(line, "```")) {
      in_fence = true;
      const std::string info = line.substr(3);
      const bool shell = info == "sh" || info == "bash" || info == "shell" || info == "console";
      if (pending == kFile) {
        capture = true;
        fence_path = pending_path;
        g.files[fence_path];
      } else if (pending == kRun) {
        if (!shell) g.errors.push_back("line " + std::to_string(n) + ": a guide-run block must be ```sh");
        capture = true;
        fence_path.clear();
        block = Block{n, "", {}};
      } else if (shell) {
        g.errors.push_back("line " + std::to_string(n) +
                           ": a shell block without <!-- guide-run -->: every command in a guide is run");
      }
      pending = kNone;
      continue;
    }
    if (pending != kNone && !line.empty()) {
      g.errors.push_back("line " + std::to_string(pending_line) + ": a marker not followed by a fenced block");
      pending = kNone;
    }
  }
  if (in_fence) g.errors.push_back("the guide ends inside a fenced block");
  return g;
}

// Whether `out` holds `pattern` ("..." for any text) within one line.
bool lineMatches(const std::string& out, const std::string& pattern) {
  size_t at = 0;
  size_t from = 0;
  while (true) {
    const size_t dots = pattern.find("...", from);
    const std::string part = pattern.substr(from, dots == std::string::npos ? std::string::npos : dots - from);
    if (!part.empty()) {
      const size_t found = out.find(part, at);
      if (found == std::string::npos) return false;
      at = found + part.size();
    }
    if (dots == std::string::npos) return true;
    from = dots + 3;
  }
}

// The first expected line that the output does not show in order, or "" when all do.
std::string firstMissing(const std::vector<std::string>& expected, const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  size_t next = 0;
  for (const std::string& e : expected) {
    if (e == "...") continue;
    size_t i = next;
    while (i < lines.size() && !lineMatches(lines[i], e)) ++i;
    if (i == lines.size()) return e.empty() ? "(an empty line)" : e;
    next = i + 1;
  }
  return "";
}

struct RunResult {
  int status = -1;  // the exit status, or -1 when killed by a signal
  bool timed_out = false;
  bool left_running = false;
  std::string output;
};

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The environment of the blocks: see Note [Runnable guides].
std::vector<std::string> blockEnvironment() {
  std::vector<std::string> env;
  std::string path = "/usr/bin:/bin";
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    if (name == "PATH") path = kv.substr(5);
    if (name == "PATH" || name == "CXX" || startsWith(name, "STRATA_")) continue;
    env.push_back(kv);
  }
  const std::string cmake_dir = fs::path(STRATA_CMAKE).parent_path().string();
  env.push_back("PATH=" + fs::path(STRATA_CLI).parent_path().string() + ":" + cmake_dir + ":" + path);
  env.push_back("CXX=" + std::string(STRATA_CXX));
  return env;
}

// Runs `bash -e -o pipefail script` in dir, in a process group of its own.
RunResult runScript(const std::string& dir, const std::string& script, int timeout_s) {
  const std::string script_path = dir + "/.guide-block.sh", out_path = dir + "/.guide-block.out";
  std::ofstream(script_path) << script;
  std::vector<std::string> env = blockEnvironment();
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  RunResult r;
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    if (chdir(dir.c_str()) != 0) _exit(126);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(out, 1);
    dup2(out, 2);
    execle("/bin/bash", "bash", "-e", "-o", "pipefail", script_path.c_str(), static_cast<char*>(nullptr),
           envp.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the child's own call
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // What the block started and did not stop: orphans come to this process (a child
  // subreaper), so they can be reaped and counted. Give a stopping process a moment.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (kill(-pid, 0) == 0) {
    while (waitpid(-pid, nullptr, WNOHANG) > 0) {
    }
    if (kill(-pid, 0) != 0) break;
    if (std::chrono::steady_clock::now() > grace) {
      r.left_running = !r.timed_out;
      kill(-pid, SIGKILL);
      while (waitpid(-pid, nullptr, 0) > 0) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.output = readFile(out_path);
  fs::remove(script_path);
  fs::remove(out_path);
  return r;
}

// A fresh directory with `build` linking to the build tree; removed when it dies.
class GuideDir {
 public:
  GuideDir() {
    std::string tmpl = (fs::temp_directory_path() / "strata-guide-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
    fs::create_directory_symlink(STRATA_BUILD_DIR, path_ + "/build");
  }
  ~GuideDir() {
    if (std::getenv("STRATA_KEEP_GUIDE_DIRS") == nullptr) fs::remove_all(path_);  // links are not followed
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs a guide's blocks in order; stops at the first that fails.
void runGuide(const std::string& guide_path, size_t min_blocks, const std::vector<std::string>& required_files) {
  const std::string text = readFile(guide_path);
  ASSERT_FALSE(text.empty()) << guide_path << " is missing or empty";
  const Guide g = parseGuide(text);
  for (const auto& e : g.errors) ADD_FAILURE() << guide_path << ": " << e;
  ASSERT_GE(g.blocks.size(), min_blocks) << guide_path << ": fewer runnable blocks than expected";
  for (const auto& f : required_files) EXPECT_TRUE(g.files.count(f)) << guide_path << ": no guide-file " << f;
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  GuideDir dir;
  for (const auto& [path, content] : g.files) {
    fs::create_directories((fs::path(dir.path()) / path).parent_path());
    std::ofstream(dir.path() + "/" + path) << content;
  }
  for (const Block& b : g.blocks) {
    const RunResult r = runScript(dir.path(), b.script, 480);
    const std::string where = guide_path + ":" + std::to_string(b.line);
    const std::string shown = "\n--- block ---\n" + b.script + "--- output ---\n" + r.output;
    ASSERT_FALSE(r.timed_out) << where << ": the block ran past its time limit" << shown;
    ASSERT_EQ(r.status, 0) << where << ": the block failed" << shown;
    ASSERT_FALSE(r.left_running) << where << ": the block left a process running" << shown;
    const std::string missing = firstMissing(b.expected, r.output);
    ASSERT_EQ(missing, "") << where << ": the output lacks a line the guide shows" << shown;
  }
}

// The harness itself: a test that cannot fail is no test.
TEST(GuideHarness, FindsBlocksFilesAndUnmarkedCommands) {
  const Guide g = parseGuide(
      "text\n<!-- guide-file: a/f.txt -->\n```text\none\n```\n<!-- guide-file: a/f.txt -->\n```\ntwo\n```\n"
      "<!-- guide-run -->\n```sh\necho hi   # a comment\n# hi\n# ...\n```\n```sh\nrm -rf nowhere\n```\n"
      "<!-- guide-run -->\n\nprose\n```sh\n```\n");
  EXPECT_EQ(g.files.at("a/f.txt"), "one\ntwo\n");
  ASSERT_EQ(g.blocks.size(), 1u);
  EXPECT_EQ(g.blocks[0].script, "echo hi   # a comment\n# hi\n# ...\n");
  EXPECT_EQ(g.blocks[0].expected, (std::vector<std::string>{"hi", "..."}));
  ASSERT_EQ(g.errors.size(), 3u);
  EXPECT_NE(g.errors[0].find("without <!-- guide-run -->"), std::string::npos);  // rm -rf nowhere
  EXPECT_NE(g.errors[1].find("not followed by a fenced block"), std::string::npos);
  EXPECT_NE(g.errors[2].find("without <!-- guide-run -->"), std::string::npos);
}

TEST(GuideHarness, MatchesLinesInOrderWithEllipses) {
  const std::string out = "strata serve: host vm:42\n  loaded     muladd@1.1.0\nready.\n";
  EXPECT_EQ(firstMissing({"strata serve: host ...", "...", "loaded ... muladd@1.1.0", "ready."}, out), "");
  EXPECT_EQ(firstMissing({"ready.", "loaded"}, out), "loaded");  // out of order
  EXPECT_EQ(firstMissing({"muladd@1.0.0"}, out), "muladd@1.0.0");
  EXPECT_EQ(firstMissing({"host ...vm:43"}, out), "host ...vm:43");
}

TEST(GuideHarness, CatchesAFailingCommandAWrongOutputAndALeftoverProcess) {
  GuideDir dir;
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  RunResult r = runScript(dir.path(), "echo one\nfalse\necho two\n", 30);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output, "one\n");
  r = runScript(dir.path(), "test -x build/bin/strata\nstrata --version\n", 30);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(firstMissing({"strata 9.9.9"}, r.output), "");
  r = runScript(dir.path(), "sleep 60 &\n", 30);
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(r.left_running);
  r = runScript(dir.path(), "sleep 60\n", 1);
  EXPECT_TRUE(r.timed_out);
}

TEST(Guides, BundleAuthorsGuide) {
  runGuide(STRATA_SOURCE_DIR "/sdk/README.md", 8, {"guide/CMakeLists.txt", "guide/guide.cc", "guide/bundle.json"});
}

TEST(Guides, AdminsGuide) { runGuide(STRATA_SOURCE_DIR "/host/README.md", 8, {}); }

}  // namespace
