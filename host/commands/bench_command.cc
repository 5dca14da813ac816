// strata bench: runs the benchmark suite (bench/, Google Benchmark) and, with
// --peer, PyTorch's dispatcher on the same scenarios; prints each result as it
// comes, the Strata/PyTorch ratios and the goals; writes JSON and an SVG.
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <algorithm>
#include <map>
#include <optional>

#include "bench_report.h"
#include "commands/commands.h"

namespace strata::host {

namespace {

QString besideThisBinary(const QString& name) { return QCoreApplication::applicationDirPath() + "/" + name; }

// The names of the benchmarks a binary would run under a filter.
std::optional<QStringList> listBenchmarks(const QString& binary, const QString& filter, QString* error) {
  QProcess p;
  p.start(binary, {"--benchmark_list_tests=true", "--benchmark_filter=" + filter});
  if (!p.waitForFinished(60000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    *error = "cannot list the benchmarks of " + binary + ": " +
             (p.error() == QProcess::FailedToStart ? p.errorString() : QString::fromLocal8Bit(p.readAllStandardError()));
    return std::nullopt;
  }
  QStringList names;
  for (const QString& line : QString::fromLocal8Bit(p.readAllStandardOutput()).split('\n')) {
    if (!line.trimmed().isEmpty()) names << line.trimmed();
  }
  return names;
}

std::optional<BenchRun> readBenchmarkFile(const QString& path, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    *error = "cannot read " + path + ": " + f.errorString();
    return std::nullopt;
  }
  QString why;
  auto run = parseBenchmarkJson(f.readAll(), &why);
  if (!run) *error = path + ": " + why;
  return run;
}

// Runs a benchmark binary, printing "[k/n] name  time" to err as each result
// arrives, and returns its JSON results.
std::optional<BenchRun> runBenchmarks(const QString& binary, const QString& label, const QString& filter,
                                      const QStringList& extra, QTextStream& err, QString* error) {
  const auto names = listBenchmarks(binary, filter, error);
  if (!names) return std::nullopt;
  if (names->isEmpty()) {
    *error = "no benchmark of " + binary + " matches '" + filter + "'";
    return std::nullopt;
  }
  QTemporaryDir tmp;
  const QString out_file = tmp.filePath("results.json");
  QProcess p;
  p.setProcessChannelMode(QProcess::SeparateChannels);
  p.start(binary, QStringList{"--benchmark_filter=" + filter, "--benchmark_format=console", "--benchmark_color=false",
                              "--benchmark_out=" + out_file, "--benchmark_out_format=json"} +
                      extra);
  if (!p.waitForStarted()) {
    *error = "cannot run " + binary + ": " + p.errorString();
    return std::nullopt;
  }
  // A result line starts with a benchmark's name: "unboxed/muladd   3.45 ns   3.45 ns   2000".
  static const QRegularExpression result(R"(^(\S+)\s+(?:([0-9.]+ \S+)\s|ERROR OCCURRED: (.*)))");
  const int total = static_cast<int>(names->size());
  int done = 0;
  QByteArray pending;
  QString stderr_text;
  auto drain = [&] {
    pending += p.readAllStandardOutput();
    stderr_text += QString::fromLocal8Bit(p.readAllStandardError());
    for (qsizetype nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
      const QString line = QString::fromLocal8Bit(pending.left(nl));
      pending.remove(0, nl + 1);
      const auto m = result.match(line);
      if (!m.hasMatch() || line.startsWith("Benchmark ")) continue;
      ++done;
      err << "[" << label << " " << done << "/" << total << "] " << m.captured(1) << "  "
          << (m.captured(3).isEmpty() ? m.captured(2) : "skipped: " + m.captured(3)) << "\n";
      err.flush();
    }
  };
  while (!p.waitForFinished(200)) {
    if (p.state() == QProcess::NotRunning) break;
    drain();
  }
  drain();
  if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    *error = binary + " failed (" + (p.exitStatus() != QProcess::NormalExit ? "crashed" : "exit code " + QString::number(p.exitCode())) +
             ")" + (stderr_text.trimmed().isEmpty() ? "" : ": " + stderr_text.trimmed());
    return std::nullopt;
  }
  QString why;
  auto run = readBenchmarkFile(out_file, &why);
  if (!run) *error = "the results of " + binary + ": " + why;
  return run;
}
bool writeFile(const QString& path, const QByteArray& bytes, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(bytes) != bytes.size()) {
    *error = "cannot write " + path + ": " + f.errorString();
    return false;
  }
  return true;
}

// The peer's filter: its names carry a "libtorch/" prefix.
QString peerFilter(const QString& filter) {
  if (filter.startsWith('^')) return "^libtorch/(" + filter.mid(1) + ")";
  return filter;
}

}  // namespace

int runBenchCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Run the dispatch benchmarks (build/bin/strata_bench, Google Benchmark), showing each result as it "
      "arrives; with --peer, PyTorch's C++ dispatcher on the same scenarios, the Strata/PyTorch ratio of each, "
      "and Strata's goals, met or missed. Compare runs made in one go on one machine.");
  parser.addHelpOption();
  parser.addOption({"filter", "Only the scenarios matching REGEX (Google Benchmark's --benchmark_filter).", "REGEX",
                    "."});
  parser.addOption({"json", "Write the results as Google Benchmark JSON (the peer's appended, with \"ratios\").",
                    "FILE"});
  parser.addOption({"plot", "Draw an SVG chart: cost per call of each scenario, and of each mode-stack depth.",
                    "FILE.svg"});
  parser.addOption({"peer", "Also run PyTorch's dispatcher ('libtorch': build/bin/strata_bench_libtorch, built "
                            "when libtorch-dev is installed), or read its results from a Google Benchmark JSON file.",
                    "libtorch|FILE"});
  parser.addOption({"python-anchors", "Compare with PyTorch's layers measured from Python: FILE holds the \"name "
                                      "value_ns\" lines that ../shared/anchors/python_layers/run.sh prints (vmap/* "
                                      "beside functorch.vmap).",
                    "FILE"});
  parser.addOption({"repetitions", "Run each scenario N times and report the median.", "N", "1"});
  parser.addOption({"min-time", "Seconds each scenario runs at least (Google Benchmark's --benchmark_min_time).",
                    "SECS"});
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (!parser.positionalArguments().isEmpty()) {
    err << args.first() << ": unexpected argument '" << parser.positionalArguments().first() << "'\n";
    return kExitUsage;
  }
  bool reps_ok = false;
  const int reps = parser.value("repetitions").toInt(&reps_ok);
  if (!reps_ok || reps < 1) {
    err << args.first() << ": --repetitions expects a positive integer, got '" << parser.value("repetitions") << "'\n";
    return kExitUsage;
  }
  QStringList extra;
  if (reps > 1) extra << "--benchmark_repetitions=" + QString::number(reps) << "--benchmark_report_aggregates_only=true";
  if (parser.isSet("min-time")) {
    bool ok = false;
    const double secs = parser.value("min-time").toDouble(&ok);
    if (!ok || secs <= 0) {
      err << args.first() << ": --min-time expects a positive number of seconds, got '" << parser.value("min-time")
          << "'\n";
      return kExitUsage;
    }
    extra << "--benchmark_min_time=" + parser.value("min-time");
  }
  // Output files are checked before minutes of benchmarks, not after.
  for (const char* option : {"json", "plot"}) {
    if (!parser.isSet(option)) continue;
    const QFileInfo target(parser.value(option));
    if (!target.absoluteDir().exists()) {
      err << "error: --" << option << " " << parser.value(option) << ": the folder " << target.absolutePath()
          << " does not exist\n";
      return kExitInvalidInput;
    }
  }
  const QString filter = parser.value("filter");
  // Google Benchmark says nothing of a filter it cannot compile: it just matches nothing.
  if (const QRegularExpression re(filter); !re.isValid()) {
    err << args.first() << ": --filter '" << filter << "' is not a regular expression: " << re.errorString()
        << " (at offset " << re.patternErrorOffset() << ")\n";
    return kExitUsage;
  }
  const QString strata_binary = besideThisBinary("strata_bench");
  if (!QFileInfo(strata_binary).isExecutable()) {
    err << "error: the benchmark binary " << strata_binary
        << " is not built (configure with -DSTRATA_BUILD_BENCHMARKS=ON and build the strata_bench target)\n";
    return kExitInvalidInput;
  }
  QString error;
  // Check the peer before spending minutes on Strata's run.
  const QString peer = parser.value("peer");
  std::optional<BenchRun> peer_run;
  QString peer_binary;
  if (peer == "libtorch") {
    peer_binary = besideThisBinary("strata_bench_libtorch");
    if (!QFileInfo(peer_binary).isExecutable()) {
      err << "error: the libtorch peer " << peer_binary
          << " is not built: install Debian's libtorch-dev, then configure and build again "
             "(STRATA_BENCH_LIBTORCH=AUTO builds it when libtorch is found)\n";
      return kExitInvalidInput;
    }
  } else if (!peer.isEmpty()) {
    peer_run = readBenchmarkFile(peer, &error);
    if (!peer_run) {
      err << "error: --peer " << error << "\n";
      return kExitInvalidInput;
    }
  }
  std::optional<PythonAnchors> python;
  if (parser.isSet("python-anchors")) {
    QFile f(parser.value("python-anchors"));
    if (!f.open(QIODevice::ReadOnly)) {
      err << "error: --python-anchors " << parser.value("python-anchors") << ": " << f.errorString() << "\n";
      return kExitInvalidInput;
    }
    python = parsePythonAnchors(f.readAll(), &error);
    if (!python) {
      err << "error: --python-anchors " << parser.value("python-anchors") << ": " << error << "\n";
      return kExitInvalidInput;
    }
  }
  auto strata_run = runBenchmarks(strata_binary, "strata", filter, extra, err, &error);
  if (!strata_run) {
    err << "error: " << error << "\n";
    return kExitInvalidInput;
  }
  if (!peer_binary.isEmpty()) {
    peer_run = runBenchmarks(peer_binary, "libtorch", peerFilter(filter), extra, err, &error);
    if (!peer_run) {
      err << "error: " << error << "\n";
      return kExitInvalidInput;
    }
  }
  const BenchRun* peer_ptr = peer_run ? &*peer_run : nullptr;
  const QString label = peer == "libtorch" || peer.isEmpty() ? "libtorch" : QFileInfo(peer).completeBaseName();

  out << "machine: " << machineSummary(strata_run->context) << "\n";
  if (peer_ptr != nullptr) {
    if (const QString why = peerMachineMismatch(*strata_run, *peer_ptr); !why.isEmpty()) {
      err << "warning: --peer " << peer << ": " << why << "\n";
    }
  }
  // The table: every Strata result, and the peer's beside it where there is one.
  std::map<QString, double> theirs;
  std::map<QString, const BenchResult*> peer_results;
  if (peer_ptr != nullptr) {
    for (const BenchRatio& r : pairWithPeer(*strata_run, *peer_ptr)) theirs[r.name] = r.peer_ns;
    peer_results = peerResults(*peer_ptr);
  }
  // Throughput, for the scenarios that count bytes (casts and copies): GB/s.
  auto gbs = [](double bytes_per_second) { return QString::number(bytes_per_second / 1e9, 'f', 1) + " GB/s"; };
  int width = 8;
  for (const BenchResult& r : strata_run->results) width = std::max(width, static_cast<int>(r.name.size()));
  out << QString("scenario").leftJustified(width + 2) << QString("strata").rightJustified(12);
  if (peer_ptr != nullptr) out << label.rightJustified(12) << QString("ratio").rightJustified(8);
  out << "\n";
  for (const BenchResult& r : strata_run->results) {
    out << r.name.leftJustified(width + 2);
    if (!r.error.isEmpty()) {
      out << "  skipped: " << r.error << "\n";
      continue;
    }
    out << formatNs(r.ns).rightJustified(12);
    if (auto it = theirs.find(r.name); it != theirs.end()) {
      out << formatNs(it->second).rightJustified(12) << QString::number(r.ns / it->second, 'f', 2).rightJustified(8);
    }
    if (r.bytes_per_second > 0) {
      out << "  " << gbs(r.bytes_per_second);
      const auto p = peer_results.find(r.name);
      if (p != peer_results.end() && p->second->bytes_per_second > 0) {
        out << " (" << label << " " << gbs(p->second->bytes_per_second) << ")";
      }
    }
    out << "\n";
  }
  const auto goals = checkGoals(*strata_run, peer_ptr, python ? &*python : nullptr);
  if (!goals.empty()) {
    out << "\ngoals:\n";
    for (const BenchGoal& g : goals) {
      out << "  " << (g.unmeasured ? "n/a   " : g.met ? "met   " : "missed") << "  " << g.goal << ": " << g.measured
          << "\n";
    }
  }
  out.flush();

  if (parser.isSet("json")) {
    const QByteArray json = QJsonDocument(mergedJson(*strata_run, peer_ptr)).toJson(QJsonDocument::Indented);
    if (!writeFile(parser.value("json"), json, &error)) {
      err << "error: " << error << "\n";
      return kExitInvalidInput;
    }
  }
  if (parser.isSet("plot")) {
    if (!writeFile(parser.value("plot"), renderSvg(*strata_run, peer_ptr, label).toUtf8(), &error)) {
      err << "error: " << error << "\n";
      return kExitInvalidInput;
    }
  }
  return kExitOk;
}

}  // namespace strata::host
