// The strata subcommands. Each takes its own arguments (argv[0] first, e.g.
// "strata schema") and returns the process exit status:
//   0 success, 1 some input was invalid, 2 the command line itself was wrong.
#pragma once

#include <QStringList>

namespace strata::host {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalidInput = 1;
inline constexpr int kExitUsage = 2;

int runSchemaCommand(const QStringList& args);
int runDemoCommand(const QStringList& args);

}  // namespace strata::host
