// TraceMode: records every op that reaches it as a small graph, which prints,
// exports as JSON and replays against new inputs.
//
//   auto trace = std::make_shared<strata::modes::TraceMode>();
//   { strata::modes::ModeGuard g(trace); strata::ops::mul(strata::ops::add(a, b), c); }
//   std::cout << trace->graph().str();
//   //   graph(%0 : float32[3] cpu, %1 : float32[3] cpu, %3 : float32[3] cpu):
//   //     %2 : float32[3] cpu = core::add.Tensor(%0, %1, 1)
//   //     %4 : float32[3] cpu = core::mul.Tensor(%2, %3)
//   //     return (%4)
//   Stack again = trace->graph().replay({x, y, z});
//
// Values are tensors, identified by their TensorImpl: a tensor an op returns is a new
// value; a tensor first seen as an argument is a graph input (numbered as they
// appear). The trace holds a reference to every tensor it saw, so identities cannot
// be confused by a freed tensor's address being reused; clear() lets them go. An op
// that writes into an argument (`Tensor(a!) out`) and returns it, or returns its
// input, reuses that value. Non-tensor arguments are recorded as constants. The
// graph's outputs are the values produced by a node and used by no later node.
// Ops that fail are not recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/modes/dispatch_mode.h"

namespace strata::modes {

struct TraceValue {
  int64_t id = 0;
  int64_t producer = -1;  // the node that made it; -1 for a graph input
  std::vector<int64_t> sizes;
  ScalarType dtype = ScalarType::Float;
  DeviceType device = DeviceType::CPU;
  std::string str() const;  // "float32[2, 3] cpu"
};

// One argument or result of a node.
struct TraceArg {
  enum class Kind : uint8_t { Value, ValueList, Constant };
  Kind kind = Kind::Constant;
  int64_t value = -1;           // Value
  std::vector<int64_t> values;  // ValueList (Tensor[], Tensor?[]); -1 for None
  bool optional_list = false;   // a Tensor?[] (replayed as a generic list)
  IValue constant;              // Constant
};

struct TraceNode {
  std::string op;  // "ns::name.overload"
  std::vector<TraceArg> args;
  std::vector<TraceArg> outputs;
};

class STRATA_MODES_API TraceGraph {
 public:
  std::vector<TraceValue> values;  // by id
  std::vector<int64_t> inputs;     // value ids, in order of first use
  std::vector<TraceNode> nodes;    // in call order

  // Values produced by a node and used by no later node, in order.
  std::vector<int64_t> outputs() const;
  // The graph in a TorchScript-like text form (see the top of this header).
  std::string str() const;
  // {"inputs": [...], "nodes": [{"op", "args", "outputs"}], "outputs": [...], "values": [...]}.
  std::string json() const;
  // Runs the nodes again, in order, through the dispatcher, with `inputs` in place of
  // the graph's inputs (same count and order; shapes may differ) and returns the
  // outputs(). Error(Value) when the count differs or a node's op no longer exists.
  Stack replay(const std::vector<Tensor>& inputs) const;
};

class STRATA_MODES_API TraceMode : public DispatchMode {
 public:
  Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) override;
  std::string name() const override { return "trace"; }

  // A copy of what was recorded so far.
  TraceGraph graph() const;
  size_t numNodes() const;
  // Forgets the recording and the tensors it held.
  void clear();

 private:
  TraceArg recordArg(const IValue& v, std::vector<int64_t>& new_inputs);
  int64_t valueOf(const Tensor& t, std::vector<int64_t>& new_inputs);
  int64_t newValue(const Tensor& t, int64_t producer);

  mutable std::mutex mu_;
  TraceGraph graph_;
  std::unordered_map<const void*, int64_t> ids_;  // TensorImpl -> value id
  std::vector<Tensor> held_;
};

}  // namespace strata::modes
