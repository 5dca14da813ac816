// The host: 100 bundles loaded from a plugin directory into a fresh store, as
// `strata serve` does at startup (metadata, sha256, the private copy, dlopen, the
// load transaction, the store's rows). Each iteration loads 100 bundles never seen
// by this process before, generated from bench_bundle.cc's library by rewriting
// its name, since a library once loaded stays mapped (Note [The load transaction]).
#include <benchmark/benchmark.h>

#include <QByteArray>
#include <QDir>
#include <QFile>
#include <QLoggingCategory>
#include <QTemporaryDir>

#include <chrono>
#include <memory>

#include "plugin_host.h"
#include "strata/db/store.h"

namespace strata::bench {
namespace {

constexpr int kBundles = 100;
const QByteArray kTemplateName = "zbench000000";

// Writes kBundles renamed copies of the template into dir; false if the template
// does not hold its name where the rewrite expects it.
bool generateBundles(const QString& dir, int round, std::string* why) {
  QFile t(STRATA_BENCH_BUNDLE);
  if (!t.open(QIODevice::ReadOnly)) {
    *why = "cannot read the template bundle " STRATA_BENCH_BUNDLE;
    return false;
  }
  const QByteArray image = t.readAll();
  if (image.count(kTemplateName) < 2) {
    *why = "the template bundle does not embed its name in bundle.json";
    return false;
  }
  for (int i = 0; i < kBundles; ++i) {
    // "zb" + 4 digits of round + 6 of index: as long as the template's name.
    const QByteArray name = QByteArray("zb") + QByteArray::number(round).rightJustified(4, '0') +
                            QByteArray::number(i).rightJustified(6, '0');
    QByteArray copy = image;
    copy.replace(kTemplateName, name);
    QFile out(dir + "/lib" + QString::fromLatin1(name) + ".so");
    if (!out.open(QIODevice::WriteOnly) || out.write(copy) != copy.size()) {
      *why = "cannot write " + out.fileName().toStdString();
      return false;
    }
  }
  return true;
}

void host_load_100_bundles(benchmark::State& s) {
  // The host logs a line per bundle loaded; a benchmark measures loading, not logging.
  QLoggingCategory::setFilterRules("strata.host.info=false");
  static int round = 0;
  for (auto _ : s) {
    QTemporaryDir tmp;
    const QString dir = tmp.path() + "/plugins";
    QDir().mkpath(dir);
    std::string why;
    if (!generateBundles(dir, round++, &why)) {
      s.SkipWithError(why.c_str());
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    size_t loaded = 0;
    {
      db::Store store((tmp.path() + "/strata.db").toStdString());
      host::PluginHost host(dir, &store);
      host.sync();
      loaded = host.loaded().size();
      const auto end = std::chrono::steady_clock::now();
      s.SetIterationTime(std::chrono::duration<double>(end - start).count());
    }  // unloading is not timed: the manual time above ends before it
    if (loaded != kBundles) {
      s.SkipWithError(("loaded " + std::to_string(loaded) + " of " + std::to_string(kBundles) + " bundles").c_str());
      return;
    }
  }
  s.SetItemsProcessed(s.iterations() * kBundles);
}
// Few iterations: each maps 100 new libraries for the rest of the process.
BENCHMARK(host_load_100_bundles)->Name("host/load_100_bundles")->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::bench
