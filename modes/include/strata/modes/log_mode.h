// LogMode: one line per op that reaches it: its name, its arguments' shapes (and
// non-tensor values), its results' shapes and the time the layers below took.
//
//   extension_cpp::mymuladd(float32[3] cpu, float32[3] cpu, 2) -> (float32[3] cpu)  4.1 us
//
// Lines go to the mode's own sink when it has one, else to the process-wide sink
// (set_log_sink), which is stderr until a host routes it to its own logging (the
// strata host sends it to the QLoggingCategory "strata.modes.log"). An op that
// throws logs "raised: <message>" and the exception goes on.
#pragma once

#include <functional>
#include <iosfwd>
#include <string_view>

#include "strata/modes/dispatch_mode.h"

namespace strata::modes {

using LogSink = std::function<void(std::string_view line)>;

// The sink of LogModes that have none of their own; null restores stderr.
STRATA_MODES_API void set_log_sink(LogSink sink);

// The layers' warnings (vmap's for-loop fallback, ...): one line each, to the warning
// sink, which is stderr ("strata: warning: ...") until a host routes it to its own
// logging (the strata host sends it to the QLoggingCategory "strata.modes" as a
// warning). null restores stderr.
STRATA_MODES_API void set_warning_sink(LogSink sink);
STRATA_MODES_API void warn(std::string_view message);

class STRATA_MODES_API LogMode : public DispatchMode {
 public:
  LogMode() = default;
  explicit LogMode(LogSink sink) : sink_(std::move(sink)) {}
  // Lines to a stream (which must outlive the mode), one per line.
  explicit LogMode(std::ostream& os);

  Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) override;
  std::string name() const override { return "log"; }

 private:
  void writeLine(std::string_view line) const;
  LogSink sink_;
};

// "float32[2, 3] cpu" for a tensor, its printed value otherwise; lists in brackets.
STRATA_MODES_API std::string describeValue(const IValue& v);

}  // namespace strata::modes
