#include "bench_report.h"

#include <QJsonDocument>
#include <QJsonValue>
#include <QRegularExpression>

#include <algorithm>
#include <cmath>
#include <map>

namespace strata::host {

namespace {

double toNs(double value, const QString& unit) {
  if (unit == "us") return value * 1e3;
  if (unit == "ms") return value * 1e6;
  if (unit == "s") return value * 1e9;
  return value;  // "ns"
}

// Google Benchmark appends what a scenario was run with; the scenario's name is the rest.
QString stableName(const QString& run_name) {
  static const QRegularExpression added("^(real_time|manual_time|process_time|iterations:\\d+|repeats:\\d+|"
                                        "min_time:[0-9.e+-]+s?|min_warmup_time:[0-9.e+-]+s?)$");
  QStringList kept;
  for (const QString& part : run_name.split('/')) {
    if (!added.match(part).hasMatch()) kept << part;
  }
  return kept.join('/');
}

QString xmlEscape(QString s) {
  return s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
}

QString num(double v, int precision = 1) { return QString::number(v, 'f', precision); }

}  // namespace

const BenchResult* BenchRun::find(const QString& name) const {
  for (const BenchResult& r : results) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::optional<BenchRun> parseBenchmarkJson(const QByteArray& json, QString* error) {
  QJsonParseError pe;
  const QJsonDocument doc = QJsonDocument::fromJson(json, &pe);
  if (pe.error != QJsonParseError::NoError) {
    *error = "not JSON: " + pe.errorString() + " at offset " + QString::number(pe.offset);
    return std::nullopt;
  }
  if (!doc.isObject() || !doc.object()["benchmarks"].isArray()) {
    *error = "not Google Benchmark output (no \"benchmarks\" array)";
    return std::nullopt;
  }
  BenchRun run;
  run.context = doc.object()["context"].toObject();
  run.raw = doc.object()["benchmarks"].toArray();
  std::map<QString, size_t> index;  // name -> results position
  std::map<QString, bool> from_median;
  for (const QJsonValue& v : run.raw) {
    const QJsonObject b = v.toObject();
    const QString run_name = b.contains("run_name") ? b["run_name"].toString() : b["name"].toString();
    if (run_name.isEmpty()) {
      *error = "a benchmark entry has no name";
      return std::nullopt;
    }
    const bool aggregate = b["run_type"].toString() == "aggregate";
    if (aggregate && b["aggregate_name"].toString() != "median") continue;
    BenchResult r;
    r.name = stableName(run_name);
    if (b["error_occurred"].toBool()) {
      r.error = b["error_message"].toString();
      if (r.error.isEmpty()) r.error = "failed";
    } else {
      if (!b["real_time"].isDouble()) {
        *error = "benchmark " + r.name + " has no real_time";
        return std::nullopt;
      }
      r.ns = toNs(b["real_time"].toDouble(), b["time_unit"].toString("ns"));
      r.items_per_second = b["items_per_second"].toDouble(0);
      r.bytes_per_second = b["bytes_per_second"].toDouble(0);
      for (auto it = b.begin(); it != b.end(); ++it) {
        if (it.value().isDouble()) r.counters[it.key()] = it.value().toDouble();
      }
    }
    auto it = index.find(r.name);
    if (it == index.end()) {
      index[r.name] = run.results.size();
      from_median[r.name] = aggregate;
      run.results.push_back(std::move(r));
    } else if (aggregate || !from_median[r.name]) {
      // A median replaces the repetitions it summarizes; otherwise the last run counts.
      run.results[it->second] = std::move(r);
      from_median[it->first] = aggregate;
    }
  }
  return run;
}

QString peerScenario(const QString& peer_name) {
  static const QString prefix = "libtorch/";
  return peer_name.startsWith(prefix) ? peer_name.mid(prefix.size()) : peer_name;
}

std::map<QString, const BenchResult*> peerResults(const BenchRun& peer) {
  const bool prefixed = std::any_of(peer.results.begin(), peer.results.end(),
                                    [](const BenchResult& r) { return peerScenario(r.name) != r.name; });
  std::map<QString, const BenchResult*> theirs;
  for (const BenchResult& r : peer.results) {
    if (r.error.isEmpty() && r.ns > 0 && (!prefixed || peerScenario(r.name) != r.name)) theirs[peerScenario(r.name)] = &r;
  }
  return theirs;
}

std::vector<BenchRatio> pairWithPeer(const BenchRun& strata, const BenchRun& peer) {
  const std::map<QString, const BenchResult*> theirs = peerResults(peer);
  std::vector<BenchRatio> out;
  for (const BenchResult& r : strata.results) {
    auto it = theirs.find(r.name);
    if (it == theirs.end() || !r.error.isEmpty() || r.ns <= 0) continue;
    out.push_back({r.name, r.ns, it->second->ns});
  }
  return out;
}

namespace {
// The least-squares line through (x, y) points; nullopt for fewer than two distinct x.
std::optional<ModeStackFit> fitPoints(const std::vector<std::pair<double, double>>& pts) {
  if (pts.size() < 2) return std::nullopt;
  const double n = static_cast<double>(pts.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double denom = n * sxx - sx * sx;
  if (denom == 0) return std::nullopt;
  ModeStackFit fit;
  fit.ns_per_mode = (n * sxy - sx * sy) / denom;
  fit.intercept = (sy - fit.ns_per_mode * sx) / n;
  double ss_res = 0, ss_tot = 0;
  for (const auto& [x, y] : pts) {
    const double e = y - (fit.intercept + fit.ns_per_mode * x);
    ss_res += e * e;
    ss_tot += (y - sy / n) * (y - sy / n);
  }
  fit.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
  fit.points = static_cast<int>(pts.size());
  return fit;
}
}  // namespace

std::optional<ModeStackFit> fitSeries(const BenchRun& run, const QString& prefix, double min_x) {
  const QRegularExpression re("^" + QRegularExpression::escape(prefix) + "(\\d+)$");
  std::vector<std::pair<double, double>> pts;
  for (const BenchResult& r : run.results) {
    const auto m = re.match(r.name);
    if (m.hasMatch() && r.error.isEmpty() && m.captured(1).toDouble() >= min_x) {
      pts.emplace_back(m.captured(1).toDouble(), r.ns);
    }
  }
  return fitPoints(pts);
}

// From one mode up: mode_stack/0 never leaves the unboxed path, and the first mode
// also pays for boxing the call once, so N = 0 is off the line by that much.
std::optional<ModeStackFit> fitModeStack(const BenchRun& run) { return fitSeries(run, "mode_stack/", 1); }

std::optional<PythonAnchors> parsePythonAnchors(const QByteArray& text, QString* error) {
  PythonAnchors out;
  for (const QByteArray& raw : text.split('\n')) {
    const QList<QByteArray> parts = raw.simplified().split(' ');
    if (parts.size() != 2) continue;
    bool ok = false;
    const double v = parts[1].toDouble(&ok);
    if (ok && v > 0) out[QString::fromUtf8(parts[0])] = v;
  }
  if (out.empty()) {
    *error = "no \"name value_ns\" lines (expected the output of ../shared/anchors/python_layers/run.sh)";
    return std::nullopt;
  }
  return out;
}

QString anchorScenario(const QString& anchor) {
  static const QRegularExpression vmap("^python_vmap_muladd_rule_B(\\d+)_ns$");
  if (const auto m = vmap.match(anchor); m.hasMatch()) return "vmap/muladd_rule/" + m.captured(1);
  if (anchor == "python_fake_mode_muladd_ns") return "fake/muladd";
  if (anchor == "python_fake_mode_aten_add_ns") return "fake/core_add";
  return {};
}

namespace {
// The vmap layer's cost over the rule's own call at each B: vmap/muladd_rule/B (a typed
// rule) or vmap/muladd_boxed_rule/B (the same rule in the boxed form) minus
// vmap/muladd_plain/B. (B, ns) pairs.
std::vector<std::pair<double, double>> vmapOverheads(const BenchRun& run, const QString& series = "muladd_rule") {
  const QRegularExpression re("^vmap/" + series + "/(\\d+)$");
  std::vector<std::pair<double, double>> out;
  for (const BenchResult& r : run.results) {
    const auto m = re.match(r.name);
    if (!m.hasMatch() || !r.error.isEmpty()) continue;
    const BenchResult* plain = run.find("vmap/muladd_plain/" + m.captured(1));
    if (plain == nullptr || !plain->error.isEmpty()) continue;
    out.emplace_back(m.captured(1).toDouble(), r.ns - plain->ns);
  }
  return out;
}
}  // namespace

// An axis label: "1 ns", "10 us", "100 ms".
QString tickLabel(double ns) {
  static const char* const kUnits[] = {"ns", "us", "ms", "s"};
  int unit = 0;
  while (ns >= 1000 && unit < 3) {
    ns /= 1000;
    ++unit;
  }
  return QString::number(ns, 'g', 3) + " " + kUnits[unit];
}

// A round step near range/4: 1, 2 or 5 times a power of ten.
double niceStep(double range) {
  const double raw = range / 4, p = std::pow(10, std::floor(std::log10(raw))), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

QString formatNs(double ns) {
  if (ns >= 1e9) return num(ns / 1e9, 2) + " s";
  if (ns >= 1e6) return num(ns / 1e6, ns >= 1e8 ? 0 : 1) + " ms";
  if (ns >= 1e3) return num(ns / 1e3, ns >= 1e5 ? 0 : 2) + " us";
  return num(ns, ns >= 100 ? 0 : 2) + " ns";
}

QString machineSummary(const QJsonObject& context) {
  QStringList parts;
  if (const QString cpu = context["cpu_model"].toString(); !cpu.isEmpty()) parts << cpu;
  const int cpus = context["num_cpus"].toInt(), mhz = context["mhz_per_cpu"].toInt();
  if (cpus > 0) {
    parts << QString("%1 CPU%2").arg(cpus).arg(cpus == 1 ? "" : "s") + (mhz > 0 ? QString(" at %1 MHz").arg(mhz) : "");
  }
  return parts.isEmpty() ? QString("an unnamed machine") : parts.join(", ");
}

QString peerMachineMismatch(const BenchRun& strata, const BenchRun& peer) {
  QStringList differences;
  for (const char* key : {"cpu_model", "host_name"}) {
    const QString ours = strata.context[key].toString(), theirs = peer.context[key].toString();
    if (!ours.isEmpty() && !theirs.isEmpty() && ours != theirs) {
      differences << QString("%1 '%2' against this run's '%3'").arg(key, theirs, ours);
    }
  }
  const int ours = strata.context["num_cpus"].toInt(), theirs = peer.context["num_cpus"].toInt();
  if (ours > 0 && theirs > 0 && ours != theirs) differences << QString("num_cpus %1 against %2").arg(theirs).arg(ours);
  if (differences.isEmpty()) return {};
  return "the peer's results were measured on another machine (" + differences.join("; ") +
         "): a ratio holds only on the machine it was measured on, so run both on one";
}

void checkCudaGoals(const BenchRun& strata, std::vector<BenchGoal>& goals);

std::vector<BenchGoal> checkGoals(const BenchRun& strata, const BenchRun* peer, const PythonAnchors* python) {
  std::vector<BenchGoal> goals;
  auto ok = [](const BenchResult* r) { return r != nullptr && r->error.isEmpty() && r->ns > 0; };
  if (peer != nullptr) {
    for (const BenchRatio& r : pairWithPeer(strata, *peer)) {
      // unboxed/ident_grad_fallthrough calls an op with no formula on a tensor that
      // requires grad: it pays the autograd layer's fallback (the node a backward would
      // raise through, as PyTorch 2's autograd fallback), where PyTorch 1.13 fell through.
      if (r.name == "unboxed/ident_grad_fallthrough") continue;
      if (r.name == "autograd/muladd_forward_backward") {
        goals.push_back({r.name + " at most 0.5x PyTorch's (torch::autograd::Function)",
                         num(r.ratio(), 2) + "x (" + formatNs(r.strata_ns) + " vs " + formatNs(r.peer_ns) + ")",
                         r.ratio() <= 0.5});
        continue;
      }
      if (!r.name.startsWith("unboxed/") && r.name != "boxed/muladd" && !r.name.startsWith("autocast/")) continue;
      goals.push_back({r.name + " at most 0.5x PyTorch's",
                       num(r.ratio(), 2) + "x (" + formatNs(r.strata_ns) + " vs " + formatNs(r.peer_ns) + ")",
                       r.ratio() <= 0.5});
    }
  }
  const BenchResult* plain = strata.find("unboxed/muladd");
  const BenchResult* autocast = strata.find("unboxed/muladd_autocast_on_no_rule");
  if (ok(plain) && ok(autocast)) {
    const double d = autocast->ns - plain->ns;
    goals.push_back({"unboxed/muladd_autocast_on_no_rule within 1 ns of unboxed/muladd",
                     (d >= 0 ? "+" : "") + num(d, 2) + " ns", std::abs(d) <= 1.0});
  }
  const BenchResult* no_grad = strata.find("autograd/muladd_forward_no_grad_inputs");
  if (ok(plain) && ok(no_grad)) {
    const double d = no_grad->ns - plain->ns;
    goals.push_back({"autograd/muladd_forward_no_grad_inputs within 2 ns of unboxed/muladd",
                     (d >= 0 ? "+" : "") + num(d, 2) + " ns", std::abs(d) <= 2.0});
  }
  if (const auto fit = fitModeStack(strata)) {
    goals.push_back({"mode_stack/N grows linearly in N (N >= 1)",
                     "R^2 = " + num(fit->r2, 4) + " over " + QString::number(fit->points) + " depths",
                     fit->r2 >= 0.98});
    const BenchResult* layer = peer != nullptr ? peer->find("libtorch/unboxed/muladd_one_boxed_layer") : nullptr;
    if (ok(layer)) {
      goals.push_back({"each pass-through mode at most 0.5x PyTorch's one-boxed-layer call",
                       formatNs(fit->ns_per_mode) + " per mode = " + num(fit->ns_per_mode / layer->ns, 2) + "x " +
                           formatNs(layer->ns),
                       fit->ns_per_mode <= 0.5 * layer->ns});
    }
  }
  // What a mode stack costs: a pass-through mode at most 15 ns, the first one (which
  // boxes the call) at most 25 ns over the plain call, the boxed paths at most 0.35x
  // PyTorch's and the registry's name lookup and bulk registration at most 0.5x; and
  // no scenario slower than PyTorch's same one.
  if (const auto fit = fitModeStack(strata)) {
    goals.push_back({"each pass-through mode at most 15 ns", formatNs(fit->ns_per_mode) + " per mode",
                     fit->ns_per_mode <= 15.0});
  }
  const BenchResult* depth0 = strata.find("mode_stack/0");
  const BenchResult* depth1 = strata.find("mode_stack/1");
  if (ok(depth0) && ok(depth1)) {
    const double d = depth1->ns - depth0->ns;
    goals.push_back({"the first mode (boxing the call) at most 25 ns over mode_stack/0",
                     "+" + formatNs(d) + " (" + formatNs(depth1->ns) + " vs " + formatNs(depth0->ns) + ")", d <= 25.0});
  }
  if (peer != nullptr) {
    const BenchRatio* slowest = nullptr;
    const std::vector<BenchRatio> ratios = pairWithPeer(strata, *peer);
    for (const BenchRatio& r : ratios) {
      const bool boxed = r.name == "boxed/muladd" || r.name == "unboxed/muladd_one_boxed_layer";
      const bool registry = r.name == "registry/find_op" || r.name == "registry/register_10k";
      if (boxed || registry) {
        const double limit = boxed ? 0.35 : 0.5;
        goals.push_back({r.name + " at most " + num(limit, 2) + "x PyTorch's",
                         num(r.ratio(), 2) + "x (" + formatNs(r.strata_ns) + " vs " + formatNs(r.peer_ns) + ")",
                         r.ratio() <= limit});
      }
      if (r.name == "unboxed/ident_grad_fallthrough") continue;  // see above: not the same work
      if (slowest == nullptr || r.ratio() > slowest->ratio()) slowest = &r;
    }
    if (slowest != nullptr) {
      goals.push_back({"no scenario slower than PyTorch's same scenario",
                       "slowest " + slowest->name + ": " + num(slowest->ratio(), 2) + "x", slowest->ratio() <= 1.0});
    }
  }
  const BenchResult* one = strata.find("threads/unboxed_muladd/threads:1");
  const BenchResult* two = strata.find("threads/unboxed_muladd/threads:2");
  if (ok(one) && ok(two) && one->items_per_second > 0) {
    const double scale = two->items_per_second / one->items_per_second;
    goals.push_back({"threads/unboxed_muladd: 2 threads at least 1.8x the throughput of 1",
                     num(scale, 2) + "x", scale >= 1.8});
  }
  // vmap: with a rule, the layer costs at most 150 ns over the rule's one call, at
  // every B and flat in B; without one, the for-loop fallback is linear in B.
  if (const auto over = vmapOverheads(strata); over.size() >= 2) {
    double worst = -1e300, at = 0;
    for (const auto& [b, ns] : over) {
      if (ns > worst) {
        worst = ns;
        at = b;
      }
    }
    // The boxed form of the same rule, for comparison (the goal is the typed form's).
    QString boxed;
    if (const auto b = vmapOverheads(strata, "muladd_boxed_rule"); !b.empty()) {
      double most = -1e300;
      for (const auto& [n, ns] : b) most = std::max(most, ns);
      boxed = "; the boxed form's at most " + formatNs(most);
    }
    goals.push_back({"vmap/muladd_rule/B (a typed rule): the layer's overhead (minus vmap/muladd_plain/B) at most "
                     "150 ns at every B",
                     "at most " + formatNs(worst) + " (B = " + QString::number(at) + ")" + boxed, worst <= 150});
    // Flat: what the line through the overheads gains or loses from the smallest B to
    // the largest is at most a quarter of their mean (a per-element cost would make
    // the overhead grow with B; noise leaves it within that band).
    const auto line = fitPoints(over);
    double mean = 0, lo_b = over.front().first, hi_b = lo_b;
    for (const auto& [b, ns] : over) {
      mean += ns / static_cast<double>(over.size());
      lo_b = std::min(lo_b, b);
      hi_b = std::max(hi_b, b);
    }
    const double slope = line ? line->ns_per_mode : 0;
    const double span = slope * (hi_b - lo_b);
    goals.push_back({"vmap/muladd_rule/B: the overhead flat in B (its fitted change over the B range at most 25% of "
                     "its mean)",
                     num(slope, 2) + " ns per batch element: " + (span >= 0 ? "+" : "") + formatNs(span) + " over B = " +
                         QString::number(lo_b) + ".." + QString::number(hi_b) + ", mean " + formatNs(mean),
                     std::abs(span) <= 0.25 * std::abs(mean)});
  }
  if (const auto fit = fitSeries(strata, "vmap/muladd_fallback/", 1)) {
    goals.push_back({"vmap/muladd_fallback/B grows linearly in B (the for-loop fallback)",
                     formatNs(fit->ns_per_mode) + " per batch element, R^2 = " + num(fit->r2, 4) + " over " +
                         QString::number(fit->points) + " sizes",
                     fit->r2 >= 0.98});
  }
  if (python != nullptr) {
    for (const auto& [anchor, ns] : *python) {
      const QString scenario = anchorScenario(anchor);
      const BenchResult* r = scenario.isEmpty() ? nullptr : strata.find(scenario);
      if (!ok(r)) continue;
      if (scenario.startsWith("fake/")) {
        // FakeTensorMode per op: at most 1/50 of PyTorch's from Python. core::matmul is
        // held to the same per-op figure as add (the anchors time one aten op).
        const std::pair<QString, const BenchResult*> rows[] = {
            {scenario, r},
            {"fake/core_matmul", scenario == "fake/core_add" ? strata.find("fake/core_matmul") : nullptr}};
        for (const auto& [name, row] : rows) {
          if (!ok(row)) continue;
          goals.push_back({name + " at most 1/50 of PyTorch's FakeTensorMode from Python (" + anchor + ")",
                           num(row->ns / ns, 4) + "x (" + formatNs(row->ns) + " vs " + formatNs(ns) + ")",
                           row->ns <= ns / 50});
        }
        continue;
      }
      goals.push_back({scenario + " at most 0.1x PyTorch's functorch.vmap from Python (" + anchor + ")",
                       num(r->ns / ns, 3) + "x (" + formatNs(r->ns) + " vs " + formatNs(ns) + ")",
                       r->ns <= 0.1 * ns});
    }
  }
  // A custom_op's call costs what the same op made with Library costs, plus the check
  // that its output is a new tensor (Note [A custom op's outputs are new tensors]).
  const BenchResult* cop = strata.find("custom_op/call_muladd");
  const BenchResult* lib = strata.find("custom_op/library_muladd");
  if (ok(cop) && ok(lib)) {
    goals.push_back({"custom_op/call_muladd within 3 ns of the same op made with Library (custom_op/library_muladd; "
                     "the difference is the per-call check that the output aliases no input)",
                     formatNs(cop->ns) + " vs " + formatNs(lib->ns) + " (" + (cop->ns >= lib->ns ? "+" : "") +
                         num(cop->ns - lib->ns, 2) + " ns)",
                     cop->ns - lib->ns <= 3.0});
  }
  const BenchResult* load = strata.find("host/load_100_bundles");
  if (ok(load)) goals.push_back({"host/load_100_bundles under 1 s", formatNs(load->ns), load->ns < 1e9});
  checkCudaGoals(strata, goals);
  return goals;
}

// The CUDA path's goals, measured on the device the run names (context "cuda_device").
// A goal whose scenarios ran but were skipped (no device) is reported unmeasured,
// with the reason: never a figure.
void checkCudaGoals(const BenchRun& strata, std::vector<BenchGoal>& goals) {
  auto ok = [](const BenchResult* r) { return r != nullptr && r->error.isEmpty() && r->ns > 0; };
  const QString device = strata.context["cuda_device"].toString();
  const QString on = device.isEmpty() ? QString() : " on " + device;
  // Adds the goal: measured by `measure` when every input ran, else unmeasured with
  // the first input's error; nothing when none of them ran.
  auto add = [&](const QString& goal, std::initializer_list<const BenchResult*> inputs, auto measure) {
    const BenchResult* skipped = nullptr;
    bool any = false;
    for (const BenchResult* r : inputs) {
      any = any || r != nullptr;
      if (r != nullptr && !ok(r) && skipped == nullptr) skipped = r;
    }
    if (!any) return;
    for (const BenchResult* r : inputs) {
      if (r == nullptr) return;  // filtered out: not a goal of this run
    }
    if (skipped != nullptr) {
      goals.push_back({goal, "unmeasured: skipped: " + skipped->error, false, true});
      return;
    }
    BenchGoal g = measure();
    g.goal = goal;
    g.measured += on;
    goals.push_back(g);
  };
  const BenchResult* add1m = strata.find("cuda/core_add_1m");
  add("cuda/core_add_1m at most 10 us, with 0 cudaMalloc per iteration", {add1m}, [&] {
    const auto it = add1m->counters.find("cuda_mallocs_per_iter");
    const double mallocs = it != add1m->counters.end() ? it->second : -1;
    return BenchGoal{{}, formatNs(add1m->ns) + ", " + (mallocs < 0 ? QString("cudaMalloc calls not counted")
                                                                    : num(mallocs, 3) + " cudaMalloc per iteration"),
                     add1m->ns <= 10e3 && mallocs == 0};
  });
  const BenchResult* mul = strata.find("cuda/bw/muladd/256m");
  const BenchResult* copy = strata.find("cuda/bw/memcpy_d2d/256m");
  add("cuda/bw/muladd/256m at least 85% of the device's copy bandwidth (cuda/bw/memcpy_d2d/256m, same run)",
      {mul, copy}, [&] {
        const double ratio = copy->bytes_per_second > 0 ? mul->bytes_per_second / copy->bytes_per_second : 0;
        return BenchGoal{{}, num(mul->bytes_per_second / 1e9, 1) + " GB/s = " + num(100 * ratio, 1) + "% of " +
                                 num(copy->bytes_per_second / 1e9, 1) + " GB/s",
                         ratio >= 0.85};
      });
  const BenchResult* direct = strata.find("cuda/direct_launch_4");
  const BenchResult* via = strata.find("cuda/unboxed/muladd_launch_4");
  add("CUDA dispatch overhead (cuda/unboxed/muladd_launch_4 minus cuda/direct_launch_4) under 100 ns", {direct, via},
      [&] {
        const double d = via->ns - direct->ns;
        return BenchGoal{{}, (d >= 0 ? "+" : "") + formatNs(d) + " (" + formatNs(via->ns) + " vs " +
                                 formatNs(direct->ns) + ")",
                         d < 100};
      });
}

QString modeStackChart(const std::vector<const BenchResult*>& rows, const ModeStackFit& fit, double modes_top,
                       double modes_height, double kWidth);
QString vmapChart(const std::vector<std::pair<double, double>> (&pts)[2], const std::optional<ModeStackFit>& fit,
                  double top, double height, double width);

QString renderSvg(const BenchRun& strata, const BenchRun* peer, const QString& peer_label) {
  constexpr double kWidth = 960, kLeft = 330, kRight = 110, kRow = 24, kTop = 84;
  std::map<QString, double> theirs;
  if (peer != nullptr) {
    for (const auto& [name, r] : peerResults(*peer)) theirs[name] = r->ns;
  }
  std::vector<const BenchResult*> rows;
  double lo = 1e300, hi = 0;
  for (const BenchResult& r : strata.results) {
    if (!r.error.isEmpty() || r.ns <= 0) continue;
    rows.push_back(&r);
    lo = std::min(lo, r.ns);
    hi = std::max(hi, r.ns);
    if (auto it = theirs.find(r.name); it != theirs.end()) {
      lo = std::min(lo, it->second);
      hi = std::max(hi, it->second);
    }
  }
  const auto fit = fitModeStack(strata);
  const double bars_height = kTop + kRow * static_cast<double>(rows.size()) + 40;
  const double modes_top = bars_height + 40, modes_height = fit ? 300 : 0;
  // vmap/muladd_rule/B and vmap/muladd_fallback/B against B.
  static const QRegularExpression vmap_re("^vmap/muladd_(rule|fallback)/(\\d+)$");
  std::vector<std::pair<double, double>> vmap_pts[2];
  for (const BenchResult* r : rows) {
    const auto m = vmap_re.match(r->name);
    if (m.hasMatch()) vmap_pts[m.captured(1) == "rule" ? 0 : 1].emplace_back(m.captured(2).toDouble(), r->ns);
  }
  const bool vmap_chart = vmap_pts[0].size() + vmap_pts[1].size() >= 2;
  const double vmap_top = modes_top + modes_height + (fit ? 40 : 0), vmap_height = vmap_chart ? 320 : 0;
  QString s;
  s += QString("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%1\" height=\"%2\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n")
           .arg(kWidth)
           .arg(vmap_top + vmap_height + 20);
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  QString host = strata.context["host_name"].toString();
  s += QString("<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">Strata dispatch benchmarks: cost per "
               "call (log scale)</text>\n<text x=\"10\" y=\"42\" fill=\"#555\">%1%2; %3</text>\n")
           .arg(xmlEscape(machineSummary(strata.context)), host.isEmpty() ? QString() : " (" + xmlEscape(host) + ")",
                xmlEscape(strata.context["date"].toString()));
  if (rows.empty()) {
    s += "<text x=\"10\" y=\"80\">no results</text>\n</svg>\n";
    return s;
  }
  const double d0 = std::floor(std::log10(lo)), d1 = std::max(d0 + 1, std::ceil(std::log10(hi)));
  const double plot_w = kWidth - kLeft - kRight;
  auto x = [&](double ns) { return kLeft + plot_w * (std::log10(ns) - d0) / (d1 - d0); };
  for (double d = d0; d <= d1; ++d) {
    const double gx = x(std::pow(10, d));
    s += QString("<line x1=\"%1\" y1=\"%2\" x2=\"%1\" y2=\"%3\" stroke=\"#ddd\"/>\n<text x=\"%1\" y=\"%4\" "
                 "text-anchor=\"middle\" fill=\"#555\">%5</text>\n")
             .arg(num(gx))
             .arg(kTop - 6)
             .arg(num(bars_height - 30))
             .arg(num(bars_height - 14))
             .arg(tickLabel(std::pow(10, d)));
  }
  double y = kTop;
  const bool paired = !theirs.empty();
  for (const BenchResult* r : rows) {
    s += QString("<text x=\"%1\" y=\"%2\" text-anchor=\"end\">%3</text>\n")
             .arg(kLeft - 8)
             .arg(num(y + 15))
             .arg(xmlEscape(r->name));
    const double h = paired ? 9 : 16;
    s += QString("<rect x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\" fill=\"#1f77b4\"><title>Strata %5: %6</title>"
                 "</rect>\n<text x=\"%7\" y=\"%8\" font-size=\"10\">%6</text>\n")
             .arg(kLeft)
             .arg(num(y + 3))
             .arg(num(std::max(1.0, x(r->ns) - kLeft)))
             .arg(h)
             .arg(xmlEscape(r->name), formatNs(r->ns))
             .arg(num(x(r->ns) + 4))
             .arg(num(y + 3 + h - 1));
    if (auto it = theirs.find(r->name); it != theirs.end()) {
      s += QString("<rect x=\"%1\" y=\"%2\" width=\"%3\" height=\"9\" fill=\"#ff7f0e\"><title>%4 %5: %6</title>"
                   "</rect>\n<text x=\"%7\" y=\"%8\" font-size=\"10\">%6 (%9x)</text>\n")
               .arg(kLeft)
               .arg(num(y + 13))
               .arg(num(std::max(1.0, x(it->second) - kLeft)))
               .arg(xmlEscape(peer_label), xmlEscape(r->name), formatNs(it->second))
               .arg(num(x(it->second) + 4))
               .arg(num(y + 21))
               .arg(num(r->ns / it->second, 2));
    }
    y += kRow;
  }
  s += QString("<rect x=\"10\" y=\"52\" width=\"12\" height=\"10\" fill=\"#1f77b4\"/><text x=\"28\" y=\"62\">Strata"
               "</text>\n");
  if (paired) {
    s += QString("<rect x=\"90\" y=\"52\" width=\"12\" height=\"10\" fill=\"#ff7f0e\"/><text x=\"108\" y=\"62\">%1, "
                 "the same scenario (in parentheses: Strata / %1)</text>\n")
             .arg(xmlEscape(peer_label));
  }
  if (fit) s += modeStackChart(rows, *fit, modes_top, modes_height, kWidth);
  if (vmap_chart) s += vmapChart(vmap_pts, fitSeries(strata, "vmap/muladd_fallback/", 1), vmap_top, vmap_height, kWidth);
  return s + "</svg>\n";
}

// mode_stack/N against N, with the fitted line.
QString modeStackChart(const std::vector<const BenchResult*>& rows, const ModeStackFit& f, double modes_top,
                       double modes_height, double kWidth) {
  const ModeStackFit* fit = &f;
  QString s;
  static const QRegularExpression re("^mode_stack/(\\d+)$");
  std::vector<std::pair<double, double>> pts;
  for (const BenchResult* r : rows) {
    const auto m = re.match(r->name);
    if (m.hasMatch()) pts.emplace_back(m.captured(1).toDouble(), r->ns);
  }
  double max_n = 0, max_ns = 0;
  for (const auto& [n, ns] : pts) {
    max_n = std::max(max_n, n);
    max_ns = std::max(max_ns, ns);
  }
  max_n = std::max(max_n, 1.0);
  const double step = niceStep(max_ns * 1.1);
  max_ns = std::ceil(max_ns * 1.1 / step) * step;
  const double px0 = 90, px1 = kWidth - 60, py0 = modes_top + modes_height - 40, py1 = modes_top + 30;
  auto mx = [&](double n) { return px0 + (px1 - px0) * n / max_n; };
  auto my = [&](double ns) { return py0 - (py0 - py1) * ns / max_ns; };
  s += QString("<text x=\"10\" y=\"%1\" font-size=\"16\" font-weight=\"bold\">Dispatch modes: unboxed/muladd under N "
               "pass-through modes</text>\n")
           .arg(modes_top);
  s += QString("<line x1=\"%1\" y1=\"%2\" x2=\"%3\" y2=\"%2\" stroke=\"#333\"/>\n<line x1=\"%1\" y1=\"%2\" x2=\"%1\" "
               "y2=\"%4\" stroke=\"#333\"/>\n")
           .arg(px0)
           .arg(num(py0))
           .arg(px1)
           .arg(num(py1));
  for (double v = 0; v <= max_ns + step / 2; v += step) {
    s += QString("<line x1=\"%1\" y1=\"%2\" x2=\"%3\" y2=\"%2\" stroke=\"#eee\"/>\n<text x=\"%4\" y=\"%5\" "
                 "text-anchor=\"end\" fill=\"#555\">%6</text>\n")
             .arg(px0)
             .arg(num(my(v)))
             .arg(px1)
             .arg(px0 - 6)
             .arg(num(my(v) + 4))
             .arg(tickLabel(v));
  }
  for (const auto& [n, ns] : pts) {
    s += QString("<circle cx=\"%1\" cy=\"%2\" r=\"4\" fill=\"#1f77b4\"><title>mode_stack/%3: %4</title></circle>\n"
                 "<text x=\"%1\" y=\"%5\" text-anchor=\"middle\" fill=\"#555\">%3</text>\n")
             .arg(num(mx(n)))
             .arg(num(my(ns)))
             .arg(n)
             .arg(formatNs(ns))
             .arg(num(py0 + 16));
  }
  s += QString("<line x1=\"%1\" y1=\"%2\" x2=\"%3\" y2=\"%4\" stroke=\"#1f77b4\" stroke-dasharray=\"6,4\"/>\n")
           .arg(num(mx(1)))
           .arg(num(my(fit->intercept + fit->ns_per_mode)))
           .arg(num(mx(max_n)))
           .arg(num(my(fit->intercept + fit->ns_per_mode * max_n)));
  s += QString("<text x=\"%1\" y=\"%2\">fit over N &gt;= 1: %3 + %4 per mode (R^2 %5); x: modes on the stack</text>\n")
           .arg(px0 + 10)
           .arg(num(py1 + 4))
           .arg(formatNs(fit->intercept), formatNs(fit->ns_per_mode), num(fit->r2, 4));
  return s;
}

// Cost per call against B, log scale: the rule's line (flat) and the fallback's
// (linear, with its fit).
QString vmapChart(const std::vector<std::pair<double, double>> (&pts)[2], const std::optional<ModeStackFit>& fit,
                  double top, double height, double width) {
  double max_b = 1, lo = 1e300, hi = 0;
  for (const auto& series : pts) {
    for (const auto& [b, ns] : series) {
      max_b = std::max(max_b, b);
      lo = std::min(lo, ns);
      hi = std::max(hi, ns);
    }
  }
  const double d0 = std::floor(std::log10(lo)), d1 = std::max(d0 + 1, std::ceil(std::log10(hi)));
  const double px0 = 90, px1 = width - 60, py0 = top + height - 40, py1 = top + 30;
  auto mx = [&](double b) { return px0 + (px1 - px0) * b / max_b; };
  auto my = [&](double ns) { return py0 - (py0 - py1) * (std::log10(ns) - d0) / (d1 - d0); };
  QString s = QString("<text x=\"10\" y=\"%1\" font-size=\"16\" font-weight=\"bold\">vmap: a call over B rows of 4 "
                      "(log scale), with a batching rule and with the for-loop fallback</text>\n")
                  .arg(top);
  s += QString("<line x1=\"%1\" y1=\"%2\" x2=\"%3\" y2=\"%2\" stroke=\"#333\"/>\n<line x1=\"%1\" y1=\"%2\" "
               "x2=\"%1\" y2=\"%4\" stroke=\"#333\"/>\n")
           .arg(px0)
           .arg(num(py0))
           .arg(px1)
           .arg(num(py1));
  for (double d = d0; d <= d1; ++d) {
    s += QString("<line x1=\"%1\" y1=\"%2\" x2=\"%3\" y2=\"%2\" stroke=\"#eee\"/>\n<text x=\"%4\" y=\"%5\" "
                 "text-anchor=\"end\" fill=\"#555\">%6</text>\n")
             .arg(px0)
             .arg(num(my(std::pow(10, d))))
             .arg(px1)
             .arg(px0 - 6)
             .arg(num(my(std::pow(10, d)) + 4))
             .arg(tickLabel(std::pow(10, d)));
  }
  const char* colors[2] = {"#1f77b4", "#d62728"};
  const char* names[2] = {"batching rule", "for-loop fallback"};
  for (int k = 0; k < 2; ++k) {
    QString path;
    for (const auto& [b, ns] : pts[k]) {
      path += QString(path.isEmpty() ? "M%1,%2" : " L%1,%2").arg(num(mx(b))).arg(num(my(ns)));
      s += QString("<circle cx=\"%1\" cy=\"%2\" r=\"4\" fill=\"%3\"><title>%4, B = %5: %6</title></circle>\n")
               .arg(num(mx(b)))
               .arg(num(my(ns)))
               .arg(colors[k], names[k])
               .arg(b)
               .arg(formatNs(ns));
    }
    if (!path.isEmpty()) s += QString("<path d=\"%1\" fill=\"none\" stroke=\"%2\"/>\n").arg(path, colors[k]);
    s += QString("<rect x=\"%1\" y=\"%2\" width=\"12\" height=\"10\" fill=\"%3\"/><text x=\"%4\" y=\"%5\">%6</text>\n")
             .arg(px0 + 10 + 200 * k)
             .arg(num(py1 - 4))
             .arg(colors[k])
             .arg(px0 + 28 + 200 * k)
             .arg(num(py1 + 6))
             .arg(names[k]);
  }
  for (const auto& [b, ns] : pts[0]) {
    s += QString("<text x=\"%1\" y=\"%2\" text-anchor=\"middle\" fill=\"#555\">%3</text>\n")
             .arg(num(mx(b)))
             .arg(num(py0 + 16))
             .arg(b);
  }
  if (fit) {
    s += QString("<text x=\"%1\" y=\"%2\">fallback fit: %3 + %4 per batch element (R^2 %5); x: B</text>\n")
             .arg(px0 + 420)
             .arg(num(py1 + 6))
             .arg(formatNs(fit->intercept), formatNs(fit->ns_per_mode), num(fit->r2, 4));
  }
  return s;
}

QJsonObject mergedJson(const BenchRun& strata, const BenchRun* peer) {
  QJsonObject out;
  out["context"] = strata.context;
  QJsonArray all = strata.raw;
  if (peer != nullptr) {
    for (const QJsonValue& v : peer->raw) all.append(v);
    QJsonArray ratios;
    for (const BenchRatio& r : pairWithPeer(strata, *peer)) {
      ratios.append(QJsonObject{{"name", r.name}, {"strata_ns", r.strata_ns}, {"peer_ns", r.peer_ns},
                                {"ratio", r.ratio()}});
    }
    out["ratios"] = ratios;
  }
  out["benchmarks"] = all;
  return out;
}

}  // namespace strata::host
