// embedded_workload: an application that embeds a Strata host and runs a workload on
// an op a bundle brings.
//
//   embedded_workload --plugins DIR --db FILE [--seconds N] [--op NAME]
//
// The host loads DIR and watches it and the store; a worker thread calls
// extension_cpp::mymuladd(a, b, 2.0) in a loop and, each second, prints how many
// calls ran and which kernel served them, from which bundle:
//
//   host: loaded muladd@1.1.0
//   [1s] 412000 calls ran; extension_cpp::mymuladd -> CPU kernel, owner muladd@1.1.0
//
// From another terminal, `strata kernel disable extension_cpp::mymuladd cpu --wait
// --db FILE` switches the kernel off in this process, live; the next report says
// the calls fail and why. `strata plugins pin muladd 1.0.0 --db FILE` swaps the
// bundle under the running workload. SIGINT or SIGTERM stops it cleanly.
//
// The application uses no Qt of its own: strata/host/host.h is plain C++.
#include <strata/host/host.h>
#include <strata/dispatcher.h>
#include <strata/tensor.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

namespace {

std::atomic<bool> g_stop{false};
extern "C" void onSignal(int) { g_stop.store(true); }

// An error's first sentence: the dispatcher's "no kernel" error goes on to list
// every registration, which `strata dump OP` shows better.
std::string firstSentence(const std::string& what) {
  const size_t end = what.find(". Registered:");
  return end == std::string::npos ? what : what.substr(0, end);
}

std::mutex g_print;
void say(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_print);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// Which kernel serves one call, found by running it under explain(): the kernel the
// outermost call chose, with its owner; or why the call fails.
std::string whoServes(const std::string& op_name, const strata::Tensor& a, const strata::Tensor& b) {
  auto& d = strata::Dispatcher::singleton();
  const strata::OperatorName name = strata::parseOperatorName(op_name);
  auto op = d.findSchema(name);
  if (!op) return op_name + " is not defined (no bundle that defines it is loaded)";
  std::exception_ptr failure;
  const strata::Explanation e = strata::explain(*op, {a, b, 2.0}, &failure);
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& x) {
      return op_name + " fails: " + firstSentence(x.what());
    }
  }
  // The last step at depth 0 or 1 that ran a kernel of the op itself: the backend
  // kernel below any layer that redispatched.
  std::string out = op_name + " ->";
  for (const auto& step : e.steps) {
    if (step.op != name.str()) continue;
    out = op_name + " -> " + strata::toString(step.slot.key) + " " + step.slot.source + ", owner " + step.slot.owner;
  }
  return out;
}

void workload(const std::string& op_name) {
  const strata::Tensor a = strata::full({64}, 3.0);
  const strata::Tensor b = strata::full({64}, 4.0);
  const strata::Tensor expected = strata::full({64}, 14.0);
  using Clock = std::chrono::steady_clock;
  auto next = Clock::now() + std::chrono::seconds(1);
  int second = 0;
  uint64_t ran = 0, failed = 0, wrong = 0;
  std::string last_error;
  while (!g_stop.load()) {
    try {
      auto op = strata::Dispatcher::singleton().findSchema(strata::parseOperatorName(op_name));
      if (!op) {
        ++failed;
        last_error = op_name + " is not defined";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } else {
        auto typed = op->typed<strata::Tensor(const strata::Tensor&, const strata::Tensor&, double)>();
        for (int i = 0; i < 256; ++i) {
          const strata::Tensor r = typed.call(a, b, 2.0);
          ++ran;
          if (!r.equal(expected)) ++wrong;
        }
      }
    } catch (const std::exception& e) {  // removed or disabled under the call: a clean error
      ++failed;
      last_error = e.what();
    }
    if (Clock::now() < next) continue;
    ++second;
    next += std::chrono::seconds(1);
    std::string line = "[" + std::to_string(second) + "s] " + std::to_string(ran) + " calls ran";
    if (failed != 0) line += ", " + std::to_string(failed) + " failed";
    if (wrong != 0) line += ", " + std::to_string(wrong) + " WRONG";
    say(line + "; " + whoServes(op_name, a, b));
    ran = failed = wrong = 0;
  }
}

int usage(const char* why) {
  std::fprintf(stderr,
               "embedded_workload: %s\n"
               "usage: embedded_workload --plugins DIR --db FILE [--seconds N] [--op NS::NAME]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  strata::host::HostOptions options;
  double seconds = 0;  // 0: until SIGINT or SIGTERM
  std::string op = "extension_cpp::mymuladd";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(("missing the value of " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--plugins") {
      options.plugin_dir = value;
    } else if (flag == "--db") {
      options.store_path = value;
    } else if (flag == "--seconds") {
      char* end = nullptr;
      seconds = std::strtod(value, &end);
      if (end == value || *end != '\0' || !(seconds >= 0)) return usage("--seconds takes a number of seconds");
    } else if (flag == "--op") {
      op = value;
    } else {
      return usage(("unknown option " + flag).c_str());
    }
  }
  if (options.plugin_dir.empty() || options.store_path.empty()) return usage("--plugins and --db are required");
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);

  try {
    strata::host::Host host(options);
    host.onEvent([](const strata::host::HostEvent& e) { say("host: " + e.text); });
    host.start();
    say("host " + host.id() + " running; plugins " + host.pluginDir() + ", store " + host.storePath());
    std::thread worker(workload, op);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!g_stop.load() && (seconds == 0 || std::chrono::steady_clock::now() < until)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    g_stop.store(true);
    worker.join();
    host.stop();
    say("stopped");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embedded_workload: %s\n", e.what());
    return 1;
  }
  return 0;
}
