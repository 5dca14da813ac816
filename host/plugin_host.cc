#include "plugin_host.h"

#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLibrary>
#include <QLoggingCategory>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <map>
#include <set>
#include <mutex>

#include <cerrno>
#include <climits>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/dispatcher.h"
#include "strata/modes/dispatch_mode.h"

Q_LOGGING_CATEGORY(lcHost, "strata.host", QtInfoMsg)  // debug lines only when QT_LOGGING_RULES asks

namespace strata::host {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

// A bundle's name: what its files, rows and commands are called by (not '.', '..' or
// an option-like '-x'), as strata_add_bundle checks it.
bool isName(const QString& s) {
  static const QRegularExpression re("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$");
  return re.match(s).hasMatch();
}
bool isIdentifier(const QString& s) {
  static const QRegularExpression re("^[A-Za-z_][A-Za-z0-9_]*$");
  return re.match(s).hasMatch();
}

}  // namespace

bool isBundleName(const QString& s) { return isName(s); }
bool isSemanticVersion(const QString& s) {
  // Each number below a billion, so it fits the int QVersionNumber compares.
  // semver.org's grammar: dot-separated identifiers after '-' (pre-release) and '+'
  // (build), none empty, a numeric pre-release identifier without a leading zero.
  static const QRegularExpression semver(
      R"(^(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8}))"
      R"((?:-(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*)?)"
      R"((?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$)");
  return semver.match(s).hasMatch();
}

namespace {

// Note [Reaping bundle caches]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A process that loads bundles copies them to its own cache directory (Note [The
// load transaction], step 2), which QTemporaryDir removes when the process exits.
// One that is killed (SIGKILL, or SIGPIPE from `strata serve | head`) leaves it
// behind. So each cache holds a `.lock` its process keeps an exclusive flock on for
// its whole life (the kernel drops it when the process dies, however it dies), and
// the next process that makes a cache removes every cache of this user's whose lock
// it can take. A lock, not a pid: pids are reused, and containers sharing /tmp see
// each other's pids as other processes or none. A cache without a lock file (made an
// instant ago, or by an older Strata) is left alone.
void reapStaleBundleCaches(const QString& tmp) {
  static const QRegularExpression name("^strata-bundles-[0-9]+-[A-Za-z0-9]{6}$");
  const QFileInfoList entries = QDir(tmp).entryInfoList({"strata-bundles-*"}, QDir::Dirs | QDir::NoDotAndDotDot);
  for (const QFileInfo& fi : entries) {
    if (!name.match(fi.fileName()).hasMatch() || fi.isSymLink() || fi.ownerId() != ::getuid()) continue;
    const QByteArray lock = QFile::encodeName(fi.absoluteFilePath() + "/.lock");
    const int fd = ::open(lock.constData(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) QDir(fi.absoluteFilePath()).removeRecursively();  // its owner is gone
    ::close(fd);
  }
}

// The private copies of this process's bundles (Note [The load transaction], step
// 2), shared by its hosts so one file is mapped once. Removed when the process
// exits: the libraries stay mapped, and Linux keeps an unlinked file's pages. Locked
// for the process's life, so a later process removes it if this one is killed
// (Note [Reaping bundle caches]).
const QTemporaryDir& bundleCache() {
  static const QString tmp = [] {
    const QString t = QStandardPaths::writableLocation(QStandardPaths::TempLocation);
    reapStaleBundleCaches(t);
    return t;
  }();
  static const QTemporaryDir cache(tmp + "/strata-bundles-" + QString::number(QCoreApplication::applicationPid()) +
                                   "-XXXXXX");
  static const bool locked = [] {
    if (!cache.isValid()) return false;
    // Locked under another name, then renamed: a reaper never sees an unlocked .lock.
    const QByteArray tmp_lock = QFile::encodeName(cache.filePath(".lock.new"));
    const int fd = ::open(tmp_lock.constData(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    // Held until the process exits: the descriptor is never closed.
    return fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
           ::rename(tmp_lock.constData(), QFile::encodeName(cache.filePath(".lock")).constData()) == 0;
  }();
  (void)locked;
  return cache;
}

// Copies src to dst if its bytes still hash to sha256 (the file may have changed
// since discovery read it): the copy is exactly the file the metadata was read from.
// Written beside dst and renamed, without an fsync: the cache is scratch.
bool copyVerified(const QString& src, const QString& sha256, const QString& dst, QString* why) {
  QFile in(src);
  if (!in.open(QIODevice::ReadOnly)) {
    *why = "cannot read: " + in.errorString();
    return false;
  }
  QFile out(dst + ".part");
  if (!out.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
    *why = "cannot copy to the bundle cache: " + out.errorString();
    return false;
  }
  // In pieces, hashed as they go: a file of any size takes 1 MiB of memory.
  QCryptographicHash h(QCryptographicHash::Sha256);
  QByteArray piece;
  while (!in.atEnd()) {
    piece = in.read(qint64{1} << 20);
    if (piece.isEmpty() && in.error() != QFileDevice::NoError) {
      *why = "cannot read: " + in.errorString();
      out.remove();
      return false;
    }
    h.addData(piece);
    if (out.write(piece) != piece.size()) {
      *why = "cannot copy to the bundle cache: " + out.errorString();
      out.remove();
      return false;
    }
  }
  if (!out.flush()) {
    *why = "cannot copy to the bundle cache: " + out.errorString();
    out.remove();
    return false;
  }
  out.close();
  if (QString::fromLatin1(h.result().toHex()) != sha256) {
    *why = "the file changed while it was being loaded (it is read again at the next rescan)";
    out.remove();
    return false;
  }
  if (!QFile::rename(out.fileName(), dst)) {
    *why = "cannot copy to the bundle cache: cannot rename " + out.fileName();
    out.remove();
    return false;
  }
  return true;
}

QString hashFile(const QString& path, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    *error = "cannot read: " + f.errorString();
    return {};
  }
  QCryptographicHash h(QCryptographicHash::Sha256);
  if (!h.addData(&f)) {
    *error = "cannot read: " + f.errorString();
    return {};
  }
  return QString::fromLatin1(h.result().toHex());
}

// A file's sha256, remembered while its identity (device, inode, size, modification
// time to the nanosecond) stays the same, as git's index does: a host rescans its
// directory on every change in it, and bundles are megabytes. Writing the file or
// replacing it changes that identity; the load step hashes the bytes it copies again
// anyway (Note [The load transaction], step 2). The change time is left out: linking
// or renaming a bundle into place changes it, not the bytes. A file modified in the
// last seconds is not remembered (git's "racily clean" rule), so a rewrite within
// the timestamps' granularity is still seen.
QString sha256Of(const QString& path, QString* error) {
  struct Identity {
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
    bool operator==(const Identity&) const = default;
  };
  static std::mutex mu;
  static std::map<QString, std::pair<Identity, QString>> known;
  struct stat st {};
  if (::stat(QFile::encodeName(path).constData(), &st) != 0) return hashFile(path, error);
  const Identity id{st.st_dev, st.st_ino, st.st_size, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(path);
    if (it != known.end() && it->second.first == id) return it->second.second;
  }
  const QString sha = hashFile(path, error);
  const bool settled = ::time(nullptr) - st.st_mtim.tv_sec > 2;
  if (!sha.isEmpty() && settled) {
    std::lock_guard<std::mutex> lock(mu);
    if (known.size() >= 4096) known.clear();  // bounded: paths come and go
    known[path] = {id, sha};
  }
  return sha;
}

// A string-array field; false (and *why) when absent or not strings.
bool stringArray(const QJsonObject& md, const char* field, QStringList* out, QString* why) {
  if (!md.contains(field)) {
    *why = QString("bundle.json has no \"%1\" (an array of namespaces, possibly empty)").arg(field);
    return false;
  }
  if (!md[field].isArray()) {
    *why = QString("bundle.json: \"%1\" must be an array of namespaces").arg(field);
    return false;
  }
  for (const auto& v : md[field].toArray()) {
    if (!v.isString() || !isIdentifier(v.toString())) {
      *why = QString("bundle.json: \"%1\" holds %2, which is not a namespace (a C++ identifier)")
                 .arg(field, v.isString() ? "'" + v.toString() + "'" : QString("a non-string"));
      return false;
    }
    out->append(v.toString());
  }
  return true;
}

// Whether the host itself defines operators in namespace ns (`core`, owner
// "builtin"): a bundle may implement it (kernels, rules for its ops) with no bundle
// defining it.
// Those namespaces are the ones of the defs Dispatcher::singleton() registers as
// "builtin" as it starts, so they are read once: scanning every operator on each call
// (now once per bundle file, for bundle.json's "defines") took a host 1.4 s to load
// 100 bundles in a process holding 10k other operators.
bool definedByTheHost(const QString& ns) {
  static const std::set<std::string> host_namespaces = [] {
    std::set<std::string> out;
    Dispatcher& d = Dispatcher::singleton();
    for (const OperatorName& op : d.operatorNames()) {
      for (const RegistrationInfo& r : d.registrations(op)) {
        if (r.what == RegistrationInfo::What::Def && r.owner == "builtin") out.insert(op.name.substr(0, op.name.find("::")));
      }
    }
    return out;
  }();
  return host_namespaces.count(ns.toStdString()) != 0;
}

// What the bundle registered by any way (its libraries, a custom_op, a kernel or a
// rule handed over with keep), held to bundle.json's lists: an operator defined in a
// namespace of "defines", a kernel or rule in one of "defines" or "implements". ""
// when all are listed.
QString unlistedNamespace(const std::string& owner, const BundleMetadata& m) {
  const Dispatcher::Owned owned = Dispatcher::singleton().ownedBy(owner);
  auto nsOf = [](const std::string& op) { return q(op.substr(0, op.find("::"))); };
  auto listed = [&m](const QString& n) { return m.defines.contains(n) || m.implements.contains(n); };
  for (const RegistrationInfo& r : owned.registrations) {
    if (r.what == RegistrationInfo::What::Fallback) continue;  // every namespace's: no list applies
    const QString n = nsOf(r.op);
    if (r.what == RegistrationInfo::What::Def && !m.defines.contains(n)) {
      return "it defines operator " + q(r.op) + " in namespace '" + n +
             "', which bundle.json does not list in \"defines\"";
    }
    if (r.what == RegistrationInfo::What::Impl && !listed(n)) {
      return "it registers a kernel for " + q(r.op) + " (" + q(toString(r.key)) + ") in namespace '" + n +
             "', which bundle.json lists neither in \"defines\" nor in \"implements\"";
    }
  }
  for (const RuleInfo& r : owned.rules) {
    const QString n = nsOf(r.op);
    if (!listed(n)) {
      return "it registers a " + q(r.kind) + " rule for " + q(r.op) + " in namespace '" + n +
             "', which bundle.json lists neither in \"defines\" nor in \"implements\"";
    }
  }
  return {};
}

}  // namespace

std::optional<BundleMetadata> checkPluginMetaData(const QJsonObject& meta, QString* why) {
  const auto fail = [why](const QString& reason) -> std::optional<BundleMetadata> {
    *why = reason;
    return std::nullopt;
  };
  const QString iid = meta["IID"].toString();
  if (iid != QLatin1String(STRATA_BUNDLE_IID)) {
    return fail(QString("plugin IID '%1' is not Strata's (%2)").arg(iid, STRATA_BUNDLE_IID));
  }
  const QJsonValue mdv = meta["MetaData"];
  if (!mdv.isObject() || mdv.toObject().isEmpty()) {
    return fail("no bundle.json metadata embedded (Q_PLUGIN_METADATA(... FILE \"bundle.json\"))");
  }
  const QJsonObject md = mdv.toObject();
  BundleMetadata m;
  if (!md["name"].isString() || !isName(md["name"].toString())) {
    return fail(md.contains("name") ? "bundle.json: \"name\" must be a string of letters, digits, '_', '.' and '-' "
                                      "that starts with a letter, digit or '_', at most 128 characters"
                                  : "bundle.json has no \"name\"");
  }
  m.name = md["name"].toString();
  if (md.contains("version") && !md["version"].isString()) {
    return fail("bundle.json: \"version\" must be a string such as \"1.0.0\", not " +
                QString(md["version"].isDouble() ? "a number" : "another JSON type"));
  }
  if (!isSemanticVersion(md["version"].toString())) {
    return fail(md.contains("version")
                  ? "bundle.json: \"version\" '" + md["version"].toVariant().toString() +
                        "' is not a semantic version (MAJOR.MINOR.PATCH, each number below 1000000000)"
                  : QString("bundle.json has no \"version\""));
  }
  m.version_text = md["version"].toString();
  m.version = QVersionNumber::fromString(m.version_text);
  const QJsonValue abi = md["abi"];
  if (!abi.isObject() || !abi.toObject()["major"].isDouble() || !abi.toObject()["minor"].isDouble()) {
    return fail("bundle.json: \"abi\" must be {\"major\": N, \"minor\": N}");
  }
  m.abi_major = abi.toObject()["major"].toInt(-1);
  m.abi_minor = abi.toObject()["minor"].toInt(-1);
  if (m.abi_major < 0 || m.abi_minor < 0) {  // not a non-negative int (-1, 2.5, 2^63)
    // As JSON writes the number (QJsonValue has no toString for numbers).
    auto written = [&](const char* part) {
      return QString::fromUtf8(QJsonDocument(QJsonArray{abi.toObject()[part]}).toJson(QJsonDocument::Compact)).mid(1).chopped(1);
    };
    return fail("bundle.json: \"abi\" must be {\"major\": N, \"minor\": N} with whole numbers from 0 to " +
                QString::number(INT_MAX) + ", not {\"major\": " + written("major") + ", \"minor\": " +
                written("minor") + "}");
  }
  if (!md["description"].isString()) {
    return fail(md.contains("description") ? "bundle.json: \"description\" must be a string"
                                         : "bundle.json has no \"description\"");
  }
  m.description = md["description"].toString();
  QString bad;
  if (!stringArray(md, "defines", &m.defines, &bad) || !stringArray(md, "implements", &m.implements, &bad)) {
    return fail(bad);
  }
  for (const QString& ns : m.defines) {
    if (definedByTheHost(ns)) {
      return fail("bundle.json: \"defines\" holds '" + ns + "', the host's own namespace, which no bundle defines; "
                  "list it in \"implements\" to add kernels or rules to its ops");
    }
  }
  const AbiVersion host = hostSdkAbi();
  if (m.abi_major != host.major) {
    return fail(QString("built for SDK ABI %1.%2; this host's ABI is %3.%4 (the major must match)")
                  .arg(m.abi_major)
                  .arg(m.abi_minor)
                  .arg(host.major)
                  .arg(host.minor));
  }
  if (m.abi_minor > host.minor) {
    return fail(QString("needs SDK ABI %1.%2, newer than this host's %3.%4")
                  .arg(m.abi_major)
                  .arg(m.abi_minor)
                  .arg(host.major)
                  .arg(host.minor));
  }
  return m;
}

BundleFile readBundleFile(const QString& path) {
  BundleFile f;
  f.path = path;
  f.sha256 = sha256Of(path, &f.error);
  if (!f.error.isEmpty()) return f;
  QPluginLoader loader(path);
  const QJsonObject meta = loader.metaData();  // does not load the library
  if (meta.isEmpty()) {
    // Qt's reason names the path the row names already; the fix is in the bundle's class.
    QString why = loader.errorString();
    why.replace(QFileInfo(path).absoluteFilePath(), "the file").replace(path, "the file");
    f.error = "not a Strata bundle: it has no Qt plugin metadata (" + why +
              "); a bundle's class declares Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE \"bundle.json\") and is "
              "built with strata_add_bundle";
    return f;
  }
  f.metadata = checkPluginMetaData(meta, &f.error);
  return f;
}

namespace {

QString userName(uid_t uid) {
  const passwd* pw = ::getpwuid(uid);
  return pw != nullptr && pw->pw_name != nullptr ? QString("uid %1 (%2)").arg(uid).arg(QString::fromLocal8Bit(pw->pw_name))
                                                 : QString("uid %1").arg(uid);
}

// "" when st (of `what`) is owned by this process's effective user or root and
// writable by no one else.
QString unsafeOwnership(const struct stat& st, const QString& what) {
  const QString mode = QString("mode %1").arg(st.st_mode & 07777, 4, 8, QChar('0'));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    const char* who = (st.st_mode & S_IWOTH) != 0 ? ((st.st_mode & S_IWGRP) != 0 ? "group and others" : "others")
                                                   : "its group";
    return QString("%1 is writable by %2 (%3)").arg(what, who, mode);
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return QString("%1 is owned by %2, neither this host's user (%3) nor root")
        .arg(what, userName(st.st_uid), userName(::geteuid()));
  }
  return {};
}

const char* const kTrustHint = "; anyone who can write it could run code in this host "
                               "(make it yours and chmod go-w, or pass --allow-insecure-plugins)";

}  // namespace

QString insecurityOfDirectory(const QString& dir) {
  struct stat st {};
  if (::stat(QFile::encodeName(dir).constData(), &st) != 0) return {};
  const QString why = unsafeOwnership(st, "the plugin directory " + dir);
  return why.isEmpty() ? why : why + kTrustHint;
}

QString insecurityOfBundle(const QString& dir, const QString& path) {
  const QByteArray p = QFile::encodeName(path);
  struct stat lst {};
  if (::lstat(p.constData(), &lst) != 0) return {};  // gone: discovery reports it
  if (S_ISLNK(lst.st_mode)) {
    const QString target = QFileInfo(path).canonicalFilePath();
    const QString root = QFileInfo(dir).canonicalFilePath();
    if (target.isEmpty()) return "it is a symlink that leads nowhere";
    if (!target.startsWith(root + "/")) {
      return "it is a symlink leading out of the plugin directory (to " + target +
             "); link or copy the bundle itself into the directory";
    }
  }
  struct stat st {};
  if (::stat(p.constData(), &st) != 0) return {};
  const QString why = unsafeOwnership(st, "the file");
  return why.isEmpty() ? why : why + kTrustHint;
}

QString defaultPluginDir() {
  const QString env = qEnvironmentVariable("STRATA_PLUGIN_PATH");
  if (!env.isEmpty()) return env;
  // A build tree keeps the bundles beside bin/; an installed tree under lib/.
  const QString build_tree = QDir(QCoreApplication::applicationDirPath() + "/../plugins").absolutePath();
  if (QFileInfo(build_tree).isDir()) return build_tree;
  return QDir(QCoreApplication::applicationDirPath() + "/../" STRATA_INSTALL_PLUGIN_DIR).absolutePath();
}

QString defaultStorePath() {
  const QString env = qEnvironmentVariable("STRATA_DB");
  return env.isEmpty() ? QDir::current().absoluteFilePath("strata.db") : env;
}

QString loginName() {
  // The login name: the terminal's, else $USER or $LOGNAME, else the password
  // database's name for the uid (a service or container has no terminal); the uid
  // only when the uid has no name.
  const char* login = ::getlogin();
  if (login != nullptr && *login != '\0') return QString::fromLocal8Bit(login);
  for (const char* var : {"USER", "LOGNAME"}) {
    const QString user = qEnvironmentVariable(var);
    if (!user.isEmpty()) return user;
  }
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_name != nullptr && *pw->pw_name != '\0') {
    return QString::fromLocal8Bit(pw->pw_name);
  }
  return QString("uid:%1").arg(::getuid());
}

PluginHost::PluginHost(QString plugin_dir, db::Store* store, QObject* parent)
    : QObject(parent), dir_(std::move(plugin_dir)), store_(store) {
  modes::initialize();
}

PluginHost::~PluginHost() {
  store_ = nullptr;  // the store keeps what was loaded: this is a shutdown, not a removal
  // Newest first: dependents were loaded after what they depend on.
  while (!loaded_.empty()) {
    auto newest = std::max_element(loaded_.begin(), loaded_.end(),
                                   [](const auto& a, const auto& b) { return a.second.seq < b.second.seq; });
    unload(newest->first);
  }
}

// A file's key in the view: its content when it passed discovery (one bundle per
// sha256), else its path, so that each rejected file keeps its own row, apart from a
// copy of the same bytes that passed (Note [Plugin trust]).
static QString viewKey(const BundleFile& f) {
  return f.error.isEmpty() && !f.sha256.isEmpty() ? f.sha256 : "path:" + f.path;
}

bool PluginHost::record(const BundleFile& f, const QString& state, const QString& reason, bool to_store) {
  db::BundleRow r;
  r.sha256 = f.sha256.toStdString();
  r.path = f.path.toStdString();
  if (f.metadata) {
    r.name = f.metadata->name.toStdString();
    r.version = f.metadata->version_text.toStdString();
    r.description = f.metadata->description.toStdString();
  } else {
    r.name = QFileInfo(f.path).fileName().toStdString();
    r.version = "";
  }
  r.state = state.toStdString();
  r.reason = reason.toStdString();
  db::HostBundleRow row{host_id_.toStdString(), r.sha256, r.name, r.version, r.path, r.state, r.reason};
  auto [it, added] = view_.try_emplace(viewKey(f), row);
  // Each rejection is logged once, when it is new or its reason changed (a rescan
  // decides the same again for every file still there).
  const bool news = added || it->second.state != r.state || it->second.reason != r.reason;
  if (state == "rejected" && news) qCWarning(lcHost).noquote() << "rejected" << f.path + ":" << reason;
  it->second = std::move(row);
  if (store_ == nullptr || !recording_ || !to_store) return news;
  try {
    store_->upsertBundle(r);
  } catch (const db::StoreError& e) {
    qCWarning(lcHost).noquote() << "cannot record bundle" << f.path << ":" << e.what();
  }
  return news;
}

std::vector<db::HostBundleRow> PluginHost::view() const {
  std::vector<db::HostBundleRow> out;
  for (const auto& [_, r] : view_) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const db::HostBundleRow& a, const db::HostBundleRow& b) {
    return std::tie(a.name, a.version, a.path) < std::tie(b.name, b.version, b.path);
  });
  return out;
}

// A serving host's own view, written whole (Note [What each host runs] in store.cc).
void PluginHost::recordView(const QStringList& what) {
  if (store_ == nullptr || !recording_ || host_id_.isEmpty()) return;
  try {
    store_->transaction([&] {
      store_->replaceHostBundles(host_id_.toStdString(), view());
      if (!what.isEmpty()) {
        store_->setHostEvent(host_id_.toStdString(),
                             (QDateTime::currentDateTimeUtc().toString(Qt::ISODateWithMs) + " " + what.last()).toStdString());
      }
    });
  } catch (const db::StoreError& e) {
    qCWarning(lcHost).noquote() << "cannot record what this host runs:" << e.what();
  }
}

void PluginHost::applyKernelStates() {
  if (store_ == nullptr) return;
  for (const auto& k : store_->kernelStates()) {
    try {
      set_kernel_enabled(k.op, k.key, k.enabled);
    } catch (const Error& e) {
      qCWarning(lcHost).noquote() << "store: kernel state for" << q(k.op) << q(k.key) << "ignored:" << e.what();
    }
  }
}

QStringList PluginHost::sync() {
  qCDebug(lcHost) << "sync: applying the store and rescanning the plugin directory";
  QStringList what;
  auto pass = [&] {
    if (store_ != nullptr) {
      data_version_ = store_->dataVersion();
      const int64_t before = last_applied_;
      last_applied_ = store_->latestChange();  // read before applying: a later change is applied next time
      // An admin's pin, unpin, disable, enable or trust of a bundle tries its failed
      // files again (Note [Choosing a version]): 'strata plugins enable NAME' is the
      // way to say "what it needed is there now".
      if (!unloadable_.empty() && last_applied_ != before) {
        const std::set<std::string> names = store_->changedTargets(before, {"pin", "bundle", "trust"});
        std::erase_if(unloadable_, [&](const auto& u) { return names.count(u.second.name.toStdString()) != 0; });
      }
    }
    applyKernelStates();
    what += rescan();
    if (store_ != nullptr && !host_id_.isEmpty()) store_->heartbeat(host_id_.toStdString(), last_applied_);
  };
  // What one pass records (a row per bundle, its registrations) is committed as one
  // transaction: one write to disk, not one per bundle.
  // A command's own scan writes nothing: it takes no write lock either, so serving
  // hosts on the store never wait for it.
  if (store_ == nullptr || !recording_) pass();
  else store_->transaction(pass);
  // Announced once committed, outside the store's write lock: a listener (an
  // embedding application's callback) may take its time.
  if (!what.isEmpty()) emit changed(what);
  return what;
}

// Listing a directory this user cannot read gives nothing, and "no bundles" would be
// a wrong answer (and a serving host could not watch it).
static void refuseUnreadableDirectory(const QString& dir) {
  if (const QFileInfo di(dir); di.isDir() && (!di.isReadable() || !di.isExecutable())) {
    throw std::runtime_error("the plugin directory " + dir.toStdString() + " cannot be read by this user (its permissions)");
  }
}

QStringList PluginHost::rescan() {
  QStringList what;
  // 1. Discover: every library file, the trust checks first (Note [Plugin trust]).
  // Only files that pass are one bundle per sha256; each refused file is its own
  // row, whatever copy of it sits beside it and whichever name sorts first.
  std::vector<BundleFile> files;
  std::set<QString> seen_sha;  // of the files that passed
  QDir dir(dir_);
  refuseUnreadableDirectory(dir_);
  // System too: a FIFO, a socket or a symlink to nothing named like a library gets a
  // row saying why it is not read, as an unreadable file does, instead of no row.
  const QFileInfoList entries = dir.entryInfoList(QDir::Files | QDir::System, QDir::Name);
  const QString dir_insecure = entries.isEmpty() ? QString() : insecurityOfDirectory(dir_);
  std::set<std::string> trusted;
  if (trust_.require_trusted && store_ != nullptr) {
    for (const auto& t : store_->trusted()) trusted.insert(t.sha256);
  }
  for (const QFileInfo& fi : entries) {
    if (!QLibrary::isLibrary(fi.fileName())) continue;
    // Removed since the directory was listed (a copy's temporary name, a churn): not
    // there, so not in the view, rather than called unreadable.
    if (!QFileInfo(fi.absoluteFilePath()).exists() && !QFileInfo(fi.absoluteFilePath()).isSymLink()) continue;
    if (const QString why = fi.isSymLink() && !fi.exists() ? "a symbolic link that leads nowhere (its target is "
                                                               "missing, or the links go round in a loop)"
                            : !fi.isFile()                 ? "not a regular file (a FIFO, socket or device): not read"
                            : !fi.isReadable()             ? "cannot be read by this user (its permissions)"
                                                           : QString();
        !why.isEmpty()) {
      BundleFile f;
      f.path = fi.absoluteFilePath();
      f.error = why;  // no content to hash: a row in this host's view only
      files.push_back(std::move(f));
      continue;
    }
    // Note [Plugin trust]: an unsafe file is hashed (its identity in the store), never parsed.
    const QString insecure = !dir_insecure.isEmpty() ? dir_insecure : insecurityOfBundle(dir_, fi.absoluteFilePath());
    BundleFile f;
    if (!insecure.isEmpty() && !trust_.allow_insecure) {
      f.path = fi.absoluteFilePath();
      f.sha256 = sha256Of(f.path, &f.error);
      if (f.error.isEmpty()) f.error = "refused: " + insecure;
    } else {
      f = readBundleFile(fi.absoluteFilePath());
      f.insecure = insecure;
    }
    if (f.error.isEmpty() && trust_.require_trusted && trusted.count(f.sha256.toStdString()) == 0) {
      f.error = "refused: not on the trust list (this host runs with --require-trusted; an admin adds it with "
                "'strata plugins trust " + f.path + "')";
    }
    if (f.error.isEmpty() && !seen_sha.insert(f.sha256).second) continue;  // the same bundle twice
    files.push_back(std::move(f));
  }
  // 2. Choose one version per name: the pin, else the highest compatible one.
  std::map<QString, std::vector<const BundleFile*>> by_name;
  for (const auto& f : files) {
    if (!f.error.isEmpty()) {
      // The store keeps one row per content: a refused copy of a file that passed
      // leaves that row to the copy that passed (this host's view has both).
      const bool to_store = !f.sha256.isEmpty() && seen_sha.count(f.sha256) == 0;
      // Reported once (what the embedding application and the host's last event see).
      if (record(f, "rejected", f.error, to_store)) what << "rejected " + QFileInfo(f.path).fileName() + ": " + f.error;
      continue;
    }
    by_name[f.metadata->name].push_back(&f);
  }
  std::map<std::string, std::string> pins;
  std::map<std::string, std::string> disabled;  // name -> the admin's reason
  if (store_ != nullptr) {
    for (const auto& p : store_->pins()) pins[p.name] = p.version;
    disabled = store_->disabledBundles();
  }
  // The versions to try for each name, in order (Note [Choosing a version]): the
  // first is chosen, the rest are what a failed load falls back to.
  std::map<QString, const BundleFile*> chosen;
  std::map<QString, std::vector<const BundleFile*>> fallbacks;
  std::set<const BundleFile*> rejected_now;
  for (auto& [name, list] : by_name) {
    std::sort(list.begin(), list.end(),
              [](const BundleFile* a, const BundleFile* b) { return a->metadata->version > b->metadata->version; });
    if (auto d = disabled.find(name.toStdString()); d != disabled.end()) {
      const QString why = "an admin disabled bundle " + name + (d->second.empty() ? QString() : ": " + q(d->second));
      for (const auto* f : list) record(*f, "disabled", why);
      continue;
    }
    // A file that failed, as things stand, goes last: tried only if nothing before it
    // loads, so it never displaces the running version (which is never among them).
    std::vector<const BundleFile*> order, known_bad;
    const auto running = loaded_.find(name);
    for (const auto* f : list) {
      const bool is_running = running != loaded_.end() && running->second.sha256 == f->sha256;
      const auto u = unloadable_.find(f->sha256);
      (u != unloadable_.end() && !is_running && u->second.stillFails(*this) ? known_bad : order).push_back(f);
    }
    if (auto it = pins.find(name.toStdString()); it != pins.end()) {
      const QString pinned = q(it->second);
      auto p = std::find_if(order.begin(), order.end(),
                            [&](const BundleFile* f) { return f->metadata->version_text == pinned; });
      if (p != order.end()) std::rotate(order.begin(), p, p + 1);  // else the highest: the rows say why
      auto b = std::find_if(known_bad.begin(), known_bad.end(),
                            [&](const BundleFile* f) { return f->metadata->version_text == pinned; });
      if (b != known_bad.end()) std::rotate(known_bad.begin(), b, b + 1);  // among those, the pin first too
    }
    order.insert(order.end(), known_bad.begin(), known_bad.end());
    if (order.empty()) continue;
    chosen[name] = order.front();
    fallbacks[name].assign(order.begin() + 1, order.end());
  }
  std::map<QString, QString> was_running;  // name -> sha256, as the rescan began
  for (const auto& [name, l] : loaded_) was_running[name] = l.sha256;
  // 3. Unload what is no longer chosen (or changed), with every bundle that
  // implements a namespace it defines (reloaded in step 4), newest first.
  std::set<QString> to_unload;
  for (const auto& [name, l] : loaded_) {
    auto it = chosen.find(name);
    if (it == chosen.end() || it->second->sha256 != l.sha256) to_unload.insert(name);
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [name, l] : loaded_) {
      if (to_unload.count(name)) continue;
      for (const auto& ns : l.implements) {
        for (const auto& gone : to_unload) {
          if (loaded_.at(gone).defines.contains(ns)) {
            to_unload.insert(name);
            grew = true;
            break;
          }
        }
        if (grew) break;
      }
      if (grew) break;
    }
  }
  // Note [A swap without a gap]: steps 3 and 4 run inside one RegistrationBatch, so
  // calls on other threads see the bundles as they were until the whole swap is
  // published at once: an upgrade, a rollback to the version before after a failed
  // one, a pin, never leave an op missing in between (a call made meanwhile runs
  // the old version's kernel, whose code stays mapped). An op whose schema changes
  // answers "no kernel" from its new def until the batch ends (Note [Registration
  // batches]). Not with --check: the checks call the new version's ops, which must be
  // published first. Another thread that opens a batch meanwhile waits for this one
  // to end, as for any batch.
  std::optional<RegistrationBatch> swap;
  if (check_ == CheckPolicy::off && !to_unload.empty()) swap.emplace();
  std::vector<QString> order(to_unload.begin(), to_unload.end());
  std::sort(order.begin(), order.end(),
            [this](const QString& a, const QString& b) { return loaded_.at(a).seq > loaded_.at(b).seq; });
  for (const auto& name : order) {
    what << "unloaded " + name + "@" + loaded_.at(name).version;
    unload(name);
  }
  // 4. Load the rest in dependency order: definers before implementers.
  std::map<QString, QString> definer;  // namespace -> bundle
  for (const auto& [name, l] : loaded_) {
    for (const auto& ns : l.defines) definer[ns] = name;
  }
  std::map<QString, const BundleFile*> pending;
  for (const auto& [name, f] : chosen) {
    if (loaded_.count(name) == 0) pending[name] = f;
  }
  for (const auto& [name, f] : pending) {
    for (const auto& ns : f->metadata->defines) {
      if (!definer.count(ns)) definer[ns] = name;
    }
  }
  std::set<QString> failed;
  // A version that cannot load gives way to the next one to try, if any; then the
  // name has failed, and so have the bundles that implement what it defines. What
  // the failed version would have defined is forgotten: its dependents see what the
  // next one defines. Unless remember is false (a failure of the host's, not the
  // file's), the file is not tried again while the other bundles stay as they end
  // this rescan (Note [Choosing a version]).
  auto give_up = [&](std::map<QString, const BundleFile*>::iterator it, bool remember, const QString& why) {
    const QString name = it->first;
    const BundleFile* failed_file = it->second;
    rejected_now.insert(failed_file);
    if (remember) {  // replacing what an earlier failure left (not a failure of the contents alone)
      auto u = unloadable_.find(failed_file->sha256);
      if (u == unloadable_.end() || !u->second.content_only) {
        unloadable_[failed_file->sha256] = {name, failed_file->metadata->defines, why, false, std::nullopt};
      }
    }
    it = pending.erase(it);
    for (auto d = definer.begin(); d != definer.end();) d = d->second == name ? definer.erase(d) : std::next(d);
    auto& next = fallbacks[name];
    if (next.empty()) {
      failed.insert(name);
      return it;
    }
    const BundleFile* f = next.front();
    next.erase(next.begin());
    chosen[name] = f;
    pending[name] = f;  // before `it`: the next pass tries it
    for (const auto& ns : f->metadata->defines) {
      if (!definer.count(ns)) definer[ns] = name;
    }
    return it;
  };
  // Whether pending bundle `name` defines ns in its chosen version or could in one it
  // falls back to; and whether any pending bundle but `asking` could: its dependents
  // wait for it rather than give up.
  auto defines_now_or_later = [&](const QString& name, const QString& ns) {
    if (pending.at(name)->metadata->defines.contains(ns)) return true;
    return std::any_of(fallbacks[name].begin(), fallbacks[name].end(),
                       [&](const BundleFile* g) { return g->metadata->defines.contains(ns); });
  };
  auto could_define = [&](const QString& ns, const QString& asking) {
    return std::any_of(pending.begin(), pending.end(), [&](const auto& p) {
      return !failed.count(p.first) && p.first != asking && defines_now_or_later(p.first, ns);
    });
  };
  while (!pending.empty()) {
    bool progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      const BundleFile& f = *it->second;
      QString missing, blocked;
      for (const auto& ns : f.metadata->implements) {
        auto d = definer.find(ns);
        if (d == definer.end() && definedByTheHost(ns)) continue;  // `core`: always there, no bundle to wait for
        if (d == definer.end() || failed.count(d->second)) {
          if (could_define(ns, it->first)) blocked = ns;
          else missing = ns;
        } else if (loaded_.count(d->second) == 0 && d->second != it->first) {
          blocked = ns;
        }
      }
      if (!missing.isEmpty()) {
        const QString why = "implements namespace '" + missing + "', which no loaded bundle defines";
        record(f, "rejected", why);
        what << "rejected " + it->first + "@" + f.metadata->version_text + ": " + why;
        it = give_up(it, true, why);
        progress = true;
        continue;
      }
      if (!blocked.isEmpty()) {
        ++it;
        continue;
      }
      QString taken;  // a namespace another loaded bundle already defines: first come, first served
      for (const auto& ns : f.metadata->defines) {
        for (const auto& [other, ol] : loaded_) {
          if (other != it->first && ol.defines.contains(ns)) taken = "defines namespace '" + ns + "', which bundle " +
                                                                     other + "@" + ol.version + " already defines";
        }
      }
      if (!taken.isEmpty()) {
        record(f, "rejected", taken);
        what << "rejected " + it->first + "@" + f.metadata->version_text + ": " + taken;
        it = give_up(it, true, taken);
        progress = true;
        continue;
      }
      QString error;
      bool ok = false;
      try {
        ok = load(f, &error);
      } catch (const std::exception& e) {  // the host's own failure (memory): this file only
        error = QString("the host could not load it: ") + e.what();
        record(f, "rejected", error);
      } catch (...) {
        error = "the host could not load it: an exception that is not a std::exception";
        record(f, "rejected", error);
      }
      if (ok) {
        what << "loaded " + it->first + "@" + f.metadata->version_text;
        for (const auto& ns : f.metadata->defines) definer[ns] = it->first;  // whoever claimed it first may have failed
        it = pending.erase(it);
      } else {
        what << "rejected " + it->first + "@" + f.metadata->version_text + ": " + error;
        it = give_up(it, false, error);  // load() remembered it, or not (a failure of the host's)
      }
      progress = true;
    }
    if (!progress) {  // a cycle: everything left waits on something else left
      // Who waits on whom: a pending bundle on the pending ones that define (or could
      // yet define) a namespace it implements. Only those on a cycle give way; those
      // that merely wait on one go on once it is broken.
      std::map<QString, std::set<QString>> waits;
      for (const auto& [name, f] : pending) {
        for (const auto& ns : f->metadata->implements) {
          for (const auto& [other, g] : pending) {
            if (other != name && defines_now_or_later(other, ns)) waits[name].insert(other);
          }
        }
      }
      std::set<QString> on_cycle;
      for (const auto& [start, _] : pending) {
        std::set<QString> seen;
        std::vector<QString> todo(waits[start].begin(), waits[start].end());
        while (!todo.empty()) {
          const QString n = todo.back();
          todo.pop_back();
          if (n == start) {
            on_cycle.insert(start);
            break;
          }
          if (!seen.insert(n).second) continue;
          todo.insert(todo.end(), waits[n].begin(), waits[n].end());
        }
      }
      if (on_cycle.empty()) on_cycle.insert(pending.begin()->first);  // cannot be; still, always progress
      // The versions new in this rescan give way first (a running version is the last
      // to be given up), each to the one before it; one with no other version fails.
      auto newcomer = [&](const QString& name) {
        auto w = was_running.find(name);
        return w == was_running.end() || w->second != pending.at(name)->sha256;
      };
      bool any_new_with_fallback = false;
      for (const auto& name : on_cycle) any_new_with_fallback |= newcomer(name) && !fallbacks[name].empty();
      const QString why = "its namespace dependencies form a cycle";
      for (const auto& name : on_cycle) {
        if (any_new_with_fallback && (!newcomer(name) || fallbacks[name].empty())) continue;
        auto it = pending.find(name);
        record(*it->second, "rejected", why);
        what << "rejected " + name + "@" + it->second->metadata->version_text + ": dependency cycle";
        give_up(it, true, why);
      }
    }
  }
  swap.reset();  // the swap goes out: every table and schema it touched at once
  // What failed for a reason other bundles may change is tried again once they do:
  // compared with the bundles loaded now, at the end of the rescan, the set the next
  // rescan starts from (Note [Choosing a version]).
  for (auto& [sha, u] : unloadable_) {
    if (!u.content_only && !u.others) u.others = othersLoaded(u.name, u.defines);
  }
  // The versions not loaded and not rejected, and the note a pin that did not decide
  // leaves on the loaded one (Note [Choosing a version]).
  for (const auto& [name, list] : by_name) {
    if (disabled.count(name.toStdString())) continue;
    auto l = loaded_.find(name);
    const BundleFile* running = nullptr;
    for (const auto* f : list) {
      if (l != loaded_.end() && f->sha256 == l->second.sha256) running = f;
    }
    const auto pin = pins.find(name.toStdString());
    // A pin that did not decide: its version is not there, or it cannot load.
    QString pin_note;
    if (pin != pins.end() && (running == nullptr || running->metadata->version_text != q(pin->second))) {
      const bool there = std::any_of(list.begin(), list.end(),
                                     [&](const BundleFile* f) { return f->metadata->version_text == q(pin->second); });
      pin_note = "pinned to " + q(pin->second) + (there ? ", which cannot load" : ", which is not in the plugin directory");
      if (running != nullptr) pin_note += "; " + name + "@" + running->metadata->version_text + " runs instead";
    }
    QString why;
    if (!pin_note.isEmpty()) why = pin_note;
    else if (pin != pins.end()) why = "not the pinned version (" + q(pin->second) + ")";
    else if (running != nullptr) why = "superseded by " + name + "@" + running->metadata->version_text;
    else why = "not tried: no version of " + name + " loads";
    for (const auto* f : list) {
      if (f == running || rejected_now.count(f)) continue;
      if (auto u = unloadable_.find(f->sha256); u != unloadable_.end()) {  // not tried again this time
        record(*f, "rejected", u->second.reason);
        continue;
      }
      if (running != nullptr && f->metadata->version_text == running->metadata->version_text) {
        // Two builds that both say name@version: only one can be that version.
        record(*f, "superseded", "another file, " + QFileInfo(running->path).fileName() + ", is " + name + "@" +
                                     running->metadata->version_text + " too, with other contents, and loaded; " +
                                     "give each build its own version");
        continue;
      }
      record(*f, "superseded", why);
    }
    if (running != nullptr) {
      const QString& was = l->second.note;
      const QString reason = pin_note.isEmpty() ? was : was.isEmpty() ? pin_note : pin_note + "; " + was;
      // Only when it changed: recording a loaded row stamps its last_loaded.
      if (auto v = view_.find(viewKey(*running)); v == view_.end() || q(v->second.reason) != reason) {
        record(*running, "loaded", reason);
      }
    }
  }
  // 5. Files that left the directory (and what was remembered of their failures).
  std::set<QString> present_keys, present_sha;
  for (const auto& f : files) {
    present_keys.insert(viewKey(f));
    present_sha.insert(f.sha256);
  }
  std::erase_if(unloadable_, [&](const auto& u) { return present_sha.count(u.first) == 0; });
  for (auto it = view_.begin(); it != view_.end();) {
    it = present_keys.count(it->first) != 0 ? std::next(it) : view_.erase(it);
  }
  if (store_ != nullptr && recording_) {
    std::set<std::string> present;
    for (const auto& f : files) present.insert(f.sha256.toStdString());
    store_->markRemovedExcept(present, QDir(dir_).absolutePath().toStdString());
  }
  // A remembered failure whose other bundles changed in this rescan (one arrived, say)
  // is tried now, in a second pass, not at whatever rescan comes next.
  const bool stale = std::any_of(unloadable_.begin(), unloadable_.end(), [&](const auto& u) {
    return !u.second.content_only && u.second.others && !u.second.stillFails(*this) &&
           std::none_of(files.begin(), files.end(), [&](const BundleFile& f) {
             return f.sha256 == u.first && rejected_now.count(&f) != 0;  // tried in this pass
           });
  });
  if (stale && !second_pass_) {
    struct SecondPass {
      bool& on;
      ~SecondPass() { on = false; }
    };
    second_pass_ = true;
    const SecondPass guard{second_pass_};
    return what + rescan();
  }
  recordView(what);
  return what;
}

// The loaded bundles a bundle's registrations could clash with: all but itself (any
// version) and those that implement a namespace it defines (Note [Choosing a version]).
QString PluginHost::othersLoaded(const QString& bundle, const QStringList& defines) const {
  QStringList out;
  for (const auto& [name, l] : loaded_) {
    if (name == bundle) continue;
    if (std::any_of(l.implements.begin(), l.implements.end(), [&](const QString& ns) { return defines.contains(ns); })) {
      continue;
    }
    out << name + "@" + l.sha256;
  }
  return out.join(',');
}

bool PluginHost::Unloadable::stillFails(const PluginHost& host) const {
  return content_only || (others && *others == host.othersLoaded(name, defines));
}

bool PluginHost::load(const BundleFile& f, QString* error) {
  const BundleMetadata& m = *f.metadata;
  // A failure of the file's own (its code, its registrations) is remembered by its
  // content; one of the host's (the bundle cache) is not (Note [Choosing a version]).
  enum Remember { never, always, while_others_same };
  auto reject = [&](const QString& why, Remember remember = always) {
    *error = why;
    // while_others_same: its fingerprint of the other bundles is taken when the rescan ends.
    if (remember != never) unloadable_[f.sha256] = {m.name, m.defines, why, remember == always, std::nullopt};
    record(f, "rejected", why);  // which logs it
    return false;
  };
  // Load a private copy named by content (Note [The load transaction], step 2).
  auto& loader = libs_[f.sha256];
  if (!loader) {
    const QTemporaryDir& cache = bundleCache();
    if (!cache.isValid()) {
      libs_.erase(f.sha256);
      return reject("cannot create the bundle cache: " + cache.errorString(), never);
    }
    const QString copy = cache.filePath(f.sha256 + "-" + QFileInfo(f.path).fileName());
    if (!QFile::exists(copy)) {
      QString why;
      if (!copyVerified(f.path, f.sha256, copy, &why)) {
        libs_.erase(f.sha256);
        return reject(why, never);
      }
    }
    loader = std::make_unique<QPluginLoader>(copy);
    // Every symbol bound at load (RTLD_NOW): a symbol no library defines fails the
    // load, naming it, instead of ending the process at the first call that needs it.
    loader->setLoadHints(QLibrary::PreventUnloadHint | QLibrary::ResolveAllSymbolsHint);
  }
  // Its static initializers run now, the first time: what they register is captured
  // (Note [Static registrations in bundles] in strata/plugin.h), and kept with the
  // file, since they never run again in this process.
  QObject* root = nullptr;
  StaticRegistrations statics;
  {
    // Per process, not per host: a library's static initializers run once in it.
    static std::mutex statics_mu;
    static std::map<QString, StaticRegistrations> statics_by_sha;
    // A static initializer that throws: C++ makes that std::terminate. GCC's code
    // unwinds out of the dynamic loader instead, and the host catches it as a last
    // resort (the loader may leak what it held); such a library is never loaded again
    // in this process, its initializers having run part way.
    static std::map<QString, QString> threw_by_sha;
    std::lock_guard<std::mutex> lock(statics_mu);
    if (auto t = threw_by_sha.find(f.sha256); t != threw_by_sha.end()) return reject(t->second);
    StaticRegistrations& kept = statics_by_sha[f.sha256];
    Dispatcher::singleton();  // the builtins are Strata's, registered before any capture
    QString threw;
    {
      CaptureStaticRegistrations capture(kept);
      try {
        root = loader->instance();
      } catch (const std::exception& e) {
        threw = QString("its static initializers threw: ") + e.what();
      } catch (...) {
        threw = "its static initializers threw an exception that is not a std::exception";
      }
    }
    if (!threw.isEmpty()) {
      // What they registered before the throw is refused (the capture took it), and
      // the library stays mapped, unused.
      threw_by_sha[f.sha256] = threw + " (fix the bundle; this file is not loaded again until the host restarts)";
      return reject(threw_by_sha[f.sha256]);
    }
    statics = kept;
  }
  if (root == nullptr) {
    // Qt names the private copy; the user knows the file in the plugin directory.
    return reject("cannot load the library: " + loader->errorString().replace(loader->fileName(), f.path));
  }
  if (!statics.refused.empty()) {
    QStringList what;
    for (size_t i = 0; i < statics.refused.size() && i < 8; ++i) what << q(statics.refused[i]);
    if (statics.refused.size() > 8) what << QString("and %1 more").arg(statics.refused.size() - 8);
    return reject(QString("it registers from static initializers outside STRATA_LIBRARY blocks, which the host "
                          "cannot own or remove (register in registerAll, or use STRATA_LIBRARY): ") +
                  what.join("; "));
  }
  auto* bundle = qobject_cast<Bundle*>(root);
  if (bundle == nullptr) {
    return reject("its root object does not implement strata::Bundle (its class derives from QObject and "
                  "strata::Bundle and declares Q_INTERFACES(strata::Bundle))");
  }
  const AbiVersion abi = bundle->sdkAbi();
  if (abi.major != m.abi_major || abi.minor != m.abi_minor) {
    return reject(QString("its code was built for SDK ABI %1.%2, but bundle.json says %3.%4")
                      .arg(abi.major)
                      .arg(abi.minor)
                      .arg(m.abi_major)
                      .arg(m.abi_minor));
  }
  auto registrar = std::make_unique<BundleRegistrar>(m.name.toStdString(), m.version_text.toStdString());
  QString why;
  QStringList dropped;
  {
    RegistrationBatch batch;
    RegistrationOwnerGuard owner(registrar->owner());
    try {
      detail::refixTypedSignatures(registrar->owner());  // Note [Who keeps a typed signature]
      registrar->runStaticBlocks(statics.blocks);
      {
        detail::DroppedDefs noted(registrar->owner());
        bundle->registerAll(*registrar);
        // Defined in registerAll and gone before it returned: a custom_op or a Library
        // the bundle made and did not keep. (One defined again after is not gone.)
        std::set<std::string> defined;
        for (const RegistrationInfo& r : Dispatcher::singleton().ownedBy(registrar->owner()).registrations) {
          if (r.what == RegistrationInfo::What::Def) defined.insert(r.op);
        }
        for (const std::string& op : noted.names()) {
          if (defined.count(op) == 0 && !dropped.contains(q(op))) dropped << q(op);
        }
      }
      for (const auto& [kind, ns] : registrar->libraryNamespaces()) {
        const QString n = q(ns);
        if (kind != Library::IMPL && !m.defines.contains(n)) {
          why = "it defines operators in namespace '" + n + "', which bundle.json does not list in \"defines\"";
        } else if (kind == Library::IMPL && n != "_" && !m.defines.contains(n) && !m.implements.contains(n)) {
          why = "it registers kernels for namespace '" + n +
                "', which bundle.json lists neither in \"defines\" nor in \"implements\"";
        }
      }
      if (why.isEmpty()) why = unlistedNamespace(registrar->owner(), m);
    } catch (const std::exception& e) {
      why = QString("registration failed: ") + e.what();
    } catch (...) {
      why = "registration failed: an exception that is not a std::exception";
    }
    if (!why.isEmpty()) registrar->clear();  // before the batch ends: calls never see it
  }
  if (!why.isEmpty()) return reject(why, while_others_same);
  // serve --check: opcheck and gradcheck on the samples the bundle ships, now that its
  // tables are published (the checks call its ops through the dispatcher).
  QString check_note;
  if (check_ != CheckPolicy::off) {
    const std::vector<modes::CheckRow> rows = checkOwnedOps(registrar->owner());
    const QString failure = firstFailure(rows);
    size_t ran = 0;
    for (const auto& r : rows) ran += r.skipped ? 0 : 1;
    if (!failure.isEmpty() && check_ == CheckPolicy::enforce) {
      {
        RegistrationBatch batch;
        registrar->clear();
      }
      return reject("strata check failed: " + failure, while_others_same);
    }
    check_note = failure.isEmpty() ? QString("strata check passed: %1 test(s)").arg(ran)
                                   : "strata check failed: " + failure;
    if (!failure.isEmpty()) qCWarning(lcHost).noquote() << m.name + "@" + m.version_text << check_note;
  }
  if (!dropped.isEmpty()) {
    qCWarning(lcHost).noquote() << m.name + "@" + m.version_text << "defined" << dropped.join(", ")
                                << "in registerAll and dropped" << (dropped.size() == 1 ? "it" : "them")
                                << "before registerAll returned: a custom_op or a Library the bundle makes is "
                                   "removed with it unless the bundle keeps it (r.keep(std::move(op)), or "
                                   "r.library(...) for a library)";
  }
  if (!f.insecure.isEmpty()) {
    const QString note = "loaded with --allow-insecure-plugins although " + f.insecure.section(';', 0, 0);
    qCWarning(lcHost).noquote() << m.name + "@" + m.version_text << note;
    check_note = check_note.isEmpty() ? note : note + "; " + check_note;
  }
  Loaded l;
  l.name = m.name;
  l.version = m.version_text;
  l.path = f.path;
  l.sha256 = f.sha256;
  l.defines = m.defines;
  l.implements = m.implements;
  l.registrar = std::move(registrar);
  l.seq = ++load_seq_;
  l.note = check_note;
  l.dropped = dropped;
  unloadable_.erase(f.sha256);  // loads now (the other bundles changed): forget that it failed
  record(f, "loaded", check_note);
  recordRegistrations(l);
  qCInfo(lcHost).noquote() << "loaded" << m.name + "@" + m.version_text << "from" << f.path;
  loaded_[m.name] = std::move(l);
  return true;
}

std::vector<modes::CheckRow> checkOwnedOps(const std::string& owner) {
  std::vector<modes::CheckRow> rows;
  Dispatcher& d = Dispatcher::singleton();
  for (const OperatorName& n : d.operatorNames()) {
    bool has = false;
    for (const RuleInfo& r : d.rules(n)) has = has || (r.kind == "sample_inputs" && (owner.empty() || r.owner == owner));
    if (!has) continue;
    auto h = d.findSchema(n);
    if (!h) continue;
    for (auto& row : modes::check_op(*h)) rows.push_back(std::move(row));
  }
  return rows;
}

QString firstFailure(const std::vector<modes::CheckRow>& rows) {
  for (const auto& r : rows) {
    if (!r.passed) return q(r.op) + " " + q(r.test) + (r.sample.empty() ? "" : " (" + q(r.sample) + ")") + ": " + q(r.reason);
  }
  return "";
}

void PluginHost::recordRegistrations(const Loaded& l) {
  if (store_ == nullptr || !recording_) return;
  const std::string owner = l.registrar->owner();
  std::vector<db::OperatorRow> ops;
  std::vector<db::RegistrationRow> regs;
  Dispatcher& d = Dispatcher::singleton();
  const Dispatcher::Owned owned = d.ownedBy(owner);
  for (const auto& r : owned.registrations) {
    switch (r.what) {
      case RegistrationInfo::What::Def: {
        auto h = d.findSchema(parseOperatorName(r.op));
        ops.push_back({r.op, h ? h->schema().str() : "", owner, h ? h->tags().str() : "",
                       h ? toString(h->aliasAnalysis()) : "FROM_SCHEMA"});
        regs.push_back({r.op, "def", r.kind, owner, r.debug});
        break;
      }
      case RegistrationInfo::What::Impl: regs.push_back({r.op, toString(r.key), r.kind, owner, r.debug}); break;
      case RegistrationInfo::What::Fallback: regs.push_back({"_", toString(r.key), r.kind, owner, r.debug}); break;
    }
  }
  for (const auto& r : owned.rules) {
    regs.push_back({r.op, r.target.empty() ? r.kind : r.kind + "[" + r.target + "]", "rule", owner, r.debug});
  }
  try {
    store_->replaceRegistrations(owner, ops, regs);
  } catch (const db::StoreError& e) {
    qCWarning(lcHost).noquote() << e.what();
  }
}

void PluginHost::unload(const QString& name) {
  auto it = loaded_.find(name);
  if (it == loaded_.end()) return;
  {
    RegistrationBatch batch;
    it->second.registrar->clear();
  }
  if (store_ != nullptr && recording_) {
    try {
      store_->clearRegistrations(it->second.registrar->owner());
    } catch (const db::StoreError& e) {
      qCWarning(lcHost).noquote() << e.what();
    }
  }
  qCInfo(lcHost).noquote() << "unloaded" << name + "@" + it->second.version;
  loaded_.erase(it);
}

// Note [A store removed while open] in store.cc: the host keeps the file it opened
// (its kernel states, its record) and says so, once per change; reopening would
// silently undo what an admin had switched off.
void PluginHost::warnIfStoreGone() {
  if (store_ == nullptr) return;
  const std::string gone = store_->fileGone();
  if (gone == store_gone_) return;
  store_gone_ = gone;
  const QString path = QString::fromStdString(store_->path());
  if (gone.empty()) {
    qCInfo(lcHost).noquote() << QString("the store %1 is the file this host opened again").arg(path);
    return;
  }
  qCWarning(lcHost).noquote() << QString("the store %1 is no longer the file this host opened (%2): this host keeps "
                                         "the file it opened, which admin commands naming the path no longer reach; "
                                         "restart it to use a store at that path")
                                     .arg(path, QString::fromStdString(gone));
}

void PluginHost::serve(const QString& host_id, int poll_ms) {
  db::HostRow me;
  me.id = host_id.toStdString();
  me.pid = QCoreApplication::applicationPid();
  serve(me, poll_ms);
}

void PluginHost::serve(const db::HostRow& me_in, int poll_ms) {
  // A directory that is not there is a mistyped --plugins far more often than one
  // bundles will arrive in: say so rather than create it and watch nothing.
  const QFileInfo dir_info(dir_);
  if (!dir_info.exists()) {
    throw std::runtime_error("the plugin directory " + dir_.toStdString() +
                             " does not exist (create it first, or name another with --plugins)");
  }
  if (!dir_info.isDir()) throw std::runtime_error("the plugin directory " + dir_.toStdString() + " is not a directory");
  refuseUnreadableDirectory(dir_);  // before this host is registered in the store
  db::HostRow me = me_in;
  me.plugins = dir_info.absoluteFilePath().toStdString();
  if (me.strata_version.empty()) {
    me.strata_version = (QCoreApplication::applicationVersion() +
                         QString(" (SDK ABI %1.%2)").arg(STRATA_SDK_ABI_MAJOR).arg(STRATA_SDK_ABI_MINOR))
                            .trimmed()
                            .toStdString();
  }
  host_id_ = QString::fromStdString(me.id);
  me_ = me;
  if (store_ != nullptr) store_->registerHost(me);
  sync();
  // Made here, not with the host: only a serving host watches (and needs an event loop).
  watcher_ = std::make_unique<QFileSystemWatcher>();
  watcher_->addPath(dir_);
  // A directory change may be a file still being written: rescan once it settles.
  rescan_timer_.setSingleShot(true);
  rescan_timer_.setInterval(100);
  connect(watcher_.get(), &QFileSystemWatcher::directoryChanged, this, [this] {
    watchDirectory();
    rescan_timer_.start();
  });
  connect(watcher_.get(), &QFileSystemWatcher::fileChanged, this, [this] { rescan_timer_.start(); });
  connect(&rescan_timer_, &QTimer::timeout, this, [this] {
    try {
      const QStringList what = rescan();  // load() and unload() log what changed, once
      if (!what.isEmpty()) emit changed(what);
    } catch (const std::exception& e) {  // a store error: the next change or poll tries again
      qCWarning(lcHost).noquote() << "rescan failed:" << e.what();
    }
    watchFiles();
  });
  watchFiles();
  connect(&poll_timer_, &QTimer::timeout, this, &PluginHost::poll);
  poll_timer_.start(poll_ms);
  connect(&heartbeat_timer_, &QTimer::timeout, this, [this] {
    watchDirectory();
    try {
      if (store_ != nullptr && !store_->heartbeat(host_id_.toStdString(), last_applied_)) {
        // Silent past the age-out (suspended a day), another host forgot this one:
        // register again and write the view again.
        qCWarning(lcHost).noquote() << "this host was forgotten by the store; registering again";
        store_->registerHost(me_);
        recordView({});
      }
    } catch (const std::exception& e) {
      qCWarning(lcHost).noquote() << e.what();
    }
  });
  heartbeat_timer_.start(1000);
}

// Every bundle file present is watched, not only the loaded ones: a file still being
// copied in when a rescan rejected it is rescanned once its bytes stop changing, and
// one replaced in place is seen.
// Only what changed is added or removed: a watch removed and added again would drop
// the events queued for it (the last write of a copy). A FIFO, a link to nothing or an
// unreadable file is not watched (inotify refuses most of them, with a warning).
void PluginHost::watchFiles() {
  std::set<QString> want;
  for (const auto& [_, row] : view_) {
    const QFileInfo fi(q(row.path));
    if (fi.isFile() && fi.isReadable()) want.insert(fi.absoluteFilePath());
  }
  const QStringList have_list = watcher_->files();
  const std::set<QString> have(have_list.begin(), have_list.end());
  QStringList add, remove;
  for (const QString& p : want) {
    if (!have.count(p)) add << p;
  }
  for (const QString& p : have) {
    if (!want.count(p)) remove << p;
  }
  if (!remove.isEmpty()) watcher_->removePaths(remove);
  if (!add.isEmpty()) {
    watcher_->addPaths(add);
    // A write between the rescan's read and the new watch would go unseen: one more
    // rescan after it (it adds no watch, so it is the last).
    rescan_timer_.start();
  }
}

// A watched directory that is removed drops out of the watch list: once it is back
// (rm -rf, then mkdir and a copy), it is watched again and rescanned.
void PluginHost::watchDirectory() {
  if (watcher_ == nullptr || watcher_->directories().contains(dir_)) return;
  if (!QFileInfo(dir_).isDir()) {
    if (!dir_missing_) {
      qCWarning(lcHost).noquote() << "the plugin directory" << dir_ << "is gone; waiting for it to return";
      rescan_timer_.start();  // its bundles left with it
    }
    dir_missing_ = true;
    return;
  }
  if (!watcher_->addPath(dir_)) return;  // not readable now: tried again at the next heartbeat
  if (dir_missing_) qCInfo(lcHost).noquote() << "the plugin directory" << dir_ << "is back; rescanning";
  dir_missing_ = false;
  rescan_timer_.start();
}

void PluginHost::poll() {
  // Tensors this thread made that others dropped are freed here, within a poll of
  // their drop, though the host may make none for hours (Note [Biased reference
  // counts] in strata/intrusive_ptr.h). One relaxed load when there are none.
  release_queued_references();
  // Kernels retired by a removal while a call was inside them are freed once every
  // such call has left (Note [Grace periods]); removals try at once, the poll retries.
  strata::Dispatcher::singleton().reclaimRetiredKernels();
  if (store_ == nullptr) return;
  warnIfStoreGone();  // one stat()
  try {
    const int64_t v = store_->dataVersion();
    if (v == data_version_) return;
    // Another connection committed. Only an admin change (the change feed) asks for a
    // sync: other hosts' heartbeats and bundle records do not, or two idle hosts would
    // wake each other at the poll rate, each re-hashing every bundle. The directory
    // has its own watcher.
    data_version_ = v;
    answerQueries();
    if (store_->latestChange() == last_applied_) return;
    const int64_t before = last_applied_;
    sync();  // load() and unload() log what changed, once
    answerQueries();  // sync() read data_version again: a question asked meanwhile is answered now
    if (last_applied_ != before) {
      qCInfo(lcHost) << "applied store changes up to" << last_applied_;
      emit applied(last_applied_);
    }
  } catch (const std::exception& e) {
    data_version_ = -1;  // the change was not applied: the next poll tries again
    qCWarning(lcHost).noquote() << "store poll failed:" << e.what();
  }
}

// Questions other processes asked this host through the store (Note [What each host
// runs] in store.cc). A query costs a SELECT only when another connection committed.
void PluginHost::answerQueries() {
  if (host_id_.isEmpty()) return;
  for (const auto& qr : store_->pendingQueries(host_id_.toStdString())) {
    std::string answer, error;
    if (!query_handler_) {
      error = "this host answers no queries";
    } else {
      try {
        answer = query_handler_(qr.query, qr.arg);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    store_->answerQuery(qr.id, answer, error);
  }
}

}  // namespace strata::host
