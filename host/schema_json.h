// JSON views of SDK values, for --json output.
#pragma once

#include <QJsonObject>

#include "strata/schema.h"

namespace strata::host {

// {"canonical", "name", "overload", "arguments": [...], "returns": [...],
//  "is_vararg", "is_varret", "is_mutable"}; each argument is
// {"name", "type", "type_tree", "N"?, "default"?, "kwarg_only", "alias"?}.
QJsonObject toJson(const FunctionSchema& schema);

}  // namespace strata::host
