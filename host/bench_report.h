// Reading Google Benchmark's JSON output, pairing Strata's scenarios with a peer's
// (PyTorch's dispatcher, "libtorch/<scenario>"), checking the benchmark goals, and
// drawing the results as SVG. What `strata bench` prints and writes.
#pragma once

#include <QByteArray>
#include <QJsonArray>
#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <map>
#include <optional>
#include <vector>

namespace strata::host {

// One scenario's result.
struct BenchResult {
  // The stable name: Google Benchmark's run name without the "/real_time",
  // "/manual_time" and "/iterations:N" parts it adds ("threads/unboxed_muladd/threads:2").
  QString name;
  double ns = 0;                // wall time per iteration in ns (the median when repeated)
  double items_per_second = 0;  // 0 when the scenario does not count items
  double bytes_per_second = 0;  // 0 when the scenario does not count bytes (casts and copies do)
  QString error;                // non-empty: the scenario was skipped or failed, and why
  // Every number of the scenario's entry, user counters included ("cuda_mallocs_per_iter").
  std::map<QString, double> counters;
};

struct BenchRun {
  QJsonObject context;  // Google Benchmark's "context" (machine, build)
  QJsonArray raw;       // its "benchmarks", as written
  std::vector<BenchResult> results;
  const BenchResult* find(const QString& name) const;
};

// Parses a Google Benchmark JSON document. Error: *error names what is wrong.
std::optional<BenchRun> parseBenchmarkJson(const QByteArray& json, QString* error);

// The scenario a peer's result stands for: its name without "libtorch/".
QString peerScenario(const QString& peer_name);

struct BenchRatio {
  QString name;
  double strata_ns = 0;
  double peer_ns = 0;
  double ratio() const { return strata_ns / peer_ns; }
};
// Strata's results that the peer also ran, in Strata's order.
std::vector<BenchRatio> pairWithPeer(const BenchRun& strata, const BenchRun& peer);

// The least-squares line through mode_stack/N: ns per mode and the fit's R².
struct ModeStackFit {
  double ns_per_mode = 0;
  double intercept = 0;
  double r2 = 0;
  int points = 0;
};
std::optional<ModeStackFit> fitModeStack(const BenchRun& run);
// The same line through a series "<prefix><N>" (vmap/muladd_fallback/B: ns per batch
// element), from x = min_x up.
std::optional<ModeStackFit> fitSeries(const BenchRun& run, const QString& prefix, double min_x);

// PyTorch's layers measured from Python (../shared/anchors/python_layers prints one
// "name value_ns" line each, e.g. "python_vmap_muladd_rule_B8_ns 33200"). Lines that
// are not "name number" are ignored; an empty result is an error (*error says why).
using PythonAnchors = std::map<QString, double>;
std::optional<PythonAnchors> parsePythonAnchors(const QByteArray& text, QString* error);
// Strata's scenario each anchor stands for: python_vmap_muladd_rule_B8_ns ->
// vmap/muladd_rule/8; empty when none does.
QString anchorScenario(const QString& anchor);

// The benchmark goals, each with what was measured; a goal whose inputs were not run
// (or need a peer that was not given) is left out. The CUDA goals whose scenarios
// ran but were skipped (no device) are kept, marked unmeasured with the reason.
struct BenchGoal {
  QString goal;
  QString measured;
  bool met = false;
  // Its scenarios ran but were skipped (the CUDA goals without a device): neither
  // met nor missed, and `measured` says why.
  bool unmeasured = false;
};
// The peer's results by scenario. A file holding "libtorch/..." results (such as
// one --json wrote, with Strata's own beside them) counts for those alone; any
// other (an earlier Strata run, say) for all of its results.
std::map<QString, const BenchResult*> peerResults(const BenchRun& peer);

std::vector<BenchGoal> checkGoals(const BenchRun& strata, const BenchRun* peer,
                                  const PythonAnchors* python = nullptr);

// A time for people: "3.45 ns", "2.10 us", "153 ms".
QString formatNs(double ns);

// The machine a run's context names: "AMD EPYC (AuthenticAMD, family 26, model 2), 2
// CPUs at 2096 MHz". The benchmark binaries record the CPU ("cpu_model"); a file
// from before they did names only the count and clock.
QString machineSummary(const QJsonObject& context);

// Empty when the peer's results could come from the machine of Strata's run; else a
// sentence saying that they do not, and how the two differ. Ratios hold only on one
// machine (an Intel and an AMD VM give different ones for the same code).
QString peerMachineMismatch(const BenchRun& strata, const BenchRun& peer);

// An SVG of the cost per call of every scenario (log scale, the peer's beside
// Strata's) and of mode_stack/N against N with its fitted line.
QString renderSvg(const BenchRun& strata, const BenchRun* peer, const QString& peer_label);

// The document --json writes: Strata's Google Benchmark JSON with the peer's
// benchmarks appended and, with a peer, "ratios".
QJsonObject mergedJson(const BenchRun& strata, const BenchRun* peer);

}  // namespace strata::host
