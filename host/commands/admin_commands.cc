// strata serve / plugins / kernel / audit: the host and its store from the command line.
#include <cmath>

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QLibrary>
#include <QRegularExpression>
#include <QSysInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLoggingCategory>
#include <QThread>
#include <QTimer>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <set>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands/commands.h"
#include "plugin_host.h"
#include "strata/host/host.h"
#include "strata/db/store.h"
#include "strata/dispatcher.h"
#include "strata/plugin.h"

Q_DECLARE_LOGGING_CATEGORY(lcHost)

namespace strata::host {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }
std::string s(const QString& x) { return x.toStdString(); }

std::atomic<int> g_stop_signal{0};

extern "C" void onStopSignal(int sig) { g_stop_signal.store(sig); }

QJsonObject toJson(const db::BundleRow& b) {
  return {{"name", q(b.name)},     {"version", q(b.version)},       {"path", q(b.path)},
          {"sha256", q(b.sha256)}, {"state", q(b.state)},           {"reason", q(b.reason)},
          {"description", q(b.description)}, {"first_seen", q(b.first_seen)}, {"last_loaded", q(b.last_loaded)}};
}

}  // namespace

bool hostAlive(const db::HostRow& h, db::Store& store) {
  if (!h.stopped.empty()) return false;
  if (store.secondsSinceHeartbeat(h.id) > kHostDeadAfterSeconds) return false;
  const QString local = QSysInfo::machineHostName();
  if (q(h.id).startsWith(local + ":") && ::kill(static_cast<pid_t>(h.pid), 0) != 0 && errno == ESRCH) return false;
  return true;
}

QString hostState(const db::HostRow& h, db::Store& store) {
  if (!h.stopped.empty()) return "stopped";
  return hostAlive(h, store) ? "live" : "dead";
}

namespace {

// Waits until every live host applied `change`; returns the hosts that did not.
QStringList waitForHosts(db::Store& store, int64_t change, double seconds) {
  QDeadlineTimer deadline(static_cast<qint64>(seconds * 1000));
  for (;;) {
    QStringList behind;
    for (const auto& h : store.hosts()) {
      if (hostAlive(h, store) && h.last_applied < change) behind << q(h.id);
    }
    if (behind.isEmpty() || deadline.hasExpired()) return behind;
    QThread::msleep(20);
  }
}

// Note [Waiting for hosts]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// An admin change (kernel disable|enable, plugins pin|unpin|disable|enable) with
// --wait [SECS] returns once every live host on the store applied it (exit 0), or
// after SECS seconds (default 10) names the hosts that have not (exit 3; the change
// stays recorded, and they apply it when they catch up). --wait promises that a host
// applied it, so with no live host on the store (or no store at all, which it does
// not create) nothing is recorded and the command exits 1 saying so. A pin applied by
// a host that then runs another version (the pinned one failed to load) is still
// applied (exit 0), with a warning naming the host and why.

// --wait [SECS]: takes SECS off the end of `pos` when it holds one more argument than
// the command takes. False, and *why, when SECS is not a number of seconds.
bool takeWaitSeconds(const QCommandLineParser& parser, QStringList& pos, qsizetype takes, double* secs,
                     QString* why) {
  *secs = 10.0;
  if (!parser.isSet("wait") && pos.size() == takes + 1) {
    bool number = false;
    pos.last().toDouble(&number);
    if (number) {
      *why = "'" + pos.last() + "' is a number of seconds, which goes with --wait (--wait " + pos.last() + ")";
      return false;
    }
  }
  if (!parser.isSet("wait") || pos.size() != takes + 1) return true;
  bool ok = false;
  *secs = pos.takeLast().toDouble(&ok);
  if (!ok || !std::isfinite(*secs) || *secs < 0 || *secs > 86400) {
    *why = "--wait expects a number of seconds from 0 to 86400";
    return false;
  }
  return true;
}

// Why --wait cannot be kept with the store at `path` (Note [Waiting for hosts]), before
// it is opened: "" when there is a store there.
QString noStoreToWaitOn(const QString& path) {
  if (QFileInfo::exists(path)) return {};
  return "--wait: no store at " + path + ", so no live host uses it; nothing was changed (start a host with "
         "'strata serve --db " + path + "', or leave out --wait to create the store and record the change for "
         "hosts that start later)";
}

// Why --wait cannot be kept on `store`: "" when a live host uses it.
QString noLiveHostToWaitFor(db::Store& store, const QString& path) {
  for (const auto& h : store.hosts()) {
    if (hostAlive(h, store)) return {};
  }
  return "--wait: no live host uses the store " + path + "; nothing was changed (start one with 'strata serve --db " +
         path + "', or leave out --wait to record the change for hosts that start later)";
}

// A reason of several lines (a signature mismatch names both signatures on lines of
// their own) as indented lines; each line escaped as oneLine() escapes it.
QString reasonLines(const std::string& reason) {
  QStringList lines;
  size_t from = 0;
  for (size_t nl = reason.find('\n'); ; nl = reason.find('\n', from)) {
    lines << oneLine(reason.substr(from, nl == std::string::npos ? std::string::npos : nl - from)).trimmed();
    if (nl == std::string::npos) break;
    from = nl + 1;
  }
  return lines.join("\n      ");
}

// "name     version  state      path\n    reason\n"
QString bundleLine(const std::string& name, const std::string& version, const std::string& state,
                   const std::string& path, const std::string& reason) {
  return q(name).leftJustified(16) + " " + q(version).leftJustified(8) + " " + q(state).leftJustified(10) + " " +
         q(path) + (reason.empty() ? "" : "\n    " + reasonLines(reason)) + "\n";
}

QJsonObject toJson(const db::HostBundleRow& b) {
  return {{"name", q(b.name)},   {"version", q(b.version)}, {"path", q(b.path)},
          {"sha256", q(b.sha256)}, {"state", q(b.state)},   {"reason", q(b.reason)}};
}

// Every bundle name a host recorded in this store.
std::vector<std::string> knownBundleNames(db::Store& store) {
  std::set<std::string> names;
  for (const auto& b : store.bundles()) names.insert(b.name);
  for (const auto& b : store.hostBundles()) names.insert(b.name);
  return {names.begin(), names.end()};
}

// The hosts `strata hosts` lists: every one whose heartbeat is within the age-out
// period (older ones are gone at the next host's start).
std::vector<db::HostRow> listedHosts(db::Store& store) {
  std::vector<db::HostRow> out;
  for (auto& h : store.hosts()) {
    if (h.seconds_since_heartbeat <= static_cast<double>(db::Store::kHostAgeOutSeconds)) out.push_back(std::move(h));
  }
  return out;
}

QString seconds(double t) {
  if (t < 10) return QString::number(t, 'f', 1) + " s";
  if (t < 120) return QString::number(static_cast<int>(t)) + " s";
  if (t < 7200) return QString::number(static_cast<int>(t / 60)) + " min";
  return QString::number(static_cast<int>(t / 3600)) + " h";
}

QString hostSummary(const db::HostRow& h, db::Store& store) {
  const QString state = hostState(h, store);
  QString out = state;
  if (state == "stopped") out += " at " + q(h.stopped);
  else if (state == "dead") out += ": no heartbeat for " + seconds(h.seconds_since_heartbeat);
  else if (h.seconds_since_heartbeat < -1) out += ", heartbeat " + seconds(-h.seconds_since_heartbeat) +
                                               " in the future (its clock, or the store, is wrong)";
  else out += ", heartbeat " + seconds(std::max(h.seconds_since_heartbeat, 0.0)) + " ago";
  out += "; pid " + QString::number(h.pid);
  if (!h.login.empty()) out += ", started by " + q(h.login);
  out += " at " + q(h.started);
  if (!h.plugins.empty()) out += "; plugins " + q(h.plugins);
  out += "; applied changes up to " + QString::number(h.last_applied);
  if (!h.last_event.empty()) out += "; last event: " + q(h.last_event);
  return out;
}

QJsonObject hostJson(const db::HostRow& h, db::Store& store) {
  QJsonArray loaded;
  for (const auto& b : store.hostBundles(h.id)) {
    if (b.state == "loaded") loaded.append(q(b.name + "@" + b.version));
  }
  return {{"id", q(h.id)},
          {"state", hostState(h, store)},
          {"pid", static_cast<qint64>(h.pid)},
          {"login", q(h.login)},
          {"version", q(h.strata_version)},
          {"plugins", q(h.plugins)},
          {"started", q(h.started)},
          {"heartbeat", q(h.heartbeat)},
          {"seconds_since_heartbeat", h.seconds_since_heartbeat},
          {"stopped", h.stopped.empty() ? QJsonValue() : QJsonValue(q(h.stopped))},
          {"last_applied", static_cast<qint64>(h.last_applied)},
          {"last_event", q(h.last_event)},
          {"loaded", loaded}};
}

// What `plugins trust|untrust ARG` names: a bundle file, NAME@VERSION in the plugin
// directory (or, to untrust, on the trust list), or a trusted sha256. Empty, and
// *why, when nothing matches; several rows when several contents match.
std::vector<db::TrustRow> trustTargets(const QString& arg, const QString& dir, db::Store& store, QString* why) {
  const QFileInfo fi(arg);
  if (fi.isFile()) {
    const BundleFile f = readBundleFile(fi.absoluteFilePath());
    if (!f.metadata) {
      *why = "the file is not a bundle: " + f.error;
      return {};
    }
    return {{s(f.sha256), s(f.metadata->name), s(f.metadata->version_text), "", ""}};
  }
  if (!fi.exists() && (arg.contains('/') || arg.endsWith(".so"))) {
    *why = "no such file";
    return {};
  }
  static const QRegularExpression sha("^[0-9a-fA-F]{64}$");  // as sha256sum prints it, or in capitals
  if (sha.match(arg).hasMatch()) {
    for (const auto& t : store.trusted()) {
      if (q(t.sha256) == arg.toLower()) return {t};
    }
    *why = "no trusted bundle has that sha256 (to trust a file, name the file)";
    return {};
  }
  const qsizetype at = arg.lastIndexOf('@');
  if (at <= 0 || !isBundleName(arg.left(at)) || !isSemanticVersion(arg.mid(at + 1))) {
    *why = "not a bundle file, nor NAME@VERSION (e.g. muladd@1.1.0), nor a sha256";
    return {};
  }
  const std::string name = s(arg.left(at)), version = s(arg.mid(at + 1));
  std::map<std::string, db::TrustRow> by_sha;
  for (const auto& t : store.trusted()) {
    if (t.name == name && t.version == version) by_sha[t.sha256] = t;
  }
  QDir d(dir);
  for (const QFileInfo& e : d.entryInfoList(QDir::Files | QDir::Readable, QDir::Name)) {
    if (!QLibrary::isLibrary(e.fileName())) continue;
    const BundleFile f = readBundleFile(e.absoluteFilePath());
    if (f.metadata && s(f.metadata->name) == name && s(f.metadata->version_text) == version) {
      by_sha.emplace(s(f.sha256), db::TrustRow{s(f.sha256), name, version, "", ""});
    }
  }
  std::vector<db::TrustRow> out;
  for (auto& [_, t] : by_sha) out.push_back(t);
  if (out.empty()) *why = "no bundle " + arg + " in " + dir + " or on the trust list";
  return out;
}

}  // namespace

void addHostOptions(QCommandLineParser& parser, bool with_plugins) {
  if (with_plugins) {
    parser.addOption({"plugins", "The plugin directory (default: $STRATA_PLUGIN_PATH, else the bundled plugins).",
                      "DIR"});
    parser.addOption({"allow-insecure-plugins",
                      "Load bundles even from a directory or file that others can write or that another user\n"
                      "owns, or through a symlink leading out of the directory (audited)."});
    parser.addOption({"require-trusted",
                      "Load only bundles whose sha256 is on the store's trust list (strata plugins trust; audited)."});
  }
  parser.addOption({"db", "The store (default: $STRATA_DB, else strata.db in the working directory).", "FILE"});
  parser.addOption({"actor", "Who is acting, for the audit log (default: the login name).", "NAME"});
}

QString pluginDirOption(const QCommandLineParser& parser) {
  return parser.isSet("plugins") ? parser.value("plugins") : defaultPluginDir();
}
QString storeOption(const QCommandLineParser& parser) {
  return parser.isSet("db") ? parser.value("db") : defaultStorePath();
}
QString shellQuoted(const QString& w) {
  static const QRegularExpression plain("^[A-Za-z0-9_./:@+=,%-]+$");
  if (plain.match(w).hasMatch()) return w;
  QString out = "'";
  for (QChar c : w) out += c == '\'' ? QString("'\\''") : QString(c);
  return out + "'";
}
QString storeArgument(const QCommandLineParser& parser) {
  return parser.isSet("db") ? " --db " + shellQuoted(QFileInfo(parser.value("db")).absoluteFilePath()) : QString();
}
QString actorOption(const QCommandLineParser& parser) {
  if (parser.isSet("actor") && !parser.value("actor").isEmpty()) return parser.value("actor");
  return loginName();
}

Session::Session() = default;
Session::~Session() = default;

// A command's own load of the directory follows the same trust options as a host.
// Note [Plugin trust]: running code the checks refuse is on the record, as for a
// serving host (Host::start); a scan that only tightens them changes nothing, and
// records nothing.
void applyTrustOptions(const QCommandLineParser& parser, PluginHost& host, db::Store* store) {
  TrustPolicy p;
  p.allow_insecure = parser.isSet("allow-insecure-plugins");
  p.require_trusted = parser.isSet("require-trusted");
  host.setTrustPolicy(p);
  if (p.allow_insecure && store != nullptr) {
    store->audit(s(actorOption(parser)), "host.allow_insecure_plugins",
                s(QFileInfo(pluginDirOption(parser)).absoluteFilePath()), "", "on");
  }
}

bool noStoreAt(const QString& path) {
  struct stat st{};
  return ::lstat(path.toLocal8Bit().constData(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
}

std::unique_ptr<Session> openSession(const QCommandLineParser& parser, bool load_plugins, bool reads_only) {
  // Loading bundles is the host's news, not this command's: warnings only.
  QLoggingCategory::setFilterRules("strata.host.info=false\nstrata.host.debug=false");
  auto session = std::make_unique<Session>();
  const QString path = storeOption(parser);
  // A command that only reads runs on no store rather than make one (at a mistyped
  // --db, say): nothing is then disabled, pinned or trusted for it, and a store it was
  // named on the command line is said to be missing. Running insecure bundles is still
  // recorded. Only a path that is not there is "no store": one this user cannot reach
  // (a folder it may not search) goes on to db::Store, which says why, rather than
  // run with kernels an admin disabled.
  if (reads_only && noStoreAt(path) && !(load_plugins && parser.isSet("allow-insecure-plugins"))) {
    if (parser.isSet("db")) {  // named on this command line: perhaps mistyped
      QTextStream(stderr) << "note: no store at " << path
                          << "; running with nothing disabled, pinned or trusted (strata serve --db " << path
                          << ", or an admin command such as strata kernel disable, makes it)\n";
    }
  } else {
    session->store = std::make_unique<db::Store>(s(path));
  }
  if (load_plugins) {
    const QString dir = pluginDirOption(parser);
    const bool named = parser.isSet("plugins") || !qEnvironmentVariable("STRATA_PLUGIN_PATH").isEmpty();
    if (named && !QFileInfo(dir).isDir()) {
      throw std::runtime_error("the plugin directory " + s(dir) +
                               (QFileInfo::exists(dir) ? " is not a directory" : " does not exist"));
    }
    session->host = std::make_unique<PluginHost>(dir, session->store.get());
    session->host->setRecording(false);  // Note [What each host runs]: only a serving host writes its view
    applyTrustOptions(parser, *session->host, session->store.get());
    session->host->sync();
    // A bundle this scan loaded that a live host refused for failing `strata check`
    // (serve --check=enforce): this command runs it all the same (its scan checks
    // nothing), so it says so, naming the host.
    if (session->store) {
      const std::vector<db::HostBundleRow> mine = session->host->view();
      for (const db::HostRow& h : session->store->hosts()) {
        if (!hostAlive(h, *session->store)) continue;
        for (const db::HostBundleRow& b : session->store->hostBundles(h.id)) {
          if (b.state != "rejected" || !QString::fromStdString(b.reason).startsWith("strata check failed")) continue;
          const bool loaded_here = std::any_of(mine.begin(), mine.end(), [&](const db::HostBundleRow& r) {
            return r.state == "loaded" && r.sha256 == b.sha256;
          });
          if (!loaded_here) continue;
          QTextStream(stderr) << "note: this command loaded " << q(b.name) << "@" << q(b.version) << ", which host "
                              << q(h.id) << " refused (" << q(b.reason)
                              << "); this command's own scan does not hold bundles to `strata check`\n";
        }
      }
    }
  }
  return session;
}

int runServeCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Load the plugin directory and stay up: watch the directory for bundles that\n"
      "arrive, change or leave, and apply within 100 ms the changes other processes\n"
      "write to the store (strata kernel disable ..., strata plugins pin ...).\n"
      "Stops cleanly on SIGINT or SIGTERM.");
  parser.addHelpOption();
  addHostOptions(parser);
  parser.addOption({"json", "Print what was loaded as JSON (then run)."});
  parser.addOption({"check",
                    "Run 'strata check' on each bundle as it loads and record the result in the store; with\n"
                    "'enforce', reject a bundle whose check fails (the failing test is its reason).",
                    "record|enforce"});
  QTextStream out(stdout);
  QTextStream err(stderr);
  // --check alone means --check=record (QCommandLineParser options take a value or none);
  // "--check enforce", as the help reads, is --check=enforce.
  QStringList argv = args;
  for (qsizetype i = 0; i < argv.size(); ++i) {
    if (argv[i] != "--check") continue;
    if (i + 1 < argv.size() && (argv[i + 1] == "record" || argv[i + 1] == "enforce")) {
      argv[i] = "--check=" + argv[i + 1];
      argv.removeAt(i + 1);
    } else {
      argv[i] = "--check=record";
    }
  }
  if (int rc = parseOrExit(parser, argv); rc >= 0) return rc;
  if (!parser.positionalArguments().isEmpty()) {
    err << args.first() << ": takes no arguments\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  CheckPolicy check = CheckPolicy::off;
  if (parser.isSet("check")) {
    const QString v = parser.value("check");
    if (v == "record") {
      check = CheckPolicy::record;
    } else if (v == "enforce") {
      check = CheckPolicy::enforce;
    } else {
      err << args.first() << ": --check takes 'record' or 'enforce', got '" << v << "'\n";
      return kExitUsage;
    }
  }
  HostOptions options;
  options.plugin_dir = s(pluginDirOption(parser));
  options.store_path = s(storeOption(parser));
  options.actor = s(actorOption(parser));
  options.allow_insecure_plugins = parser.isSet("allow-insecure-plugins");
  options.require_trusted = parser.isSet("require-trusted");
  options.check = check == CheckPolicy::record ? "record" : check == CheckPolicy::enforce ? "enforce" : "";
  // Each log line once, with its time and category (QT_MESSAGE_PATTERN overrides).
  qSetMessagePattern("%{time yyyy-MM-ddThh:mm:ss.zzz} %{category} %{if-warning}warning: %{endif}"
                     "%{if-critical}error: %{endif}%{message}");
  std::signal(SIGINT, onStopSignal);
  std::signal(SIGTERM, onStopSignal);
  const QString db_path = QFileInfo(storeOption(parser)).absoluteFilePath();
  const QString plugin_path = QFileInfo(pluginDirOption(parser)).absoluteFilePath();
  // serve is the embeddable host (strata/host/host.h) with a command line around it.
  std::unique_ptr<Host> host;
  try {
    host = std::make_unique<Host>(options);
    host->start();
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
  const QString host_id = q(host->id());
  const std::vector<BundleStatus> view = host->bundles();
  if (parser.isSet("json")) {
    QJsonArray loaded;
    for (const auto& b : view) {
      if (b.state == "loaded") loaded.append(QJsonObject{{"name", q(b.name)}, {"version", q(b.version)}, {"path", q(b.path)}});
    }
    out << QJsonDocument(QJsonObject{{"host", host_id}, {"plugins", plugin_path}, {"db", db_path}, {"loaded", loaded}})
               .toJson(QJsonDocument::Compact)
        << "\n";
  } else {
    out << "strata serve: host " << host_id << "\n  plugins: " << plugin_path << "\n  store:   " << db_path << "\n";
    for (const auto& b : view) {
      out << "  " << q(b.state).leftJustified(11) << q(b.name) << (b.version.empty() ? "" : "@" + q(b.version))
          << (b.reason.empty() ? "" : "  (" + q(b.reason) + ")") << "\n";
    }
    if (view.empty()) out << "  (no bundles in the plugin directory yet: it is watched)\n";
    // The hints carry this host's own --db and --plugins, so they act on this host.
    const QString db = " --db " + shellQuoted(db_path);
    const QString plugins = " --plugins " + shellQuoted(plugin_path);
    out << "ready. From another terminal:\n"
        << "  strata hosts" << db << "\n"
        << "  strata plugins list --host " << host_id << db << "\n";
    QString op;
    for (const std::string& owner : host->loaded()) {
      for (const auto& r : Dispatcher::singleton().ownedBy(owner).registrations) {
        if (op.isEmpty() && r.what == RegistrationInfo::What::Def) op = q(r.op);
      }
    }
    if (Dispatcher::singleton().findSchema(parseOperatorName("extension_cpp::mymuladd"))) {
      op = "extension_cpp::mymuladd";
    }
    if (!op.isEmpty()) {
      out << "  strata dump " << op << " --host " << host_id << db << "\n"
          << "  strata kernel disable " << op << " cpu --reason \"without its CPU kernel\" --wait" << db << "\n";
      if (op == "extension_cpp::mymuladd") {
        out << "  strata call extension_cpp::mymuladd ones(3) ones(3) 2.0 --explain" << plugins << db << "\n";
      }
      out << "  strata kernel enable " << op << " cpu" << db << "\n";
    }
  }
  out.flush();
  QTimer stop_timer;
  QObject::connect(&stop_timer, &QTimer::timeout, [&] {
    if (g_stop_signal.load() != 0) QCoreApplication::quit();
  });
  stop_timer.start(50);
  QCoreApplication::exec();
  qCInfo(lcHost) << "stopping on signal" << g_stop_signal.load();
  try {
    host->stop();  // Note [What each host runs]: its last view stays, as stopped
  } catch (const std::exception& e) {
    err << "warning: " << e.what() << "\n";
  }
  return kExitOk;
}

int runPluginsCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Bundles: list what the plugin directory holds and what became of each\n"
      "(loaded, rejected, superseded, disabled, with the reason), or change\n"
      "the admin state that every host applies:\n"
      "  list                  (default) scan the directory here and list every bundle; with\n"
      "                        --host ID or --all-hosts, what running hosts loaded instead\n"
      "  show NAME             one bundle's versions, its pin and its registrations\n"
      "  pin NAME VERSION      load VERSION instead of the highest compatible one\n"
      "  unpin NAME\n"
      "  disable NAME          unload it everywhere and keep it unloaded\n"
      "  enable NAME           load it again; also tries again its versions that failed to load\n"
      "                        (each of these four takes --wait [SECS])\n"
      "  trust FILE|NAME@VERSION    put the bundle's sha256 on the trust list (serve --require-trusted)\n"
      "  untrust FILE|NAME@VERSION|SHA256\n"
      "  trusted               list the trust list");
  parser.addHelpOption();
  addHostOptions(parser);
  parser.addOption({"json", "Print JSON (list: an array of bundle objects; with --host or --all-hosts, an array of "
                            "host objects, as 'strata hosts --json', each with its \"bundles\")."});
  parser.addOption({"reason", "Why (disable/enable), for the audit log.", "TEXT"});
  parser.addOption({"wait", "pin, unpin, disable, enable: return once every live host has applied the change, or "
                            "fail (exit 3) after SECS seconds (default 10) naming the hosts that have not."});
  parser.addOption({"host", "list: what the running host ID loaded, as it recorded it in the store (ID as 'strata "
                            "hosts' prints it, or its pid), instead of a scan by this command.",
                    "ID"});
  parser.addOption({"all-hosts", "list: what every host on the store recorded, live, stopped and dead."});
  parser.addPositionalArgument("action", "list, show, pin, unpin, disable, enable, trust, untrust or trusted.",
                               "[ACTION]");
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  QStringList pos = parser.positionalArguments();
  const QString action = pos.isEmpty() ? "list" : pos.takeFirst();
  const std::map<QString, int> arity{{"list", 0},   {"show", 1},  {"pin", 2},     {"unpin", 1}, {"disable", 1},
                                     {"enable", 1}, {"trust", 1}, {"untrust", 1}, {"trusted", 0}};
  auto a = arity.find(action);
  if (a == arity.end()) {
    err << args.first() << ": unknown action '" << action << "'\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  const bool admin_change = action == "pin" || action == "unpin" || action == "disable" || action == "enable";
  if (parser.isSet("wait") && !admin_change) {
    err << args.first() << " " << action << ": --wait goes with pin, unpin, disable and enable\n";
    return kExitUsage;
  }
  double wait_secs = 10.0;
  if (QString why; !takeWaitSeconds(parser, pos, a->second, &wait_secs, &why)) {
    err << args.first() << " " << action << ": " << why << "\n";
    return kExitUsage;
  }
  if (pos.size() != a->second) {
    err << args.first() << " " << action << ": expected " << a->second << " argument(s), got " << pos.size() << "\n";
    return kExitUsage;
  }
  if ((parser.isSet("host") || parser.isSet("all-hosts")) && action != "list") {
    err << args.first() << " " << action << ": --host and --all-hosts go with 'list'\n";
    return kExitUsage;
  }
  if (parser.isSet("host") && parser.isSet("all-hosts")) {
    err << args.first() << ": --host and --all-hosts exclude each other\n";
    return kExitUsage;
  }
  try {
    if (parser.isSet("host") || parser.isSet("all-hosts")) {
      const std::unique_ptr<db::Store> opened = openExistingStore(storeOption(parser));
      db::Store& store = *opened;
      std::vector<db::HostRow> hosts;
      if (parser.isSet("host")) hosts.push_back(findHost(store, parser.value("host")));
      else hosts = listedHosts(store);
      QJsonArray all;
      for (const auto& h : hosts) {
        const auto rows = store.hostBundles(h.id);
        if (parser.isSet("json")) {
          QJsonObject o = hostJson(h, store);
          QJsonArray bundles;
          for (const auto& b : rows) bundles.append(toJson(b));
          o["bundles"] = bundles;
          all.append(o);
          continue;
        }
        out << "host " << q(h.id) << " (" << hostSummary(h, store) << ")\n";
        if (rows.empty()) out << "  (no bundles recorded)\n";
        for (const auto& b : rows) out << "  " << bundleLine(b.name, b.version, b.state, b.path, b.reason);
      }
      if (parser.isSet("json")) out << QJsonDocument(all).toJson(QJsonDocument::Indented);
      else if (hosts.empty()) out << "no host has used the store " << q(store.path()) << " in the last 24 hours\n";
      return kExitOk;
    }
    if (admin_change) {
      if (!isBundleName(pos[0])) {
        err << "error: '" << q(shortened(s(pos[0]))) << "' is not a bundle name (letters, digits, '_', '.', '-')\n";
        return kExitInvalidInput;
      }
      if (action == "pin" && !isSemanticVersion(pos[1])) {
        err << "error: cannot pin " << pos[0] << " to '" << q(shortened(s(pos[1])))
            << "': not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.0.0); nothing was changed\n";
        return kExitInvalidInput;
      }
      // Note [Waiting for hosts]: refused before a store is created at a mistyped path.
      if (const QString why = parser.isSet("wait") ? noStoreToWaitOn(storeOption(parser)) : QString(); !why.isEmpty()) {
        err << "error: " << why << "\n";
        return kExitInvalidInput;
      }
    }
    const bool scan = action == "list" || action == "show";
    if (action == "trusted") openExistingStore(storeOption(parser));  // a list read from no store would make one
    // Undoing what no store holds changes nothing: said so, and no store is made (at a
    // mistyped --db, say).
    if ((action == "enable" || action == "unpin" || action == "untrust") && noStoreAt(storeOption(parser))) {
      const char* what = action == "enable" ? "disabled" : action == "unpin" ? "pinned" : "trusted";
      if (parser.isSet("json") && action != "untrust") {
        out << QJsonDocument(QJsonObject{{"action", action},
                                         {"bundle", q(shortened(s(pos[0])))},
                                         {"change", QJsonValue()},
                                         {"not_applied_by", QJsonArray()}})
                   .toJson(QJsonDocument::Compact)
            << "\n";
        return kExitOk;
      }
      (action == "untrust" ? err : out) << (action == "untrust" ? "error: " : "") << "no store at "
                                        << storeOption(parser) << ", so nothing is " << what
                                        << "; nothing was changed\n";
      return action == "untrust" ? kExitInvalidInput : kExitOk;
    }
    auto session = openSession(parser, scan, scan);
    db::Store* const listed = session->store.get();  // none for a scan when there is no store
    const std::string actor = s(actorOption(parser));
    if (action == "list" || action == "show") {
      // This process's own scan (Note [What each host runs] in store.cc): it writes
      // nothing, and says that it is not what a running host loaded.
      std::map<std::string, db::BundleRow> catalog;  // what hosts recorded about each file, by sha256
      if (listed != nullptr) {
        for (auto& b : listed->bundles()) catalog[b.sha256] = b;
      }
      QJsonArray rows;
      bool any = false;
      const QString dir = pluginDirOption(parser);
      if (action == "list" && !parser.isSet("json")) {
        out << "local scan of " << QFileInfo(dir).absoluteFilePath()
            << " by this command (what running hosts loaded: strata hosts; strata plugins list --host ID)\n";
      }
      for (const auto& v : session->host->view()) {
        if (action == "show" && q(v.name) != pos[0]) continue;
        any = true;
        if (parser.isSet("json")) {
          db::BundleRow b;
          if (auto it = catalog.find(v.sha256); it != catalog.end()) b = it->second;
          b.name = v.name;
          b.version = v.version;
          b.path = v.path;
          b.sha256 = v.sha256;
          b.state = v.state;
          b.reason = v.reason;
          if (b.description.empty() && !v.version.empty()) {  // no host recorded it: the file's own metadata
            if (const BundleFile f = readBundleFile(q(v.path)); f.metadata) b.description = s(f.metadata->description);
          }
          rows.append(toJson(b));
          continue;
        }
        out << bundleLine(v.name, v.version, v.state, v.path, v.reason);
      }
      if (action == "list" && !any && !parser.isSet("json")) out << "  (no bundles)\n";
      if (action == "show") {
        if (!any) {
          std::vector<std::string> names;
          for (const auto& v : session->host->view()) names.push_back(v.name);
          if (listed != nullptr) {
            for (const auto& name : knownBundleNames(*listed)) names.push_back(name);
          }
          err << "error: no bundle named '" << q(shortened(s(pos[0]))) << "' in " << dir
              << q(didYouMean(s(pos[0]), names)) << "\n";
          return kExitInvalidInput;
        }
        for (const auto& p : listed != nullptr ? listed->pins() : std::vector<db::PinRow>{}) {
          if (q(p.name) == pos[0] && !parser.isSet("json")) out << "pinned to " << q(p.version) << " by " << q(p.actor) << "\n";
        }
        if (auto it = session->host->loaded().find(pos[0]); it != session->host->loaded().end() && !parser.isSet("json")) {
          const Dispatcher::Owned owned = Dispatcher::singleton().ownedBy(it->second.registrar->owner());
          for (const auto& r : owned.registrations) {
            const char* key = r.what == RegistrationInfo::What::Def ? "def" : toString(r.key);
            out << "  " << q(r.op) << "  " << key << "  " << q(r.kind) << "  owner=" << q(r.owner) << "\n";
          }
          for (const auto& r : owned.rules) {
            const std::string label = r.target.empty() ? r.kind : r.kind + "[" + r.target + "]";
            out << "  " << q(r.op) << "  " << q(label) << "  rule  owner=" << q(r.owner) << "\n";
          }
        }
      }
      if (parser.isSet("json")) out << QJsonDocument(rows).toJson(QJsonDocument::Indented);
      return kExitOk;
    }
    db::Store& store = *session->store;
    if (action == "trusted") {
      QJsonArray rows;
      for (const auto& t : store.trusted()) {
        if (parser.isSet("json")) {
          rows.append(QJsonObject{{"name", q(t.name)}, {"version", q(t.version)}, {"sha256", q(t.sha256)},
                                  {"actor", q(t.actor)}, {"time", q(t.time)}});
        } else {
          out << q(t.name) << "@" << q(t.version) << "  " << q(t.sha256) << "  by " << q(t.actor) << " at "
              << q(t.time) << "\n";
        }
      }
      if (parser.isSet("json")) out << QJsonDocument(rows).toJson(QJsonDocument::Indented);
      return kExitOk;
    }
    if (action == "trust" || action == "untrust") {
      QString why;
      const std::vector<db::TrustRow> found = trustTargets(pos[0], pluginDirOption(parser), store, &why);
      if (found.empty()) {
        err << "error: cannot " << action << " '" << q(shortened(s(pos[0]))) << "': " << why << "; nothing was changed\n";
        return kExitInvalidInput;
      }
      if (found.size() > 1) {
        err << "error: cannot " << action << " '" << q(shortened(s(pos[0]))) << "': " << found.size()
            << " files with different contents carry that name and version (";
        for (size_t i = 0; i < found.size(); ++i) err << (i ? ", " : "") << q(found[i].sha256).left(12);
        err << "); name the file instead; nothing was changed\n";
        return kExitInvalidInput;
      }
      const db::TrustRow& t = found.front();
      const int64_t change = action == "trust" ? store.trust(t, actor) : store.untrust(t.sha256, actor);
      if (parser.isSet("json")) {
        out << QJsonDocument(QJsonObject{{"action", action}, {"bundle", q(t.name + "@" + t.version)},
                                         {"sha256", q(t.sha256)}, {"change", static_cast<qint64>(change)}})
                   .toJson(QJsonDocument::Compact)
            << "\n";
      } else {
        out << action << " " << q(t.name) << "@" << q(t.version) << " (sha256 " << q(t.sha256)
            << "): recorded (change " << change << ")\n";
      }
      return kExitOk;
    }
    const std::string name = s(pos[0]);
    if (const QString why = parser.isSet("wait") ? noLiveHostToWaitFor(store, storeOption(parser)) : QString();
        !why.isEmpty()) {
      err << "error: " << why << "\n";
      return kExitInvalidInput;
    }
    QString warning;  // said once recorded (Note [Waiting for hosts])
    QTextStream warn(&warning);
    {  // pin, unpin, disable, enable: a name no host has seen is most often a typo
      const std::vector<std::string> known = knownBundleNames(store);
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        warn << "warning: no host on " << q(store.path()) << " has seen a bundle named " << pos[0]
             << "; the change is kept and applies when one arrives" << q(didYouMean(name, known)) << "\n";
      } else if (action == "pin") {
        // Note [Choosing a version] in plugin_host.h: until the version arrives, the pin decides nothing.
        std::set<QString> seen;
        for (const auto& b : store.bundles()) {
          if (b.name == name && b.state != "removed") seen.insert(q(b.version));
        }
        if (seen.count(pos[1]) == 0) {
          warn << "warning: no host on " << q(store.path()) << " has " << pos[0] << " " << pos[1]
              << " in its plugin directory ("
              << (seen.empty() ? QString("none of its versions is there now")
                               : "there: " + QStringList(seen.begin(), seen.end()).join(", "))
              << "); the pin is kept and takes effect when that version arrives; until then hosts run the "
                 "highest version that loads\n";
        }
      }
    }
    int64_t change = 0;
    if (action == "pin") change = store.pin(name, s(pos[1]), actor);
    else if (action == "unpin") change = store.unpin(name, actor);
    else change = store.setBundleDisabled(name, action == "disable", s(parser.value("reason")), actor);
    warn.flush();
    err << warning;
    QStringList behind;
    if (parser.isSet("wait")) behind = waitForHosts(store, change, wait_secs);
    // A pin applied is not a pin that took: a host that applied it but runs another
    // version (the pinned one failed to load, or is not there) says so, and why.
    if (parser.isSet("wait") && action == "pin") {
      std::map<std::string, bool> applied;  // live hosts that applied the change
      for (const auto& h : store.hosts()) {
        if (hostAlive(h, store) && h.last_applied >= change) applied[h.id] = false;
      }
      std::map<std::string, QString> why_not;
      for (const auto& b : store.hostBundles()) {
        if (!applied.count(b.host) || b.name != name) continue;
        if (b.version == s(pos[1]) && b.state == "loaded") applied[b.host] = true;
        else if (b.version == s(pos[1])) why_not[b.host] = q(b.state + (b.reason.empty() ? "" : ": " + b.reason));
      }
      for (const auto& [host, took] : applied) {
        if (took) continue;
        err << "warning: host " << q(host) << " applied the pin but does not run " << pos[0] << " " << pos[1] << " ("
            << (why_not.count(host) ? why_not[host] : QString("that version is not in its plugin directory"))
            << ")\n";
      }
    }
    if (parser.isSet("json")) {
      out << QJsonDocument(QJsonObject{{"action", action},
                                       {"bundle", pos[0]},
                                       {"change", static_cast<qint64>(change)},
                                       {"not_applied_by", QJsonArray::fromStringList(behind)}})
                 .toJson(QJsonDocument::Compact)
          << "\n";
    } else {
      out << action << " " << pos.join(' ') << ": recorded (change " << change << ")";
      if (parser.isSet("wait") && behind.isEmpty()) out << "; applied by every live host";
      out << "\n";
    }
    if (!behind.isEmpty()) {
      err << "error: not applied within " << wait_secs << " s by: " << behind.join(", ") << "\n";
      return kExitTimeout;
    }
    return kExitOk;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
}

int runKernelCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Switch the kernels registered at (OP, DEVICE_OR_KEY) off or on, in the store,\n"
      "for every host (and every later process). A kernel disabled before its bundle\n"
      "loads is disabled the moment it loads. DEVICE_OR_KEY: cpu, cuda, meta, default,\n"
      "or a dispatch key name (AutogradCPU, ...).");
  parser.addHelpOption();
  addHostOptions(parser, false);
  parser.addOption({"reason", "Why, for the audit log.", "TEXT"});
  parser.addOption({"wait", "Return once every live host has applied the change, or fail (exit 3) after SECS "
                            "seconds (default 10) naming the hosts that have not."});
  parser.addOption({"json", "Print the result as JSON."});
  parser.addPositionalArgument("action", "disable or enable.", "disable|enable");
  parser.addPositionalArgument("op", "ns::name or ns::name.overload.", "OP");
  parser.addPositionalArgument("key", "A device type or dispatch key.", "DEVICE_OR_KEY");
  parser.addPositionalArgument("secs", "With --wait: the timeout in seconds.", "[SECS]");
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  QStringList pos = parser.positionalArguments();
  double wait_secs = 10.0;
  if (QString why; !takeWaitSeconds(parser, pos, 3, &wait_secs, &why)) {
    err << args.first() << ": " << why << "\n";
    return kExitUsage;
  }
  if (pos.size() > 3 && (pos[0] == "disable" || pos[0] == "enable")) {
    err << args.first() << ": " << pos[0] << " takes OP DEVICE_OR_KEY; '" << q(shortened(s(pos[3])))
        << "' is one argument too many\n";
    return kExitUsage;
  }
  if (pos.size() != 3 || (pos[0] != "disable" && pos[0] != "enable")) {
    err << args.first() << ": expected disable|enable OP DEVICE_OR_KEY\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  const bool enable = pos[0] == "enable";
  try {
    const OperatorName op = parseOperatorName(s(pos[1]));
    if (op.name.find("::") == std::string::npos) {
      std::vector<std::string> same;  // the ops of any namespace with this name, and their overloads
      for (const auto& k : liveOperatorNames()) {
        const std::string tail = k.substr(k.find("::") + 2);
        if (tail == op.str() || tail.rfind(op.str() + ".", 0) == 0) same.push_back(k);
      }
      STRATA_FAIL(Value, "'", shortened(op.str()), "' has no namespace: name the operator as ns::name or ns::name.overload "
                  "(e.g. core::add.Tensor)", didYouMean(same));
    }
    DispatchKey key = DispatchKey::Undefined;
    try {
      key = parseDispatchKey(s(pos[2]));
    } catch (const Error& e) {
      // The closest key or device names, case aside ("autogradcpu": AutogradCPU).
      static const char* kNames[] = {"cpu", "cuda", "meta", "privateuse1", "default", "batched", "autocast:cpu",
                                     "autocast:cuda", "autograd:cpu", "autograd:cuda", "CPU", "CUDA", "PrivateUse1",
                                     "Meta", "Fake", "Mode", "AutogradMeta", "AutogradCPU", "AutogradCUDA",
                                     "AutocastCPU", "AutocastCUDA", "AutocastPrivateUse1", "Batched",
                                     "CompositeExplicitAutograd", "CompositeImplicitAutograd", "Autograd"};
      std::vector<std::string> lower;
      std::map<std::string, std::string> original;
      for (const char* n : kNames) {
        const std::string l = s(QString::fromLatin1(n).toLower());
        lower.push_back(l);
        original.emplace(l, n);
      }
      std::vector<std::string> close;
      const std::string typed = s(pos[2].toLower());
      for (const char* n : kNames) {
        if (s(QString::fromLatin1(n).toLower()) == typed) close.push_back(n);  // only the case differs
      }
      if (close.empty()) {
        for (const auto& c : closestNames(typed, lower)) close.push_back(original.at(c));
      }
      throw std::runtime_error(e.what() + (close.empty() ? std::string() : didYouMean(close)));
    }
    // Note [Waiting for hosts]: refused before anything is recorded (or a store is
    // created at a mistyped path).
    if (const QString why = parser.isSet("wait") ? noStoreToWaitOn(storeOption(parser)) : QString(); !why.isEmpty()) {
      err << "error: " << why << "\n";
      return kExitInvalidInput;
    }
    if (enable && noStoreAt(storeOption(parser))) {  // nothing to undo, and no store is made
      if (op.name.rfind("core::", 0) == 0 && Dispatcher::singleton().findOp(op) == std::nullopt) {
        err << "error: " << q(shortened(op.str())) << " is not one of the host's core:: operators; nothing was "
            << "changed" << q(didYouMean(op.str(), liveOperatorNames())) << "\n";
        return kExitInvalidInput;
      }
      if (parser.isSet("json")) {
        out << QJsonDocument(QJsonObject{{"op", q(shortened(op.str()))}, {"key", toString(key)}, {"enabled", true},
                                         {"change", QJsonValue()}, {"not_applied_by", QJsonArray()}})
                   .toJson(QJsonDocument::Compact)
            << "\n";
      } else {
        out << q(shortened(op.str())) << " " << toString(key) << " is enabled: there is no store at "
            << storeOption(parser) << ", so nothing is disabled; nothing was changed\n";
      }
      return kExitOk;
    }
    db::Store store(s(storeOption(parser)));
    if (const QString why = parser.isSet("wait") ? noLiveHostToWaitFor(store, storeOption(parser)) : QString();
        !why.isEmpty()) {
      err << "error: " << why << "\n";
      return kExitInvalidInput;
    }
    // An op no bundle recorded in this store (and no builtin op) is accepted, for a
    // bundle that brings it later, with a warning saying so.
    std::vector<std::string> known = liveOperatorNames();
    for (const auto& o : store.operators()) known.push_back(o.name);
    QString warning;
    if (std::find(known.begin(), known.end(), op.str()) == known.end() && op.name.rfind("core::", 0) == 0) {
      // The host's own namespace: no bundle will ever define it (bundle.json may not).
      err << "error: " << q(op.str()) << " is not one of the host's core:: operators; nothing was changed"
          << q(didYouMean(op.str(), known)) << "\n";
      return kExitInvalidInput;
    }
    if (std::find(known.begin(), known.end(), op.str()) == known.end()) {
      warning = "warning: no bundle recorded in " + storeOption(parser) + " defines " + q(op.str()) +
                " (a serving host records what it loads there: strata serve, or an application that embeds the "
                "host); the change is kept, and applies wherever a bundle that defines it loads with this store "
                "(a host, or a command such as strata call)" +
                q(didYouMean(op.str(), known));
    } else {
      // A known op with nothing at this key: the toggle changes nothing until something is.
      std::set<std::string> keys;
      for (const auto& r : Dispatcher::singleton().registrations(op)) {
        if (r.what == RegistrationInfo::What::Impl) keys.insert(toString(r.key));
      }
      for (const auto& r : store.registrations(op.str())) {
        if (r.key == "def") continue;
        try {  // a kernel's key; a rule's row (sample_inputs, a mode's rule) names no key
          keys.insert(toString(parseDispatchKey(r.key)));
        } catch (const std::exception&) {
        }
      }
      if (!keys.empty() && keys.count(toString(key)) == 0) {
        QStringList have;
        for (const auto& k : keys) have << q(k);
        warning = "warning: " + q(op.str()) + " has no kernel at " + toString(key) + " (it has: " +
                  have.join(", ") + "); the change is kept and applies if one is registered there" +
                  (key == DispatchKey::Fake ? "; an op's fake implementation (register_fake) is its Meta kernel: "
                                              "toggle it with 'meta'"
                                            : "");
      }
    }
    // A toggle to the state the kernel is in (with the same reason) changes nothing:
    // said so, and nothing is written to the store or its audit log.
    {
      bool now_enabled = true;
      std::string now_reason;
      for (const auto& k : store.kernelStates()) {
        if (k.op == op.str() && k.key == toString(key)) {
          now_enabled = k.enabled;
          now_reason = k.reason;
        }
      }
      if (now_enabled == enable && now_reason == s(parser.value("reason"))) {
        if (parser.isSet("json")) {
          out << QJsonDocument(QJsonObject{{"op", q(op.str())}, {"key", toString(key)}, {"enabled", enable},
                                           {"change", QJsonValue()}, {"not_applied_by", QJsonArray()}})
                     .toJson(QJsonDocument::Compact)
              << "\n";
        } else {
          out << q(op.str()) << " " << toString(key) << " is already " << (enable ? "enabled" : "disabled")
              << "; nothing was changed\n";
        }
        return kExitOk;
      }
    }
    // Said once recorded: a store that cannot take the change (locked, read-only) gets
    // an error, not a warning that it was kept.
    const int64_t change =
        store.setKernelState(op.str(), toString(key), enable, s(parser.value("reason")), s(actorOption(parser)));
    if (!warning.isEmpty()) err << warning << "\n";
    QStringList behind;
    if (parser.isSet("wait")) behind = waitForHosts(store, change, wait_secs);
    if (parser.isSet("json")) {
      out << QJsonDocument(QJsonObject{{"op", q(op.str())},
                                       {"key", toString(key)},
                                       {"enabled", enable},
                                       {"change", static_cast<qint64>(change)},
                                       {"not_applied_by", QJsonArray::fromStringList(behind)}})
                 .toJson(QJsonDocument::Compact)
          << "\n";
    } else {
      out << (enable ? "enabled " : "disabled ") << q(op.str()) << " " << toString(key) << " (change " << change << ")";
      if (parser.isSet("wait") && behind.isEmpty()) out << "; applied by every live host";
      out << "\n";
    }
    if (!behind.isEmpty()) {
      err << "error: not applied within " << wait_secs << " s by: " << behind.join(", ") << "\n";
      return kExitTimeout;
    }
    return kExitOk;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
}

int runAuditCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription("Print the audit log: who changed what, when, from what to what.");
  parser.addHelpOption();
  addHostOptions(parser, false);
  parser.addOption({"since", "Only rows at or after TIME (ISO 8601, e.g. 2026-11-22 or 2026-11-22T10:00).", "TIME"});
  parser.addOption({"op", "Only rows about OP.", "OP"});
  parser.addOption({"json", "Print a JSON array."});
  parser.addOption({"verify",
                    "Check the log's hash chain instead of printing it: exit 0 when it holds (the head hash is "
                    "printed: keep it elsewhere to check later), 1 naming the first row where it breaks."});
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  if (!parser.positionalArguments().isEmpty()) {
    err << args.first() << ": takes no arguments\n";
    return kExitUsage;
  }
  if (parser.isSet("verify")) {
    if (parser.isSet("since") || parser.isSet("op")) {
      err << args.first() << ": --verify checks the whole log; it takes no --since or --op\n";
      return kExitUsage;
    }
    try {
      // Reading a store that is not there would create it and vouch for an empty log.
      const std::unique_ptr<db::Store> opened = openExistingStore(storeOption(parser));
      db::Store& store = *opened;
      const db::AuditVerdict v = store.verifyAudit();
      if (parser.isSet("json")) {
        out << QJsonDocument(QJsonObject{{"ok", v.ok},
                                         {"rows", static_cast<qint64>(v.rows)},
                                         {"first_bad_id", v.ok ? QJsonValue() : QJsonValue(static_cast<qint64>(v.first_bad_id))},
                                         {"why", q(v.why)},
                                         {"head", q(v.head)}})
                   .toJson(QJsonDocument::Indented);
      } else if (v.ok) {
        out << "audit log of " << q(store.path()) << ": " << v.rows << " row(s), the chain holds; head "
            << (v.head.empty() ? QString("(empty log)") : q(v.head)) << "\n";
      } else {
        out << "audit log of " << q(store.path()) << ": the chain breaks at row " << v.first_bad_id << ": "
            << q(v.why) << " (" << v.rows << " row(s) before it hold)\n";
      }
      return v.ok ? kExitOk : kExitInvalidInput;
    } catch (const std::exception& e) {
      err << "error: " << e.what() << "\n";
      return kExitInvalidInput;
    }
  }
  QString since = parser.value("since");
  if (!since.isEmpty()) {
    QDateTime t = QDateTime::fromString(since, Qt::ISODateWithMs);
    if (!t.isValid()) t = QDateTime::fromString(since, Qt::ISODate);
    // QDate reads the date of "2026-11-27T25:00" and ignores the rest: a date alone only.
    if (!t.isValid() && !since.contains('T') && QDate::fromString(since, Qt::ISODate).isValid()) {
      t = QDate::fromString(since, Qt::ISODate).startOfDay(Qt::UTC);
    }
    if (!t.isValid()) {
      err << args.first() << ": --since '" << q(shortened(s(since))) << "' is not an ISO 8601 time\n";
      return kExitUsage;
    }
    since = t.toUTC().toString("yyyy-MM-ddTHH:mm:ss.zzzZ");
  }
  try {
    const std::unique_ptr<db::Store> opened = openExistingStore(storeOption(parser));
    db::Store& store = *opened;
    // An op is written as `kernel` writes it ("core:: neg" is core::neg); anything else
    // (a bundle's name) as given.
    std::string op = s(parser.value("op"));
    try {
      if (!op.empty()) op = parseOperatorName(op).str();
    } catch (const std::exception&) {
    }
    const auto rows = store.auditLog(s(since), op);
    QJsonArray all;
    for (const auto& r : rows) {
      if (parser.isSet("json")) {
        all.append(QJsonObject{{"id", static_cast<qint64>(r.id)}, {"time", q(r.time)}, {"actor", q(r.actor)},
                               {"action", q(r.action)}, {"target", q(r.target)}, {"before", q(r.before)},
                               {"after", q(r.after)}});
      } else {
        out << q(r.time) << "  " << oneLine(r.actor).leftJustified(10) << " " << q(r.action).leftJustified(15)
            << " " << oneLine(r.target) << ": " << (r.before.empty() ? "-" : oneLine(r.before)) << " -> "
            << (r.after.empty() ? "-" : oneLine(r.after)) << "\n";
      }
    }
    if (parser.isSet("json")) out << QJsonDocument(all).toJson(QJsonDocument::Indented);
    return kExitOk;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
}

QString versionText() {
  return QString("%1 (SDK ABI %2.%3, store schema %4)")
      .arg(QCoreApplication::applicationVersion())
      .arg(STRATA_SDK_ABI_MAJOR)
      .arg(STRATA_SDK_ABI_MINOR)
      .arg(db::Store::kSchemaVersion);
}

db::HostRow findHost(db::Store& store, const QString& id) {
  const std::vector<db::HostRow> hosts = store.hosts();
  std::vector<db::HostRow> found;
  for (const auto& h : hosts) {
    if (q(h.id) == id) return h;
  }
  bool numeric = false;
  const qint64 pid = id.toLongLong(&numeric);
  for (const auto& h : hosts) {
    if ((numeric && h.pid == pid) || (!id.isEmpty() && q(h.id).startsWith(id))) found.push_back(h);
  }
  if (found.size() == 1) return found.front();
  std::vector<std::string> ids;
  for (const auto& h : (found.empty() ? hosts : found)) ids.push_back(h.id);
  if (found.size() > 1) {
    STRATA_FAIL(Value, "'", shortened(id.toStdString()), "' names ", found.size(), " hosts on ", store.path(), ": ",
                didYouMean(ids).substr(2), " (give the whole id)");
  }
  STRATA_FAIL(Value, "no host '", shortened(id.toStdString()), "' on the store ", store.path(),
              hosts.empty() ? std::string(" (no host has used it: start one with 'strata serve --db " + store.path() + "')")
                            : didYouMean(id.toStdString(), ids) + " ('strata hosts' lists them)");
}

std::string askRunningHost(db::Store& store, const db::HostRow& host, const std::string& query,
                           const std::string& arg, double seconds_to_wait) {
  if (!hostAlive(host, store)) {
    STRATA_FAIL(Value, "host ", host.id, " is ", s(hostSummary(host, store)),
                ": only a running host can answer; 'strata plugins list --host ", host.id,
                "' shows what it last recorded");
  }
  const int64_t id = store.askHost(host.id, query, arg);
  QDeadlineTimer deadline(static_cast<qint64>(seconds_to_wait * 1000));
  for (;;) {
    const std::optional<db::HostQueryRow> a = store.queryAnswer(id);
    if (a && a->answered) {
      store.forgetQuery(id);
      if (!a->error.empty()) STRATA_FAIL(Value, "host ", host.id, ": ", a->error);
      return a->answer;
    }
    if (!a) STRATA_FAIL(Value, "host ", host.id, " restarted before it answered; ask again");
    for (const auto& h : store.hosts()) {
      if (h.id == host.id && !h.stopped.empty()) {
        store.forgetQuery(id);
        STRATA_FAIL(Value, "host ", host.id, " stopped (at ", h.stopped, ") before it answered");
      }
    }
    if (deadline.hasExpired()) {
      store.forgetQuery(id);
      throw HostTimeoutError("host " + host.id + " did not answer within " +
                             QString::number(seconds_to_wait).toStdString() + " s (is its event loop busy?)");
    }
    QThread::msleep(20);
  }
}

std::unique_ptr<db::Store> openExistingStore(const QString& path) {
  if (noStoreAt(path)) {  // not there (a path this user cannot reach is db::Store's to explain)
    STRATA_FAIL(Value, "no store at ", path.toStdString(), " (a host creates it when it starts: strata serve --db ",
                path.toStdString(), ")");
  }
  return std::make_unique<db::Store>(path.toStdString());
}

int runHostsCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "List the hosts that use the store: live ones (heartbeating), stopped ones (they\n"
      "stopped cleanly) and dead ones (no heartbeat for 5 s), each with its plugin\n"
      "directory, who started it, the last admin change it applied, its last event and\n"
      "the bundles it loaded. Hosts silent for 24 hours are left out, and forgotten when\n"
      "the next host starts. 'strata plugins list --host ID' shows one host's bundles\n"
      "in full; 'strata dump OP --host ID' asks a running host for its dispatch table.");
  parser.addHelpOption();
  addHostOptions(parser, false);
  parser.addOption({"json", "Print a JSON array of host objects: id, state (live, stopped, dead), pid, login, "
                            "version, plugins, started, heartbeat, seconds_since_heartbeat, stopped, "
                            "last_applied, last_event, loaded (NAME@VERSION strings)."});
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  if (!parser.positionalArguments().isEmpty()) {
    err << args.first() << ": takes no arguments\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  try {
    const std::unique_ptr<db::Store> opened = openExistingStore(storeOption(parser));
    db::Store& store = *opened;
    const std::vector<db::HostRow> hosts = listedHosts(store);
    if (parser.isSet("json")) {
      QJsonArray all;
      for (const auto& h : hosts) all.append(hostJson(h, store));
      out << QJsonDocument(all).toJson(QJsonDocument::Indented);
      return kExitOk;
    }
    if (hosts.empty()) {
      out << "no host has used the store " << q(store.path()) << " in the last 24 hours\n";
      return kExitOk;
    }
    for (const auto& h : hosts) {
      QStringList loaded;
      for (const auto& b : store.hostBundles(h.id)) {
        if (b.state == "loaded") loaded << q(b.name + "@" + b.version);
      }
      out << q(h.id) << "  " << hostSummary(h, store) << "\n    loaded: "
          << (loaded.isEmpty() ? QString("(nothing)") : loaded.join(", ")) << "\n";
    }
    return kExitOk;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
}

}  // namespace strata::host
