#include "strata/db/store.h"

#include <sqlite3.h>

#include <QCryptographicHash>
#include <QByteArray>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <filesystem>
#include <functional>
#include <thread>
#include <utility>

namespace strata::db {

// Note [Store migrations]
// ~~~~~~~~~~~~~~~~~~~~~~~
// PRAGMA user_version is the schema version of the file. Opening a store runs, in
// one exclusive (IMMEDIATE) transaction that also reads the version, the migrations
// from the file's version up to kSchemaVersion, so processes opening one store at
// once migrate it exactly once; a file newer than this build is refused (never
// downgraded), so an old binary cannot damage a new store. A store is marked as
// Strata's by PRAGMA application_id (kApplicationId); a file without the mark is
// refused, never migrated: an empty file, another program's database. (A store from
// before the mark, versions 1-3 with Strata's tables, gets it on open.) Migrations only add: tables, columns,
// triggers. Version 1 is the registry (bundles, operators, registrations, kernel
// state, pins, audit); version 2 adds running hosts, the change feed hosts poll,
// and bundle admin state; version 3 adds each operator's tags and alias analysis
// kind (a row a version-2 binary wrote reads as no tags, FROM_SCHEMA); version 4
// chains the audit rows (Note [The audit chain]) and chains the rows already there,
// and keeps the trust list (the sha256s `strata plugins trust` recorded); version 5
// keeps what each host runs (Note [What each host runs]).

// Note [Creating a store]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A store that does not exist yet is built complete (WAL, every migration, the
// application id) in a private file beside it, then link()ed into place, which
// fails if the path exists. So a store path is either absent or a whole store: eight
// processes creating one at the same instant all open the one that won, and an
// empty file at the path is never something Strata left there, hence refused.

// Note [A store removed while open]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Deleting a store's file while a host has it open leaves the host writing the
// unlinked file, and its -wal and -shm files still at their names. SQLite finds
// those by the store's name: a new store made at the path would take the old one's
// write-ahead log for its own and replay foreign pages into itself. So a store is
// never created beside a -wal or -shm file without its store (createAtomically
// says which and what to do), and a serving host checks at every poll that the path
// is still the file it opened, and warns once when it is not
// (PluginHost::warnIfStoreGone): it keeps the state it has and the file it opened,
// and a restart takes up whatever store is at the path then. A file moved or
// copied over a store in use cannot be told from the store (its -wal and -shm are
// there, by name): the next process replays the old log into it. The README says
// never to; restore a backup with the hosts stopped.

// Note [The audit chain]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Triggers refuse UPDATE, DELETE and an INSERT that would replace a row (INSERT OR
// REPLACE deletes the old row without firing DELETE triggers), which stops an honest
// mistake but not someone who drops them. So each audit row also stores
//   hash = sha256(id, time, actor, action, target, before, after, prev_hash)
// (each field length-prefixed), where prev_hash is the previous row's hash ("" for
// the first), and ids count up by one from 1 (sqlite_sequence remembers the highest
// ever given). verifyAudit() walks the log and names the first row where it breaks:
// an edited row no longer hashes to its hash; a deleted one leaves a gap in the ids
// and a prev_hash that matches nothing; an inserted one has no valid hash, or
// breaks the next row's prev_hash; rows deleted at the end leave the sequence past
// the last id. Someone who can rewrite the file can also recompute the whole chain
// from the point they edit: keep the head hash that `strata audit --verify` prints
// somewhere else, and a rewritten history no longer ends in it.

namespace {

const char* const kMigrations[] = {
    // 1
    R"sql(
CREATE TABLE bundles (
  sha256 TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  path TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('loaded', 'rejected', 'superseded', 'removed', 'disabled')),
  reason TEXT NOT NULL DEFAULT '',
  first_seen TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  last_loaded TEXT NOT NULL DEFAULT ''
);
CREATE TABLE operators (
  name TEXT PRIMARY KEY,
  schema TEXT NOT NULL,
  owner TEXT NOT NULL
);
CREATE TABLE registrations (
  op TEXT NOT NULL,
  key TEXT NOT NULL,
  kind TEXT NOT NULL,
  owner TEXT NOT NULL,
  debug TEXT NOT NULL
);
CREATE INDEX registrations_owner ON registrations(owner);
CREATE TABLE kernel_state (
  op TEXT NOT NULL,
  key TEXT NOT NULL,
  enabled INTEGER NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  actor TEXT NOT NULL,
  time TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (op, key)
);
CREATE TABLE pins (
  name TEXT PRIMARY KEY,
  version TEXT NOT NULL,
  actor TEXT NOT NULL,
  time TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  before TEXT NOT NULL DEFAULT '',
  after TEXT NOT NULL DEFAULT ''
);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: UPDATE refused'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: DELETE refused'); END;
)sql",
    // 2
    R"sql(
ALTER TABLE bundles ADD COLUMN description TEXT NOT NULL DEFAULT '';
CREATE TABLE hosts (
  id TEXT PRIMARY KEY,
  pid INTEGER NOT NULL,
  started TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  heartbeat TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  last_applied INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE changes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  kind TEXT NOT NULL,
  target TEXT NOT NULL
);
CREATE TABLE bundle_admin (
  name TEXT PRIMARY KEY,
  disabled INTEGER NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  actor TEXT NOT NULL,
  time TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
)sql",
    // 3
    R"sql(
ALTER TABLE operators ADD COLUMN tags TEXT NOT NULL DEFAULT '';
ALTER TABLE operators ADD COLUMN alias_analysis TEXT NOT NULL DEFAULT 'FROM_SCHEMA';
)sql",
    // 4 (Note [The audit chain]; Store::migrate chains rows already there)
    R"sql(
ALTER TABLE audit ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN hash TEXT NOT NULL DEFAULT '';
CREATE TRIGGER audit_no_replace BEFORE INSERT ON audit WHEN EXISTS (SELECT 1 FROM audit WHERE id = NEW.id)
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: replacing a row refused'); END;
CREATE TABLE trusted (
  sha256 TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  actor TEXT NOT NULL,
  time TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
)sql",
    // 5 (Note [What each host runs])
    R"sql(
ALTER TABLE hosts ADD COLUMN plugins TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN login TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN strata_version TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN stopped TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN last_event TEXT NOT NULL DEFAULT '';
CREATE TABLE host_bundles (
  host TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  path TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (host, path)
);
CREATE TABLE host_queries (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  host TEXT NOT NULL,
  query TEXT NOT NULL,
  arg TEXT NOT NULL DEFAULT '',
  asked TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  answered INTEGER NOT NULL DEFAULT 0,
  answer TEXT NOT NULL DEFAULT '',
  error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX host_queries_host ON host_queries(host, answered);
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == Store::kSchemaVersion);

}  // namespace

// A prepared statement: bind in order, then step.
class Store::Stmt {
 public:
  Stmt(Store* store, sqlite3_stmt* s) : store_(store), s_(s) {}
  Stmt(Stmt&& o) noexcept : store_(o.store_), s_(std::exchange(o.s_, nullptr)) {}
  Stmt(const Stmt&) = delete;
  ~Stmt() {
    if (s_ != nullptr) sqlite3_finalize(s_);
  }
  Stmt& bind(const std::string& v) {
    check(sqlite3_bind_text(s_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Stmt& bind(const char* v) { return bind(std::string(v)); }
  Stmt& bind(int64_t v) {
    check(sqlite3_bind_int64(s_, ++n_, v));
    return *this;
  }
  Stmt& bind(int v) { return bind(static_cast<int64_t>(v)); }
  Stmt& bind(bool v) { return bind(static_cast<int64_t>(v ? 1 : 0)); }
  // True while there is a row.
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    store_->fail(sqlite3_sql(s_));
  }
  void run() {
    while (step()) {
    }
  }
  std::string text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
    return p != nullptr ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, i))) : std::string();
  }
  int64_t integer(int i) const { return sqlite3_column_int64(s_, i); }
  double real(int i) const { return sqlite3_column_double(s_, i); }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) store_->fail("binding a parameter");
  }
  Store* store_;
  sqlite3_stmt* s_;
  int n_ = 0;
};

const char* Store::migrationSql(int v) { return v >= 1 && v <= kSchemaVersion ? kMigrations[v - 1] : nullptr; }

namespace {

// The files SQLite keeps beside a store, found by its name.
constexpr const char* kSideFiles[] = {"-wal", "-shm", "-journal"};

std::string folderOf(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// Runs one statement, retrying while another connection holds a lock the busy
// handler does not wait for (PRAGMA journal_mode takes one), for up to `wait`.
int execRetryingBusy(sqlite3* db, const char* sql, std::chrono::milliseconds wait) {
  int rc = SQLITE_OK;
  for (int64_t i = 0; i < std::max<int64_t>(1, wait.count() / 10); ++i) {
    rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return rc;
}

}  // namespace

void Store::openConnection(bool create) {
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  // A path is a file's name, never one of SQLite's special names: "file:..." would
  // be read as a URI (Debian's SQLite reads them) and ":memory:" as no file at all.
  const std::string name = path_.rfind("file:", 0) == 0 || path_.rfind(':', 0) == 0 ? "./" + path_ : path_;
  const int rc = sqlite3_open_v2(name.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    std::error_code ec;
    if (!std::filesystem::exists(path_, ec)) why = "it does not exist";
    else if (::access(path_.c_str(), R_OK | W_OK) != 0) why = std::string(std::strerror(errno)) + " (" + why + ")";
    throw StoreError("store " + path_ + ": cannot open: " + why);
  }
  // Long enough for a host's sync (it rescans the plugin directory in one write
  // transaction) to finish: an admin command waits its turn, never sees SQLITE_BUSY.
  setBusyTimeout(kBusyTimeout);
  sqlite3_extended_result_codes(db_, 1);
  // SQLite quietly opens a write-protected file read-only; a store is written to
  // (the audit log, the hosts table), so say so now rather than at the first write.
  if (sqlite3_db_readonly(db_, "main") == 1) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError("store " + path_ + ": cannot open: the file is read-only for this user (" +
                     std::strerror(EACCES) + "), and Strata writes to its store");
  }
}

void Store::useWal() {
  const int rc = execRetryingBusy(db_, "PRAGMA journal_mode=WAL", busy_timeout_);
  if ((rc & 0xff) == SQLITE_READONLY || (rc & 0xff) == SQLITE_CANTOPEN) {
    const std::string folder = folderOf(path_);
    if (::access(folder.c_str(), W_OK) != 0) {
      throw StoreError("store " + path_ + ": cannot open: its folder " + folder + " is not writable (" +
                       std::strerror(errno) + "), and SQLite keeps the store's -wal and -shm files beside it");
    }
  }
  if (rc != SQLITE_OK) fail("PRAGMA journal_mode=WAL");
  prepare("PRAGMA foreign_keys=ON").run();
}

void Store::createAtomically(const std::string& path) {
  const std::string folder = folderOf(path);
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    throw StoreError("store " + path + ": cannot create it: " +
                     (std::filesystem::exists(folder, ec) ? folder + " is a file, not a folder"
                                                          : "the folder " + folder + " does not exist"));
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw StoreError("store " + path + ": cannot create it in " + folder + ": " + std::strerror(errno));
  }
  // Note [A store removed while open]: -wal or -shm files with no store are a removed
  // store's, perhaps still open in a host. A new store at the path would take them
  // as its own (SQLite finds them by name) and replay the old store's pages into
  // itself. (They are looked at before the path: a store another process has just
  // linked into place makes its -wal only after the link.)
  std::vector<std::string> left;
  for (const char* suffix : kSideFiles) {
    // (An empty journal is nothing SQLite would replay.)
    if (std::filesystem::exists(path + suffix, ec) &&
        (std::string_view(suffix) != "-journal" || std::filesystem::file_size(path + suffix, ec) > 0)) {
      left.push_back(path + suffix);
    }
  }
  if (!left.empty() && !std::filesystem::exists(path, ec)) {
    std::string files = left.front();
    for (size_t i = 1; i < left.size(); ++i) files += (i + 1 == left.size() ? " and " : ", ") + left[i];
    throw StoreError("store " + path + ": cannot create it: " + files + (left.size() > 1 ? " are" : " is") +
                     " left from a store removed while a process had it open (a running strata serve?) or after a "
                     "crash, and a new store would read them as its own; stop any host that used the old store, "
                     "then remove them");
  }
  // Built under a name of its own in the same folder (short, whatever the store's
  // name), then linked into place; an error names the store, never this file.
  // (The pid and thread alone could repeat: pid 1 in two containers sharing a volume.)
  const std::string tmp = (std::filesystem::path(folder) /
                           (".strata-new-" + std::to_string(::getpid()) + "-" +
                            std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "-" +
                            std::to_string(std::random_device{}())))
                              .string();
  auto removeTmp = [&] {
    ::unlink(tmp.c_str());
    for (const char* suffix : kSideFiles) ::unlink((tmp + suffix).c_str());
  };
  try {
    Store s(tmp, Store::Creating{});
    s.transaction([&] {
      for (int v = 1; v <= kSchemaVersion; ++v) s.exec(kMigrations[v - 1]);
      s.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
      s.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
    });
  } catch (const StoreError& e) {
    removeTmp();
    std::string why = e.what();
    if (const std::string own = "store " + tmp + ": "; why.rfind(own, 0) == 0) why.erase(0, own.size());
    throw StoreError("store " + path + ": cannot create it: " + why, e.reason());
  } catch (...) {
    removeTmp();
    throw;
  }
  // Closed: the WAL is checkpointed into the file, which is now a whole store.
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  removeTmp();
  if (linked != 0 && err != EEXIST) {  // EEXIST: another process made it first; open theirs
    throw StoreError("store " + path + ": cannot create it: " + std::strerror(err));
  }
}

Store::Store(const std::string& path, Creating) : path_(path) {
  openConnection(/*create=*/true);
  useWal();
}

void Store::refuseTruncated() const {
  // The header says how many pages the file holds (when its "valid for" counter
  // matches the change counter); a file shorter than that lost its tail, and SQLite
  // would only notice at the first read of a missing page, after writes elsewhere.
  // Another process's checkpoint writes the header page before the pages that grow
  // the file, so while a WAL file is there (a checkpoint needs one) a short file is
  // looked at again for a while before it is called truncated (8 writers at once saw
  // it, between the header and the last page). Without one, nobody is writing it.
  for (int attempt = 0;; ++attempt) {
    const std::optional<std::string> why = truncation();
    if (!why) return;
    std::error_code ec;
    if (attempt == 50 || !std::filesystem::exists(path_ + "-wal", ec)) {
      throw StoreError("store " + path_ + ": the database is malformed: " + *why + "; refusing to open it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::optional<std::string> Store::truncation() const {
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  if (f == nullptr) return std::nullopt;  // openConnection says why
  unsigned char h[100];
  const size_t n = std::fread(h, 1, sizeof h, f);
  std::fclose(f);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path_, ec);
  if (n == 0 || ec) return std::nullopt;  // empty: refuseUnmarked says so
  static const char kMagic[] = "SQLite format 3";  // with its NUL: 16 bytes
  if (n < sizeof h || std::memcmp(h, kMagic, sizeof kMagic) != 0) {
    throw StoreError("store " + path_ + ": not a Strata store: " +
                     (n < sizeof h && std::memcmp(h, kMagic, std::min(n, sizeof kMagic)) == 0
                          ? "the file is truncated (" + std::to_string(n) + " bytes, shorter than SQLite's header)"
                          : std::string("file is not a database (it does not start with SQLite's header)")) +
                     "; refusing to open it");
  }
  auto be32 = [&](int at) {
    return (uint32_t{h[at]} << 24) | (uint32_t{h[at + 1]} << 16) | (uint32_t{h[at + 2]} << 8) | uint32_t{h[at + 3]};
  };
  const uint32_t page_size = h[16] == 0 && h[17] == 1 ? 65536u : (uint32_t{h[16]} << 8) | h[17];
  const uint32_t pages = be32(28);
  if (be32(92) != be32(24) || pages == 0 || page_size < 512) return std::nullopt;  // no reliable size in the header
  const uint64_t expected = uint64_t{page_size} * pages;
  if (size >= expected) return std::nullopt;
  return "the file is truncated (its header says " + std::to_string(pages) + " pages of " +
         std::to_string(page_size) + " bytes, " + std::to_string(expected) + " bytes, and it has " +
         std::to_string(size) + ")";
}

namespace {

// What would stop SQLite from opening or creating the store at `path`, said in the
// path's own words before SQLite says it in its ("attempt to write a readonly
// database", or a temporary file's name).
void refuseUnusablePath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const std::string name = p.filename().string();
  // SQLite names a store's files NAME-wal and NAME-shm (a store is always in WAL mode).
  if (constexpr size_t kLongest = NAME_MAX - 4; name.size() > kLongest) {
    throw StoreError("store " + path.substr(0, 80) + "...: the file name is too long (" + std::to_string(name.size()) +
                     " bytes; at most " + std::to_string(kLongest) + ", as SQLite adds '-wal' to it)");
  }
  if (fs::is_symlink(fs::symlink_status(p, ec))) {
    const fs::path target = fs::read_symlink(p, ec);
    std::error_code sec;
    if ((void)fs::status(p, sec), sec == std::errc::too_many_symbolic_link_levels) {
      throw StoreError("store " + path + ": a loop of symbolic links (" + path + " -> " + target.string() +
                       "); name a store file");
    }
    if (!fs::exists(p, sec)) {
      throw StoreError("store " + path + ": a symbolic link to " + target.string() +
                       ", which does not exist; make the link point at a store, or name a store file");
    }
  }
  // A path this user cannot reach (a folder on the way it may not search) is not a
  // missing store to create.
  if (struct stat st{}; ::stat(path.c_str(), &st) != 0 && errno != ENOENT && errno != ENOTDIR && errno != ELOOP) {
    const int err = errno;
    throw StoreError("store " + path + ": cannot open: " + std::strerror(err) +
                     (err == EACCES ? " (a folder on the way that this user may not search)" : ""));
  }
  // SQLite keeps a store's -wal and -shm files beside it: a directory there is in its way.
  for (const char* suffix : kSideFiles) {
    if (fs::is_directory(path + suffix, ec)) {
      throw StoreError("store " + path + ": " + path + suffix +
                       " is a directory, where SQLite keeps the store's " + (suffix + 1) +
                       " file; move it away");
    }
  }
  // An existing store in a folder this user cannot write: SQLite cannot make its -wal
  // and -shm files, and says "attempt to write a readonly database" at the first read.
  // (A file this user cannot write is openConnection's to name.)
  if (fs::exists(p, ec) && ::access(path.c_str(), R_OK | W_OK) == 0) {
    const std::string folder = folderOf(fs::canonical(p, ec).string());
    const int writable = ::access(folder.c_str(), W_OK | X_OK);
    const int err = errno;
    if (writable != 0 && !(fs::exists(path + "-wal", ec) && fs::exists(path + "-shm", ec))) {
      throw StoreError("store " + path + ": cannot open: its folder " + folder + " is not writable (" +
                       std::strerror(err) + "), and SQLite keeps the store's -wal and -shm files beside it");
    }
  }
}

}  // namespace

Store::Store(const std::string& path) : path_(path) {
  std::error_code ec;
  if (path.empty()) throw StoreError("store: an empty path (name a file, e.g. --db strata.db)");
  if (std::filesystem::is_directory(path, ec)) {
    throw StoreError("store " + path + ": a directory, not a store file (name a file in it, e.g. " +
                     (std::filesystem::path(path) / "strata.db").string() + ")");
  }
  // A FIFO would block the first read forever, a device (/dev/null) would read as
  // an empty database: only a regular file (or a link to one) can be a store.
  if (const auto st = std::filesystem::status(path, ec); !ec && std::filesystem::exists(st) &&
                                                          !std::filesystem::is_regular_file(st)) {
    const char* kind = std::filesystem::is_fifo(st)               ? "a FIFO"
                       : std::filesystem::is_character_file(st) ? "a character device"
                       : std::filesystem::is_block_file(st)     ? "a block device"
                       : std::filesystem::is_socket(st)         ? "a socket"
                                                                 : "not a regular file";
    throw StoreError("store " + path + ": " + kind + ", not a store file; name a store file (e.g. --db strata.db)");
  }
  refuseUnusablePath(path);
  if (!std::filesystem::exists(path, ec)) createAtomically(path);
  refuseTruncated();
  openConnection(/*create=*/false);
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    std::error_code aec;
    absolute_path_ = std::filesystem::absolute(path, aec).string();  // fileGone(), whatever chdir() comes after
  }
  try {
    refuseUnmarked();  // before anything writes to the file
    useWal();
    migrate();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

std::string Store::fileGone() const {
  if (ino_ == 0 || absolute_path_.empty()) return "";
  struct stat st{};
  if (::stat(absolute_path_.c_str(), &st) != 0) return errno == ENOENT ? "it was removed" : "it cannot be read: " + std::string(std::strerror(errno));
  if (static_cast<uint64_t>(st.st_dev) != dev_ || static_cast<uint64_t>(st.st_ino) != ino_) {
    return "another file replaced it";
  }
  return "";
}

Store::~Store() {
  if (db_ != nullptr) sqlite3_close(db_);
}

void Store::setBusyTimeout(std::chrono::milliseconds t) {
  busy_timeout_ = t;
  sqlite3_busy_timeout(db_, static_cast<int>(std::min<int64_t>(t.count(), INT32_MAX)));
}

void Store::fail(const std::string& what) {
  // An I/O failure says which: "disk I/O error (No space left on device)", "(File too
  // large)"; a short write (a full disk, ulimit -f) leaves no errno, so it is named.
  std::string why = sqlite3_errmsg(db_);
  const int code = sqlite3_extended_errcode(db_) & 0xff;
  const int sys = sqlite3_system_errno(db_);
  if (sys != 0 && (code == SQLITE_IOERR || code == SQLITE_FULL || code == SQLITE_CANTOPEN)) {
    why += std::string(" (") + std::strerror(sys) + ")";
  } else if (code == SQLITE_FULL || sqlite3_extended_errcode(db_) == SQLITE_IOERR_WRITE) {
    why += " (a write was cut short: the disk is full or a file-size limit was reached)";
  } else if (sqlite3_extended_errcode(db_) == SQLITE_BUSY) {  // not BUSY_SNAPSHOT/RECOVERY: those do not wait
    const int64_t ms = busy_timeout_.count();
    why += " (another connection held its lock for longer than the " +
           (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") + " Strata waits for it)";
  }
  throw StoreError("store " + path_ + ": " + why + " (in: " + what + ")", why);
}

Store::Stmt Store::prepare(const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) fail(sql);
  return Stmt(this, s);
}

void Store::exec(const std::string& sql) {
  const char* p = sql.c_str();
  while (*p != '\0') {
    sqlite3_stmt* s = nullptr;
    const char* tail = nullptr;
    if (sqlite3_prepare_v2(db_, p, -1, &s, &tail) != SQLITE_OK) fail(p);
    if (s != nullptr) Stmt(this, s).run();
    p = tail;
  }
}

void Store::transaction(const std::function<void()>& f) {
  // The outermost call holds the write lock (BEGIN IMMEDIATE) and commits once; a
  // nested one is a savepoint, so its failure undoes only its own part.
  const int depth = depth_;
  const std::string sp = "nested_" + std::to_string(depth);
  exec(depth == 0 ? "BEGIN IMMEDIATE" : "SAVEPOINT " + sp);
  depth_ = depth + 1;
  try {
    f();
    exec(depth == 0 ? "COMMIT" : "RELEASE " + sp);
    depth_ = depth;
  } catch (...) {
    depth_ = depth;
    const std::string undo = depth == 0 ? "ROLLBACK" : "ROLLBACK TO " + sp + "; RELEASE " + sp;
    sqlite3_exec(db_, undo.c_str(), nullptr, nullptr, nullptr);
    throw;
  }
}

int Store::schemaVersion() {
  Stmt s = prepare("PRAGMA user_version");
  return s.step() ? static_cast<int>(s.integer(0)) : 0;
}

int64_t Store::applicationId() {
  Stmt s = prepare("PRAGMA application_id");
  return s.step() ? s.integer(0) : 0;
}

void Store::refuseUnmarked() {
  const int64_t app = applicationId();
  if (app == kApplicationId) return;
  const int have = schemaVersion();
  auto hasTable = [&](const char* name) {
    Stmt s = prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
    s.bind(name);
    return s.step();
  };
  // A store from before the mark: Strata's version numbers and tables (migrate() marks it).
  if (app == 0 && have >= 1 && have <= kSchemaVersion && hasTable("bundles") && hasTable("audit") &&
      hasTable("kernel_state")) {
    return;
  }
  std::error_code ec;
  const bool empty = std::filesystem::file_size(path_, ec) == 0 && !ec;
  Stmt n = prepare("SELECT count(*) FROM sqlite_master");
  const int64_t objects = n.step() ? n.integer(0) : 0;
  std::string why;
  if (empty) why = "the file is empty, and a store Strata creates never is";
  else if (app != 0) why = "its application_id is " + std::to_string(app) + ", another program's";
  else if (objects == 0) why = "it is an empty SQLite database, not one Strata created";
  else why = "it is an SQLite database without Strata's mark or tables (another program's?)";
  throw StoreError("store " + path_ + ": not a Strata store: " + why + "; refusing to open it");
}

void Store::migrate() {
  // Most opens: already a current store, and no write lock is taken.
  if (applicationId() == kApplicationId && schemaVersion() == kSchemaVersion) return;
  transaction([&] {  // BEGIN IMMEDIATE: one process at a time reads the version and migrates
    const int have = schemaVersion();
    if (have < 0) {
      throw StoreError("store " + path_ + ": schema version " + std::to_string(have) +
                       " is not one any strata writes (they count up from 1); refusing to open it");
    }
    if (have > kSchemaVersion) {
      throw StoreError("store " + path_ + ": schema version " + std::to_string(have) +
                       " was written by a newer strata (this one knows up to " + std::to_string(kSchemaVersion) +
                       "); refusing to open it");
    }
    for (int v = have + 1; v <= kSchemaVersion; ++v) {
      try {
        exec(kMigrations[v - 1]);
      } catch (const StoreError& e) {
        // The tables are not what version `have` had: its user_version was set by hand
        // (or another program wrote the file). Nothing is changed: the transaction rolls back.
        throw StoreError("store " + path_ + ": says schema version " + std::to_string(have) +
                         ", but its tables do not match that version (upgrading to " + std::to_string(v) +
                         " failed: " + (e.reason().empty() ? e.what() : e.reason()) +
                         "); was its user_version changed by hand? Refusing to open it");
      }
    }
    if (have < 4) chainExistingAuditRows();
    exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
    exec("PRAGMA application_id = " + std::to_string(kApplicationId));
  });
}

namespace {

void addField(QCryptographicHash& h, const std::string& v) {
  const std::string len = std::to_string(v.size()) + ":";
  h.addData(QByteArrayView(len.data(), static_cast<qsizetype>(len.size())));
  h.addData(QByteArrayView(v.data(), static_cast<qsizetype>(v.size())));
}

}  // namespace

std::string Store::auditRowHash(const AuditRow& r, const std::string& prev_hash) {
  QCryptographicHash h(QCryptographicHash::Sha256);
  addField(h, std::to_string(r.id));
  for (const std::string* f : {&r.time, &r.actor, &r.action, &r.target, &r.before, &r.after, &prev_hash}) {
    addField(h, *f);
  }
  return h.result().toHex().toStdString();
}

void Store::chainExistingAuditRows() {
  // Rows written before the chain: hashed in id order, renumbered 1..n if a gap was
  // ever left, inside the migration's transaction (the triggers step aside for it).
  std::vector<AuditRow> rows = auditLog();
  exec("DROP TRIGGER audit_no_update; DROP TRIGGER audit_no_delete; DROP TRIGGER audit_no_replace;");
  exec("DELETE FROM audit");
  std::string prev;
  int64_t id = 0;
  for (AuditRow& r : rows) {
    r.id = ++id;
    const std::string hash = auditRowHash(r, prev);
    prepare("INSERT INTO audit (id, time, actor, action, target, before, after, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(r.id).bind(r.time).bind(r.actor).bind(r.action).bind(r.target).bind(r.before).bind(r.after)
        .bind(prev).bind(hash)
        .run();
    prev = hash;
  }
  prepare("UPDATE sqlite_sequence SET seq = ? WHERE name = 'audit'").bind(id).run();
  exec(R"sql(
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: UPDATE refused'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: DELETE refused'); END;
CREATE TRIGGER audit_no_replace BEFORE INSERT ON audit WHEN EXISTS (SELECT 1 FROM audit WHERE id = NEW.id)
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: replacing a row refused'); END;
)sql");
}

int64_t Store::dataVersion() {
  Stmt s = prepare("PRAGMA data_version");
  return s.step() ? s.integer(0) : 0;
}

// --- Bundles ---

void Store::upsertBundle(const BundleRow& r) {
  const bool loaded = r.state == "loaded";
  prepare(
      "INSERT INTO bundles (sha256, name, version, path, state, reason, description, last_loaded) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, CASE WHEN ? THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ELSE '' END) "
      "ON CONFLICT (sha256) DO UPDATE SET name = excluded.name, version = excluded.version, path = excluded.path, "
      "state = excluded.state, reason = excluded.reason, description = excluded.description, "
      "last_loaded = CASE WHEN ? THEN excluded.last_loaded ELSE bundles.last_loaded END")
      .bind(r.sha256)
      .bind(r.name)
      .bind(r.version)
      .bind(r.path)
      .bind(r.state)
      .bind(r.reason)
      .bind(r.description)
      .bind(loaded)
      .bind(loaded)
      .run();
}

std::vector<BundleRow> Store::bundles() {
  Stmt s = prepare(
      "SELECT name, version, path, sha256, state, reason, description, first_seen, last_loaded FROM bundles "
      "ORDER BY name, version, path");
  std::vector<BundleRow> out;
  while (s.step()) {
    out.push_back({s.text(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6), s.text(7), s.text(8)});
  }
  return out;
}

void Store::markRemovedExcept(const std::set<std::string>& present, const std::string& dir) {
  transaction([&] {
    std::vector<std::string> gone;
    {
      Stmt s = prepare("SELECT sha256, path FROM bundles WHERE state != 'removed'");
      const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
      while (s.step()) {
        if (present.count(s.text(0)) == 0 && s.text(1).rfind(prefix, 0) == 0) gone.push_back(s.text(0));
      }
    }
    for (const auto& sha : gone) {
      prepare("UPDATE bundles SET state = 'removed', reason = 'the file left the plugin directory' WHERE sha256 = ?")
          .bind(sha)
          .run();
    }
  });
}

// --- Registrations ---

void Store::replaceRegistrations(const std::string& owner, const std::vector<OperatorRow>& ops,
                                 const std::vector<RegistrationRow>& regs) {
  transaction([&] {
    prepare("DELETE FROM registrations WHERE owner = ?").bind(owner).run();
    prepare("DELETE FROM operators WHERE owner = ?").bind(owner).run();
    for (const auto& o : ops) {
      prepare("INSERT OR REPLACE INTO operators (name, schema, owner, tags, alias_analysis) VALUES (?, ?, ?, ?, ?)")
          .bind(o.name)
          .bind(o.schema)
          .bind(o.owner)
          .bind(o.tags)
          .bind(o.alias_analysis.empty() ? std::string("FROM_SCHEMA") : o.alias_analysis)
          .run();
    }
    for (const auto& r : regs) {
      prepare("INSERT INTO registrations (op, key, kind, owner, debug) VALUES (?, ?, ?, ?, ?)")
          .bind(r.op)
          .bind(r.key)
          .bind(r.kind)
          .bind(r.owner)
          .bind(r.debug)
          .run();
    }
  });
}

void Store::clearRegistrations(const std::string& owner) { replaceRegistrations(owner, {}, {}); }

std::vector<OperatorRow> Store::operators() {
  Stmt s = prepare("SELECT name, schema, owner, tags, alias_analysis FROM operators ORDER BY name");
  std::vector<OperatorRow> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.text(3), s.text(4)});
  return out;
}

std::vector<RegistrationRow> Store::registrations(const std::string& op) {
  Stmt s = prepare("SELECT op, key, kind, owner, debug FROM registrations WHERE ? = '' OR op = ? ORDER BY op, key");
  s.bind(op).bind(op);
  std::vector<RegistrationRow> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.text(3), s.text(4)});
  return out;
}

// --- Admin state ---

int64_t Store::addChange(const std::string& kind, const std::string& target) {
  prepare("INSERT INTO changes (kind, target) VALUES (?, ?)").bind(kind).bind(target).run();
  return sqlite3_last_insert_rowid(db_);
}

int64_t Store::setKernelState(const std::string& op, const std::string& key, bool enabled, const std::string& reason,
                              const std::string& actor) {
  int64_t change = 0;
  transaction([&] {
    std::string before = "enabled";
    {
      Stmt s = prepare("SELECT enabled FROM kernel_state WHERE op = ? AND key = ?");
      s.bind(op).bind(key);
      if (s.step()) before = s.integer(0) != 0 ? "enabled" : "disabled";
    }
    prepare(
        "INSERT INTO kernel_state (op, key, enabled, reason, actor) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (op, key) DO UPDATE SET enabled = excluded.enabled, reason = excluded.reason, "
        "actor = excluded.actor, time = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
        .bind(op)
        .bind(key)
        .bind(enabled)
        .bind(reason)
        .bind(actor)
        .run();
    audit(actor, enabled ? "kernel.enable" : "kernel.disable", op + " " + key, before,
          std::string(enabled ? "enabled" : "disabled") + (reason.empty() ? "" : ": " + reason));
    change = addChange("kernel", op + " " + key);
  });
  return change;
}

std::vector<KernelStateRow> Store::kernelStates() {
  Stmt s = prepare("SELECT op, key, enabled, reason, actor, time FROM kernel_state ORDER BY op, key");
  std::vector<KernelStateRow> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.integer(2) != 0, s.text(3), s.text(4), s.text(5)});
  return out;
}

std::string Store::pinnedVersion(const std::string& name) {
  Stmt s = prepare("SELECT version FROM pins WHERE name = ?");
  s.bind(name);
  return s.step() ? s.text(0) : std::string();
}

int64_t Store::pin(const std::string& name, const std::string& version, const std::string& actor) {
  int64_t change = 0;
  transaction([&] {
    const std::string before = pinnedVersion(name);
    prepare(
        "INSERT INTO pins (name, version, actor) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
        "version = excluded.version, actor = excluded.actor, time = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
        .bind(name)
        .bind(version)
        .bind(actor)
        .run();
    audit(actor, "bundle.pin", name, before, version);
    change = addChange("pin", name);
  });
  return change;
}

int64_t Store::unpin(const std::string& name, const std::string& actor) {
  int64_t change = 0;
  transaction([&] {
    const std::string before = pinnedVersion(name);
    prepare("DELETE FROM pins WHERE name = ?").bind(name).run();
    audit(actor, "bundle.unpin", name, before, "");
    change = addChange("pin", name);
  });
  return change;
}

std::vector<PinRow> Store::pins() {
  Stmt s = prepare("SELECT name, version, actor, time FROM pins ORDER BY name");
  std::vector<PinRow> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.text(3)});
  return out;
}

int64_t Store::setBundleDisabled(const std::string& name, bool disabled, const std::string& reason,
                                 const std::string& actor) {
  int64_t change = 0;
  transaction([&] {
    std::string before = "enabled";
    {
      Stmt s = prepare("SELECT disabled FROM bundle_admin WHERE name = ?");
      s.bind(name);
      if (s.step() && s.integer(0) != 0) before = "disabled";
    }
    prepare(
        "INSERT INTO bundle_admin (name, disabled, reason, actor) VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE "
        "SET disabled = excluded.disabled, reason = excluded.reason, actor = excluded.actor, "
        "time = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
        .bind(name)
        .bind(disabled)
        .bind(reason)
        .bind(actor)
        .run();
    audit(actor, disabled ? "bundle.disable" : "bundle.enable", name, before,
          std::string(disabled ? "disabled" : "enabled") + (reason.empty() ? "" : ": " + reason));
    change = addChange("bundle", name);
  });
  return change;
}

std::map<std::string, std::string> Store::disabledBundles() {
  Stmt s = prepare("SELECT name, reason FROM bundle_admin WHERE disabled != 0");
  std::map<std::string, std::string> out;
  while (s.step()) out.emplace(s.text(0), s.text(1));
  return out;
}

int64_t Store::trust(const TrustRow& row, const std::string& actor) {
  int64_t change = 0;
  transaction([&] {
    const bool had = isTrusted(row.sha256);
    prepare("INSERT OR REPLACE INTO trusted (sha256, name, version, actor) VALUES (?, ?, ?, ?)")
        .bind(row.sha256)
        .bind(row.name)
        .bind(row.version)
        .bind(actor)
        .run();
    audit(actor, "bundle.trust", row.name + "@" + row.version, had ? "trusted" : "", "trusted sha256 " + row.sha256);
    change = addChange("trust", row.name);
  });
  return change;
}

int64_t Store::untrust(const std::string& sha256, const std::string& actor) {
  int64_t change = 0;
  transaction([&] {
    std::string target;
    {
      Stmt s = prepare("SELECT name, version FROM trusted WHERE sha256 = ?");
      s.bind(sha256);
      if (!s.step()) throw StoreError("store " + path_ + ": sha256 " + sha256 + " is not on the trust list");
      target = s.text(0) + "@" + s.text(1);
    }
    prepare("DELETE FROM trusted WHERE sha256 = ?").bind(sha256).run();
    audit(actor, "bundle.untrust", target, "trusted sha256 " + sha256, "");
    change = addChange("trust", target);
  });
  return change;
}

std::vector<TrustRow> Store::trusted() {
  Stmt s = prepare("SELECT sha256, name, version, actor, time FROM trusted ORDER BY name, version, sha256");
  std::vector<TrustRow> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.text(3), s.text(4)});
  return out;
}

bool Store::isTrusted(const std::string& sha256) {
  Stmt s = prepare("SELECT 1 FROM trusted WHERE sha256 = ?");
  s.bind(sha256);
  return s.step();
}

int64_t Store::latestChange() {
  Stmt s = prepare("SELECT COALESCE(MAX(id), 0) FROM changes");
  return s.step() ? s.integer(0) : 0;
}

std::set<std::string> Store::changedTargets(int64_t after, const std::vector<std::string>& kinds) {
  Stmt s = prepare("SELECT kind, target FROM changes WHERE id > ?");
  s.bind(after);
  std::set<std::string> out;
  while (s.step()) {
    if (std::find(kinds.begin(), kinds.end(), s.text(0)) != kinds.end()) out.insert(s.text(1));
  }
  return out;
}

// --- Hosts ---

// Note [What each host runs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Several hosts may share a store, each with its own plugin directory. Each serving
// host writes its own view and nothing else writes it: its row in `hosts` (plugins
// directory, login, heartbeat, the last change it applied, its last event, when it
// stopped) and its rows in `host_bundles` (every bundle file it saw, with the state
// and reason), replaced whole after each rescan. The CLI's own scans (plugins list,
// dump, call, ...) write nothing: they describe this process, not a host. A question
// only the running process can answer (its dispatch table for an op) goes through
// `host_queries`: the CLI inserts it, the host sees the commit at its next poll and
// writes the answer into the row. A host that stops cleanly keeps its row, marked
// stopped; a host whose heartbeat is older than kHostAgeOutSeconds is deleted, with
// its view and queries, by the next host that registers.
void Store::registerHost(const HostRow& row) {
  transaction([&] {
    const std::string age = "-" + std::to_string(kHostAgeOutSeconds) + " seconds";
    prepare("DELETE FROM hosts WHERE id != ? AND julianday(heartbeat) < julianday('now', ?)").bind(row.id).bind(age).run();
    prepare("DELETE FROM host_bundles WHERE host NOT IN (SELECT id FROM hosts) OR host = ?").bind(row.id).run();
    prepare("DELETE FROM host_queries WHERE host NOT IN (SELECT id FROM hosts) OR host = ? OR "
            "julianday(asked) < julianday('now', '-1 hour')")
        .bind(row.id)
        .run();
    prepare("INSERT OR REPLACE INTO hosts (id, pid, plugins, login, strata_version) VALUES (?, ?, ?, ?, ?)")
        .bind(row.id)
        .bind(row.pid)
        .bind(row.plugins)
        .bind(row.login)
        .bind(row.strata_version)
        .run();
  });
}

void Store::registerHost(const std::string& id, int64_t pid) {
  HostRow row;
  row.id = id;
  row.pid = pid;
  registerHost(row);
}

bool Store::heartbeat(const std::string& id, int64_t last_applied) {
  prepare(
      "UPDATE hosts SET heartbeat = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), last_applied = MAX(last_applied, ?) "
      "WHERE id = ?")
      .bind(last_applied)
      .bind(id)
      .run();
  return sqlite3_changes(db_) > 0;
}

void Store::setHostEvent(const std::string& id, const std::string& event) {
  prepare("UPDATE hosts SET last_event = ? WHERE id = ?").bind(event).bind(id).run();
}

void Store::markHostStopped(const std::string& id) {
  prepare("UPDATE hosts SET stopped = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), "
          "heartbeat = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?")
      .bind(id)
      .run();
}

void Store::removeHost(const std::string& id) {
  transaction([&] {
    prepare("DELETE FROM hosts WHERE id = ?").bind(id).run();
    prepare("DELETE FROM host_bundles WHERE host = ?").bind(id).run();
    prepare("DELETE FROM host_queries WHERE host = ?").bind(id).run();
  });
}

std::vector<HostRow> Store::hosts() {
  Stmt s = prepare(
      "SELECT id, pid, started, heartbeat, last_applied, plugins, login, strata_version, stopped, last_event, "
      "(julianday('now') - julianday(heartbeat)) * 86400.0 FROM hosts ORDER BY started, id");
  std::vector<HostRow> out;
  while (s.step()) {
    HostRow h;
    h.id = s.text(0);
    h.pid = s.integer(1);
    h.started = s.text(2);
    h.heartbeat = s.text(3);
    h.last_applied = s.integer(4);
    h.plugins = s.text(5);
    h.login = s.text(6);
    h.strata_version = s.text(7);
    h.stopped = s.text(8);
    h.last_event = s.text(9);
    h.seconds_since_heartbeat = s.real(10);
    out.push_back(std::move(h));
  }
  return out;
}

void Store::replaceHostBundles(const std::string& host, const std::vector<HostBundleRow>& rows) {
  transaction([&] {
    prepare("DELETE FROM host_bundles WHERE host = ?").bind(host).run();
    for (const auto& r : rows) {
      prepare("INSERT OR REPLACE INTO host_bundles (host, sha256, name, version, path, state, reason) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)")
          .bind(host)
          .bind(r.sha256)
          .bind(r.name)
          .bind(r.version)
          .bind(r.path)
          .bind(r.state)
          .bind(r.reason)
          .run();
    }
  });
}

std::vector<HostBundleRow> Store::hostBundles(const std::string& host) {
  Stmt s = prepare(
      "SELECT host, sha256, name, version, path, state, reason FROM host_bundles WHERE ? = '' OR host = ? "
      "ORDER BY host, name, version, path");
  s.bind(host).bind(host);
  std::vector<HostBundleRow> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6)});
  return out;
}

int64_t Store::askHost(const std::string& host, const std::string& query, const std::string& arg) {
  prepare("INSERT INTO host_queries (host, query, arg) VALUES (?, ?, ?)").bind(host).bind(query).bind(arg).run();
  return sqlite3_last_insert_rowid(db_);
}

std::vector<HostQueryRow> Store::pendingQueries(const std::string& host) {
  Stmt s = prepare("SELECT id, host, query, arg FROM host_queries WHERE host = ? AND answered = 0 ORDER BY id");
  s.bind(host);
  std::vector<HostQueryRow> out;
  while (s.step()) {
    HostQueryRow r;
    r.id = s.integer(0);
    r.host = s.text(1);
    r.query = s.text(2);
    r.arg = s.text(3);
    out.push_back(std::move(r));
  }
  return out;
}

void Store::answerQuery(int64_t id, const std::string& answer, const std::string& error) {
  prepare("UPDATE host_queries SET answered = 1, answer = ?, error = ? WHERE id = ?").bind(answer).bind(error).bind(id).run();
}

std::optional<HostQueryRow> Store::queryAnswer(int64_t id) {
  Stmt s = prepare("SELECT id, host, query, arg, answered, answer, error FROM host_queries WHERE id = ?");
  s.bind(id);
  if (!s.step()) return std::nullopt;
  HostQueryRow r;
  r.id = s.integer(0);
  r.host = s.text(1);
  r.query = s.text(2);
  r.arg = s.text(3);
  r.answered = s.integer(4) != 0;
  r.answer = s.text(5);
  r.error = s.text(6);
  return r;
}

void Store::forgetQuery(int64_t id) { prepare("DELETE FROM host_queries WHERE id = ?").bind(id).run(); }

double Store::secondsSinceHeartbeat(const std::string& id) {
  Stmt s = prepare(
      "SELECT (julianday('now') - julianday(heartbeat)) * 86400.0 FROM hosts WHERE id = ?");
  s.bind(id);
  return s.step() ? s.real(0) : 1e9;
}

// --- Audit ---

int64_t Store::auditSequence() {
  Stmt s = prepare("SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'audit'");
  return s.step() ? s.integer(0) : 0;
}

void Store::audit(const std::string& actor, const std::string& action, const std::string& target,
                  const std::string& before, const std::string& after) {
  // In the write transaction, so the row's id and prev_hash are the log's tail's.
  transaction([&] {
    AuditRow r{0, "", actor, action, target, before, after};
    std::string prev;
    int64_t last = 0;
    {
      Stmt s = prepare("SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1");
      if (s.step()) {
        last = s.integer(0);
        prev = s.text(1);
      }
    }
    r.id = std::max(last, auditSequence()) + 1;
    {
      Stmt s = prepare("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')");
      if (s.step()) r.time = s.text(0);
    }
    prepare("INSERT INTO audit (id, time, actor, action, target, before, after, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(r.id).bind(r.time).bind(actor).bind(action).bind(target).bind(before).bind(after)
        .bind(prev).bind(auditRowHash(r, prev))
        .run();
  });
}

AuditVerdict Store::verifyAudit() {
  AuditVerdict v;
  Stmt s = prepare("SELECT id, time, actor, action, target, before, after, prev_hash, hash FROM audit ORDER BY id");
  std::string prev;
  int64_t expected = 1;
  auto broken = [&](int64_t id, std::string why) {
    v.ok = false;
    v.first_bad_id = id;
    v.why = std::move(why);
    return v;
  };
  while (s.step()) {
    AuditRow r{s.integer(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6)};
    const std::string prev_hash = s.text(7), hash = s.text(8);
    if (r.id != expected) {
      return broken(r.id, r.id > expected ? "rows " + std::to_string(expected) + ".." + std::to_string(r.id - 1) +
                                                " are missing (deleted)"
                                          : "its id is out of sequence (expected " + std::to_string(expected) + ")");
    }
    if (hash.empty()) return broken(r.id, "it has no hash (written around Strata: inserted by hand?)");
    if (prev_hash != prev) {
      return broken(r.id, "its prev_hash does not match the hash of the row before it (a row was deleted, "
                          "inserted or edited there)");
    }
    if (hash != auditRowHash(r, prev_hash)) {
      return broken(r.id, "its content does not match its hash (edited)");
    }
    prev = hash;
    ++expected;
    ++v.rows;
  }
  const int64_t seq = auditSequence();
  if (seq > v.rows) {
    return broken(v.rows + 1, "rows " + std::to_string(v.rows + 1) + ".." + std::to_string(seq) +
                                  " were written and are gone (deleted from the end)");
  }
  v.head = prev;
  return v;
}

std::vector<AuditRow> Store::auditLog(const std::string& since, const std::string& op) {
  Stmt s = prepare(
      "SELECT id, time, actor, action, target, before, after FROM audit "
      "WHERE (? = '' OR time >= ?) AND (? = '' OR target = ? OR substr(target, 1, length(?) + 1) = ? || ' ') "
      "ORDER BY id");
  s.bind(since).bind(since).bind(op).bind(op).bind(op).bind(op);
  std::vector<AuditRow> out;
  while (s.step()) {
    out.push_back({s.integer(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6)});
  }
  return out;
}

}  // namespace strata::db
