// The store: one SQLite file that keeps what the host saw, what admins changed and
// who changed what. It knows records, not the dispatcher.
//
// Opened in WAL mode with a busy timeout, so a host and admin commands share it;
// the schema is migrated on open, keyed by PRAGMA user_version (Note [Store
// migrations] in store.cc); every statement is prepared and bound. The audit log is
// append-only (triggers refuse UPDATE, DELETE and INSERT OR REPLACE on it) and
// hash-chained, so an edit made around the triggers shows (Note [The audit chain]).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

struct sqlite3;

namespace strata::db {

// Every failure names the file and says why.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  StoreError(const std::string& what, std::string reason) : std::runtime_error(what), reason_(std::move(reason)) {}
  // SQLite's own words for a failed statement ("duplicate column name: x"), without
  // the file and the statement what() names; empty for the store's own errors.
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string reason_;
};

struct BundleRow {
  std::string name, version, path, sha256;
  std::string state;   // loaded, rejected, superseded, removed, disabled
  std::string reason;  // why, for every state but loaded
  std::string description;
  std::string first_seen, last_loaded;
};

struct OperatorRow {
  std::string name, schema, owner;
  std::string tags;            // "pt2_compliant_tag, pointwise"; "" for none
  std::string alias_analysis;  // "FROM_SCHEMA", "CONSERVATIVE", "PURE_FUNCTION"
};

struct RegistrationRow {
  std::string op, key, kind, owner, debug;
};

struct KernelStateRow {
  std::string op, key;
  bool enabled = true;
  std::string reason, actor, time;
};

struct PinRow {
  std::string name, version, actor, time;
};

// A bundle file an admin trusts, by content (strata plugins trust).
struct TrustRow {
  std::string sha256, name, version, actor, time;
};

// A host on the store (Note [What each host runs] in store.cc).
struct HostRow {
  std::string id;  // "hostname:pid"
  int64_t pid = 0;
  std::string started, heartbeat;
  int64_t last_applied = 0;  // the newest admin change it applied
  std::string plugins;         // its plugin directory
  std::string login;           // who started it
  std::string strata_version;  // "0.1.0 (SDK ABI 3.0)"
  std::string stopped;         // when it stopped cleanly; "" while it has not
  std::string last_event;      // "loaded muladd@1.1.0", the last thing its directory or the store changed
  double seconds_since_heartbeat = 0;  // by the database's clock, when read
};

// A bundle file as one host saw it: its own view, which only it writes.
struct HostBundleRow {
  std::string host, sha256, name, version, path;
  std::string state;  // loaded, rejected, superseded, disabled
  std::string reason;
};

// A question for a running host (strata dump OP --host ID) and its answer.
struct HostQueryRow {
  int64_t id = 0;
  std::string host, query, arg;
  bool answered = false;
  std::string answer, error;
};

struct AuditRow {
  int64_t id = 0;
  std::string time, actor, action, target, before, after;
};

// What verifyAudit() found: ok, or the first row where the chain breaks and why.
struct AuditVerdict {
  bool ok = true;
  int64_t rows = 0;          // rows checked before the break (all of them when ok)
  int64_t first_bad_id = 0;  // the row where it breaks
  std::string why;
  std::string head;  // the last row's hash when ok ("" for an empty log)
};

class Store {
 public:
  static constexpr int kSchemaVersion = 5;
  // A host whose heartbeat is older than this is forgotten (Note [What each host runs]).
  static constexpr int64_t kHostAgeOutSeconds = 24 * 3600;
  // PRAGMA application_id of every store ("Stra"): a file without it is not Strata's.
  static constexpr int32_t kApplicationId = 0x53747261;
  // The DDL that takes a store from version v-1 to v (v = 1..kSchemaVersion).
  static const char* migrationSql(int v);

  // Opens (creating) the file and migrates it. StoreError: not a database, a schema
  // newer than this build, unwritable, ...
  explicit Store(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  // "" while path() still names the file this store opened; else what happened to it
  // ("it was removed", "another file replaced it"). A connection keeps writing the
  // file it opened, which a command naming the path no longer reaches.
  std::string fileGone() const;
  // How long a statement waits for another connection's lock before it fails with
  // "database is locked" (default kBusyTimeout: a host's whole rescan).
  static constexpr std::chrono::milliseconds kBusyTimeout{30000};
  void setBusyTimeout(std::chrono::milliseconds t);
  int schemaVersion();
  // Changes when another connection commits (PRAGMA data_version).
  int64_t dataVersion();
  // Runs f in one IMMEDIATE transaction: all of it or none. Calls nest (a nested
  // call is a savepoint: its failure undoes its own writes, and the outer
  // transaction goes on); the outermost commits once.
  void transaction(const std::function<void()>& f);

  // --- Bundles seen, keyed by sha256. ---
  void upsertBundle(const BundleRow& row);  // keeps first_seen; sets last_loaded when state is loaded
  std::vector<BundleRow> bundles();
  // Marks every bundle whose path is in `dir` ("": anywhere), not in `present`
  // (sha256s) and not already removed as removed: one host's directory, not another's.
  void markRemovedExcept(const std::set<std::string>& present, const std::string& dir = "");

  // --- What a loaded bundle registered (replaced per owner). ---
  void replaceRegistrations(const std::string& owner, const std::vector<OperatorRow>& ops,
                            const std::vector<RegistrationRow>& regs);
  void clearRegistrations(const std::string& owner);
  std::vector<OperatorRow> operators();
  std::vector<RegistrationRow> registrations(const std::string& op = "");

  // --- Admin state. Each returns the change id and writes an audit row. ---
  int64_t setKernelState(const std::string& op, const std::string& key, bool enabled, const std::string& reason,
                         const std::string& actor);
  std::vector<KernelStateRow> kernelStates();
  int64_t pin(const std::string& name, const std::string& version, const std::string& actor);
  int64_t unpin(const std::string& name, const std::string& actor);
  std::vector<PinRow> pins();
  // "" when name is not pinned.
  std::string pinnedVersion(const std::string& name);
  int64_t setBundleDisabled(const std::string& name, bool disabled, const std::string& reason, const std::string& actor);
  // The disabled bundles: name -> the reason the admin gave ("" when none).
  std::map<std::string, std::string> disabledBundles();
  // The trust list (serve --require-trusted loads only these sha256s). Audited.
  int64_t trust(const TrustRow& row, const std::string& actor);  // row.actor and time are ignored
  int64_t untrust(const std::string& sha256, const std::string& actor);  // StoreError when not trusted
  std::vector<TrustRow> trusted();
  bool isTrusted(const std::string& sha256);
  // The newest change id (0 when none).
  int64_t latestChange();
  // The targets of the changes after `after` (up to the latest) of the given kinds
  // ("kernel", "pin", "bundle", "trust"): for a bundle change, its name.
  std::set<std::string> changedTargets(int64_t after, const std::vector<std::string>& kinds);

  // --- Running hosts. ---
  // Registers (or re-registers) row.id; forgets hosts dead for kHostAgeOutSeconds.
  void registerHost(const HostRow& row);
  void registerHost(const std::string& id, int64_t pid);
  // False when no row has that id (another host forgot it: it re-registers).
  bool heartbeat(const std::string& id, int64_t last_applied);
  void setHostEvent(const std::string& id, const std::string& event);
  // A clean stop: the row and the host's view stay (as stopped) until they age out.
  void markHostStopped(const std::string& id);
  void removeHost(const std::string& id);  // the row, its view and its queries
  std::vector<HostRow> hosts();
  // A host's view of its plugin directory, replaced whole; hostBundles("") is every host's.
  void replaceHostBundles(const std::string& host, const std::vector<HostBundleRow>& rows);
  std::vector<HostBundleRow> hostBundles(const std::string& host = "");
  // Questions for a running host: asked by the CLI, answered by the host at its poll.
  int64_t askHost(const std::string& host, const std::string& query, const std::string& arg);
  std::vector<HostQueryRow> pendingQueries(const std::string& host);
  void answerQuery(int64_t id, const std::string& answer, const std::string& error);
  std::optional<HostQueryRow> queryAnswer(int64_t id);
  void forgetQuery(int64_t id);
  // Seconds since the host's last heartbeat (by the database's clock).
  double secondsSinceHeartbeat(const std::string& id);

  // --- The audit log. ---
  void audit(const std::string& actor, const std::string& action, const std::string& target,
             const std::string& before, const std::string& after);
  // since: an ISO time ("2026-11-22", "2026-11-22T10:00:00"); op: rows whose target is op or starts with "op ".
  std::vector<AuditRow> auditLog(const std::string& since = "", const std::string& op = "");
  // Walks the chain (Note [The audit chain] in store.cc).
  AuditVerdict verifyAudit();
  // The chain's hash of a row whose predecessor's hash is prev_hash.
  static std::string auditRowHash(const AuditRow& row, const std::string& prev_hash);

  // Low level, for tests and migrations: runs SQL (each statement prepared in turn).
  void exec(const std::string& sql);

 private:
  class Stmt;
  Stmt prepare(const char* sql);
  [[noreturn]] void fail(const std::string& what);
  int64_t addChange(const std::string& kind, const std::string& target);
  int64_t auditSequence();  // the highest audit id ever given
  void chainExistingAuditRows();
  void migrate();
  // StoreError unless the file carries Strata's mark (or is a store from before it).
  void refuseUnmarked();
  // StoreError when the file is not an SQLite file or is shorter than its header says.
  void refuseTruncated() const;
  // Why the file looks truncated (its header promises more pages than it has), if it does.
  std::optional<std::string> truncation() const;
  void useWal();
  int64_t applicationId();
  // Opens path_ (creating it when `create`), with the busy timeout and WAL.
  void openConnection(bool create);
  // Makes path_ a new, complete store by building it beside the path and linking it
  // into place (Note [Creating a store]).
  static void createAtomically(const std::string& path);
  struct Creating {};
  Store(const std::string& path, Creating);  // a connection that creates the file, nothing more

  std::string path_;
  uint64_t dev_ = 0, ino_ = 0;  // the file opened (fileGone)
  std::string absolute_path_;
  sqlite3* db_ = nullptr;
  int depth_ = 0;  // transaction() nesting
  std::chrono::milliseconds busy_timeout_ = kBusyTimeout;
};

}  // namespace strata::db
