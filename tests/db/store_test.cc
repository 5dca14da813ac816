// The store on real SQLite files in temp dirs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "strata/db/store.h"

namespace strata::db {
namespace {

using ::testing::HasSubstr;

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/strata-store-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Store, CreatesTheLatestSchemaInWalMode) {
  TempDir d;
  Store s(d.file("a.db"));
  EXPECT_EQ(s.schemaVersion(), Store::kSchemaVersion);
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(d.file("a.db").c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

TEST(Store, MigratesAVersion1FileKeepingItsRows) {
  TempDir d;
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(d.file("old.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, Store::migrationSql(1), nullptr, nullptr, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "PRAGMA user_version = 1;"
                           "INSERT INTO bundles (sha256, name, version, path, state) VALUES ('abc', 'old', '0.1.0', "
                           "'/p/old.so', 'loaded');"
                           "INSERT INTO kernel_state (op, key, enabled, actor) VALUES ('a::b', 'CPU', 0, 'ann');"
                           "INSERT INTO operators (name, schema, owner) VALUES ('a::b', 'a::b(Tensor x) -> Tensor', "
                           "'old@0.1.0');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  Store s(d.file("old.db"));
  EXPECT_EQ(s.schemaVersion(), Store::kSchemaVersion);
  const auto b = s.bundles();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].name, "old");
  EXPECT_EQ(b[0].description, "");  // the column version 2 added
  ASSERT_EQ(s.kernelStates().size(), 1u);
  EXPECT_FALSE(s.kernelStates()[0].enabled);
  s.registerHost("h", 1);  // version 2's tables exist
  EXPECT_EQ(s.hosts().size(), 1u);
  const auto ops = s.operators();  // version 3's columns, with their defaults
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].schema, "a::b(Tensor x) -> Tensor");
  EXPECT_EQ(ops[0].tags, "");
  EXPECT_EQ(ops[0].alias_analysis, "FROM_SCHEMA");
}

TEST(Store, AVersion2FileGainsOperatorTagsAndKeepsItsRows) {
  TempDir d;
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(d.file("v2.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, Store::migrationSql(1), nullptr, nullptr, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, Store::migrationSql(2), nullptr, nullptr, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "PRAGMA user_version = 2;"
                           "INSERT INTO operators (name, schema, owner) VALUES ('m::f', 'm::f(Tensor x) -> Tensor', "
                           "'m@1.0.0');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  Store s(d.file("v2.db"));
  EXPECT_EQ(s.schemaVersion(), Store::kSchemaVersion);
  ASSERT_EQ(s.operators().size(), 1u);
  EXPECT_EQ(s.operators()[0].owner, "m@1.0.0");
  s.replaceRegistrations("m@1.0.0",
                         {{"m::f", "m::f(Tensor x) -> Tensor", "m@1.0.0", "pointwise, pt2_compliant_tag",
                           "PURE_FUNCTION"}},
                         {});
  const auto ops = s.operators();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].tags, "pointwise, pt2_compliant_tag");
  EXPECT_EQ(ops[0].alias_analysis, "PURE_FUNCTION");
}

TEST(Store, RefusesANewerSchemaAndFilesThatAreNotDatabases) {
  TempDir d;
  {
    Store s(d.file("new.db"));
    s.exec("PRAGMA user_version = 99");
  }
  EXPECT_THAT(errorOf([&] { Store s(d.file("new.db")); }), HasSubstr("schema version 99 was written by a newer strata"));
  {
    Store s(d.file("negative.db"));
    s.exec("PRAGMA user_version = -2560");
  }
  EXPECT_THAT(errorOf([&] { Store s(d.file("negative.db")); }),
              HasSubstr("negative.db: schema version -2560 is not one any strata writes"));
  // An older version set by hand on current tables: named, refused, and left as it was.
  {
    Store s(d.file("edited.db"));
    s.setKernelState("a::b", "CPU", false, "", "ann");
    s.exec("PRAGMA user_version = 3");
  }
  EXPECT_THAT(errorOf([&] { Store s(d.file("edited.db")); }),
              HasSubstr("edited.db: says schema version 3, but its tables do not match that version (upgrading to 4 "
                        "failed: duplicate column name: prev_hash); was its user_version changed by hand?"));
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(d.file("edited.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 3);  // the failed upgrade rolled back
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  EXPECT_THAT(errorOf([&] { Store s(d.path); }), HasSubstr("a directory, not a store file"));
  EXPECT_THAT(errorOf([&] { Store s(""); }), HasSubstr("store: an empty path"));
  {
    std::ofstream f(d.file("junk.db"));
    f << "this is not an SQLite database, just some text that is long enough to have a header";
  }
  const std::string e = errorOf([&] { Store s(d.file("junk.db")); });
  EXPECT_THAT(e, HasSubstr(d.file("junk.db")));
  EXPECT_THAT(e, HasSubstr("not a database"));
  EXPECT_THAT(errorOf([&] { Store s("/nonexistent-dir/x.db"); }),
              HasSubstr("store /nonexistent-dir/x.db: cannot create it: the folder /nonexistent-dir does not exist"));
}

// Stores carry Strata's mark (PRAGMA application_id); a file without it is refused,
// its bytes unchanged, never migrated into a store. A store from before the mark
// (Strata's tables and versions) gets it.
TEST(Store, RefusesEmptyFilesAndOtherProgramsDatabasesUnchanged) {
  TempDir d;
  const auto bytes = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::ofstream(d.file("empty.db")).close();
  EXPECT_THAT(errorOf([&] { Store s(d.file("empty.db")); }),
              HasSubstr("empty.db: not a Strata store: the file is empty, and a store Strata creates never is"));
  EXPECT_EQ(bytes(d.file("empty.db")), "");
  for (const char* sql : {"CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');",
                          "PRAGMA application_id = 1234; CREATE TABLE t (x);"}) {
    sqlite3* raw = nullptr;
    std::filesystem::remove(d.file("other.db"));
    ASSERT_EQ(sqlite3_open(d.file("other.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
    const std::string before = bytes(d.file("other.db"));
    const std::string e = errorOf([&] { Store s(d.file("other.db")); });
    EXPECT_THAT(e, HasSubstr("other.db: not a Strata store")) << sql;
    EXPECT_EQ(bytes(d.file("other.db")), before) << sql;
  }
  {
    Store s(d.file("a.db"));  // created: marked
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(d.file("a.db").c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA application_id", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), Store::kApplicationId);
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

// Only a regular file can be a store: a FIFO (which would block the first read) and
// a device are refused, naming what they are. A path is always a file's name:
// "file:x.db" and ":memory:" make files of those names, not a URI or no file.
TEST(Store, SpecialFilesAreRefusedAndSQLitesSpecialNamesAreFileNames) {
  TempDir d;
  ASSERT_EQ(::mkfifo(d.file("fifo.db").c_str(), 0600), 0);
  EXPECT_THAT(errorOf([&] { Store s(d.file("fifo.db")); }), HasSubstr("fifo.db: a FIFO, not a store file"));
  if (std::filesystem::exists("/dev/null")) {
    EXPECT_THAT(errorOf([] { Store s("/dev/null"); }), HasSubstr("/dev/null: a character device, not a store file"));
  }
  struct Cwd {  // back where it was however the test ends
    std::filesystem::path was = std::filesystem::current_path();
    ~Cwd() { std::filesystem::current_path(was); }
  } cwd;
  std::filesystem::current_path(d.path);
  for (const char* name : {"file:u.db", ":memory:"}) {
    {
      Store s(name);
      s.setKernelState("core::neg", "cpu", false, "", "ann");
    }
    EXPECT_TRUE(std::filesystem::is_regular_file(d.path / name)) << name;
    Store again(name);
    EXPECT_EQ(again.kernelStates().size(), 1u) << name;  // the same file, read back
  }
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(d.path)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{":memory:", "fifo.db", "file:u.db"}));  // no temporary left behind
}

// A file shorter than its header says is truncated, unless it grows to its size soon:
// another process's checkpoint writes the header page before the pages that grow the
// file (eight admins at once saw a store "truncated" in between).
TEST(Store, AFileCaughtMidCheckpointOpensATruncatedOneIsRefused) {
  TempDir d;
  const auto bytes = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  {
    Store s(d.file("whole.db"));
    s.setKernelState("a::b", "CPU", false, "r", "t");
  }
  const std::string whole = bytes(d.file("whole.db"));
  ASSERT_GT(whole.size(), 4096u * 3);
  const std::string shorter = whole.substr(0, whole.size() - 4096);
  const std::string path = d.file("growing.db");
  std::ofstream(path, std::ios::binary) << shorter;
  std::ofstream(path + "-wal").close();  // a checkpoint is only ever of a WAL
  std::thread grow([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ofstream(path, std::ios::binary | std::ios::app) << whole.substr(shorter.size());
  });
  EXPECT_EQ(errorOf([&] { Store s(path); }), "");
  grow.join();
  // Truncated for good: refused at once without a WAL, after the wait with one.
  std::ofstream(d.file("cut.db"), std::ios::binary) << shorter;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(errorOf([&] { Store s(d.file("cut.db")); }),
              HasSubstr("cut.db: the database is malformed: the file is truncated"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));
  std::ofstream(d.file("cut.db-wal")).close();
  EXPECT_THAT(errorOf([&] { Store s(d.file("cut.db")); }),
              HasSubstr("cut.db: the database is malformed: the file is truncated"));
  EXPECT_EQ(bytes(d.file("cut.db")), shorter);
}

// Eight processes open one store that does not exist yet at the same instant: each
// succeeds, and the store is created and migrated once (Note [Creating a store]).
TEST(Store, EightProcessesCreatingOneStoreAtOnceAllSucceed) {
  for (int round = 0; round < 10; ++round) {
    TempDir d;
    const std::string path = d.file("race.db");
    std::vector<pid_t> kids;
    for (int i = 0; i < 8; ++i) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        try {
          Store s(path);
          s.setKernelState("race::op" + std::to_string(i), "CPU", false, "race", "kid");
          _exit(s.schemaVersion() == Store::kSchemaVersion ? 0 : 3);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "process %d: %s\n", i, e.what());
          _exit(2);
        }
      }
      kids.push_back(pid);
    }
    for (pid_t pid : kids) {
      int status = 0;
      waitpid(pid, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    Store s(path);
    EXPECT_EQ(s.kernelStates().size(), 8u);
    EXPECT_EQ(s.auditLog().size(), 8u);
    // Nothing of the losers' private files is left beside it.
    size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.path)) files += e.path().string().find(".strata-new-") != std::string::npos;
    EXPECT_EQ(files, 0u);
  }
}

TEST(Store, AdminActionsAreAuditedAndTheAuditLogIsAppendOnly) {
  TempDir d;
  Store s(d.file("a.db"));
  const int64_t c1 = s.setKernelState("extension_cpp::mymuladd", "CPU", false, "slow", "ann");
  const int64_t c2 = s.pin("muladd", "1.0.0", "bob");
  const int64_t c3 = s.unpin("muladd", "bob");
  const int64_t c4 = s.setBundleDisabled("mylib", true, "broken", "cy");
  const int64_t c5 = s.setKernelState("extension_cpp::mymuladd", "CPU", true, "", "ann");
  EXPECT_LT(c1, c2);
  EXPECT_LT(c4, c5);
  EXPECT_EQ(s.latestChange(), c5);
  (void)c3;
  const auto rows = s.auditLog();
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].action, "kernel.disable");
  EXPECT_EQ(rows[0].target, "extension_cpp::mymuladd CPU");
  EXPECT_EQ(rows[0].before, "enabled");
  EXPECT_EQ(rows[0].after, "disabled: slow");
  EXPECT_EQ(rows[0].actor, "ann");
  EXPECT_EQ(rows[1].action, "bundle.pin");
  EXPECT_EQ(rows[2].action, "bundle.unpin");
  EXPECT_EQ(rows[2].before, "1.0.0");
  EXPECT_EQ(rows[3].action, "bundle.disable");
  EXPECT_EQ(rows[4].before, "disabled");
  EXPECT_EQ(s.auditLog("", "extension_cpp::mymuladd").size(), 2u);
  EXPECT_EQ(s.auditLog("2999-01-01").size(), 0u);
  EXPECT_THAT(errorOf([&] { s.exec("UPDATE audit SET actor = 'mallory'"); }), HasSubstr("append-only"));
  EXPECT_THAT(errorOf([&] { s.exec("DELETE FROM audit"); }), HasSubstr("append-only"));
  EXPECT_EQ(s.auditLog().size(), 5u);
  EXPECT_EQ(s.auditLog()[0].actor, "ann");
}

// Note [The audit chain]: each kind of tampering, done with sqlite3 around Strata (the
// triggers dropped, as someone who means it would), is found at the row it touched.
namespace {

void tamper(const std::string& path, const std::string& sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  char* msg = nullptr;
  const int rc = sqlite3_exec(raw,
                              ("DROP TRIGGER IF EXISTS audit_no_update; DROP TRIGGER IF EXISTS audit_no_delete; "
                               "DROP TRIGGER IF EXISTS audit_no_replace; " + sql)
                                  .c_str(),
                              nullptr, nullptr, &msg);
  EXPECT_EQ(rc, SQLITE_OK) << (msg != nullptr ? msg : "");
  sqlite3_free(msg);
  sqlite3_close(raw);
}

// A store with five audited changes, ids 1..5.
std::string fiveChanges(const TempDir& d, const char* name) {
  const std::string path = d.file(name);
  Store s(path);
  for (int i = 0; i < 5; ++i) s.setKernelState("a::b", "CPU", i % 2 == 0, "r" + std::to_string(i), "ann");
  return path;
}

}  // namespace

TEST(Store, TheAuditLogIsAChainThatVerifies) {
  TempDir d;
  const std::string path = fiveChanges(d, "a.db");
  Store s(path);
  const AuditVerdict v = s.verifyAudit();
  EXPECT_TRUE(v.ok) << v.why;
  EXPECT_EQ(v.rows, 5);
  EXPECT_EQ(v.head.size(), 64u);
  // The head moves with every row, and an empty log verifies.
  s.pin("p", "1.0.0", "bob");
  EXPECT_TRUE(s.verifyAudit().ok);
  EXPECT_NE(s.verifyAudit().head, v.head);
  Store empty(d.file("empty.db"));
  EXPECT_TRUE(empty.verifyAudit().ok);
  EXPECT_EQ(empty.verifyAudit().rows, 0);
}

TEST(Store, INSERTORREPLACECannotOverwriteAnAuditRow) {
  TempDir d;
  Store s(d.file("a.db"));
  s.setKernelState("a::b", "CPU", false, "", "ann");
  EXPECT_THAT(errorOf([&] {
                s.exec("INSERT OR REPLACE INTO audit (id, actor, action, target) VALUES (1, 'mallory', 'x', 'y')");
              }),
              HasSubstr("append-only"));
  EXPECT_THAT(errorOf([&] { s.exec("REPLACE INTO audit (id, actor, action, target) VALUES (1, 'm', 'x', 'y')"); }),
              HasSubstr("append-only"));
  ASSERT_EQ(s.auditLog().size(), 1u);
  EXPECT_EQ(s.auditLog()[0].actor, "ann");
  EXPECT_TRUE(s.verifyAudit().ok);
}

TEST(Store, AnEditedAuditRowBreaksTheChainThere) {
  TempDir d;
  const std::string path = fiveChanges(d, "a.db");
  tamper(path, "UPDATE audit SET actor = 'mallory' WHERE id = 3");
  const AuditVerdict v = Store(path).verifyAudit();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_id, 3);
  EXPECT_EQ(v.rows, 2);
  EXPECT_THAT(v.why, HasSubstr("edited"));
}

TEST(Store, ADeletedAuditRowBreaksTheChainThere) {
  TempDir d;
  const std::string path = fiveChanges(d, "a.db");
  tamper(path, "DELETE FROM audit WHERE id = 2");
  AuditVerdict v = Store(path).verifyAudit();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_id, 3);
  EXPECT_THAT(v.why, HasSubstr("missing"));
  // Renumbered to hide the gap: the prev_hash no longer matches.
  const std::string other = fiveChanges(d, "b.db");
  tamper(other, "DELETE FROM audit WHERE id = 2; UPDATE audit SET id = id - 1 WHERE id > 2;"
                "UPDATE sqlite_sequence SET seq = 4 WHERE name = 'audit'");
  v = Store(other).verifyAudit();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_id, 2);
}

TEST(Store, AuditRowsDeletedFromTheEndAreFound) {
  TempDir d;
  const std::string path = fiveChanges(d, "a.db");
  tamper(path, "DELETE FROM audit WHERE id >= 4");
  Store s(path);
  AuditVerdict v = s.verifyAudit();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_id, 4);
  EXPECT_THAT(v.why, HasSubstr("deleted from the end"));
  // A later honest row does not paper over it: ids go on from the sequence.
  s.setKernelState("a::b", "CPU", true, "", "ann");
  v = s.verifyAudit();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_id, 6);
  EXPECT_THAT(v.why, HasSubstr("missing"));
}

TEST(Store, AnInsertedAuditRowBreaksTheChainThere) {
  TempDir d;
  const std::string path = fiveChanges(d, "a.db");
  // Appended by hand: no hash.
  tamper(path, "INSERT INTO audit (id, actor, action, target) VALUES (6, 'mallory', 'kernel.enable', 'a::b CPU')");
  AuditVerdict v = Store(path).verifyAudit();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_id, 6);
  EXPECT_THAT(v.why, HasSubstr("no hash"));
  // Slipped in between, everything after it moved up, with a well-formed hash of its own.
  const std::string other = fiveChanges(d, "b.db");
  {
    Store s(other);
    const auto rows = s.auditLog();
    AuditRow fake = rows[1];
    fake.id = 3;
    fake.actor = "mallory";
    const std::string hash = Store::auditRowHash(fake, "0000");
    tamper(other, "UPDATE audit SET id = id + 10 WHERE id >= 3; UPDATE audit SET id = id - 9 WHERE id >= 13;"
                  "INSERT INTO audit (id, time, actor, action, target, before, after, prev_hash, hash) VALUES (3, '" +
                      fake.time + "', 'mallory', '" + fake.action + "', '" + fake.target + "', '', '', '0000', '" +
                      hash + "');"
                      "UPDATE sqlite_sequence SET seq = 6 WHERE name = 'audit'");
  }
  v = Store(other).verifyAudit();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_id, 3);
  EXPECT_THAT(v.why, HasSubstr("prev_hash"));
}

TEST(Store, AStoreFromBeforeTheChainIsChainedOnOpen) {
  TempDir d;
  const std::string path = d.file("v3.db");
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    for (int v = 1; v <= 3; ++v) ASSERT_EQ(sqlite3_exec(raw, Store::migrationSql(v), nullptr, nullptr, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "PRAGMA user_version = 3;"
                           "INSERT INTO audit (actor, action, target) VALUES ('ann', 'kernel.disable', 'a::b CPU');"
                           "INSERT INTO audit (actor, action, target) VALUES ('bob', 'kernel.enable', 'a::b CPU');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  Store s(path);
  EXPECT_EQ(s.schemaVersion(), Store::kSchemaVersion);
  ASSERT_EQ(s.auditLog().size(), 2u);
  EXPECT_EQ(s.auditLog()[1].actor, "bob");
  EXPECT_TRUE(s.verifyAudit().ok) << s.verifyAudit().why;
  s.pin("p", "1.0.0", "cy");
  EXPECT_TRUE(s.verifyAudit().ok);
  EXPECT_EQ(s.verifyAudit().rows, 3);
  EXPECT_THAT(errorOf([&] { s.exec("DELETE FROM audit"); }), HasSubstr("append-only"));  // triggers back
}

TEST(Store, StatePersistsAcrossReopening) {
  TempDir d;
  {
    Store s(d.file("p.db"));
    s.setKernelState("a::f", "CPU", false, "r", "ann");
    s.pin("b", "2.0.0", "ann");
    s.upsertBundle({"b", "2.0.0", "/p/b.so", "sha", "loaded", "", "desc", "", ""});
    s.replaceRegistrations("b@2.0.0", {{"a::f", "a::f(Tensor x) -> Tensor", "b@2.0.0", "core", "CONSERVATIVE"}},
                           {{"a::f", "CPU", "unboxed", "b@2.0.0", "here"}});
  }
  Store s(d.file("p.db"));
  ASSERT_EQ(s.kernelStates().size(), 1u);
  EXPECT_EQ(s.kernelStates()[0].reason, "r");
  ASSERT_EQ(s.pins().size(), 1u);
  EXPECT_EQ(s.pins()[0].version, "2.0.0");
  ASSERT_EQ(s.bundles().size(), 1u);
  EXPECT_EQ(s.bundles()[0].state, "loaded");
  EXPECT_NE(s.bundles()[0].last_loaded, "");
  EXPECT_EQ(s.registrations("a::f").size(), 1u);
  ASSERT_EQ(s.operators().size(), 1u);
  EXPECT_EQ(s.operators()[0].tags, "core");
  EXPECT_EQ(s.operators()[0].alias_analysis, "CONSERVATIVE");
  s.clearRegistrations("b@2.0.0");
  EXPECT_TRUE(s.registrations().empty());
  EXPECT_TRUE(s.operators().empty());
}

TEST(Store, TwoConnectionsSeeEachOthersChangesThroughDataVersion) {
  TempDir d;
  Store a(d.file("c.db"));
  Store b(d.file("c.db"));
  const int64_t v = a.dataVersion();
  b.setKernelState("x::y", "CPU", false, "", "ann");
  EXPECT_NE(a.dataVersion(), v);
  EXPECT_EQ(a.kernelStates().size(), 1u);
}

// Transactions nest: a failed inner one undoes only its own writes; the outer one
// commits everything else at once, and other connections see none of it before.
TEST(Store, NestedTransactionsAreSavepoints) {
  TempDir d;
  Store a(d.file("t.db"));
  Store b(d.file("t.db"));
  a.transaction([&] {
    a.pin("kept", "1.0.0", "ann");
    EXPECT_THAT(errorOf([&] {
                  a.transaction([&] {
                    a.pin("undone", "1.0.0", "ann");
                    throw std::runtime_error("inner failure");
                  });
                }),
                HasSubstr("inner failure"));
    a.setKernelState("x::y", "CPU", false, "", "ann");
    EXPECT_TRUE(b.pins().empty());  // not committed yet
  });
  ASSERT_EQ(b.pins().size(), 1u);
  EXPECT_EQ(b.pins()[0].name, "kept");
  EXPECT_EQ(b.kernelStates().size(), 1u);
  // An outer failure undoes everything, the inner parts included.
  EXPECT_THAT(errorOf([&] {
                a.transaction([&] {
                  a.transaction([&] { a.unpin("kept", "ann"); });
                  throw std::runtime_error("outer failure");
                });
              }),
              HasSubstr("outer failure"));
  EXPECT_EQ(b.pins().size(), 1u);
  a.unpin("kept", "ann");  // and the store is usable afterwards
  EXPECT_TRUE(b.pins().empty());
}

// A connection that holds the store's write lock past the busy timeout makes a
// change fail whole, with the reason and how long Strata waited, not a bare
// "database is locked"; the change is applied once the lock is gone.
TEST(Store, AChangeBlockedPastTheBusyTimeoutFailsWholeAndSaysWhy) {
  TempDir d;
  Store a(d.file("l.db"));
  Store b(d.file("l.db"));
  b.setBusyTimeout(std::chrono::milliseconds(200));
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(d.file("l.db").c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  const std::string e = errorOf([&] { b.setKernelState("x::y", "CPU", false, "", "ann"); });
  EXPECT_THAT(e, HasSubstr("database is locked"));
  EXPECT_THAT(e, HasSubstr("another connection held its lock for longer than the 200 ms Strata waits for it"));
  ASSERT_EQ(sqlite3_exec(raw, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  EXPECT_TRUE(a.kernelStates().empty());
  EXPECT_TRUE(a.auditLog().empty());
  b.setKernelState("x::y", "CPU", false, "", "ann");
  EXPECT_EQ(a.kernelStates().size(), 1u);
}

}  // namespace
}  // namespace strata::db
