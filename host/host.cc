// The embeddable host: a PluginHost on a thread of its own, behind a header with no
// Qt in it.
//
// Note [The embedded host's thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A PluginHost is a QObject driven by timers and a QFileSystemWatcher, so it needs
// an event loop on its thread. An application that embeds Strata may have none (or
// one it does not want the host's disk and store work on), so the Host runs the
// PluginHost on a thread of its own (a std::thread running a QEventLoop: joining it
// is a pthread_join, which ThreadSanitizer understands, where QThread::wait() is
// ordered by Qt's futex-based locks only): start() makes the thread, then builds and
// serves the PluginHost there (the caller waits, so the first load is done and any
// error is thrown on the caller's thread when start() returns); stop() destroys
// it there (the bundles are unloaded on the thread that loaded them) and joins. Each
// such call is a job handed over under a mutex of our own (Impl::onHostThread).
// Everything the application may read while the host runs (bundles(), loaded(),
// lastApplied()) is a snapshot the host thread refreshes after each change, under
// `mu`. Qt's event loops need a QCoreApplication in the process: when the
// application has none, the Host makes one and deletes it with itself.
#include "strata/host/host.h"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QDir>
#include <QFileInfo>
#include <QMetaObject>
#include <QSysInfo>
#include <QEventLoop>

#include <algorithm>
#include <cstdio>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "operator_info.h"
#include "plugin_host.h"
#include "strata/db/store.h"
#include "strata/plugin.h"

namespace strata::host {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }
std::string s(const QString& x) { return x.toStdString(); }

// Orders every hand-off between a Host's caller and its thread (Impl::onHostThread).
std::mutex g_job_mu;

// The QCoreApplication a Host makes when the application has none: argv must
// outlive it.
int g_argc = 1;
char g_arg0[] = "strata-host";
char* g_argv[] = {g_arg0, nullptr};

// "loaded muladd@1.1.0" -> a loaded event; see PluginHost::changed for the forms.
HostEvent eventOf(const QString& line) {
  HostEvent e;
  e.text = s(line);
  for (auto [prefix, kind] : {std::pair{"loaded ", HostEvent::Kind::loaded},
                              std::pair{"unloaded ", HostEvent::Kind::unloaded},
                              std::pair{"rejected ", HostEvent::Kind::rejected}}) {
    if (!line.startsWith(QLatin1String(prefix))) continue;
    const QString rest = line.mid(static_cast<qsizetype>(std::char_traits<char>::length(prefix)));
    const qsizetype colon = rest.indexOf(": ");
    e.kind = kind;
    e.bundle = s(colon < 0 ? rest : rest.left(colon));
    if (colon >= 0) e.reason = s(rest.mid(colon + 2));
    return e;
  }
  return e;
}

}  // namespace

struct Host::Impl {
  HostOptions options;
  std::unique_ptr<QCoreApplication> own_app;
  std::unique_ptr<db::Store> store;
  std::function<void(const HostEvent&)> on_event;
  std::function<std::string(const std::string&, const std::string&)> on_query;

  // Made by start(), gone after stop(). The PluginHost lives on `thread`.
  std::thread thread;
  QObject* context = nullptr;  // on `thread`: the target of calls made there
  QEventLoop* loop = nullptr;  // `thread`'s
  bool thread_ready = false;   // guarded by g_job_mu
  std::unique_ptr<PluginHost> plugin_host;

  mutable std::mutex mu;  // guards the snapshot below
  std::vector<BundleStatus> bundles;
  std::vector<std::string> loaded;
  int64_t last_applied = 0;
  bool running = false;

  // On the host thread.
  void refreshSnapshot() {
    std::vector<BundleStatus> rows;
    for (const auto& r : plugin_host->view()) rows.push_back({r.name, r.version, r.path, r.sha256, r.state, r.reason});
    std::vector<std::string> names;
    for (const auto& [name, l] : plugin_host->loaded()) names.push_back(s(name + "@" + l.version));
    std::sort(names.begin(), names.end());
    std::lock_guard<std::mutex> lock(mu);
    bundles = std::move(rows);
    loaded = std::move(names);
    last_applied = plugin_host->lastApplied();
  }
  void emitEvent(const HostEvent& e) {
    if (!on_event) return;
    try {
      on_event(e);
    } catch (...) {  // the application's callback must not take the host down
    }
  }
  // Runs f on the host thread and waits; rethrows what it threw. The hand-off is
  // ordered by g_job_mu, not only by Qt's event queue: Qt's own locks are invisible
  // to ThreadSanitizer, this mutex is not. The job takes it before it reads anything
  // the caller wrote (its own captures included), and the caller holds it from
  // before it builds the job until it waits, so what the caller wrote is visible to
  // the job and what the job wrote to the caller after. One mutex for every Host:
  // it is held only for the hand-off.
  std::condition_variable job_done;
  void onHostThread(const std::function<void()>& f) {
    std::exception_ptr failure;
    bool done = false;
    std::unique_lock<std::mutex> lock(g_job_mu);
    QMetaObject::invokeMethod(
        context,
        [&] {
          std::unique_lock<std::mutex> job(g_job_mu);  // first: before any capture is read
          job.unlock();
          try {
            f();
          } catch (...) {
            failure = std::current_exception();
          }
          job.lock();
          done = true;
          job_done.notify_all();
        },
        Qt::QueuedConnection);
    job_done.wait(lock, [&] { return done; });
    if (failure) std::rethrow_exception(failure);
  }
  // Starts the host thread: a std::thread (Qt adopts it) running a QEventLoop, so
  // joining it is a pthread_join ThreadSanitizer sees; QThread's own wait() is
  // ordered by Qt's locks alone.
  void startThread() {
    thread = std::thread([this] {
      QObject ctx;
      QEventLoop events;
      {
        std::lock_guard<std::mutex> lock(g_job_mu);
        context = &ctx;
        loop = &events;
        thread_ready = true;
        job_done.notify_all();
      }
      events.exec();
    });
    std::unique_lock<std::mutex> lock(g_job_mu);
    job_done.wait(lock, [this] { return thread_ready; });
  }
  // Ends the host thread once a job emptied it: the loop quits from inside a job
  // (nothing wakes the thread after that), then the thread is joined.
  void endThread() {
    onHostThread([this] { loop->quit(); });
    thread.join();
    context = nullptr;
    loop = nullptr;
    thread_ready = false;
  }
  void serveOnHostThread();
  void stopOnHostThread();
};

Host::Host(HostOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.options = std::move(options);
  if (d.options.plugin_dir.empty()) throw HostError("strata host: no plugin directory given");
  if (d.options.store_path.empty()) throw HostError("strata host: no store path given");
  if (d.options.poll_ms <= 0) throw HostError("strata host: poll_ms must be positive");
  if (!d.options.check.empty() && d.options.check != "record" && d.options.check != "enforce") {
    throw HostError("strata host: check must be \"\", \"record\" or \"enforce\", not \"" + d.options.check + "\"");
  }
  if (QCoreApplication::instance() == nullptr) d.own_app = std::make_unique<QCoreApplication>(g_argc, g_argv);
  if (d.options.id.empty()) {
    d.options.id = s(QSysInfo::machineHostName() + ":" + QString::number(QCoreApplication::applicationPid()));
  }
  if (d.options.actor.empty()) d.options.actor = s(loginName());
  try {
    d.store = std::make_unique<db::Store>(d.options.store_path);
  } catch (const std::exception& e) {
    throw HostError(e.what());
  }
  d.on_query = [](const std::string& query, const std::string& arg) -> std::string {
    if (query == "dump") return answerDumpQuery(arg);
    throw std::runtime_error("unknown query '" + query + "' (this host answers: dump)");
  };
}

Host::~Host() {
  if (impl_->thread.joinable() && strata::detail::registrationBatchHeldByThisThread()) {
    // Stopping would wait for the host's thread, which may be waiting for this
    // thread's batch: a hang. Said, then ended, as a joinable std::thread's
    // destruction ends a program.
    std::fputs("strata host: a running Host was destroyed inside a RegistrationBatch on the same thread; end the "
               "batch first (or stop() the host before it)\n",
               stderr);
    std::terminate();
  }
  try {
    stop();
  } catch (...) {  // a store that went away: the process is ending the host anyway
  }
  impl_->store.reset();
}

void Host::onEvent(std::function<void(const HostEvent&)> callback) { impl_->on_event = std::move(callback); }

void Host::onQuery(std::function<std::string(const std::string&, const std::string&)> handler) {
  impl_->on_query = std::move(handler);
}

void Host::Impl::serveOnHostThread() {
  plugin_host = std::make_unique<PluginHost>(q(options.plugin_dir), store.get());
  PluginHost& h = *plugin_host;
  h.setCheckPolicy(options.check == "record"    ? CheckPolicy::record
                   : options.check == "enforce" ? CheckPolicy::enforce
                                                : CheckPolicy::off);
  h.setTrustPolicy({options.allow_insecure_plugins, options.require_trusted});
  h.setQueryHandler(on_query);
  QObject::connect(&h, &PluginHost::changed, context, [this](const QStringList& what) {
    refreshSnapshot();
    for (const QString& line : what) emitEvent(eventOf(line));
  }, Qt::DirectConnection);
  QObject::connect(&h, &PluginHost::applied, context, [this](qint64 change) {
    refreshSnapshot();  // an applied pin or disable may have changed nothing on disk
    HostEvent e;
    e.kind = HostEvent::Kind::applied;
    e.change = change;
    e.text = "applied store changes up to " + std::to_string(change);
    emitEvent(e);
  }, Qt::DirectConnection);
  // Note [Plugin trust]: relaxing the checks, or tightening them, is on the record,
  // before anything loads (a start that fails half way may have run bundle code).
  const std::string dir = s(QFileInfo(q(options.plugin_dir)).absoluteFilePath());
  if (options.allow_insecure_plugins) store->audit(options.actor, "host.allow_insecure_plugins", dir, "", "on");
  if (options.require_trusted) store->audit(options.actor, "host.require_trusted", dir, "", "on");
  db::HostRow me;
  me.id = options.id;
  me.pid = QCoreApplication::applicationPid();
  me.login = options.actor;
  me.strata_version = STRATA_VERSION " (SDK ABI " + std::to_string(STRATA_SDK_ABI_MAJOR) + "." +
                      std::to_string(STRATA_SDK_ABI_MINOR) + ")";
  h.serve(me, options.poll_ms);
  refreshSnapshot();
}

void Host::Impl::stopOnHostThread() {
  plugin_host.reset();  // unloads every bundle, newest first
  // Note [What each host runs]: its last view stays, marked stopped.
  store->markHostStopped(options.id);
}

// The host's thread registers inside batches of its own, which wait for one this
// thread holds: waiting for that thread from inside a batch would never end.
static void refuseInsideABatch(const char* what) {
  if (strata::detail::registrationBatchHeldByThisThread()) {
    throw HostError(std::string("strata host: ") + what + " inside a RegistrationBatch: this thread holds one, and "
                    "the host's thread, which loads bundles in a batch of its own, would wait for it; " + what +
                    " the host outside the batch");
  }
}

void Host::start() {
  Impl& d = *impl_;
  if (d.thread.joinable()) return;
  refuseInsideABatch("start");
  const QFileInfo dir(q(d.options.plugin_dir));
  if (!dir.exists()) {
    throw HostError("the plugin directory " + d.options.plugin_dir + " does not exist");
  }
  if (!dir.isDir()) throw HostError("the plugin directory " + d.options.plugin_dir + " is not a directory");
  d.startThread();
  try {
    d.onHostThread([&d] {
      try {
        d.serveOnHostThread();
      } catch (...) {
        d.plugin_host.reset();
        try {
          d.store->markHostStopped(d.options.id);  // registered, then failed: not a live host
        } catch (...) {  // the store itself failed: the original error says why
        }
        throw;
      }
    });
  } catch (const std::exception& e) {
    d.endThread();
    throw HostError(e.what());
  }
  std::lock_guard<std::mutex> lock(d.mu);
  d.running = true;
}

void Host::stop() {
  Impl& d = *impl_;
  if (!d.thread.joinable()) return;
  refuseInsideABatch("stop");
  std::exception_ptr failure;
  try {
    d.onHostThread([&d] { d.stopOnHostThread(); });
  } catch (...) {
    failure = std::current_exception();
  }
  d.endThread();
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.running = false;
    d.loaded.clear();
  }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      throw HostError(std::string("stopping the host: ") + e.what());
    }
  }
}

bool Host::running() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->running;
}
std::string Host::id() const { return impl_->options.id; }
std::string Host::pluginDir() const { return impl_->options.plugin_dir; }
std::string Host::storePath() const { return impl_->options.store_path; }

std::vector<BundleStatus> Host::bundles() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->bundles;
}

std::vector<std::string> Host::loaded() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->loaded;
}

int64_t Host::lastApplied() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_applied;
}

}  // namespace strata::host
