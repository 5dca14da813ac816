// strata cuda: whether this process can use CUDA, on which devices, and what the
// caching allocator of each holds (strata/cuda.h, Note [The caching allocator]).
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include "commands/commands.h"
#include "strata/cuda.h"

namespace strata::host {

namespace {

QJsonObject statsJson(const cuda::MemoryStats& s) {
  auto n = [](uint64_t v) { return static_cast<double>(v); };
  return QJsonObject{{"allocated_bytes", n(s.allocated_bytes)},
                     {"requested_bytes", n(s.requested_bytes)},
                     {"reserved_bytes", n(s.reserved_bytes)},
                     {"peak_allocated_bytes", n(s.peak_allocated_bytes)},
                     {"peak_reserved_bytes", n(s.peak_reserved_bytes)},
                     {"active_blocks", n(s.active_blocks)},
                     {"segments", n(s.segments)},
                     {"allocations", n(s.allocations)},
                     {"device_mallocs", n(s.device_mallocs)},
                     {"device_frees", n(s.device_frees)},
                     {"cache_flushes", n(s.cache_flushes)},
                     {"ooms", n(s.ooms)}};
}

}  // namespace

int runCudaCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Say whether CUDA can be used: each device, or \"CUDA is not available: <reason>\", and the memory statistics "
      "of this process's caching allocator (allocated, reserved, peaks, cudaMalloc calls).");
  parser.addHelpOption();
  parser.addOption({"json", "Print JSON: {built, available, reason, devices: [{index, name, memory}]}."});
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (!parser.positionalArguments().isEmpty()) {
    err << args.first() << ": unexpected argument '" << parser.positionalArguments().first() << "'\n";
    return kExitUsage;
  }
  try {
    const bool available = cuda::is_available();
    QJsonArray devices;
    if (!available) {
      // Nothing can have been allocated; the figures say so rather than go missing.
      const cuda::MemoryStats s = cuda::memory_stats(0);
      if (parser.isSet("json")) {
        devices.append(QJsonObject{{"index", 0}, {"name", QJsonValue()}, {"memory", statsJson(s)}});
      } else {
        out << "CUDA is not available: " << QString::fromStdString(cuda::unavailable_reason()) << "\n";
        out << "allocator: " << QString::fromStdString(s.str()) << "\n";
      }
    }
    for (int d = 0; available && d < cuda::device_count(); ++d) {
      const cuda::MemoryStats s = cuda::memory_stats(d);
      const QString name = QString::fromStdString(cuda::device_description(d));
      if (parser.isSet("json")) {
        devices.append(QJsonObject{{"index", d}, {"name", name}, {"memory", statsJson(s)}});
      } else {
        out << "cuda:" << d << " " << name << "\n  allocator: " << QString::fromStdString(s.str()) << "\n";
      }
    }
    if (parser.isSet("json")) {
      const QJsonObject doc{{"built", cuda::is_built()},
                            {"available", available},
                            {"reason", QString::fromStdString(cuda::unavailable_reason())},
                            {"devices", devices}};
      out << QJsonDocument(doc).toJson(QJsonDocument::Indented);
    }
    return kExitOk;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return kExitInvalidInput;
  }
}

}  // namespace strata::host
