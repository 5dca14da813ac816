// What the host says about operators: their JSON and the names close to a typo.
#include "operator_info.h"

#include <algorithm>

#include <QJsonArray>
#include <QJsonDocument>

namespace strata::host {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

QJsonObject toJson(const RegistrationInfo& r) {
  QJsonObject o{{"kind", q(r.kind)}, {"owner", q(r.owner)}, {"debug", q(r.debug)}};
  if (r.what != RegistrationInfo::What::Def) {
    o["key"] = toString(r.key);
    o["enabled"] = r.enabled;
    o["active"] = r.active;
  }
  return o;
}

QJsonObject toJson(const SlotInfo& s) {
  QJsonObject o{{"key", s.key == DispatchKey::Undefined ? QString("(no keys)") : QString(toString(s.key))},
                {"source", q(s.source)}};
  if (!s.owner.empty()) {
    o["kind"] = q(s.kind);
    o["registered_at"] = toString(s.registered_at);
    o["owner"] = q(s.owner);
    o["debug"] = q(s.debug);
  }
  return o;
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> closestNames(const std::string& name, const std::vector<std::string>& known) {
  std::vector<std::string> overloads;
  for (const auto& k : known) {
    if (k.size() > name.size() && k.compare(0, name.size(), name) == 0 && k[name.size()] == '.') overloads.push_back(k);
  }
  if (!overloads.empty()) return overloads;
  // The closest names, within a quarter of the name's length after its namespace
  // (1 to 3 edits).
  const size_t sep = name.find("::");
  const size_t base = sep == std::string::npos ? name.size() : name.size() - (sep + 2);
  const size_t limit = std::min<size_t>(3, std::max<size_t>(1, base / 4));
  size_t best = limit + 1;
  std::vector<std::string> out;
  for (const auto& k : known) {
    const size_t d = editDistance(name, k);
    if (d == 0 || d > best) continue;
    if (d < best) out.clear();
    best = d;
    out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.size() > 5) out.resize(5);
  return out;
}

std::string didYouMean(const std::vector<std::string>& close) {
  if (close.empty()) return "";
  std::string s = "; did you mean ";
  for (size_t i = 0; i < close.size(); ++i) {
    if (i > 0) s += i + 1 == close.size() ? " or " : ", ";
    s += close[i];
  }
  return s + "?";
}

std::string didYouMean(const std::string& name, const std::vector<std::string>& known) {
  return didYouMean(closestNames(name, known));
}

std::vector<std::string> liveOperatorNames() {
  std::vector<std::string> names;
  for (const auto& n : Dispatcher::singleton().operatorNames()) names.push_back(n.str());
  return names;
}

QJsonObject opJson(const OperatorName& name, bool with_table) {
  Dispatcher& d = Dispatcher::singleton();
  QJsonObject o{{"name", q(name.str())}};
  auto h = d.findOp(name);
  if (h && h->hasSchema()) {
    o["schema"] = q(h->schema().str());
    QJsonArray tags;
    for (Tag t : h->tags().tags()) tags.append(QString::fromLatin1(toString(t)));
    o["tags"] = tags;
    o["alias_analysis"] = QString::fromLatin1(toString(h->aliasAnalysis()));
  }
  QJsonArray regs;
  for (const auto& r : d.registrations(name)) regs.append(toJson(r));
  o["registrations"] = regs;
  if (with_table) {
    QJsonArray table;
    for (const auto& s : d.computedTable(name)) table.append(toJson(s));
    o["table"] = table;
  }
  return o;
}


std::string answerDumpQuery(const std::string& op) {
  const OperatorName name = parseOperatorName(op);
  STRATA_CHECK(Dispatcher::singleton().findOp(name).has_value(), NotImplemented, "no operator named ", shortened(name.str()),
               didYouMean(name.str(), liveOperatorNames()));
  const QJsonObject o{{"text", q(Dispatcher::singleton().dump(name))}, {"json", opJson(name, true)}};
  return QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString();
}

std::string shortened(std::string_view whole) { return strata::detail::shortened(whole); }

}  // namespace strata::host
