// host/examples/embedded_workload, driven as an admin would: an application embeds
// the host and runs mymuladd in a loop; `strata kernel disable ... --wait` and
// `strata plugins pin ...` from another process flip what its workload reports, live.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <QDeadlineTimer>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>

#include <cstdlib>
#include <string>

namespace {

using ::testing::HasSubstr;

struct Workload {
  QTemporaryDir tmp;
  QString dir = tmp.path() + "/plugins";
  QString db = tmp.path() + "/strata.db";
  QProcess proc;
  QString seen;  // everything it printed so far

  Workload() {
    QDir().mkpath(dir);
    for (const char* name : {"muladd_1_0_0", "muladd_1_1_0"}) {
      const QString from = QString(STRATA_PLUGIN_BUILD_DIR) + "/lib" + name + ".so";
      EXPECT_TRUE(QFile::copy(from, dir + "/lib" + name + ".so")) << name;
    }
    proc.setProcessChannelMode(QProcess::MergedChannels);
    proc.start(EMBEDDED_WORKLOAD, {"--plugins", dir, "--db", db});
  }
  ~Workload() {
    if (proc.state() != QProcess::NotRunning) {
      proc.kill();
      proc.waitForFinished(5000);
    }
  }
  // Reads its output until a line printed after `from` (an offset in `seen`, taken
  // as seen.size() before an action) holds `text`; up to 20 s. Returns that line,
  // or "" on time-out.
  std::string waitForLine(const QString& text, qsizetype from) {
    QDeadlineTimer deadline(20000);
    for (;;) {
      qsizetype start = from;
      for (qsizetype end; (end = seen.indexOf('\n', start)) >= 0; start = end + 1) {
        const QString line = seen.mid(start, end - start);
        if (line.contains(text)) return line.toStdString();
      }
      if (deadline.hasExpired() || proc.state() == QProcess::NotRunning) return "";
      if (proc.waitForReadyRead(200)) seen += QString::fromUtf8(proc.readAll());
    }
  }
  int strata(const std::string& args) {
    const std::string cmd = std::string(STRATA_CLI) + " " + args + " --db " + db.toStdString() + " >> " +
                            tmp.path().toStdString() + "/cli.log 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string cliLog() {
    QFile f(tmp.path() + "/cli.log");
    return f.open(QIODevice::ReadOnly) ? f.readAll().toStdString() : "";
  }
};

TEST(EmbeddedWorkload, ReportsWhichKernelRanAndFlipsLiveUnderAdminCommands) {
  Workload w;
  ASSERT_TRUE(w.proc.waitForStarted(10000)) << w.proc.errorString().toStdString();
  ASSERT_THAT(w.waitForLine("host: loaded muladd@1.1.0", 0), HasSubstr("muladd@1.1.0")) << w.seen.toStdString();
  std::string line = w.waitForLine("calls ran", 0);
  ASSERT_THAT(line, HasSubstr("extension_cpp::mymuladd -> CPU kernel, owner muladd@1.1.0")) << w.seen.toStdString();
  EXPECT_THAT(line, ::testing::Not(HasSubstr("WRONG")));

  // The host is on the store like any other: `strata hosts` sees it.
  ASSERT_EQ(w.strata("hosts"), 0) << w.cliLog();
  EXPECT_THAT(w.cliLog(), HasSubstr("live"));

  // Switched off from another process: the workload's calls fail, and it says why.
  qsizetype mark = w.seen.size();
  ASSERT_EQ(w.strata("kernel disable extension_cpp::mymuladd cpu --reason test --wait"), 0) << w.cliLog();
  line = w.waitForLine("fails:", mark);
  ASSERT_FALSE(line.empty()) << w.seen.toStdString();
  EXPECT_THAT(line, HasSubstr("failed"));

  // Switched on again: back to the kernel.
  mark = w.seen.size();
  ASSERT_EQ(w.strata("kernel enable extension_cpp::mymuladd cpu --wait"), 0) << w.cliLog();
  line = w.waitForLine("CPU kernel, owner muladd@1.1.0", mark);
  ASSERT_FALSE(line.empty()) << w.seen.toStdString();

  // A pin swaps the bundle under the running workload: the report names the other one.
  mark = w.seen.size();
  ASSERT_EQ(w.strata("plugins pin muladd 1.0.0"), 0) << w.cliLog();
  line = w.waitForLine("CPU kernel, owner muladd@1.0.0", mark);
  ASSERT_FALSE(line.empty()) << w.seen.toStdString();
  EXPECT_THAT(line, ::testing::Not(HasSubstr("WRONG")));

  // SIGTERM stops it cleanly.
  w.proc.terminate();
  ASSERT_TRUE(w.proc.waitForFinished(10000));
  w.seen += QString::fromUtf8(w.proc.readAll());
  EXPECT_EQ(w.proc.exitStatus(), QProcess::NormalExit);
  EXPECT_EQ(w.proc.exitCode(), 0) << w.seen.toStdString();
  EXPECT_THAT(w.seen.toStdString(), HasSubstr("stopped"));
  ASSERT_EQ(w.strata("hosts"), 0);
  EXPECT_THAT(w.cliLog(), HasSubstr("stopped"));
}

TEST(EmbeddedWorkload, BadCommandLinesAndMissingDirectoriesAreClearErrors) {
  QTemporaryDir tmp;
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(EMBEDDED_WORKLOAD, {"--plugins"});
  ASSERT_TRUE(p.waitForFinished(10000));
  EXPECT_EQ(p.exitCode(), 2);
  EXPECT_THAT(p.readAll().toStdString(), HasSubstr("missing the value of --plugins"));
  p.start(EMBEDDED_WORKLOAD, {"--plugins", tmp.path() + "/nope", "--db", tmp.path() + "/s.db"});
  ASSERT_TRUE(p.waitForFinished(10000));
  EXPECT_EQ(p.exitCode(), 1);
  const std::string out = p.readAll().toStdString();
  EXPECT_THAT(out, HasSubstr(tmp.path().toStdString() + "/nope"));
  EXPECT_THAT(out, HasSubstr("does not exist"));
}

}  // namespace
