// The plugin host on real bundles (plugins/ and tests/bundles/) copied into temp
// plugin directories, with real SQLite stores.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "plugin_host.h"
#include "strata/cuda.h"
#include "strata/dispatcher.h"
#include "strata/modes/autocast.h"
#include "strata/modes/custom_op.h"
#include "strata/modes/log_mode.h"
#include "strata/modes/vmap.h"
#include "strata/ops.h"
#include "dispatch/test_util.h"

namespace strata::host {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::AllOf;

QString built(const char* dir, const char* name) { return QString(dir) + "/lib" + name + ".so"; }
QString plugin(const char* name) { return built(STRATA_PLUGIN_BUILD_DIR, name); }
QString testBundle(const char* name) { return built(STRATA_TEST_BUNDLE_DIR, name); }

struct Env {
  QTemporaryDir tmp;
  QString dir = tmp.path() + "/plugins";
  std::unique_ptr<db::Store> store;
  Env() {
    QDir().mkpath(dir);
    store = std::make_unique<db::Store>((tmp.path() + "/strata.db").toStdString());
  }
  void add(const QString& file, const QString& as = {}) {
    const QString to = dir + "/" + (as.isEmpty() ? QFileInfo(file).fileName() : as);
    ASSERT_TRUE(QFile::copy(file, to)) << file.toStdString() << " -> " << to.toStdString();
  }
  void remove(const QString& name) { ASSERT_TRUE(QFile::remove(dir + "/" + name)); }
  std::map<std::string, db::BundleRow> rows() {
    std::map<std::string, db::BundleRow> out;
    for (auto& b : store->bundles()) out[b.name + "@" + b.version + (b.state == "rejected" ? ":" + b.path : "")] = b;
    return out;
  }
  db::BundleRow row(const std::string& file) {
    for (auto& b : store->bundles()) {
      if (QFileInfo(QString::fromStdString(b.path)).fileName().toStdString() == file) return b;
    }
    ADD_FAILURE() << "no store row for " << file;
    return {};
  }
};

size_t registrationsOwnedBy(const std::string& prefix) {
  size_t n = 0;
  auto& d = Dispatcher::singleton();
  for (const auto& op : d.operatorNames()) {
    for (const auto& r : d.registrations(op)) n += r.owner.rfind(prefix, 0) == 0;
    for (const auto& r : d.rules(op)) n += r.owner.rfind(prefix, 0) == 0;
  }
  for (const auto& r : d.fallbacks()) n += r.owner.rfind(prefix, 0) == 0;
  return n;
}

Tensor mymuladd(const Tensor& a, const Tensor& b, double c) {
  return Dispatcher::singleton()
      .findSchemaOrThrow("extension_cpp::mymuladd")
      .typed<Tensor(const Tensor&, const Tensor&, double)>()
      .call(a, b, c);
}

bool mapped(const QString& file_name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(file_name.toStdString()) != std::string::npos) return true;
  }
  return false;
}

// The check discovery runs on every plugin's metadata, on JSON alone. Version numbers
// must fit the int QVersionNumber compares (a fuzzer found one that did not).
// A bundle hands its custom_op to the registrar, which keeps it (and so the op) for
// the bundle's lifetime and removes it with the rest, newest first.
TEST(BundleRegistrar, KeepsACustomOpForTheBundlesLifetime) {
  const OperatorName name = parseOperatorName("keep_cop::twice");
  auto registrar = std::make_unique<BundleRegistrar>("keep_cop", "1.0.0");
  {
    RegistrationOwnerGuard owner(registrar->owner());
    auto twice = modes::custom_op(
        "keep_cop::twice", [](const Tensor& x) { return ops::add(x, x); }, {"x"}, /*mutates_args=*/{});
    twice.register_fake([](const Tensor& x) { return ops::empty_like(x); });
    registrar->keep(std::move(twice));
  }  // the registrar holds it now
  ASSERT_TRUE(Dispatcher::singleton().findSchema(name).has_value());
  const Tensor two = Dispatcher::singleton().findSchemaOrThrow("keep_cop::twice").typed<Tensor(const Tensor&)>().call(
      ops::ones({2}));
  EXPECT_TRUE(ops::allclose(two, ops::full({2}, 2.0)));
  EXPECT_GT(registrationsOwnedBy("keep_cop@1.0.0"), 0u);
  registrar->clear();
  EXPECT_FALSE(Dispatcher::singleton().findSchema(name).has_value());
  EXPECT_EQ(registrationsOwnedBy("keep_cop@1.0.0"), 0u);
}

TEST(PluginHost, ChecksMetadataFieldByField) {
  const auto meta = [](const char* bundle_json) {
    QJsonObject m;
    m["IID"] = QStringLiteral(STRATA_BUNDLE_IID);
    m["MetaData"] = QJsonDocument::fromJson(bundle_json).object();
    return m;
  };
  const AbiVersion abi = hostSdkAbi();
  const std::string ok = R"({"name": "demo", "version": "999999999.0.1", "abi": {"major": )" +
                         std::to_string(abi.major) + R"(, "minor": 0}, "description": "d", "defines": ["demo"],
                         "implements": []})";
  QString why;
  const auto m = checkPluginMetaData(meta(ok.c_str()), &why);
  ASSERT_TRUE(m.has_value()) << why.toStdString();
  EXPECT_EQ(m->version, QVersionNumber(999999999, 0, 1));
  std::string big = ok;
  big.replace(big.find("999999999"), 9, "17777777777777777777777777777777777777");
  EXPECT_FALSE(checkPluginMetaData(meta(big.c_str()), &why).has_value());
  EXPECT_THAT(why.toStdString(), HasSubstr("is not a semantic version (MAJOR.MINOR.PATCH, each number below 1000000000)"));
  EXPECT_FALSE(isSemanticVersion("1000000000.0.0"));
  EXPECT_FALSE(isSemanticVersion("01.2.3"));
  EXPECT_TRUE(isSemanticVersion("1.2.3-rc.1+b5"));
  // semver.org's grammar exactly: no empty identifiers, no leading zero in a numeric one.
  for (const char* v : {"1.0.0-alpha", "1.0.0-0.3.7", "1.0.0-x.7.z.92", "1.0.0-x-y-z.--", "1.0.0+20130313144700",
                        "1.0.0-beta+exp.sha.5114f85", "1.0.0-0a", "1.0.0-a.01b"}) {
    EXPECT_TRUE(isSemanticVersion(v)) << v;
  }
  for (const char* v : {"1.0.0-", "1.0.0+", "1.0.0-01", "1.0.0+a+b", "1.0.0-a..b", "1.0.0-a.", "1.0.0+a_b", "1.0"}) {
    EXPECT_FALSE(isSemanticVersion(v)) << v;
  }
  for (const char* n : {"-x", ".", "..", ".hidden", ""}) EXPECT_FALSE(isBundleName(n)) << n;
  EXPECT_FALSE(isBundleName(QString(129, 'a')));
  EXPECT_TRUE(isBundleName("my_bundle-2.x"));
  std::string number = ok;
  number.replace(number.find(R"("999999999.0.1")"), 15, "1.0");
  EXPECT_FALSE(checkPluginMetaData(meta(number.c_str()), &why).has_value());
  EXPECT_THAT(why.toStdString(), HasSubstr("\"version\" must be a string such as \"1.0.0\", not a number"));
  std::string huge_abi = ok;
  huge_abi.replace(huge_abi.find(R"("major": )") + 9, std::to_string(abi.major).size(), "9223372036854775808");
  EXPECT_FALSE(checkPluginMetaData(meta(huge_abi.c_str()), &why).has_value());
  EXPECT_THAT(why.toStdString(), HasSubstr("with whole numbers from 0 to 2147483647, not {\"major\": 9223372036854776000"));
  std::string core = ok;
  core.replace(core.find(R"("defines": ["demo"])"), 19, R"("defines": ["core"])");
  EXPECT_FALSE(checkPluginMetaData(meta(core.c_str()), &why).has_value());
  EXPECT_THAT(why.toStdString(), HasSubstr("\"defines\" holds 'core', the host's own namespace"));
  QJsonObject other;
  other["IID"] = "org.example.Other/1";
  EXPECT_FALSE(checkPluginMetaData(other, &why).has_value());
  EXPECT_THAT(why.toStdString(), HasSubstr("plugin IID 'org.example.Other/1' is not Strata's"));
}

TEST(PluginHost, ReadsMetadataWithoutLoadingTheLibrary) {
  const BundleFile good = readBundleFile(plugin("muladd_1_1_0"));
  ASSERT_TRUE(good.metadata.has_value()) << good.error.toStdString();
  EXPECT_EQ(good.metadata->name, "muladd");
  EXPECT_EQ(good.metadata->version_text, "1.1.0");
  EXPECT_EQ(good.metadata->defines, QStringList{"extension_cpp"});
  EXPECT_EQ(good.sha256.size(), 64);
  const BundleFile bad = readBundleFile(testBundle("abi_major"));
  EXPECT_THAT(bad.error.toStdString(), HasSubstr("built for SDK ABI 1.0; this host's ABI is " + std::to_string(STRATA_SDK_ABI_MAJOR) + "." +
                                                    std::to_string(STRATA_SDK_ABI_MINOR)));
  EXPECT_FALSE(mapped("libabi_major.so"));
  EXPECT_FALSE(mapped("libmuladd_1_1_0.so"));
}

TEST(PluginHost, RejectsEveryBadBundleWithItsReasonAndLeavesNothingRegistered) {
  Env env;
  env.add(plugin("mylib"));
  env.add(plugin("muladd_1_1_0"));
  PluginHost host(env.dir, env.store.get());
  host.sync();  // the good ones first: the bad ones arrive later
  for (const char* b : {"abi_major", "abi_minor", "wrong_iid", "throws", "dup_define", "override", "orphan", "no_version",
                        "unlisted_def", "unlisted_impl", "unlisted_rule"}) {
    env.add(testBundle(b));
  }
  env.add(plugin("mylib"), "libmylib_copy.so");  // the same file twice: one bundle
  {
    std::ofstream corrupt((env.dir + "/libcorrupt.so").toStdString());
    corrupt << "\x7f" "ELF but not really a library";
  }
  host.sync();
  EXPECT_EQ(host.loaded().size(), 2u);
  EXPECT_EQ(env.row("libmylib.so").state, "loaded");
  EXPECT_EQ(env.row("libmuladd_1_1_0.so").state, "loaded");
  EXPECT_THAT(env.row("libabi_major.so").reason, HasSubstr("the major must match"));
  EXPECT_THAT(env.row("libabi_minor.so").reason, HasSubstr("needs SDK ABI " + std::to_string(STRATA_SDK_ABI_MAJOR) + ".99, newer than this host's " +
                          std::to_string(STRATA_SDK_ABI_MAJOR) + "." + std::to_string(STRATA_SDK_ABI_MINOR)));
  EXPECT_THAT(env.row("libwrong_iid.so").reason, HasSubstr("plugin IID 'org.example.NotStrata/1' is not Strata's"));
  EXPECT_THAT(env.row("libthrows.so").reason, HasSubstr("registration failed: the bundle gave up"));
  EXPECT_THAT(env.row("libdup_define.so").reason, HasSubstr("defines namespace 'mylib', which bundle mylib@1.0.0 already defines"));
  EXPECT_THAT(env.row("liboverride.so").reason, HasSubstr("may replace it only with allow_override"));
  EXPECT_THAT(env.row("liborphan.so").reason, HasSubstr("implements namespace 'ghost', which no loaded bundle defines"));
  EXPECT_THAT(env.row("libno_version.so").reason, HasSubstr("no \"version\""));
  // Handed over by handle, not through a library: held to the lists all the same.
  EXPECT_THAT(env.row("libunlisted_def.so").reason,
              HasSubstr("it defines operator elsewhere::f in namespace 'elsewhere', which bundle.json does not list"));
  EXPECT_THAT(env.row("libunlisted_impl.so").reason,
              HasSubstr("it registers a kernel for core::neg (Meta) in namespace 'core', which bundle.json lists "
                        "neither in \"defines\" nor in \"implements\""));
  EXPECT_THAT(env.row("libunlisted_rule.so").reason,
              HasSubstr("it registers a test_rule rule for core::neg in namespace 'core', which bundle.json lists "
                        "neither in \"defines\" nor in \"implements\""));
  EXPECT_THAT(env.row("libcorrupt.so").reason, HasSubstr("it has no Qt plugin metadata"));
  for (const auto& b : env.store->bundles()) {
    if (b.state == "rejected") EXPECT_FALSE(b.reason.empty()) << b.path;
  }
  EXPECT_EQ(env.store->bundles().size(), 14u);  // the copy of mylib is not a second bundle
  for (const char* owner : {"throws@", "dup_define@", "override@", "orphan@", "abi_", "wrong_iid@", "unlisted_"}) {
    EXPECT_EQ(registrationsOwnedBy(owner), 0u) << owner;
  }
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("throws_ns::f")).has_value());
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("dup_define::g")).has_value());
  EXPECT_FALSE(Dispatcher::singleton().findOp(parseOperatorName("elsewhere::f")).has_value());
  EXPECT_EQ(get_kernel("extension_cpp::mymuladd", "cpu").owner(), "muladd@1.1.0");
  EXPECT_TRUE(ops::allclose(mymuladd(ops::ones({3}), ops::ones({3}), 2.0), ops::full({3}, 3.0)));
}

// Entries named like libraries that are not files to read: each gets a row in the
// host's view saying why (none before), nothing blocks on a FIFO, and the good
// bundle beside them loads.
TEST(PluginHost, AFifoASymlinkToNothingAndALoopAreRowsWithTheirReason) {
  Env env;
  env.add(plugin("mylib"));
  ASSERT_EQ(::mkfifo((env.dir + "/libfifo.so").toLocal8Bit().constData(), 0600), 0);
  ASSERT_EQ(::symlink("libmissing.so", (env.dir + "/libghost.so").toLocal8Bit().constData()), 0);
  ASSERT_EQ(::symlink("libloop_b.so", (env.dir + "/libloop_a.so").toLocal8Bit().constData()), 0);
  ASSERT_EQ(::symlink("libloop_a.so", (env.dir + "/libloop_b.so").toLocal8Bit().constData()), 0);
  PluginHost host(env.dir, env.store.get());
  host.sync();
  EXPECT_EQ(host.loaded().count("mylib"), 1u);
  std::map<std::string, db::HostBundleRow> rows;
  for (auto& r : host.view()) rows[QFileInfo(QString::fromStdString(r.path)).fileName().toStdString()] = r;
  ASSERT_EQ(rows.count("libfifo.so"), 1u);
  EXPECT_EQ(rows["libfifo.so"].state, "rejected");
  EXPECT_THAT(rows["libfifo.so"].reason, HasSubstr("not a regular file (a FIFO, socket or device)"));
  EXPECT_THAT(rows["libghost.so"].reason, HasSubstr("a symbolic link that leads nowhere"));
  EXPECT_THAT(rows["libloop_a.so"].reason, HasSubstr("a symbolic link that leads nowhere"));
  EXPECT_THAT(rows["libloop_b.so"].reason, HasSubstr("go round in a loop"));
  EXPECT_EQ(rows["libmylib.so"].state, "loaded");
}

// The host's own namespace (core) needs no bundle to define it: a bundle that lists
// it in "implements" loads, and its rule for a core op goes with it.
TEST(PluginHost, ABundleMayImplementTheHostsOwnNamespace) {
  Env env;
  env.add(testBundle("implements_core"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  EXPECT_EQ(env.row("libimplements_core.so").state, "loaded") << env.row("libimplements_core.so").reason;
  EXPECT_EQ(registrationsOwnedBy("implements_core@"), 1u);
  ASSERT_TRUE(QFile::remove(env.dir + "/libimplements_core.so"));
  host.sync();
  EXPECT_TRUE(host.loaded().empty());
  EXPECT_EQ(registrationsOwnedBy("implements_core@"), 0u);
}

// Two bundles that define one namespace, seen in one scan: the first by name loads
// (whatever order the files were copied in), the other is rejected naming it; and a
// bundle already running keeps the namespace when the other arrives.
TEST(PluginHost, OfTwoBundlesDefiningANamespaceTheFirstByNameLoadsInOneScan) {
  {
    Env env;
    env.add(plugin("mylib"));
    env.add(testBundle("dup_define"));  // "dup_define" < "mylib"
    PluginHost host(env.dir, env.store.get());
    host.sync();
    EXPECT_EQ(env.row("libdup_define.so").state, "loaded") << env.row("libdup_define.so").reason;
    EXPECT_EQ(env.row("libmylib.so").state, "rejected");
    EXPECT_THAT(env.row("libmylib.so").reason,
                HasSubstr("defines namespace 'mylib', which bundle dup_define@1.0.0 already defines"));
  }
  Env env;
  env.add(plugin("mylib"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  env.add(testBundle("dup_define"));
  host.sync();
  EXPECT_EQ(env.row("libmylib.so").state, "loaded");
  EXPECT_EQ(env.row("libdup_define.so").state, "rejected");
}

// Note [Plugin trust]: what others could have written is refused, with the reason in
// the store and nothing of it registered, until it is safe again or allowed.
TEST(PluginHost, RefusesBundlesOthersCouldHaveWritten) {
  Env env;
  env.add(plugin("mylib"));
  env.add(plugin("muladd_1_1_0"));
  ASSERT_EQ(::chmod(QFile::encodeName(env.dir).constData(), 0777), 0);
  PluginHost host(env.dir, env.store.get());
  host.sync();
  EXPECT_TRUE(host.loaded().empty());
  EXPECT_EQ(env.row("libmylib.so").state, "rejected");
  EXPECT_THAT(env.row("libmylib.so").reason,
              HasSubstr("the plugin directory " + env.dir.toStdString() + " is writable by group and others (mode 0777)"));
  EXPECT_EQ(registrationsOwnedBy("mylib@"), 0u);
  ASSERT_EQ(::chmod(QFile::encodeName(env.dir).constData(), 0755), 0);
  host.sync();
  EXPECT_EQ(host.loaded().size(), 2u);
  // A file its group can write: refused, and the loaded one goes.
  ASSERT_EQ(::chmod(QFile::encodeName(env.dir + "/libmylib.so").constData(), 0664), 0);
  host.sync();
  EXPECT_EQ(host.loaded().count("mylib"), 0u);
  EXPECT_EQ(registrationsOwnedBy("mylib@"), 0u);
  EXPECT_THAT(env.row("libmylib.so").reason, HasSubstr("the file is writable by its group (mode 0664)"));
  // Allowed: loaded, the reason kept on its row.
  host.setTrustPolicy({.allow_insecure = true});
  host.sync();
  EXPECT_EQ(host.loaded().count("mylib"), 1u);
  EXPECT_EQ(env.row("libmylib.so").state, "loaded");
  EXPECT_THAT(env.row("libmylib.so").reason,
              HasSubstr("loaded with --allow-insecure-plugins although the file is writable by its group"));
}

TEST(PluginHost, RefusesASymlinkLeadingOutOfTheDirectory) {
  Env env;
  const QString outside = env.tmp.path() + "/elsewhere";
  QDir().mkpath(outside);
  QDir().mkpath(env.dir + "/versions");
  ASSERT_TRUE(QFile::copy(plugin("mylib"), outside + "/libmylib.so"));
  ASSERT_TRUE(QFile::copy(plugin("muladd_1_1_0"), env.dir + "/versions/libmuladd_1_1_0.so"));
  ASSERT_TRUE(QFile::link(outside + "/libmylib.so", env.dir + "/libmylib.so"));
  ASSERT_TRUE(QFile::link(env.dir + "/versions/libmuladd_1_1_0.so", env.dir + "/libmuladd.so"));  // inside: fine
  PluginHost host(env.dir, env.store.get());
  host.sync();
  EXPECT_EQ(host.loaded().count("mylib"), 0u);
  EXPECT_EQ(host.loaded().count("muladd"), 1u);
  EXPECT_THAT(env.row("libmylib.so").reason, HasSubstr("a symlink leading out of the plugin directory"));
}

// Note [Plugin trust]: the checks come before copies of one file are taken as one
// bundle. A refused copy of a bundle is a rejected row of its own, never parsed, and
// leaves the store's row for those bytes to the copy that passes, which loads
// whichever name sorts first.
TEST(PluginHost, ARefusedCopyOfABundleIsItsOwnRejectedRowAndTheGoodCopyLoads) {
  Env env;
  env.add(plugin("mylib"), "liba_mylib.so");  // sorts before the good copy
  env.add(plugin("mylib"));
  ASSERT_EQ(::chmod(QFile::encodeName(env.dir + "/liba_mylib.so").constData(), 0664), 0);
  ASSERT_TRUE(QFile::copy(plugin("mylib"), env.tmp.path() + "/libmylib.so"));
  ASSERT_TRUE(QFile::link(env.tmp.path() + "/libmylib.so", env.dir + "/libz_mylib.so"));  // leads out
  {
    std::ofstream junk((env.dir + "/libjunk.so").toStdString());
    junk << "\x7f" "ELF but not really a library";
  }
  ASSERT_EQ(::chmod(QFile::encodeName(env.dir + "/libjunk.so").constData(), 0666), 0);
  PluginHost host(env.dir, env.store.get());
  for (int pass = 0; pass < 2; ++pass) {  // a rescan decides the same
    host.sync();
    ASSERT_EQ(host.loaded().count("mylib"), 1u);
    EXPECT_EQ(host.loaded().at("mylib").path, env.dir + "/libmylib.so");
    std::map<std::string, db::HostBundleRow> by_file;
    for (const auto& v : host.view()) by_file[QFileInfo(QString::fromStdString(v.path)).fileName().toStdString()] = v;
    ASSERT_EQ(by_file.size(), 4u);
    EXPECT_EQ(by_file["libmylib.so"].state, "loaded");
    EXPECT_EQ(by_file["liba_mylib.so"].state, "rejected");
    EXPECT_THAT(by_file["liba_mylib.so"].reason, HasSubstr("refused: the file is writable by its group (mode 0664)"));
    EXPECT_EQ(by_file["libz_mylib.so"].state, "rejected");
    EXPECT_THAT(by_file["libz_mylib.so"].reason, HasSubstr("refused: it is a symlink leading out of the plugin directory"));
    // Never parsed: no metadata (the row is named by its file), and a file that is no
    // plugin at all is refused for what the checks found, not for what it holds.
    EXPECT_EQ(by_file["liba_mylib.so"].name, "liba_mylib.so");
    EXPECT_EQ(by_file["liba_mylib.so"].version, "");
    EXPECT_THAT(by_file["libjunk.so"].reason, HasSubstr("refused: the file is writable by group and others"));
    EXPECT_THAT(by_file["libjunk.so"].reason, Not(HasSubstr("it has no Qt plugin metadata")));
    // The store's row for mylib's bytes is the loaded copy's.
    size_t mylib_rows = 0;
    for (const auto& b : env.store->bundles()) {
      if (b.sha256 == host.loaded().at("mylib").sha256.toStdString()) {
        ++mylib_rows;
        EXPECT_EQ(b.state, "loaded");
        EXPECT_EQ(b.path, (env.dir + "/libmylib.so").toStdString());
      }
    }
    EXPECT_EQ(mylib_rows, 1u);
  }
}

TEST(PluginHost, RefusesABundleAnotherUserDroppedIntoAnOpenDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a file another user owns needs root";
  Env env;
  env.add(plugin("mylib"));
  const QByteArray file = QFile::encodeName(env.dir + "/libmylib.so");
  ASSERT_EQ(::chown(file.constData(), 65534, 65534), 0);  // nobody
  ASSERT_EQ(::chmod(QFile::encodeName(env.dir).constData(), 0777), 0);
  PluginHost host(env.dir, env.store.get());
  host.sync();
  EXPECT_TRUE(host.loaded().empty());
  EXPECT_THAT(env.row("libmylib.so").reason, HasSubstr("is writable by group and others"));
  ASSERT_EQ(::chmod(QFile::encodeName(env.dir).constData(), 0755), 0);
  host.sync();  // the directory is safe now; the file is still nobody's
  EXPECT_TRUE(host.loaded().empty());
  EXPECT_THAT(env.row("libmylib.so").reason, HasSubstr("the file is owned by uid 65534"));
  EXPECT_THAT(env.row("libmylib.so").reason, HasSubstr("neither this host's user (uid 0"));
}

TEST(PluginHost, RequireTrustedLoadsOnlyWhatTheTrustListHolds) {
  Env env;
  env.add(plugin("mylib"));
  env.add(plugin("muladd_1_1_0"));
  PluginHost host(env.dir, env.store.get());
  host.setTrustPolicy({.require_trusted = true});
  host.sync();
  EXPECT_TRUE(host.loaded().empty());
  EXPECT_THAT(env.row("libmylib.so").reason, HasSubstr("not on the trust list"));
  const BundleFile f = readBundleFile(env.dir + "/libmylib.so");
  env.store->trust({f.sha256.toStdString(), "mylib", "1.0.0", "", ""}, "ann");
  host.sync();
  EXPECT_EQ(host.loaded().count("mylib"), 1u);
  EXPECT_EQ(host.loaded().count("muladd"), 0u);
  // Trust is by content: a different file under the trusted name is not trusted.
  env.remove("libmylib.so");
  env.add(plugin("muladd_1_1_0"), "libmylib.so");
  host.sync();
  EXPECT_EQ(host.loaded().count("mylib"), 0u);
  EXPECT_TRUE(host.loaded().empty());
  const auto audit = env.store->auditLog();
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit.back().action, "bundle.trust");
  EXPECT_EQ(audit.back().target, "mylib@1.0.0");
}

// The store records what each loaded bundle registered (what `strata plugins show`
// prints), owner by owner, and forgets it when the bundle goes.
TEST(PluginHost, CheckOnLoadRecordsTheResultAndEnforceRejectsABundleThatFails) {
  {
    Env env;
    env.add(plugin("muladd_1_1_0"));
    env.add(testBundle("broken_check"));
    PluginHost host(env.dir, env.store.get());
    host.setCheckPolicy(CheckPolicy::record);
    host.sync();
    EXPECT_EQ(env.row("libbroken_check.so").state, "loaded");
    EXPECT_THAT(env.row("libbroken_check.so").reason,
                HasSubstr("strata check failed: broken_check::sneaky test_schema (sample 0): argument 'x' was mutated"));
    EXPECT_EQ(env.row("libmuladd_1_1_0.so").state, "loaded");
    EXPECT_THAT(env.row("libmuladd_1_1_0.so").reason, HasSubstr("strata check passed"));
  }
  Env env;
  env.add(plugin("muladd_1_1_0"));
  env.add(testBundle("broken_check"));
  PluginHost host(env.dir, env.store.get());
  host.setCheckPolicy(CheckPolicy::enforce);
  host.sync();
  const db::BundleRow broken = env.row("libbroken_check.so");
  EXPECT_EQ(broken.state, "rejected");
  EXPECT_THAT(broken.reason, HasSubstr("strata check failed: broken_check::sneaky test_schema"));
  EXPECT_EQ(registrationsOwnedBy("broken_check@"), 0u);
  EXPECT_FALSE(Dispatcher::singleton().findSchema(parseOperatorName("broken_check::sneaky")).has_value());
  EXPECT_EQ(env.row("libmuladd_1_1_0.so").state, "loaded");
  // Each broken op fails exactly its own test.
  std::map<std::string, std::vector<std::string>> failed;
  {
    Env again;
    again.add(testBundle("broken_check"));
    PluginHost h2(again.dir, again.store.get());
    h2.sync();
    for (const auto& row : checkOwnedOps("broken_check@1.0.0")) {
      if (!row.passed) failed[row.op].push_back(row.test);
    }
  }
  EXPECT_EQ(failed["broken_check::sneaky"], std::vector<std::string>{"test_schema"});
  EXPECT_EQ(failed["broken_check::wrong_fake"], std::vector<std::string>{"test_faketensor"});
  EXPECT_EQ(failed["broken_check::wrong_backward"], std::vector<std::string>{"gradcheck"});
}

TEST(PluginHost, TheStoreRecordsEachBundlesRegistrations) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  env.add(plugin("flop_counter"));
  env.add(plugin("mylib"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().size(), 3u);
  std::map<std::string, std::string> ops;
  std::map<std::string, std::string> tags;
  for (const auto& o : env.store->operators()) {
    ops[o.name] = o.owner + " " + o.schema;
    tags[o.name] = o.tags + " / " + o.alias_analysis;
  }
  EXPECT_EQ(tags["mylib::sin"], "pointwise / FROM_SCHEMA");  // the def's tags, stored
  EXPECT_EQ(tags["extension_cpp::mymuladd"], " / FROM_SCHEMA");
  EXPECT_EQ(ops["extension_cpp::mymuladd"], "muladd@1.1.0 extension_cpp::mymuladd(Tensor a, Tensor b, float c) -> Tensor");
  EXPECT_EQ(ops["extension_cpp::mysub"], "muladd@1.1.0 extension_cpp::mysub(Tensor a, Tensor b) -> Tensor");
  EXPECT_EQ(ops.count("core::add.Tensor"), 0u);  // builtin ops are not a bundle's
  std::set<std::string> regs;
  for (const auto& r : env.store->registrations("extension_cpp::mymuladd")) regs.insert(r.key + " " + r.kind + " " + r.owner);
  EXPECT_TRUE(regs.count("def def muladd@1.1.0")) << ::testing::PrintToString(regs);
  EXPECT_TRUE(regs.count("CPU unboxed muladd@1.1.0"));
  EXPECT_TRUE(regs.count("Meta fake muladd@1.1.0"));  // its fake impl (register_fake)
  bool rule = false;
  for (const auto& r : regs) rule |= r.rfind("torch_dispatch[", 0) == 0 && r.find("rule flop_counter@1.0.0") != std::string::npos;
  EXPECT_TRUE(rule) << ::testing::PrintToString(regs);
  env.remove("libflop_counter.so");
  host.sync();
  for (const auto& r : env.store->registrations()) EXPECT_NE(r.owner, "flop_counter@1.0.0") << r.op << " " << r.key;
  EXPECT_FALSE(env.store->registrations("extension_cpp::mymuladd").empty());
}

// Note [Static registrations in bundles]: STRATA_LIBRARY blocks at namespace scope run
// inside the load transaction, owned by the bundle, and go with it; the library stays
// mapped, so when the same file loads again its kept blocks run again.
TEST(PluginHost, StaticLibraryBlocksRunInTheTransactionOwnedByTheBundleAndGoWithIt) {
  Env env;
  auto& d = Dispatcher::singleton();
  const OperatorName twice = parseOperatorName("static_init::twice");
  auto nothing_left = [&] {
    EXPECT_FALSE(d.findOp(twice).has_value());
    EXPECT_FALSE(d.findOp(parseOperatorName("static_init::thrice")).has_value());
    EXPECT_EQ(registrationsOwnedBy("static_init@"), 0u);
    for (const auto& o : env.store->operators()) EXPECT_NE(o.owner, "static_init@1.0.0") << o.name;
    for (const auto& r : env.store->registrations()) EXPECT_NE(r.owner, "static_init@1.0.0") << r.op << " " << r.key;
  };
  nothing_left();
  PluginHost host(env.dir, env.store.get());
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first load: the static initializers run" : "the same file again: they do not");
    env.add(testBundle("static_init"));
    host.sync();
    ASSERT_EQ(env.row("libstatic_init.so").state, "loaded") << env.row("libstatic_init.so").reason;
    std::set<std::string> regs;
    for (const auto& r : d.registrations(twice)) {
      regs.insert((r.what == RegistrationInfo::What::Def ? std::string("def") : std::string(toString(r.key))) + " " +
                  r.owner);
      EXPECT_THAT(r.debug, HasSubstr("static_init.cc:"));
    }
    EXPECT_EQ(regs, (std::set<std::string>{"def static_init@1.0.0", "CPU static_init@1.0.0",
                                           "Meta static_init@1.0.0"}));
    std::set<std::string> stored;
    for (const auto& r : env.store->registrations("static_init::twice")) stored.insert(r.key + " " + r.owner);
    EXPECT_EQ(stored, (std::set<std::string>{"def static_init@1.0.0", "CPU static_init@1.0.0",
                                             "Meta static_init@1.0.0"}));
    auto call = [&](const char* name) {
      return d.findSchemaOrThrow(name).typed<Tensor(const Tensor&)>().call(ops::ones({2}));
    };
    EXPECT_TRUE(ops::allclose(call("static_init::twice"), ops::full({2}, 2.0)));
    EXPECT_TRUE(ops::allclose(call("static_init::thrice"), ops::full({2}, 3.0)));  // registerAll's, beside them
    env.remove("libstatic_init.so");
    host.sync();
    EXPECT_EQ(host.loaded().size(), 0u);
    nothing_left();
  }
  EXPECT_TRUE(mapped("libstatic_init.so"));  // kept mapped, so its blocks could run again
}

// Registrations a bundle's static initializers make any other way register nothing,
// and reject the bundle, naming each; a block that breaks the transaction rejects it
// too. Nothing of any of them stays, in the dispatcher or the store.
TEST(PluginHost, OtherStaticRegistrationsAndBadBlocksRejectTheBundleAndLeaveNothing) {
  Env env;
  auto& d = Dispatcher::singleton();
  const size_t static_errors = detail::staticRegistrationErrors().size();
  for (const char* b : {"static_escape", "static_undeclared", "static_throws"}) env.add(testBundle(b));
  PluginHost host(env.dir, env.store.get());
  for (int round = 0; round < 2; ++round) {
    host.sync();
    EXPECT_EQ(host.loaded().size(), 0u);
    const db::BundleRow escape = env.row("libstatic_escape.so");
    EXPECT_EQ(escape.state, "rejected");
    EXPECT_THAT(escape.reason, HasSubstr("registers from static initializers outside STRATA_LIBRARY blocks"));
    EXPECT_THAT(escape.reason, HasSubstr("library static_escape (registered at"));
    EXPECT_THAT(escape.reason, HasSubstr("def static_escape::f(Tensor x) -> Tensor"));
    EXPECT_THAT(escape.reason, HasSubstr("impl static_escape::f at CPU"));
    EXPECT_THAT(escape.reason, HasSubstr("impl core::neg at Meta (a static registerImpl)"));
    EXPECT_THAT(env.row("libstatic_undeclared.so").reason,
                HasSubstr("defines operators in namespace 'not_in_metadata', which bundle.json does not list"));
    EXPECT_THAT(env.row("libstatic_throws.so").reason,
                AllOf(HasSubstr("registration failed: the FRAGMENT block for namespace static_throws at "),
                      HasSubstr("static_throws.cc:13 failed: the block gave up half way")));
    for (const char* op : {"static_escape::f", "static_escape::g", "static_undeclared::ok",
                           "not_in_metadata::sneaky", "static_throws::ok", "static_throws::half"}) {
      EXPECT_FALSE(d.findOp(parseOperatorName(op)).has_value()) << op;
    }
    for (const auto& r : d.registrations(parseOperatorName("core::neg"))) {
      EXPECT_NE(r.owner, "static_escape") << r.debug;
      EXPECT_THAT(r.debug, Not(HasSubstr("a static registerImpl")));
    }
    for (const char* owner : {"static_escape", "static_undeclared@", "static_throws@"}) {
      EXPECT_EQ(registrationsOwnedBy(owner), 0u) << owner;
    }
    EXPECT_TRUE(env.store->operators().empty());
    EXPECT_TRUE(env.store->registrations().empty());
    EXPECT_EQ(detail::staticRegistrationErrors().size(), static_errors);  // the throw was the transaction's
    env.remove("libstatic_escape.so");  // and back: the same answer, from what the host kept
    host.sync();
    env.add(testBundle("static_escape"));
  }
}

TEST(PluginHost, LoadsTheHighestVersionUnlessPinned) {
  Env env;
  env.add(plugin("muladd_1_0_0"));
  env.add(plugin("muladd_1_1_0"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  EXPECT_EQ(env.row("libmuladd_1_0_0.so").state, "superseded");
  EXPECT_THAT(env.row("libmuladd_1_0_0.so").reason, HasSubstr("superseded by muladd@1.1.0"));
  EXPECT_TRUE(Dispatcher::singleton().findSchema(parseOperatorName("extension_cpp::mysub")).has_value());
  env.store->pin("muladd", "1.0.0", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.0.0");
  EXPECT_EQ(env.row("libmuladd_1_1_0.so").state, "superseded");
  EXPECT_FALSE(Dispatcher::singleton().findSchema(parseOperatorName("extension_cpp::mysub")).has_value());
  EXPECT_EQ(get_kernel("extension_cpp::mymuladd", "cpu").owner(), "muladd@1.0.0");
  env.store->unpin("muladd", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
}

// Note [Choosing a version]: a new version that fails to load gives way to the one
// that ran before (and its dependents come back with it), is not tried again on the
// next rescan, and a pin to a version that is not there leaves the highest running.
TEST(PluginHost, AVersionThatFailsToLoadGivesWayToTheNextAndIsNotRetried) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  env.add(plugin("flop_counter"));  // implements extension_cpp
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().at("muladd").version, "1.1.0");
  ASSERT_EQ(host.loaded().count("flop_counter"), 1u);
  const Tensor a = ops::ones({3});
  env.add(testBundle("muladd_1_2_0_broken"));
  const QStringList what = host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0") << what.join("\n").toStdString();
  EXPECT_EQ(host.loaded().count("flop_counter"), 1u);
  EXPECT_TRUE(ops::allclose(mymuladd(a, a, 2.0), ops::full({3}, 3.0)));
  EXPECT_EQ(env.row("libmuladd_1_2_0_broken.so").state, "rejected");
  EXPECT_THAT(env.row("libmuladd_1_2_0_broken.so").reason, HasSubstr("muladd 1.2.0 is broken"));
  EXPECT_EQ(env.row("libmuladd_1_1_0.so").state, "loaded");
  EXPECT_EQ(env.row("libflop_counter.so").state, "loaded");
  EXPECT_THAT(what.join("\n").toStdString(), HasSubstr("loaded muladd@1.1.0"));
  // The next rescan (what an admin's change or a new file brings) neither retries
  // 1.2.0 nor reloads 1.1.0.
  const uint64_t seq = host.loaded().at("muladd").seq;
  EXPECT_TRUE(host.sync().isEmpty());
  EXPECT_EQ(host.loaded().at("muladd").seq, seq);
  EXPECT_EQ(env.row("libmuladd_1_2_0_broken.so").state, "rejected");
  // An older version beside it is superseded by the one that runs, not by 1.2.0.
  env.add(plugin("muladd_1_0_0"));
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  EXPECT_EQ(env.row("libmuladd_1_0_0.so").state, "superseded");
  EXPECT_THAT(env.row("libmuladd_1_0_0.so").reason, HasSubstr("superseded by muladd@1.1.0"));
  // A pin to a version that is not there: the highest that loads runs, and says so.
  env.store->pin("muladd", "2.0.0", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  EXPECT_THAT(env.row("libmuladd_1_1_0.so").reason,
              HasSubstr("pinned to 2.0.0, which is not in the plugin directory; muladd@1.1.0 runs instead"));
  EXPECT_THAT(env.row("libmuladd_1_0_0.so").reason, HasSubstr("pinned to 2.0.0, which is not in the plugin directory"));
  // A pin to the version that cannot load: the same.
  env.store->pin("muladd", "1.2.0", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  EXPECT_THAT(env.row("libmuladd_1_1_0.so").reason, HasSubstr("pinned to 1.2.0, which cannot load"));
  // A pin to a version that loads decides; unpinned, the highest that loads is back.
  env.store->pin("muladd", "1.0.0", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.0.0");
  EXPECT_EQ(env.row("libmuladd_1_0_0.so").reason, "");
  EXPECT_THAT(env.row("libmuladd_1_1_0.so").reason, HasSubstr("not the pinned version (1.0.0)"));
  env.store->unpin("muladd", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  EXPECT_EQ(env.row("libmuladd_1_1_0.so").reason, "");
  EXPECT_EQ(env.row("libmuladd_1_2_0_broken.so").state, "rejected");
}

// A bundle's next version may change an op's C++ signature, and an admin may pin
// back to the one before, in a running host: each version's typed handles go with
// it (Note [Who keeps a typed signature]).
TEST(PluginHost, AVersionThatChangesAnOpsCppSignatureReplacesTheOneBefore) {
  Env env;
  env.add(testBundle("typed_sig_1_0_0"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().at("typed_sig").version, "1.0.0");
  env.add(testBundle("typed_sig_2_0_0"));
  QStringList what = host.sync();
  ASSERT_EQ(host.loaded().count("typed_sig"), 1u) << what.join("\n").toStdString();
  EXPECT_EQ(host.loaded().at("typed_sig").version, "2.0.0") << what.join("\n").toStdString();
  EXPECT_EQ(env.row("libtyped_sig_2_0_0.so").state, "loaded");
  EXPECT_NE(Dispatcher::singleton().findSchemaOrThrow("typed_sig::f").schema().str().find("int y"), std::string::npos);
  env.store->pin("typed_sig", "1.0.0", "ann");
  what = host.sync();
  ASSERT_EQ(host.loaded().count("typed_sig"), 1u) << what.join("\n").toStdString();
  EXPECT_EQ(host.loaded().at("typed_sig").version, "1.0.0") << what.join("\n").toStdString();
  EXPECT_NE(Dispatcher::singleton().findSchemaOrThrow("typed_sig::f").schema().str().find("float y"), std::string::npos);
}

// Note [A swap without a gap]: a thread calling a bundle's op all along never fails
// while the host upgrades it, falls back from a broken newer version, or is pinned
// back: each swap is published at once.
TEST(PluginHost, CallsOnAnotherThreadSeeNoGapWhileVersionsSwap) {
  Env env;
  env.add(plugin("muladd_1_0_0"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().at("muladd").version, "1.0.0");
  const OperatorHandle h = Dispatcher::singleton().findSchemaOrThrow("extension_cpp::mymuladd");
  std::atomic<bool> stop{false};
  std::atomic<long> calls{0}, failures{0};
  std::string first_failure;
  std::thread caller([&] {
    while (!stop.load()) {
      try {
        Stack s{IValue(ops::ones({3})), IValue(ops::ones({3})), IValue(2.0)};
        h.callBoxed(s);
      } catch (const std::exception& e) {
        if (failures++ == 0) first_failure = e.what();
      }
      ++calls;
    }
  });
  auto callsDuring = [&](auto&& change) {
    const long before = calls.load();
    change();
    while (calls.load() < before + 100) std::this_thread::yield();  // the caller ran across it
  };
  callsDuring([&] {
    env.add(plugin("muladd_1_1_0"));
    host.sync();
  });
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  callsDuring([&] {
    env.add(testBundle("muladd_1_2_0_broken"));
    host.sync();
  });
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  callsDuring([&] {
    env.store->pin("muladd", "1.0.0", "ann");
    host.sync();
  });
  EXPECT_EQ(host.loaded().at("muladd").version, "1.0.0");
  stop = true;
  caller.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
}

// A library that fails as it loads because it needs a symbol no library defines is
// rejected with the reason (every symbol is bound at load), and the version that ran
// before stays, its dependents with it; nothing aborts the host. (A static
// initializer that throws is not tested: C++ makes that std::terminate, and what GCC
// does instead, unwinding out of the dynamic loader, leaks the loader's state.)
TEST(PluginHost, ALibraryThatFailsAsItLoadsIsRejectedAndTheRunningVersionStays) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  env.add(plugin("flop_counter"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().at("muladd").version, "1.1.0");
  const struct {
    const char* bundle;
    const char* why;
  } cases[] = {
      {"undefined_symbol", "strata_test_no_such_function"},
  };
  for (const auto& c : cases) {
    env.add(testBundle(c.bundle));
    const QStringList what = host.sync();
    EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0") << c.bundle << ": " << what.join("\n").toStdString();
    EXPECT_EQ(host.loaded().count("flop_counter"), 1u) << c.bundle;
    EXPECT_TRUE(ops::allclose(mymuladd(ops::ones({3}), ops::ones({3}), 2.0), ops::full({3}, 3.0))) << c.bundle;
    const std::string file = std::string("lib") + c.bundle + ".so";
    EXPECT_EQ(env.row(file).state, "rejected") << c.bundle;
    EXPECT_THAT(env.row(file).reason, HasSubstr(c.why)) << c.bundle;
  }
}

// A host that starts with a broken newest version loads the next one in its first pass.
TEST(PluginHost, AHostStartingBesideABrokenNewestVersionLoadsTheNext) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  env.add(testBundle("muladd_1_2_0_broken"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().count("muladd"), 1u);
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  EXPECT_EQ(env.row("libmuladd_1_1_0.so").state, "loaded");
  EXPECT_THAT(env.row("libmuladd_1_2_0_broken.so").reason, HasSubstr("muladd 1.2.0 is broken"));
  EXPECT_TRUE(ops::allclose(mymuladd(ops::ones({3}), ops::ones({3}), 2.0), ops::full({3}, 3.0)));
}

// Note [Choosing a version]: whatever makes the newest version fail, once the running
// version is back, later rescans leave it alone (no unload and reload per rescan):
// a namespace no one defines, a dependency cycle, and a failure while the bundle has
// dependents of dependents. An admin's change to the bundle tries the file again.
TEST(PluginHost, NoFailureMakesLaterRescansBounceTheRunningVersion) {
  struct Case {
    const char* newer;
    std::vector<const char*> others;
    const char* why;
  };
  const Case cases[] = {
      {"muladd_1_3_0_orphan", {}, "implements namespace 'ghost', which no loaded bundle defines"},
      {"muladd_1_4_0_cycle", {"cyc_b"}, "its namespace dependencies form a cycle"},
      {"muladd_1_2_0_broken", {"chain_b", "chain_c"}, "muladd 1.2.0 is broken"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.newer);
    Env env;
    env.add(plugin("muladd_1_1_0"));
    for (const char* o : c.others) env.add(testBundle(o));
    env.add(testBundle(c.newer));
    PluginHost host(env.dir, env.store.get());
    const QStringList first = host.sync();
    ASSERT_EQ(host.loaded().count("muladd"), 1u) << first.join("\n").toStdString();
    EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
    for (const char* o : c.others) EXPECT_EQ(host.loaded().count(o), 1u) << o << ": " << first.join("\n").toStdString();
    EXPECT_EQ(env.row("lib" + std::string(c.newer) + ".so").state, "rejected");
    EXPECT_THAT(env.row("lib" + std::string(c.newer) + ".so").reason, HasSubstr(c.why));
    std::map<QString, uint64_t> seqs;
    for (const auto& [name, l] : host.loaded()) seqs[name] = l.seq;
    const QStringList again = host.sync();
    EXPECT_TRUE(again.isEmpty()) << again.join("\n").toStdString();
    for (const auto& [name, l] : host.loaded()) EXPECT_EQ(l.seq, seqs[name]) << name.toStdString();
    // 'strata plugins enable muladd' (not disabled): the failed file is tried again.
    env.store->setBundleDisabled("muladd", false, "", "ann");
    const QStringList retried = host.sync();
    EXPECT_THAT(retried.join("\n").toStdString(), HasSubstr("rejected muladd@"));
    EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
    EXPECT_TRUE(host.sync().isEmpty());
    // Another bundle arriving may try it once more (the others changed), and that is all.
    env.add(plugin("mylib"));
    host.sync();
    EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
    EXPECT_EQ(host.loaded().count("mylib"), 1u);
    const QStringList settled = host.sync();
    EXPECT_TRUE(settled.isEmpty()) << settled.join("\n").toStdString();
  }
}

// An upgrade that makes a cycle gives way on its own: the running bundle on the other
// side of the cycle keeps its version (an older one beside it is not taken).
TEST(PluginHost, OnlyTheVersionThatMadeACycleGivesWay) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  env.add(testBundle("cyc_b"));
  env.add(testBundle("cyc_b_0_9_0"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().count("cyc_b"), 1u);
  ASSERT_EQ(host.loaded().at("cyc_b").version, "1.0.0");
  env.add(testBundle("muladd_1_4_0_cycle"));
  const QStringList what = host.sync();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0") << what.join("\n").toStdString();
  EXPECT_EQ(host.loaded().at("cyc_b").version, "1.0.0") << what.join("\n").toStdString();
  EXPECT_THAT(env.row("libmuladd_1_4_0_cycle.so").reason, HasSubstr("form a cycle"));
  EXPECT_EQ(env.row("libcyc_b.so").state, "loaded");
  EXPECT_TRUE(host.sync().isEmpty());
}

// A dependent waits for the version its definer falls back to, when that one is the
// version that defines what it needs (the newer one, which fails, does not).
TEST(PluginHost, ADependentWaitsForTheVersionItsDefinerFallsBackTo) {
  Env env;
  env.add(plugin("flop_counter"));  // implements extension_cpp; sorts before muladd
  env.add(plugin("muladd_1_1_0"));
  env.add(testBundle("muladd_1_5_0_broken"));  // defines muladd_next only
  PluginHost host(env.dir, env.store.get());
  const QStringList what = host.sync();
  ASSERT_EQ(host.loaded().count("muladd"), 1u) << what.join("\n").toStdString();
  EXPECT_EQ(host.loaded().at("muladd").version, "1.1.0");
  EXPECT_EQ(host.loaded().count("flop_counter"), 1u) << what.join("\n").toStdString();
  EXPECT_EQ(env.row("libflop_counter.so").state, "loaded");
  EXPECT_THAT(env.row("libmuladd_1_5_0_broken.so").reason, HasSubstr("muladd 1.5.0 is broken"));
}

// A disabled bundle's row says why, in the admin's words, to every host's view.
TEST(PluginHost, ADisabledBundleShowsTheReasonTheAdminGave) {
  Env env;
  env.add(plugin("mylib"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().count("mylib"), 1u);
  env.store->setBundleDisabled("mylib", true, "not needed here", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().count("mylib"), 0u);
  EXPECT_EQ(env.row("libmylib.so").state, "disabled");
  EXPECT_EQ(env.row("libmylib.so").reason, "an admin disabled bundle mylib: not needed here");
  ASSERT_EQ(host.view().size(), 1u);
  EXPECT_EQ(host.view().front().reason, "an admin disabled bundle mylib: not needed here");
  // Disabled again with another reason: the new one shows.
  env.store->setBundleDisabled("mylib", true, "replaced by mylib2", "ann");
  host.sync();
  EXPECT_EQ(host.view().front().reason, "an admin disabled bundle mylib: replaced by mylib2");
  env.store->setBundleDisabled("mylib", false, "", "ann");
  env.store->setBundleDisabled("mylib", true, "", "ann");  // no reason given
  host.sync();
  EXPECT_EQ(host.view().front().reason, "an admin disabled bundle mylib");
}

TEST(PluginHost, DependentsLoadAfterTheirDefinerAndAreRefusedWithoutOne) {
  {
    Env env;
    env.add(plugin("flop_counter"));
    PluginHost host(env.dir, env.store.get());
    host.sync();
    EXPECT_TRUE(host.loaded().empty());
    EXPECT_THAT(env.row("libflop_counter.so").reason,
                HasSubstr("implements namespace 'extension_cpp', which no loaded bundle defines"));
  }
  Env env;
  env.add(plugin("flop_counter"));  // sorts before muladd: order comes from the metadata
  env.add(plugin("muladd_1_1_0"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  ASSERT_EQ(host.loaded().size(), 2u);
  EXPECT_LT(host.loaded().at("muladd").seq, host.loaded().at("flop_counter").seq);
  auto rules = Dispatcher::singleton().rules(parseOperatorName("extension_cpp::mymuladd"));
  std::erase_if(rules, [](const RuleInfo& r) { return r.kind != "torch_dispatch"; });  // muladd's sample inputs
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].owner, "flop_counter@1.0.0");
  // Disabling the definer takes its dependent with it; enabling brings both back.
  env.store->setBundleDisabled("muladd", true, "test", "ann");
  host.sync();
  EXPECT_TRUE(host.loaded().empty());
  EXPECT_EQ(registrationsOwnedBy("flop_counter@"), 0u);
  EXPECT_EQ(env.row("libmuladd_1_1_0.so").state, "disabled");
  env.store->setBundleDisabled("muladd", false, "", "ann");
  host.sync();
  EXPECT_EQ(host.loaded().size(), 2u);
}

TEST(PluginHost, AKernelDisabledBeforeItsBundleLoadsIsDisabledOnLoadAndAfterARestart) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  env.store->setKernelState("extension_cpp::mymuladd", "CPU", false, "before load", "ann");
  const Tensor a = ops::ones({3});
  {
    PluginHost host(env.dir, env.store.get());
    host.sync();
    EXPECT_THAT(testing::errorOf([&] { mymuladd(a, a, 2.0); }), HasSubstr("extension_cpp::mymuladd"));
    EXPECT_FALSE(is_kernel_enabled("extension_cpp::mymuladd", "cpu"));
  }
  set_kernel_enabled("extension_cpp::mymuladd", "cpu", true);  // forget it in-process: a "restart"
  PluginHost host(env.dir, env.store.get());
  host.sync();
  EXPECT_FALSE(is_kernel_enabled("extension_cpp::mymuladd", "cpu"));
  env.store->setKernelState("extension_cpp::mymuladd", "CPU", true, "", "ann");
  host.sync();
  EXPECT_TRUE(ops::allclose(mymuladd(a, a, 2.0), ops::full({3}, 3.0)));
}

TEST(PluginHost, AutocastRulesAreRecordedGoWithTheirBundleAndStayDisabled) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  // Disabled in the store before the bundle that brings the rule loads.
  env.store->setKernelState("extension_cpp::mymuladd", "AutocastCPU", false, "before load", "ann");
  const Tensor a = ops::ones({3});
  {
    PluginHost host(env.dir, env.store.get());
    host.sync();
    std::set<std::string> regs;
    for (const auto& r : env.store->registrations("extension_cpp::mymuladd")) regs.insert(r.key + " " + r.owner);
    EXPECT_TRUE(regs.count("AutocastCPU muladd@1.1.0")) << ::testing::PrintToString(regs);
    EXPECT_TRUE(regs.count("AutocastCUDA muladd@1.1.0")) << ::testing::PrintToString(regs);
    EXPECT_FALSE(is_kernel_enabled("extension_cpp::mymuladd", "autocast:cpu"));
    {
      modes::AutocastGuard autocast(DeviceType::CPU);
      EXPECT_EQ(mymuladd(a, a, 2.0).dtype(), ScalarType::Float);  // the rule is off
    }
    env.store->setKernelState("extension_cpp::mymuladd", "AutocastCPU", true, "", "ann");
    host.sync();
    {
      modes::AutocastGuard autocast(DeviceType::CPU);
      EXPECT_EQ(mymuladd(a, a, 2.0).dtype(), ScalarType::BFloat16);
    }
    // The rule goes with its bundle: 1.0.0 (no rules) replaces 1.1.0.
    env.add(plugin("muladd_1_0_0"));
    env.store->pin("muladd", "1.0.0", "ann");
    host.sync();
    EXPECT_EQ(host.loaded().at("muladd").version, "1.0.0");
    for (const auto& r : Dispatcher::singleton().registrations(parseOperatorName("extension_cpp::mymuladd"))) {
      EXPECT_FALSE(kAutocastKeys.has(r.key)) << toString(r.key) << " " << r.owner;
    }
    for (const auto& r : env.store->registrations("extension_cpp::mymuladd")) EXPECT_NE(r.key, "AutocastCPU");
    modes::AutocastGuard autocast(DeviceType::CPU);
    EXPECT_EQ(mymuladd(a, a, 2.0).dtype(), ScalarType::Float);
    // 1.0.0's kernels are float32 only, as they always were.
    const Tensor h = ops::ones({3}, ScalarType::BFloat16);
    EXPECT_THAT(testing::errorOf([&] { mymuladd(h, h, 2.0); }), HasSubstr("a and b must be float32, got bfloat16"));
  }
}

// muladd 1.1.0's batching rule: recorded, one call for the batch, nested vmap; it
// goes with its bundle (1.0.0 has none: the for-loop fallback runs, warning once).
TEST(PluginHost, BatchingRulesAreRecordedAndGoWithTheirBundle) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  std::vector<std::string> warnings;
  modes::set_warning_sink([&](std::string_view line) { warnings.emplace_back(line); });
  modes::reset_vmap_fallback_warnings();
  const Tensor a = ops::rand({4, 3}), b = ops::rand({4, 3});
  const Tensor want = ops::add(ops::mul(a, b), 2.0);
  auto f = [](const Tensor& x, const Tensor& y) { return mymuladd(x, y, 2.0); };
  {
    PluginHost host(env.dir, env.store.get());
    host.sync();
    std::set<std::string> regs;
    for (const auto& r : env.store->registrations("extension_cpp::mymuladd")) regs.insert(r.key + " " + r.owner);
    EXPECT_TRUE(regs.count("Batched muladd@1.1.0")) << ::testing::PrintToString(regs);
    EXPECT_TRUE(ops::allclose(modes::vmap(f)(a, b), want));
    // Nested: map the rows outside and the columns inside.
    const Tensor nested = modes::vmap(modes::vmap(f, 0), 0)(ops::unsqueeze(a, 2), ops::unsqueeze(b, 2));
    EXPECT_TRUE(ops::allclose(nested, ops::unsqueeze(want, 2)));
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    // The rule goes with its bundle: 1.0.0 (no rule) replaces 1.1.0, and the loop runs.
    env.add(plugin("muladd_1_0_0"));
    env.store->pin("muladd", "1.0.0", "ann");
    host.sync();
    EXPECT_EQ(host.loaded().at("muladd").version, "1.0.0");
    for (const auto& r : Dispatcher::singleton().registrations(parseOperatorName("extension_cpp::mymuladd"))) {
      EXPECT_NE(r.key, DispatchKey::Batched) << r.owner;
    }
    for (const auto& r : env.store->registrations("extension_cpp::mymuladd")) EXPECT_NE(r.key, "Batched");
    EXPECT_TRUE(ops::allclose(modes::vmap(f)(a, b), want));
    EXPECT_TRUE(ops::allclose(modes::vmap(modes::vmap(f, 0), 0)(ops::unsqueeze(a, 2), ops::unsqueeze(b, 2)),
                              ops::unsqueeze(want, 2)));
    EXPECT_THAT(warnings, ::testing::ElementsAre("vmap: no batching rule for extension_cpp::mymuladd; running a "
                                                 "slow for-loop fallback, 4 calls"));
  }
  modes::set_warning_sink(nullptr);
}

// Two threads call a bundle's op, unboxed through a typed handle kept across cycles
// and boxed through a fresh lookup, while the bundle is loaded, replaced by a newer
// version and removed, STRATA_RELOAD_CYCLES times (1,000 in CI, under ASan too).
// Every call runs one of the versions or fails with the clean error of an operator
// that is not there; none crashes or sees a freed kernel.
TEST(PluginHost, ReplacingAndRemovingABundleWhileTwoThreadsCallIt) {
  const char* env_cycles = std::getenv("STRATA_RELOAD_CYCLES");
  const int cycles = env_cycles != nullptr ? std::atoi(env_cycles) : 1000;
  Env env;
  PluginHost host(env.dir, nullptr);  // the store is not what this exercises
  // Each version is copied once and linked into the directory and out again: a new
  // directory entry for the host to see, without copying megabytes per cycle.
  const QString staged = env.tmp.path() + "/staged";
  QDir().mkpath(staged);
  for (const char* v : {"muladd_1_0_0", "muladd_1_1_0"}) {
    const QString to = staged + "/lib" + v + ".so";
    ASSERT_TRUE(QFile::copy(plugin(v), to));
    // Built an hour ago, as far as the host can tell: settled, so it hashes each once.
    const timespec old[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, QFile::encodeName(to).constData(), old, 0), 0) << std::strerror(errno);
  }
  auto put = [&](const char* v) {
    const QString name = QString("/lib") + v + ".so";
    ASSERT_EQ(::link(QFile::encodeName(staged + name).constData(), QFile::encodeName(env.dir + name).constData()), 0)
        << std::strerror(errno);
  };
  put("muladd_1_0_0");
  host.sync();
  const auto typed = Dispatcher::singleton()
                         .findSchemaOrThrow("extension_cpp::mymuladd")
                         .typed<Tensor(const Tensor&, const Tensor&, double)>();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ran{0}, refused{0}, wrong{0};
  std::mutex mu;
  std::vector<std::string> unexpected;
  auto clean = [](const Error& e) {
    const std::string m = e.what();
    return e.kind() == ErrorKind::NotImplemented &&
           (m.find("was removed") != std::string::npos || m.find("no kernel") != std::string::npos ||
            m.find("has no schema") != std::string::npos || m.find("no operator") != std::string::npos ||
            m.find("has kernels but no schema") != std::string::npos);
  };
  auto caller = [&](bool boxed) {
    const Tensor a = ops::ones({4});
    const Tensor three = ops::full({4}, 3.0);
    for (uint64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
      // Two callers and the host share two cores here: pause now and then so the
      // host gets to replace the bundle under them.
      if (n % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
      try {
        Tensor r;
        if (boxed) {
          Stack s{a, a, 2.0};
          Dispatcher::singleton().findSchemaOrThrow("extension_cpp::mymuladd").callBoxed(s);
          r = s[0].toTensor();
        } else {
          r = typed.call(a, a, 2.0);
        }
        if (ops::allclose(r, three)) ++ran;
        else ++wrong;
      } catch (const Error& e) {
        ++refused;
        if (!clean(e)) {
          std::lock_guard<std::mutex> lock(mu);
          if (unexpected.size() < 5) unexpected.push_back(e.what());
        }
      }
    }
  };
  std::thread unboxed_caller(caller, false), boxed_caller(caller, true);
  struct Join {  // also when an ASSERT below returns early
    std::atomic<bool>& stop;
    std::thread &a, &b;
    ~Join() {
      stop = true;
      if (a.joinable()) a.join();
      if (b.joinable()) b.join();
    }
  } join{stop, unboxed_caller, boxed_caller};
  size_t most_retired = 0;  // kernels retired and not yet freed, at the worst cycle
  for (int i = 0; i < cycles; ++i) {
    most_retired = std::max(most_retired, Dispatcher::singleton().numRetiredKernels());
    put("muladd_1_1_0");  // the newer version replaces the loaded one
    host.sync();
    ASSERT_EQ(host.loaded().at("muladd").version, "1.1.0") << "cycle " << i;
    env.remove("libmuladd_1_0_0.so");
    env.remove("libmuladd_1_1_0.so");  // and then it is gone
    host.sync();
    ASSERT_TRUE(host.loaded().empty()) << "cycle " << i;
    put("muladd_1_0_0");
    host.sync();
    ASSERT_EQ(host.loaded().at("muladd").version, "1.0.0") << "cycle " << i;
  }
  stop = true;
  unboxed_caller.join();
  boxed_caller.join();
  // For the long run's figures: what replacing costs in memory. Retired kernels are
  // freed by grace periods as the callers pass between calls (Note [Grace periods]);
  // without them each cycle would leave 26.
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages >> pages;
  std::printf("%d cycles: %lld calls ran, %lld refused cleanly; at most %zu retired kernels waiting, %zu at the "
              "end, RSS %.1f MiB\n",
              cycles, static_cast<long long>(ran.load()), static_cast<long long>(refused.load()), most_retired,
              Dispatcher::singleton().numRetiredKernels(), pages * (::sysconf(_SC_PAGESIZE) / 1048576.0));
  if (cycles >= 1000) EXPECT_LT(most_retired, 26u * 100) << "retired kernels grow with the cycles";
  Dispatcher::singleton().reclaimRetiredKernels();  // the callers have stopped: all of them
  EXPECT_EQ(Dispatcher::singleton().numRetiredKernels(), 0u);
  EXPECT_GT(ran.load(), 0);
  if (cycles >= 100) EXPECT_GT(refused.load(), 0);  // calls did land while it was gone
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(unexpected.empty()) << ::testing::PrintToString(unexpected);
}

// Normal(0, 1) float32 values: never zeros, which would hide unwritten outputs.
Tensor randomTensor(std::vector<int64_t> shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return ops::reshape(from_vector<float>(v), shape);
}

// The muladd bundle's kernels on each device, held to the same numbers: CPU and CUDA
// compute a*b+c, a*b and a+b; Meta gives the shape only; mixed devices are refused.
TEST(MulAddBundle, KernelsOnEveryDeviceAgree) {
  Env env;
  env.add(plugin("muladd_1_1_0"));
  PluginHost host(env.dir, env.store.get());
  host.sync();
  auto& d = Dispatcher::singleton();
  const auto mymul = d.findSchemaOrThrow("extension_cpp::mymul").typed<Tensor(const Tensor&, const Tensor&)>();
  const auto myadd_out =
      d.findSchemaOrThrow("extension_cpp::myadd_out").typed<void(const Tensor&, const Tensor&, Tensor&)>();
  const Tensor a = randomTensor({5, 7}, 1), b = randomTensor({5, 7}, 2);
  const Tensor want = ops::add(ops::mul(a, b), 0.5);
  EXPECT_TRUE(ops::allclose(mymuladd(a, b, 0.5), want));
  EXPECT_TRUE(ops::allclose(mymul.call(a, b), ops::mul(a, b)));
  Tensor out = ops::empty({5, 7});
  myadd_out.call(a, b, out);
  EXPECT_TRUE(ops::allclose(out, ops::add(a, b)));

  const Device meta(DeviceType::Meta);
  const Tensor m = mymuladd(ops::empty({5, 7}, kFloat32, meta), ops::empty({5, 7}, kFloat32, meta), 0.5);
  EXPECT_EQ(m.device(), meta);
  EXPECT_EQ(m.sizes().size(), 2u);
  EXPECT_THAT(testing::errorOf([&] { mymuladd(a, ops::empty({5, 7}, kFloat32, meta), 0.5); }),
              HasSubstr("mymuladd: expected a and b on the same device, got cpu and meta"));

  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const Device gpu(DeviceType::CUDA, 0);
  const Tensor ga = a.to(gpu), gb = b.to(gpu);
  const Tensor r = mymuladd(ga, gb, 0.5);
  EXPECT_TRUE(r.is_cuda());
  EXPECT_TRUE(ops::allclose(r.to(kCPU), want, 1e-5, 1e-6));
  EXPECT_TRUE(ops::allclose(mymul.call(ga, gb).to(kCPU), ops::mul(a, b), 1e-5, 1e-6));
  Tensor gout = ops::empty({5, 7}, kFloat32, gpu);
  myadd_out.call(ga, gb, gout);
  EXPECT_TRUE(ops::allclose(gout.to(kCPU), ops::add(a, b), 1e-5, 1e-6));
  // Non-contiguous inputs are made contiguous first; a large size takes many blocks.
  const Tensor big = randomTensor({1 << 20}, 3);
  EXPECT_TRUE(ops::allclose(mymuladd(big.to(gpu), big.to(gpu), -1.0).to(kCPU), ops::sub(ops::mul(big, big), 1.0),
                            1e-5, 1e-6));
  const Tensor at = ops::t(a);
  EXPECT_TRUE(ops::allclose(mymul.call(at.to(gpu), at.to(gpu)).to(kCPU), ops::mul(at, at), 1e-5, 1e-6));
  EXPECT_THAT(testing::errorOf([&] { mymuladd(ga, b, 0.5); }),
              HasSubstr("mymuladd: expected a and b on the same device, got cuda:0 and cpu"));
  EXPECT_THAT(testing::errorOf([&] { myadd_out.call(ga, gb, out); }),
              HasSubstr("myadd_out: expected out on cuda:0, got cpu"));
}

}  // namespace
}  // namespace strata::host
