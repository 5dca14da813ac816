// libFuzzer target for bundle metadata: JSON read by Qt, then checked by the same
// function the host runs on every plugin it discovers (host::checkPluginMetaData).
// The input is tried as the whole plugin metadata object and as the bundle.json
// inside a Strata plugin's, so every field check is reached. Checking never throws,
// and metadata it accepts satisfies what discovery relies on.
#include <QByteArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "plugin_host.h"
#include "strata/plugin.h"

namespace {

void check(const QJsonObject& meta) {
  QString why;
  const std::optional<strata::host::BundleMetadata> m = strata::host::checkPluginMetaData(meta, &why);
  if (!m) {
    if (why.isEmpty()) {
      std::fprintf(stderr, "refused without a reason\n");
      std::abort();
    }
    return;
  }
  const strata::AbiVersion host = strata::hostSdkAbi();
  if (!strata::host::isBundleName(m->name) || !strata::host::isSemanticVersion(m->version_text) ||
      m->version.isNull() || m->abi_major != host.major || m->abi_minor > host.minor) {
    std::fprintf(stderr, "accepted bad metadata: %s %s abi %d.%d\n", qPrintable(m->name), qPrintable(m->version_text),
                 m->abi_major, m->abi_minor);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const QJsonDocument doc =
      QJsonDocument::fromJson(QByteArray::fromRawData(reinterpret_cast<const char*>(data), static_cast<qsizetype>(size)));
  if (!doc.isObject()) return 0;
  check(doc.object());
  QJsonObject wrapped;
  wrapped["IID"] = QStringLiteral(STRATA_BUNDLE_IID);
  wrapped["MetaData"] = doc.object();
  check(wrapped);
  return 0;
}
