// The store under crashes, contention and bad files, as users meet them: real
// `strata` processes killed with SIGKILL, writing at once, and pointed at files that
// are not good stores. What exited 0 is in the store; nothing else is ever half done.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "strata/db/store.h"

namespace {

using ::testing::HasSubstr;
using strata::db::Store;

struct Result {
  int status;
  std::string out;
};

// Runs a shell command line; stderr joins stdout.
Result sh(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string q(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

const std::string kCli = STRATA_CLI;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/strata-crash-XXXXXX";
    path = mkdtemp(tmpl);
    ::chmod(path.c_str(), 0755);  // readable by the unprivileged user of the read-only case
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::string bytes(const std::string& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> lines(const std::string& f) {
  std::ifstream in(f);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

// A process in its own process group running `sh -c script`, output to `log`.
pid_t spawnShell(const std::string& script, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    if (freopen(log.c_str(), "a", stdout) == nullptr || freopen(log.c_str(), "a", stderr) == nullptr) _exit(126);
    execl("/bin/sh", "sh", "-c", script.c_str(), nullptr);
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);
  return pid;
}

void killGroup(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

std::string integrityCheck(const std::string& db) {
  sqlite3* raw = nullptr;
  std::string out;
  if (sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(raw, 30000);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &st, nullptr);
    int rc = SQLITE_ROW;
    while (st != nullptr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
      out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    if (rc != SQLITE_DONE) out += std::string("[") + sqlite3_errmsg(raw) + "]";
    sqlite3_finalize(st);
  } else {
    out = std::string("[cannot open: ") + sqlite3_errmsg(raw) + "]";
  }
  sqlite3_close(raw);
  return out;
}

// Each audit row's reason (the text after "disabled: " or "enabled: ").
std::set<std::string> auditedReasons(Store& s) {
  std::set<std::string> out;
  for (const auto& r : s.auditLog()) {
    const auto colon = r.after.find(": ");
    if (colon != std::string::npos) out.insert(r.after.substr(colon + 2));
  }
  return out;
}

// A writer: toggles OP KEY in a loop, each command with its own reason, and appends
// the reason of each command that exited 0 to ok_file. Errors go to the log.
std::string writerScript(const std::string& db, const std::string& op, const std::string& key,
                         const std::string& tag, const std::string& ok_file, int count = 1000000) {
  return "i=0; while [ $i -lt " + std::to_string(count) + " ]; do i=$((i+1)); "
         "if [ $((i % 2)) = 1 ]; then a=disable; else a=enable; fi; " +
         q(kCli) + " kernel $a " + op + " " + key + " --actor w --reason " + tag + "-$i --db " + q(db) +
         " >/dev/null && echo " + tag + "-$i >> " + q(ok_file) + "; done";
}

// A host and four admins, killed with SIGKILL at a random moment, 50 times over:
// every command that exited 0 is in the audit log and the store, the file passes
// integrity_check and its audit chain holds, no admin ever saw SQLITE_BUSY, and a
// host started afterwards applies the final state.
TEST(StoreUnderKill, FiftyRoundsOfKilledHostsAndWriters) {
  TempDir d;
  const std::string plugins = d.path + "/plugins", db = d.path + "/s.db", errors = d.path + "/errors.log";
  ASSERT_EQ(sh("mkdir -p " + plugins + " && cp " STRATA_PLUGIN_BUILD_DIR "/libmuladd_1_0_0.so " + plugins).status, 0);
  { Store made(db); }  // creation under SIGKILL: Note [Creating a store]
  std::mt19937 rng(20261123);
  std::uniform_int_distribution<int> delay_ms(50, 400);
  const char* keys[] = {"cpu", "cpu", "meta", "meta"};
  size_t confirmed = 0;
  for (int round = 0; round < 50; ++round) {
    const std::string ok_file = d.path + "/ok-" + std::to_string(round);
    std::vector<pid_t> procs;
    procs.push_back(spawnShell("exec " + q(kCli) + " serve --plugins " + q(plugins) + " --db " + q(db) + " >/dev/null",
                               errors));
    for (int w = 0; w < 4; ++w) {
      const std::string tag = "r" + std::to_string(round) + "w" + std::to_string(w);
      procs.push_back(spawnShell(writerScript(db, "extension_cpp::mymuladd", keys[w], tag, ok_file), errors));
    }
    // Kill at a random moment after the first confirmed command: on a loaded machine or
    // under a sanitizer, starting the processes alone can take longer than the delay.
    for (int waited = 0; waited < 1000 && lines(ok_file).empty(); ++waited) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    std::shuffle(procs.begin(), procs.end(), rng);
    for (pid_t p : procs) killGroup(p);

    ASSERT_EQ(integrityCheck(db), "ok") << "round " << round;
    Store s(db);
    const auto verdict = s.verifyAudit();
    ASSERT_TRUE(verdict.ok) << "round " << round << ": row " << verdict.first_bad_id << ": " << verdict.why;
    const std::set<std::string> audited = auditedReasons(s);
    for (const std::string& reason : lines(ok_file)) {
      EXPECT_EQ(audited.count(reason), 1u) << "round " << round << ": " << reason << " exited 0 but is not audited";
      ++confirmed;
    }
    // The store's state is the last audited change of each key.
    std::map<std::string, std::string> last;
    for (const auto& r : s.auditLog()) last[r.target] = r.after.substr(0, r.after.find(':'));
    for (const auto& k : s.kernelStates()) {
      EXPECT_EQ(last[k.op + " " + k.key], k.enabled ? "enabled" : "disabled") << "round " << round;
    }
  }
  EXPECT_GE(confirmed, 50u) << "the writers hardly ran: the test proves little";
  const std::string log = bytes(errors);
  EXPECT_THAT(log, ::testing::Not(HasSubstr("locked")));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("busy")));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("error:")));

  // A host started now applies the final state: its last applied change is the newest.
  const pid_t host = spawnShell("exec " + q(kCli) + " serve --plugins " + q(plugins) + " --db " + q(db), errors);
  int64_t applied = -1, newest = 0;
  for (int i = 0; i < 200 && applied != newest; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Store s(db);
    newest = s.latestChange();
    for (const auto& h : s.hosts()) {
      if (h.pid == host) applied = h.last_applied;
    }
  }
  EXPECT_EQ(applied, newest);
  kill(host, SIGTERM);
  int status = 0;
  waitpid(host, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::printf("%zu commands confirmed over 50 killed rounds\n", confirmed);
}

// Eight admins at once: no command fails (the busy timeout and BEGIN IMMEDIATE wait
// their turn), and the audit log has exactly one row per command.
TEST(StoreUnderLoad, EightWritersNeverSeeBusyAndEachCommandHasOneAuditRow) {
  TempDir d;
  const std::string db = d.path + "/s.db", ok_file = d.path + "/ok", errors = d.path + "/errors.log";
  { Store made(db); }  // created before the rush
  constexpr int kWriters = 8, kEach = 15;
  std::vector<pid_t> procs;
  for (int w = 0; w < kWriters; ++w) {
    procs.push_back(spawnShell(
        writerScript(db, "w" + std::to_string(w) + "::op", "cpu", "w" + std::to_string(w), ok_file, kEach), errors));
  }
  for (pid_t p : procs) {
    int status = 0;
    waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(lines(ok_file).size(), size_t{kWriters * kEach}) << bytes(errors);
  EXPECT_THAT(bytes(errors), ::testing::Not(HasSubstr("error:")));
  Store s(db);
  EXPECT_EQ(s.auditLog().size(), size_t{kWriters * kEach});
  EXPECT_EQ(auditedReasons(s).size(), size_t{kWriters * kEach});
  EXPECT_TRUE(s.verifyAudit().ok);
  EXPECT_EQ(integrityCheck(db), "ok");
}

// Files that are not good stores: each is an error naming the file and the reason,
// exit 1, and the file's bytes unchanged. Never repaired by recreating.
TEST(BadStoreFiles, EachIsRefusedWithItsReasonAndLeftUnchanged) {
  TempDir d;
  const std::string good = d.path + "/good.db";
  ASSERT_EQ(sh(q(kCli) + " kernel disable a::b cpu --db " + q(good)).status, 0);
  const std::string good_bytes = bytes(good);
  auto write = [&](const std::string& name, const std::string& content) {
    const std::string f = d.path + "/" + name;
    std::ofstream(f, std::ios::binary) << content;
    return f;
  };
  std::string noise(8192, '\0');
  std::mt19937 rng(7);
  for (char& c : noise) c = static_cast<char>(rng());
  std::map<std::string, std::string> cases = {
      {write("truncated.db", good_bytes.substr(0, good_bytes.size() / 3)), "malformed"},
      {write("random.db", noise), "not a database"},
      {write("empty.db", ""), "the file is empty"},
  };
  {
    const std::string other = d.path + "/other.db";
    ASSERT_EQ(sh("sqlite3 " + q(other) + " 'CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES (1);'").status, 0);
    cases[other] = "not a Strata store";
    const std::string newer = write("newer.db", good_bytes);
    ASSERT_EQ(sh("sqlite3 " + q(newer) + " 'PRAGMA user_version = 99'").status, 0);
    cases[newer] = "was written by a newer strata";
  }
  for (const auto& [file, reason] : cases) {
    const std::string before = bytes(file);
    for (const char* cmd : {" kernel disable a::b cpu --db ", " audit --db ", " plugins pin p 1.0.0 --db "}) {
      const Result r = sh(q(kCli) + cmd + q(file));
      EXPECT_EQ(r.status, 1) << file << cmd << r.out;
      EXPECT_THAT(r.out, HasSubstr(file)) << cmd;
      EXPECT_THAT(r.out, HasSubstr(reason)) << cmd;
    }
    EXPECT_EQ(bytes(file), before) << file;
    EXPECT_FALSE(std::filesystem::exists(file + "-wal") && std::filesystem::file_size(file + "-wal") > 0) << file;
  }

  // Read-only for the user running strata: refused before anything is read or written.
  const std::string ro = write("readonly.db", good_bytes);
  const bool root = ::geteuid() == 0;
  ASSERT_EQ(::chmod(ro.c_str(), 0444), 0);
  const std::string as_user = root ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
  Result r = sh(as_user + q(kCli) + " kernel disable a::b cpu --db " + q(ro));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr(ro + ": cannot open: the file is read-only for this user"));
  EXPECT_EQ(bytes(ro), good_bytes);

  // Paths SQLite would trip on, named in their own words before it speaks: a dangling
  // link, a loop of links, a name too long for the files SQLite adds to it, a
  // directory where its -shm file goes, a folder this user cannot write. None is
  // created or changed.
  ASSERT_EQ(::symlink((d.path + "/nothere.db").c_str(), (d.path + "/dangling.db").c_str()), 0);
  ASSERT_EQ(::symlink("loop.db", (d.path + "/loop.db").c_str()), 0);
  const std::string shm = write("shm.db", good_bytes);
  ASSERT_TRUE(std::filesystem::create_directory(shm + "-shm"));
  const std::string long_name = d.path + "/" + std::string(250, 'x') + ".db";
  const std::map<std::string, std::string> paths = {
      {d.path + "/dangling.db", "a symbolic link to " + d.path + "/nothere.db, which does not exist"},
      {d.path + "/loop.db", "a loop of symbolic links"},
      {long_name, "the file name is too long (253 bytes; at most 251, as SQLite adds '-wal' to it)"},
      {shm, shm + "-shm is a directory, where SQLite keeps the store's shm file"},
  };
  for (const auto& [file, reason] : paths) {
    const Result r = sh(q(kCli) + " kernel disable a::b cpu --db " + q(file));
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr(reason));
  }
  EXPECT_FALSE(std::filesystem::exists(d.path + "/nothere.db"));
  EXPECT_FALSE(std::filesystem::exists(long_name));
  EXPECT_EQ(bytes(shm), good_bytes);
  for (const auto& e : std::filesystem::directory_iterator(d.path)) {
    EXPECT_EQ(e.path().filename().string().find(".strata-new-"), std::string::npos) << e.path();
  }
  if (root) {  // a store this user may write, in a folder it may not: SQLite could not make its -wal file
    const std::string folder = d.path + "/ro";
    ASSERT_TRUE(std::filesystem::create_directory(folder));
    const std::string in_ro = folder + "/s.db";
    std::ofstream(in_ro, std::ios::binary) << good_bytes;
    ASSERT_EQ(::chmod(in_ro.c_str(), 0666), 0);
    ASSERT_EQ(::chmod(folder.c_str(), 0555), 0);
    r = sh(as_user + q(kCli) + " kernel disable a::b cpu --db " + q(in_ro));
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr(in_ro + ": cannot open: its folder " + folder + " is not writable (Permission "
                                 "denied), and SQLite keeps the store's -wal and -shm files beside it"));
    EXPECT_EQ(bytes(in_ro), good_bytes);
    // A store behind a folder this user may not search is an error for a command that
    // only reads, not "no store" (it would run the kernels an admin disabled there).
    const std::string hidden = d.path + "/hidden";
    ASSERT_TRUE(std::filesystem::create_directory(hidden));
    ASSERT_EQ(sh(q(kCli) + " kernel disable core::neg cpu --db " + q(hidden + "/s.db")).status, 0);
    ASSERT_EQ(::chmod(hidden.c_str(), 0700), 0);
    r = sh(as_user + q(kCli) + " call core::neg '[1]' --db " + q(hidden + "/s.db"));
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr(hidden + "/s.db: cannot open: Permission denied (a folder on the way"));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("tensor(")));
  }

  // A full disk (a file-size limit): the change is refused, named, and rolled back.
  const std::string full = write("full.db", good_bytes);
  const std::string big_reason(100000, 'x');
  r = sh("bash -c " + q("ulimit -f 40; " + q(kCli) + " kernel disable a::c cpu --reason " + big_reason + " --db " +
                         q(full)));  // 40 KiB: the -shm file fits, the change does not
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr(full + ": disk I/O error (a write was cut short: the disk is full or a file-size "
                                      "limit was reached)"));
  EXPECT_EQ(bytes(full), good_bytes);
  Store s(full);
  EXPECT_EQ(s.auditLog().size(), 1u);  // the one good.db had; the refused change left nothing
  EXPECT_EQ(s.kernelStates().size(), 1u);
  EXPECT_TRUE(s.verifyAudit().ok);
}

}  // namespace
