// The embeddable plugin host: what `strata serve` is made of, for applications that
// load Strata bundles themselves (as Qt applications host their plugins).
//
//   strata::host::HostOptions o;
//   o.plugin_dir = "/opt/app/plugins";
//   o.store_path = "/var/lib/app/strata.db";
//   strata::host::Host host(o);                     // opens (or creates) the store
//   host.onEvent([](const strata::host::HostEvent& e) { std::cerr << e.text << "\n"; });
//   host.start();                                   // loads the directory, then watches it
//   ... call ops through strata::Dispatcher from any thread ...
//   host.stop();                                    // or let the destructor do it
//
// Link `strata::host` (find_package(strata)). The header needs only the C++ standard
// library; the host runs on Qt Core and SQLite inside the library.
//
// What a running host does (Note [The load transaction] and Note [What each host
// runs] in the sources say how):
//   - loads every bundle in the plugin directory that passes the trust checks, the
//     newest compatible version of each unless an admin pinned another, each inside
//     a load transaction (all of its registrations or none);
//   - watches the directory: a bundle that arrives, is replaced or leaves is loaded,
//     swapped or unloaded within about 100 ms of the file settling;
//   - applies what admins write to the store from other processes (`strata kernel
//     disable OP KEY`, `strata plugins pin NAME VERSION`, ...) within a poll
//     interval, and reports each applied change (`--wait` counts on it);
//   - records in the store what it runs, heartbeats every second, and answers
//     `strata dump OP --host ID` from its own dispatcher;
//   - frees retired kernels and tensors other threads dropped at each poll.
//
// Thread safety: a Host is driven from one thread (the one that made it); its const
// accessors may be called from any thread. The host itself runs on a thread of its
// own; callbacks run on that thread, one at a time, and must not call start() or
// stop(). Ops may be called from any thread while the host runs: a bundle removed
// under a call finishes that call first (Note [Grace periods]).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(STRATA_HOST_BUILDING)
#define STRATA_HOST_API __attribute__((visibility("default")))
#else
#define STRATA_HOST_API
#endif

namespace strata::host {

// Every failure to open, start or query a host: the message names the file or
// directory and the reason.
struct STRATA_HOST_API HostError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct HostOptions {
  // The plugin directory. It must exist when start() runs (a mistyped path is an
  // error, not an empty directory to watch).
  std::string plugin_dir;
  // The store: an SQLite file Strata created, or a path where none exists yet (it is
  // created). Another application's database, a newer Strata's or a damaged file
  // is refused, never repaired.
  std::string store_path;
  // This host's id in the store ("strata hosts"); default "<hostname>:<pid>".
  std::string id;
  // Who started it, for the store and the audit log; default the login name.
  std::string actor;
  // How often the store is polled for admin changes and questions, in ms.
  int poll_ms = 50;
  // Note [Plugin trust]: load bundles others could have written (audited), and/or
  // only bundles whose sha256 is on the store's trust list (audited).
  bool allow_insecure_plugins = false;
  bool require_trusted = false;
  // Run opcheck and gradcheck on each bundle's sample inputs as it loads: "" (off),
  // "record" (the result becomes its reason in the store) or "enforce" (a failing
  // bundle is rejected).
  std::string check;
};

// What a bundle file in the plugin directory is to this host.
struct BundleStatus {
  std::string name;
  std::string version;  // empty when the file's metadata could not be read
  std::string path;
  std::string sha256;
  // "loaded", "rejected", "superseded" (an older or unpinned version), "disabled"
  // (by an admin), ...: as `strata plugins list --host ID` prints them.
  std::string state;
  std::string reason;   // why it is rejected, disabled or superseded
};

struct HostEvent {
  enum class Kind {
    loaded,    // a bundle is now loaded: bundle is "name@version"
    unloaded,  // a bundle was unloaded (removed, replaced, disabled or pinned away)
    rejected,  // a bundle was refused: reason says why; nothing of it is registered
    applied,   // admin changes in the store up to `change` are applied
    message,   // anything else the host reports about a change (text)
  };
  Kind kind = Kind::message;
  // "name@version" (loaded, unloaded, rejected); for a file rejected before its
  // metadata could be read (not a library, refused by the trust checks), its file
  // name; for bundles whose namespaces depend on each other in a cycle, the name.
  std::string bundle;
  std::string reason;   // rejected: why
  int64_t change = 0;   // applied: the store's change id now applied
  std::string text;     // one line for people, e.g. "loaded muladd@1.1.0"
};

class STRATA_HOST_API Host {
 public:
  // Opens the store. Throws HostError naming the file and the reason when it cannot
  // be opened (read-only directory, not a Strata store, a newer Strata's, damaged).
  // When the application has no QCoreApplication, the Host makes one on this thread
  // and deletes it with itself. REQUIRES: then this is the thread that first used Qt
  // in the process (usually main()).
  explicit Host(HostOptions options);
  // stop(), then closes the store.
  ~Host();
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  // Called for every event from the first load on; set before start().
  void onEvent(std::function<void(const HostEvent&)> callback);
  // Answers `strata dump OP --host ID` and other questions asked through the store:
  // (query, argument) -> answer, or throw std::exception for an error. The default
  // answers "dump" as `strata serve` does. Set before start().
  void onQuery(std::function<std::string(const std::string& query, const std::string& arg)> handler);

  // Registers the host in the store, loads the plugin directory (events for each
  // bundle come before it returns), then watches the directory and polls the store on
  // the host's thread. Throws HostError when the directory does not exist or the
  // store cannot be written: then no thread runs, nothing stays loaded, and the store
  // shows this host stopped. A second start() while running does nothing.
  // Events are reported after what they describe is committed to the store.
  void start();
  // Stops watching, unloads every bundle (their registrations go; calls already
  // inside a kernel finish), and marks the host stopped in the store, which keeps
  // its last view. Idempotent; safe when start() was never called.
  // start() and stop() throw HostError on a thread that holds a RegistrationBatch
  // (the host's thread loads in a batch of its own, which would wait for it), and
  // destroying a running Host there ends the program, as a joinable std::thread's
  // destruction does: end the batch first.
  void stop();

  bool running() const;
  // The id this host has in the store.
  std::string id() const;
  std::string pluginDir() const;
  std::string storePath() const;
  // What the host last saw in its directory, one row per bundle file, sorted by name
  // and version. Empty before start().
  std::vector<BundleStatus> bundles() const;
  // "name@version" of each loaded bundle, sorted.
  std::vector<std::string> loaded() const;
  // The store's change id up to which admin changes are applied.
  int64_t lastApplied() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::host
