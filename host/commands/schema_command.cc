// strata schema: canonicalize schema strings.
#include <QCommandLineParser>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>

#include <cstdio>

#include <iostream>
#include <string>

#include "commands/commands.h"
#include "schema_json.h"
#include "strata/schema.h"

namespace strata::host {

namespace {

// One input -> one output line. Returns false when the input is invalid.
bool canonicalize(const QString& input, bool json, QTextStream& out) {
  const std::string text = input.toStdString();
  try {
    const FunctionSchema schema = parseSchema(text);
    if (json) {
      QJsonObject o = toJson(schema);
      o["input"] = input;
      o["ok"] = true;
      out << QJsonDocument(o).toJson(QJsonDocument::Compact) << "\n";
    } else {
      out << QString::fromStdString(schema.str()) << "\n";
    }
    return true;
  } catch (const SchemaError& e) {
    if (json) {
      QJsonObject error{{"column", static_cast<qint64>(e.column())},
                        {"reason", QString::fromStdString(e.reason())}};
      QJsonObject o{{"input", input}, {"ok", false}, {"error", error}};
      out << QJsonDocument(o).toJson(QJsonDocument::Compact) << "\n";
    } else {
      out << "error: " << e.column() << ": " << QString::fromStdString(e.reason()) << "\n";
    }
    return false;
  }
}

}  // namespace

int runSchemaCommand(const QStringList& args) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Parse operator schemas and print each in the canonical form PyTorch prints.\n"
      "Schemas come from the arguments or, when there are none, one per line on\n"
      "standard input (blank lines and '#' comment lines are skipped). Each input\n"
      "gives one output line; an invalid one prints 'error: <column>: <reason>'.\n"
      "The exit status is 1 if any input was invalid, 2 for a bad command line.");
  parser.addHelpOption();
  parser.addOption({"json", "Print the parsed structure, one JSON object per line."});
  parser.addPositionalArgument("schema", "Schema strings, e.g. 'mylib::foo(Tensor x) -> Tensor'.",
                               "[SCHEMA...]");
  QTextStream out(stdout);
  QTextStream err(stderr);
  if (int rc = parseOrExit(parser, args); rc >= 0) return rc;
  const bool json = parser.isSet("json");
  bool all_valid = true;
  const QStringList inputs = parser.positionalArguments();
  if (!inputs.isEmpty()) {
    for (const QString& s : inputs) all_valid = canonicalize(s, json, out) && all_valid;
    return all_valid ? kExitOk : kExitInvalidInput;
  }
  // Read as bytes: a line that is not UTF-8 is refused, not read with U+FFFD in it.
  std::string raw;
  for (int n = 1; std::getline(std::cin, raw); ++n) {
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();  // CRLF, as QTextStream read it
    if (n == 1 && raw.starts_with("\xEF\xBB\xBF")) raw.erase(0, 3);  // a byte order mark, as editors on Windows write
    const QByteArray bytes = QByteArray::fromStdString(raw);
    const QString line = QString::fromUtf8(bytes);
    const QString trimmed = line.trimmed();
    if (trimmed.isEmpty() || trimmed.startsWith('#')) continue;  // not an input
    if (!isUtf8(bytes)) {
      if (json) {
        out << QJsonDocument(QJsonObject{{"line", n}, {"ok", false},
                                         {"error", QJsonObject{{"reason", "not valid UTF-8"}}}})
                   .toJson(QJsonDocument::Compact)
            << "\n";
      } else {
        out << "error: line " << n << " is not valid UTF-8\n";
      }
      all_valid = false;
      continue;
    }
    all_valid = canonicalize(line, json, out) && all_valid;
    out.flush();
  }
  return all_valid ? kExitOk : kExitInvalidInput;
}

}  // namespace strata::host
