// The strata subcommands. Each takes its own arguments (argv[0] first, e.g.
// "strata schema") and returns the process exit status:
//   0 success, 1 some input was invalid (or an operation failed), 2 the command line
//   itself was wrong, 3 a --wait timed out (or a host did not answer in time).
#pragma once

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QStringList>
#include <QTextStream>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "operator_info.h"

namespace strata::db {
class Store;
struct HostRow;
}

namespace strata::host {

class PluginHost;

inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalidInput = 1;
inline constexpr int kExitUsage = 2;
// kernel or plugins ... --wait: some live host did not apply the change in time.
inline constexpr int kExitTimeout = 3;

// --plugins, --db and --actor, shared by the commands that use the host or the store.
void addHostOptions(QCommandLineParser& parser, bool with_plugins = true);
QString pluginDirOption(const QCommandLineParser& parser);
QString storeOption(const QCommandLineParser& parser);
// " --db PATH" (absolute, shell-quoted) when the command was given --db, else "": for
// a hint's command line, so that it acts on the same store.
QString storeArgument(const QCommandLineParser& parser);
// One shell word: as is when it is plain, else single-quoted.
QString shellQuoted(const QString& w);
// --actor, else the login name.
QString actorOption(const QCommandLineParser& parser);

// A store (or none: see reads_only) and, for ops/dump/call, the plugin directory loaded into this process
// ("no host involved"). Throws db::StoreError when the store cannot be opened.
struct Session {
  std::unique_ptr<db::Store> store;
  std::unique_ptr<PluginHost> host;
  Session();
  ~Session();
};
// reads_only: a command that writes nothing runs on no store when there is none (it
// makes none), saying so when the store was named.
std::unique_ptr<Session> openSession(const QCommandLineParser& parser, bool load_plugins, bool reads_only = false);

// "0.1.0 (SDK ABI 4.4, store schema 5)": what `strata --version` prints after "strata ".
QString versionText();

// A host is live while it heartbeats (every second) and has not stopped; one silent
// this long is dead (killed, or its machine is gone).
inline constexpr double kHostDeadAfterSeconds = 5.0;
bool hostAlive(const db::HostRow& h, db::Store& store);
// "live", "stopped" (it stopped cleanly) or "dead".
QString hostState(const db::HostRow& h, db::Store& store);
// The host `id` names in the store: exact, else the one whose id starts with it
// or whose pid it is. Throws strata::Error naming the known hosts when none or
// several match.
db::HostRow findHost(db::Store& store, const QString& id);
// Asks the running host a question through the store and waits up to `seconds`
// for the answer (Note [What each host runs] in store.cc). Throws strata::Error
// when the host is not live or answers with an error, HostTimeoutError when it
// does not answer in time.
struct HostTimeoutError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
std::string askRunningHost(db::Store& store, const db::HostRow& host, const std::string& query,
                           const std::string& arg, double seconds);
// The store at path, which must exist: a command that only reads what hosts
// recorded never creates one (a mistyped --db is an error, not a new empty store).
std::unique_ptr<db::Store> openExistingStore(const QString& path);

// Whether bytes are UTF-8, as Strata reads every name, value and path: read as a
// QString, bytes that are not become U+FFFD and would name another file.
inline bool isUtf8(const QByteArray& bytes) { return QString::fromUtf8(bytes).toUtf8() == bytes; }

// Text someone typed (an actor, a reason), as one line of a listing: control
// characters as escapes, so a newline or a terminal escape in it cannot forge a
// row or repaint the screen. JSON output needs none of this.
inline QString oneLine(const std::string& text) {
  QString out;
  for (const QChar c : QString::fromStdString(text)) {
    const char16_t u = c.unicode();
    if (u == '\n') out += "\\n";
    else if (u == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f || (u >= 0x80 && u < 0xa0)) out += QString("\\x%1").arg(u, 2, 16, QChar('0'));
    else if (u == '\\') out += "\\\\";
    else out += c;
  }
  return out;
}

// QCommandLineParser's help names the binary (argv[0]); ours names the
// subcommand ("Usage: strata schema [options] ...").
inline QString helpText(const QCommandLineParser& parser, const QString& command) {
  QString help = parser.helpText();
  const QString usage = "Usage: ";
  const qsizetype end = help.indexOf(' ', usage.size());
  if (help.startsWith(usage) && end > 0) help.replace(usage.size(), end - usage.size(), command);
  return help;
}

// Parses args; prints the help (exit 0) or the error and the help (exit 2) when
// that is all there is to do. Returns -1 when the command should go on.
inline int parseOrExit(QCommandLineParser& parser, const QStringList& args) {
  if (!parser.parse(args)) {
    QString hint;  // "--wait -1": Qt reads "-1" as options named "1"
    for (const QString& a : args) {
      if (a.size() > 1 && a[0] == '-' && (a[1].isDigit() || a[1] == '.')) {
        hint = " ('" + a + "' is read as an option: a number here cannot be negative)";
      }
    }
    QTextStream(stderr) << args.first() << ": " << parser.errorText() << hint << "\n" << helpText(parser, args.first());
    return kExitUsage;
  }
  // An empty path is a shell variable that was not set far more often than a choice.
  for (const char* path_option : {"db", "plugins"}) {
    if (parser.optionNames().contains(path_option) && parser.value(path_option).isEmpty()) {
      QTextStream(stderr) << args.first() << ": --" << path_option << " was given an empty path\n";
      return kExitUsage;
    }
  }
  if (parser.isSet("help") || parser.isSet("help-all")) {  // addHelpOption() lists both
    QTextStream(stdout) << helpText(parser, args.first());
    return kExitOk;
  }
  return -1;
}


int runSchemaCommand(const QStringList& args);
int runDemoCommand(const QStringList& args);
int runOpsCommand(const QStringList& args);
int runDumpCommand(const QStringList& args);
int runModesCommand(const QStringList& args);
// strata check [BUNDLE | OP]: opcheck and gradcheck on the sample inputs bundles ship.
int runCheckCommand(const QStringList& args);
int runServeCommand(const QStringList& args);
int runPluginsCommand(const QStringList& args);
int runKernelCommand(const QStringList& args);
int runAuditCommand(const QStringList& args);
int runHostsCommand(const QStringList& args);
int runCallCommand(const QStringList& args);
int runBenchCommand(const QStringList& args);
// strata cuda [--json]: the devices (or why CUDA is unavailable) and each one's
// caching allocator statistics.
int runCudaCommand(const QStringList& args);

}  // namespace strata::host
