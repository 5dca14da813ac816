// The embeddable host (strata/host/host.h) in-process: it loads, reports, applies
// admin changes written by another store connection (as another process would),
// watches its directory, stops cleanly, and refuses bad input with the reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "strata/db/store.h"
#include "strata/dispatcher.h"
#include "strata/host/host.h"
#include "strata/ops.h"

namespace strata::host {
namespace {

using ::testing::HasSubstr;

QString plugin(const char* name) { return QString(STRATA_PLUGIN_BUILD_DIR) + "/lib" + name + ".so"; }

// Events the host reported, and a bounded wait for one.
struct Events {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<HostEvent> all;
  void add(const HostEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    all.push_back(e);
    cv.notify_all();
  }
  // Waits up to 10 s for an event of `kind` for `bundle` ("" for any) after index `from`.
  bool waitFor(HostEvent::Kind kind, const std::string& bundle, size_t from = 0) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] {
      for (size_t i = from; i < all.size(); ++i) {
        if (all[i].kind == kind && (bundle.empty() || all[i].bundle == bundle)) return true;
      }
      return false;
    });
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return all.size();
  }
};

Tensor callMulAdd() {
  auto op = Dispatcher::singleton().findSchemaOrThrow("extension_cpp::mymuladd");
  return op.typed<Tensor(const Tensor&, const Tensor&, double)>().call(ones({3}), full({3}, 2.0), 1.0);
}

struct EmbeddedHostEnv {
  QTemporaryDir tmp;
  QString dir = tmp.path() + "/plugins";
  std::string store = (tmp.path() + "/strata.db").toStdString();
  EmbeddedHostEnv() { QDir().mkpath(dir); }
  void add(const char* name) {
    ASSERT_TRUE(QFile::copy(plugin(name), dir + "/lib" + name + ".so")) << name;
  }
  HostOptions options() const {
    HostOptions o;
    o.plugin_dir = dir.toStdString();
    o.store_path = store;
    o.id = "embedded-test";
    o.actor = "tester";
    return o;
  }
};

TEST(EmbeddedHost, LoadsReportsAppliesAdminChangesWatchesAndStops) {
  EmbeddedHostEnv env;
  env.add("muladd_1_0_0");
  env.add("muladd_1_1_0");
  Events events;
  {
    Host host(env.options());
    host.onEvent([&](const HostEvent& e) { events.add(e); });
    EXPECT_FALSE(host.running());
    EXPECT_TRUE(host.bundles().empty());
    host.start();
    ASSERT_TRUE(host.running());
    EXPECT_EQ(host.id(), "embedded-test");

    // The first load is done, and reported, when start() returns.
    EXPECT_EQ(host.loaded(), std::vector<std::string>{"muladd@1.1.0"});
    ASSERT_TRUE(events.waitFor(HostEvent::Kind::loaded, "muladd@1.1.0"));
    const auto rows = host.bundles();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].version, "1.0.0");
    EXPECT_EQ(rows[0].state, "superseded");
    EXPECT_EQ(rows[1].version, "1.1.0");
    EXPECT_EQ(rows[1].state, "loaded");
    EXPECT_EQ(rows[1].sha256.size(), 64u);
    EXPECT_TRUE(ops::allclose(callMulAdd(), full({3}, 3.0)));
    EXPECT_EQ(get_kernel("extension_cpp::mymuladd", "cpu").owner(), "muladd@1.1.0");

    // The store knows this host as live, with what it runs.
    db::Store admin(env.store);  // another connection: what `strata kernel ...` opens
    bool listed = false;
    for (const auto& h : admin.hosts()) {
      if (h.id != "embedded-test") continue;
      listed = true;
      EXPECT_TRUE(h.stopped.empty());
      EXPECT_EQ(h.login, "tester");
      EXPECT_EQ(h.plugins, QFileInfo(env.dir).absoluteFilePath().toStdString());
    }
    EXPECT_TRUE(listed);

    // An admin switches the CPU kernel off: the host applies it within a poll.
    size_t mark = events.size();
    const int64_t change = admin.setKernelState("extension_cpp::mymuladd", "CPU", false, "test", "tester");
    ASSERT_TRUE(events.waitFor(HostEvent::Kind::applied, "", mark));
    EXPECT_GE(host.lastApplied(), change);
    EXPECT_THROW(callMulAdd(), Error);
    admin.setKernelState("extension_cpp::mymuladd", "CPU", true, "test", "tester");
    mark = events.size();
    ASSERT_TRUE(events.waitFor(HostEvent::Kind::applied, "", mark));
    EXPECT_TRUE(ops::allclose(callMulAdd(), full({3}, 3.0)));

    // A pin swaps the bundle under the running host.
    mark = events.size();
    admin.pin("muladd", "1.0.0", "tester");
    ASSERT_TRUE(events.waitFor(HostEvent::Kind::loaded, "muladd@1.0.0", mark));
    EXPECT_TRUE(events.waitFor(HostEvent::Kind::unloaded, "muladd@1.1.0", mark));
    EXPECT_EQ(host.loaded(), std::vector<std::string>{"muladd@1.0.0"});
    EXPECT_EQ(get_kernel("extension_cpp::mymuladd", "cpu").owner(), "muladd@1.0.0");
    admin.unpin("muladd", "tester");

    // The directory is watched: a bundle that leaves is unloaded.
    mark = events.size();
    ASSERT_TRUE(QFile::remove(env.dir + "/libmuladd_1_1_0.so"));
    ASSERT_TRUE(QFile::remove(env.dir + "/libmuladd_1_0_0.so"));
    ASSERT_TRUE(events.waitFor(HostEvent::Kind::unloaded, "", mark));
    for (int i = 0; i < 500 && !host.loaded().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(host.loaded().empty());
    EXPECT_FALSE(Dispatcher::singleton().findSchema(parseOperatorName("extension_cpp::mymuladd")).has_value());

    // A bad bundle arriving is rejected with its reason, and reported.
    mark = events.size();
    std::ofstream((env.dir + "/libbroken.so").toStdString()) << "not a library";
    ASSERT_TRUE(events.waitFor(HostEvent::Kind::rejected, "", mark));

    // And one arriving is loaded.
    mark = events.size();
    env.add("muladd_1_1_0");
    ASSERT_TRUE(events.waitFor(HostEvent::Kind::loaded, "muladd@1.1.0", mark));

    host.stop();
    EXPECT_FALSE(host.running());
    host.stop();  // idempotent
    EXPECT_FALSE(Dispatcher::singleton().findSchema(parseOperatorName("extension_cpp::mymuladd")).has_value());
    for (const auto& h : admin.hosts()) {
      if (h.id == "embedded-test") EXPECT_FALSE(h.stopped.empty()) << "a stopped host is marked stopped";
    }
  }
  std::lock_guard<std::mutex> lock(events.mu);
  for (const auto& e : events.all) EXPECT_FALSE(e.text.empty());
}

TEST(EmbeddedHost, ReportsARejectedBundleWithItsReasonAtStart) {
  EmbeddedHostEnv env;
  std::ofstream((env.dir + "/libjunk.so").toStdString()) << "not a library";
  Events events;
  Host host(env.options());
  host.onEvent([&](const HostEvent& e) { events.add(e); });
  host.start();
  ASSERT_TRUE(events.waitFor(HostEvent::Kind::rejected, ""));
  std::lock_guard<std::mutex> lock(events.mu);
  bool found = false;
  for (const auto& e : events.all) {
    if (e.kind != HostEvent::Kind::rejected) continue;
    found = true;
    EXPECT_FALSE(e.reason.empty()) << e.text;
  }
  EXPECT_TRUE(found);
  ASSERT_EQ(host.bundles().size(), 1u);
  EXPECT_EQ(host.bundles()[0].state, "rejected");
}

// The host's thread loads in batches of its own, which wait for one this thread
// holds: start() and stop() inside a batch are errors, not a hang.
TEST(EmbeddedHost, StartAndStopInsideARegistrationBatchAreErrorsNotAHang) {
  EmbeddedHostEnv env;
  Host host(env.options());
  {
    RegistrationBatch batch;
    try {
      host.start();
      FAIL() << "start() inside a batch";
    } catch (const HostError& e) {
      EXPECT_THAT(e.what(), HasSubstr("strata host: start inside a RegistrationBatch: this thread holds one"));
    }
  }
  host.start();
  EXPECT_TRUE(host.running());
  {
    RegistrationBatch batch;
    EXPECT_THROW(host.stop(), HostError);
    EXPECT_TRUE(host.running());
  }
  host.stop();
  EXPECT_FALSE(host.running());
}

TEST(EmbeddedHost, BadOptionsAndStoresAreErrorsNamingTheThing) {
  EmbeddedHostEnv env;
  HostOptions o = env.options();
  o.plugin_dir = env.tmp.path().toStdString() + "/no-such-dir";
  {
    Host host(o);
    try {
      host.start();
      FAIL() << "start() on a missing directory";
    } catch (const HostError& e) {
      EXPECT_THAT(e.what(), HasSubstr("no-such-dir"));
      EXPECT_THAT(e.what(), HasSubstr("does not exist"));
    }
    EXPECT_FALSE(host.running());
  }
  o = env.options();
  o.store_path = env.tmp.path().toStdString() + "/missing/dir/strata.db";
  try {
    Host host(o);
    FAIL() << "a store in a missing directory";
  } catch (const HostError& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing/dir"));
  }
  // Another application's file is refused, and left as it was.
  const std::string other = env.tmp.path().toStdString() + "/notes.txt";
  std::ofstream(other) << "not a database, and not Strata's to repair";
  o = env.options();
  o.store_path = other;
  EXPECT_THROW(Host{o}, HostError);
  std::ifstream in(other);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not a database, and not Strata's to repair");
  o = env.options();
  o.check = "sometimes";
  EXPECT_THROW(Host{o}, HostError);
  o = env.options();
  o.plugin_dir.clear();
  EXPECT_THROW(Host{o}, HostError);
}

}  // namespace
}  // namespace strata::host
