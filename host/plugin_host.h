// The plugin host: finds bundles in a directory, picks a version of each, loads
// them in dependency order inside load transactions, and keeps the store in step.
//
// Note [The load transaction]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A bundle loads in these steps, and any failure leaves nothing registered and a
// reason recorded in the store (state "rejected"):
//   1. its metadata is read with QPluginLoader::metaData(), without loading the
//      library, and checked: Strata's IID, name, semantic version, ABI {major, minor}
//      (major equal to the host's, minor not newer), defines/implements;
//   2. the file is copied to a private cache named by its sha256 and loaded from
//      there, so a file replaced in the directory never changes code that is mapped,
//      and a new version at the same path is a new library;
//   3. the root object must implement strata::Bundle and report the ABI its
//      metadata claims; registrations its static initializers made any other way
//      than through STRATA_LIBRARY blocks reject it (Note [Static registrations in
//      bundles] in strata/plugin.h);
//   4. the STRATA_LIBRARY blocks its static initializers deferred, then registerAll(),
//      run inside a RegistrationBatch (Note [Registration batches]) under
//      RegistrationOwnerGuard("name@version"): every registration is checked
//      as it is made (schemas, C++ signatures, other owners' kernels without
//      allow_override, duplicate defs), nothing is published yet;
//   5. what it registered must match its metadata, however it registered it (its
//      libraries, a custom_op, a kernel or rule handed over with keep): operators
//      defined only in namespaces it "defines", kernels and rules only in those it
//      defines or "implements" (backend fallbacks and mode types belong to no
//      namespace);
//   6. on any error the BundleRegistrar is cleared before the batch ends, so calls
//      never see the bundle; otherwise the batch ends and every table it touched is
//      published at once.
// Before step 1, the file must pass the trust checks (Note [Plugin trust]); which
// version of a bundle goes through these steps is Note [Choosing a version].
// Removing, disabling or replacing a bundle clears its registrar (in a batch too), so
// no table reaches its code. Its library stays mapped (QPluginLoader::unload is
// never called): a call may still be running inside it.
//
// Note [Choosing a version]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Several versions of a bundle may sit in the directory. Each rescan tries them in
// order until one loads: the pinned version first when it is there (a pin to a
// version that is not there, or that cannot load, does not decide, and every row
// says so), then the others, highest first. So a new version that fails to load
// never takes the bundle down: the version that ran before loads again, and its
// dependents with it (the old one is unloaded first, as for any upgrade: two
// versions define the same namespaces and cannot be registered side by side; calls
// on other threads never see the gap, Note [A swap without a gap] in plugin_host.cc). A
// dependent whose namespace only a version still to be tried defines waits for it.
// Two versions in a dependency cycle give way to the ones before them.
//
// A file that failed is remembered by its sha256, with the reason, and goes last in
// later rescans' order, so the running version is never unloaded for it again (a
// kernel toggle, another bundle arriving: each rescan would otherwise bounce it). It
// is tried again when:
//   - its contents change (a new build is a new sha256);
//   - nothing before it loads (the only version of a bundle is always tried);
//   - for a failure that other bundles can cause (its registrations clashed, a
//     namespace it needs is not defined or one it defines is taken, a cycle, a
//     failed check), the other loaded bundles differ from those loaded when the
//     rescan that failed it ended (its own dependents aside: they come and go with
//     it);
//   - an admin pins, unpins, disables, enables or trusts the bundle: `strata
//     plugins enable NAME` says "what it needed is there now" (a library it links
//     that was missing, say).
// A failure of the host's own (the bundle cache) is not remembered.
#pragma once

#include <QFileSystemWatcher>
#include <QObject>
#include <QPluginLoader>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QVersionNumber>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "strata/db/store.h"
#include "strata/modes/opcheck.h"
#include "strata/plugin.h"

namespace strata::host {

// Note [Plugin trust]
// ~~~~~~~~~~~~~~~~~~~
// A bundle runs with the host's privileges, so a host loads only what its own user
// (or root) could have put there, as ssh's StrictModes does for authorized_keys:
//   - the plugin directory must be owned by the host's effective user or root and
//     not be writable by group or others;
//   - each bundle file (after symlinks) likewise, and a symlink must lead to a file
//     inside the directory, not out of it.
// A file that fails is hashed (its identity in the store) but never parsed, not even
// for its metadata: it is recorded as rejected with the reason. The checks come before
// files with the same bytes are taken as one bundle, so a refused copy (a
// group-writable one, a symlink leading out) is a rejected row of its own beside the
// copy that passes, whichever name sorts first.
// `--allow-insecure-plugins` loads it anyway, with the reason kept on the loaded row,
// and starting a host with it is audited.
// On top of that, `--require-trusted` loads only files whose sha256 an admin put on
// the store's trust list (`strata plugins trust`, audited); trusting is by content,
// so a rebuilt file is a new, untrusted one.
struct TrustPolicy {
  bool allow_insecure = false;
  bool require_trusted = false;
};
// Why loading from `dir` would be unsafe, "" when it is not (a missing directory is
// not unsafe: there is nothing to load).
QString insecurityOfDirectory(const QString& dir);
// Why loading `path` (a file listed in `dir`) would be unsafe, "" when it is not.
QString insecurityOfBundle(const QString& dir, const QString& path);

// A bundle's name (letters, digits, '_', '.', '-') and version (MAJOR.MINOR.PATCH,
// with an optional -pre or +build suffix), as bundle.json must give them.
bool isBundleName(const QString& s);
bool isSemanticVersion(const QString& s);

struct BundleMetadata {
  QString name;
  QVersionNumber version;
  QString version_text;
  int abi_major = 0;
  int abi_minor = 0;
  QString description;
  QStringList defines;
  QStringList implements;
};

// A file in the plugin directory, as discovery saw it.
struct BundleFile {
  QString path;
  QString sha256;
  std::optional<BundleMetadata> metadata;  // empty when rejected before loading
  QString error;                           // why it was rejected
  QString insecure;                        // why it would be refused, when --allow-insecure-plugins loads it
};

// Checks the metadata Qt read from a plugin (its "IID" and the "MetaData" object
// holding bundle.json): the bundle's metadata, or nullopt and *why. Never throws.
std::optional<BundleMetadata> checkPluginMetaData(const QJsonObject& meta, QString* why);

// Reads and checks a bundle's metadata without loading it. Never throws.
BundleFile readBundleFile(const QString& path);

// The plugin directory: --plugins, else STRATA_PLUGIN_PATH, else the bundled plugins
// beside the binary (<bin>/../plugins).
QString defaultPluginDir();
// The store: --db, else STRATA_DB, else strata.db in the working directory.
QString defaultStorePath();
// Who is acting, for the audit log: the login name (the terminal's, else $USER or
// $LOGNAME, else the password database's name for the uid), "uid:N" when the uid
// has no name.
QString loginName();

// Runs opcheck and gradcheck (strata::modes::check_op) on the sample inputs every op
// has whose samples `owner` registered ("name@version"; empty: every owner).
std::vector<modes::CheckRow> checkOwnedOps(const std::string& owner);
// "core::x test_schema (sample 0): why" for the first failed row, "" when none failed.
QString firstFailure(const std::vector<modes::CheckRow>& rows);

// What a host does with a bundle's sample inputs as it loads it (serve --check):
// nothing; check and record the result in the store; or also reject a bundle that fails.
enum class CheckPolicy { off, record, enforce };

class PluginHost : public QObject {
  Q_OBJECT

 public:
  PluginHost(QString plugin_dir, db::Store* store, QObject* parent = nullptr);
  ~PluginHost() override;

  void setCheckPolicy(CheckPolicy p) { check_ = p; }
  void setTrustPolicy(TrustPolicy p) { trust_ = p; }
  // Whether the host writes what it sees to the store (bundles, registrations, its
  // view). A command's own scan of a directory does not: it reads the admin state
  // and writes nothing (Note [What each host runs] in store.cc). Default: on.
  void setRecording(bool on) { recording_ = on; }

  // What this host saw in its directory: one row per bundle file present, with its
  // state and reason (host and the store's removed rows aside).
  std::vector<db::HostBundleRow> view() const;

  // Answers a question another process asked this host through the store
  // (strata dump OP --host ID): returns the answer, throws std::exception for an error.
  using QueryHandler = std::function<std::string(const std::string& query, const std::string& arg)>;
  void setQueryHandler(QueryHandler h) { query_handler_ = std::move(h); }

  // Applies the store's kernel states, then brings the loaded bundles in line with
  // the directory, the pins and the disabled bundles. Returns what changed, for logs.
  QStringList sync();

  // Watches the directory (QFileSystemWatcher) and polls the store for other
  // processes' changes and questions every `poll_ms`; registers as `me` (its id,
  // pid, login, version; the plugins directory is the host's) and heartbeats.
  // Throws when the plugin directory does not exist.
  void serve(const db::HostRow& me, int poll_ms = 50);
  void serve(const QString& host_id, int poll_ms = 50);

  struct Loaded {
    QString name, version, path, sha256;
    std::unique_ptr<BundleRegistrar> registrar;
    QStringList defines, implements;
    uint64_t seq = 0;  // load order
    QString note;      // what its row says beside "loaded" (the check's result, an insecure load)
    QStringList dropped;  // ops it defined in registerAll and dropped before returning (not kept)
  };
  const QString& pluginDir() const { return dir_; }
  const std::map<QString, Loaded>& loaded() const { return loaded_; }
  int64_t lastApplied() const { return last_applied_; }

 signals:
  // What a rescan changed: "loaded NAME@VERSION", "unloaded NAME@VERSION",
  // "rejected NAME@VERSION: reason" ("rejected FILE: reason" when its metadata could
  // not be read), and other lines for people.
  void changed(const QStringList& what);
  // Admin changes in the store up to `change` are now applied (serve() only).
  void applied(qint64 change);

 private:
  void applyKernelStates();
  QStringList rescan();
  bool load(const BundleFile& f, QString* error);
  void unload(const QString& name);
  // Records what this host decided for a file, in its view and (when to_store) in the
  // store's bundles; true when that is new or changed.
  bool record(const BundleFile& f, const QString& state, const QString& reason, bool to_store = true);
  void recordRegistrations(const Loaded& l);
  void poll();
  void watchFiles();
  void watchDirectory();
  void warnIfStoreGone();  // see its definition
  std::string store_gone_;  // what warnIfStoreGone last said ("" while the store is the file opened)
  void answerQueries();
  void recordView(const QStringList& what);

  QString dir_;
  db::Store* store_;
  std::map<QString, Loaded> loaded_;                       // by bundle name
  std::map<QString, std::unique_ptr<QPluginLoader>> libs_;  // by sha256; never unloaded
  std::unique_ptr<QFileSystemWatcher> watcher_;  // serve() only
  bool dir_missing_ = false;                     // the watched directory was removed (logged once)
  QTimer poll_timer_, heartbeat_timer_, rescan_timer_;
  QString host_id_;
  db::HostRow me_;  // as serve() registered it
  int64_t data_version_ = -1;
  int64_t last_applied_ = 0;
  uint64_t load_seq_ = 0;
  CheckPolicy check_ = CheckPolicy::off;
  TrustPolicy trust_;
  bool recording_ = true;
  std::map<QString, db::HostBundleRow> view_;  // by viewKey(): sha256, or path for a rejected file
  // Files whose load failed, by sha256: not tried again while their content is the
  // same and, for a failure of its registrations, while the other bundles it could
  // have clashed with are the same (Note [Choosing a version]).
  struct Unloadable {
    QString name;          // the bundle's
    QStringList defines;   // the namespaces it defines
    QString reason;
    bool content_only;     // its contents alone fail (the ABI, not a bundle, static registrations)
    std::optional<QString> others;  // othersLoaded() as the rescan that failed it ended
    bool stillFails(const PluginHost& host) const;
  };
  std::map<QString, Unloadable> unloadable_;
  bool second_pass_ = false;  // rescan() runs a second pass at most once
  QString othersLoaded(const QString& bundle, const QStringList& defines) const;
  QueryHandler query_handler_;
};

}  // namespace strata::host
