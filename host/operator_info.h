// What the host says about operators, shared by the CLI and the embeddable host:
// an operator's JSON (strata ops/dump --json, dump --host) and the names a user
// most likely meant when a name is unknown.
#pragma once

#include <QJsonObject>

#include <string>
#include <vector>

#include "strata/dispatcher.h"

namespace strata::host {

// {"name", "schema", "tags", "alias_analysis", "registrations"[, "table"]}.
QJsonObject opJson(const OperatorName& name, bool with_table);
// The answer to "dump OP" a host gives through the store: {"text": ..., "json": {...}}
// (what `strata dump` prints). Throws strata::Error for an unknown op.
std::string answerDumpQuery(const std::string& op);

// The names among `known` a user who typed `name` most likely meant: every overload
// of it when it names none ("core::add": core::add.Scalar, core::add.Tensor), else
// the names within a few edits of it, closest first. Empty when nothing is close.
std::vector<std::string> closestNames(const std::string& name, const std::vector<std::string>& known);
// "; did you mean core::add.Scalar or core::add.Tensor?", or "" when nothing is close.
std::string didYouMean(const std::string& name, const std::vector<std::string>& known);
// The same sentence for names already chosen ("" for none).
std::string didYouMean(const std::vector<std::string>& names);
// Every live operator's qualified name, sorted.
std::vector<std::string> liveOperatorNames();

// A value as an error message quotes it: whole, or its start and its length when it
// is long (a command line may hold a 100 KB argument).
std::string shortened(std::string_view whole);

}  // namespace strata::host
