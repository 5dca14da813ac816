// strata: the command-line entry point. Dispatches to a subcommand.
#include <QCoreApplication>
#include <QLoggingCategory>
#include <QTextStream>

#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commands/commands.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/log_mode.h"

Q_LOGGING_CATEGORY(lcModesLog, "strata.modes.log")
Q_LOGGING_CATEGORY(lcModes, "strata.modes")

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const QStringList&);
};

constexpr Subcommand kSubcommands[] = {
    {"serve", "Load the plugin directory and stay up, applying admin changes live", &strata::host::runServeCommand},
    {"plugins", "List bundles; pin, unpin, disable or enable one", &strata::host::runPluginsCommand},
    {"kernel", "Disable or enable a kernel in every host (--wait for them)", &strata::host::runKernelCommand},
    {"audit", "Print the audit log of admin actions", &strata::host::runAuditCommand},
    {"hosts", "List the hosts on a store, live and dead, and what each one runs", &strata::host::runHostsCommand},
    {"schema", "Canonicalize operator schemas (arguments or one per line on stdin)",
     &strata::host::runSchemaCommand},
    {"ops", "List the registered operators and their schemas", &strata::host::runOpsCommand},
    {"dump", "Print an operator's dispatch table, registrations and kernel state", &strata::host::runDumpCommand},
    {"call", "Run an operator on literal arguments (--explain says why each layer ran)",
     &strata::host::runCallCommand},
    {"check", "Run opcheck and gradcheck on the sample inputs bundles ship for their ops",
     &strata::host::runCheckCommand},
    {"modes", "List the dispatch mode types 'call --mode' can push", &strata::host::runModesCommand},
    {"bench", "Run the dispatch benchmarks (--peer libtorch: beside PyTorch's), chart them (--plot)",
     &strata::host::runBenchCommand},
    {"demo", "Show the SDK's values: tensors, DLPack, IValues, schemas", &strata::host::runDemoCommand},
    {"cuda", "Show the CUDA devices (or why there are none) and the caching allocator's memory statistics",
     &strata::host::runCudaCommand},
};

void printUsage(QTextStream& out) {
  out << "Usage: strata <command> [options]\n\n"
      << "Strata: an operator dispatcher and plugin host.\n\nCommands:\n";
  for (const Subcommand& c : kSubcommands) {
    out << "  " << QString::fromLatin1(c.name).leftJustified(10) << c.summary << "\n";
  }
  out << "\nRun 'strata <command> --help' for a command's options; 'strata --version' for the version.\n";
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) reached while writing the store is a full disk: an
  // error SQLite reports and Strata names, with the transaction rolled back, not a
  // SIGXFSZ that kills the process.
  std::signal(SIGXFSZ, SIG_IGN);
  QCoreApplication app(argc, argv);
  QCoreApplication::setApplicationName("strata");
  QCoreApplication::setApplicationVersion("0.1.0");

  // LogMode's lines go to the host's logging (QT_LOGGING_RULES can silence them).
  strata::modes::initialize();
  // The layers' warnings (vmap's for-loop fallback) too, as warnings of "strata.modes".
  strata::modes::set_warning_sink([](std::string_view line) {
    qCWarning(lcModes).noquote() << QString::fromUtf8(line.data(), static_cast<qsizetype>(line.size()));
  });
  strata::modes::set_log_sink([](std::string_view line) {
    qCInfo(lcModesLog).noquote() << QString::fromUtf8(line.data(), static_cast<qsizetype>(line.size()));
  });

  const QStringList args = QCoreApplication::arguments();
  QTextStream out(stdout);
  QTextStream err(stderr);
  // Arguments are read as UTF-8; bytes that are not would become U+FFFD, and a --db
  // or --plugins path would silently name another file. Refuse them instead.
  for (int i = 1; i < argc; ++i) {
    const QByteArray raw(argv[i]);
    if (strata::host::isUtf8(raw)) continue;
    QString shown;
    for (const char c : raw) {
      const auto b = static_cast<unsigned char>(c);
      shown += b >= 0x20 && b < 0x7f ? QString(QChar(b)) : QString("\\x%1").arg(b, 2, 16, QChar('0'));
    }
    err << "strata: argument " << i << " ('" << shown
        << "') is not valid UTF-8; Strata reads names, values and paths as UTF-8, and would read this one as "
           "another\n";
    return strata::host::kExitUsage;
  }
  // The same for the variables that name paths.
  for (const char* var : {"STRATA_DB", "STRATA_PLUGIN_PATH"}) {
    const QByteArray raw = qgetenv(var);
    if (strata::host::isUtf8(raw)) continue;
    err << "strata: $" << var << " is not valid UTF-8; Strata reads paths as UTF-8, and would read this one as "
           "another path\n";
    return strata::host::kExitUsage;
  }
  if (args.size() < 2 || args[1] == "--help" || args[1] == "--help-all" || args[1] == "-h" || args[1] == "help") {
    printUsage(args.size() < 2 ? err : out);
    return args.size() < 2 ? strata::host::kExitUsage : strata::host::kExitOk;
  }
  if (args[1] == "--version" || args[1] == "-v") {
    out << "strata " << strata::host::versionText() << "\n";
    return strata::host::kExitOk;
  }
  for (const Subcommand& c : kSubcommands) {
    if (args[1] == QLatin1String(c.name)) {
      QStringList sub = args.mid(2);
      sub.prepend(QStringLiteral("strata ") + c.name);
      out.flush();
      int rc = strata::host::kExitInvalidInput;
      try {
        rc = c.run(sub);
      } catch (const std::exception& e) {  // what a command's own handlers did not name
        err << "strata " << c.name << ": error: " << e.what() << "\n";
      } catch (...) {
        // A kernel's or a bundle's throw of something else (an int, a struct): it
        // would otherwise end the process with std::terminate.
        err << "strata " << c.name
            << ": error: a kernel or a bundle threw an exception that is not a std::exception, so Strata "
               "cannot say what it holds\n";
      }
      // Output that could not be written (a full disk, a closed pipe) is an error, not
      // a silent success.
      if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
        err << "strata " << c.name << ": error: cannot write the output: " << std::strerror(errno) << "\n";
        return strata::host::kExitInvalidInput;
      }
      return rc;
    }
  }
  err << "strata: unknown command '" << args[1] << "'\n\n";
  printUsage(err);
  return strata::host::kExitUsage;
}
