// Fake tensors, FakeTensorMode, register_fake and get_ctx: PyTorch's
// torch._subclasses.FakeTensorMode and torch.library.register_fake / get_ctx in C++.
//
//   auto mode = std::make_shared<strata::modes::FakeTensorMode>();
//   {
//     strata::modes::ModeGuard guard(mode);               // `with FakeTensorMode():`
//     Tensor x = strata::ops::rand({2, 3});               // a fake tensor: cpu, no data
//     Tensor y = op.typed<Tensor(const Tensor&)>().call(x);  // runs y's fake impl only
//   }
//
//   strata::modes::register_fake("mylib::custom_nonzero", [](const Tensor& x) {
//     strata::SymInt nnz = strata::modes::get_ctx().new_dynamic_size(0, x.numel());
//     return strata::ops::empty({nnz, x.dim()}, strata::ScalarType::Long, x.device());
//   }, lib);
//
// Note [Fake tensors]
// ~~~~~~~~~~~~~~~~~~~
// A fake tensor has sizes, strides, a dtype and a device it claims (cpu, cuda, ...),
// but no data. It is a wrapper tensor (Note [Wrapper tensors]): its storage claims the
// device and holds no memory; its TensorWrapper keeps a meta storage of the same size
// (what the Meta kernels see) and the FakeTensorMode that made it. Its key set is the
// claimed device's backend key, the autograd key when it requires grad, and Fake,
// which sits above every backend: no CPU or CUDA kernel ever runs on it. Touching its
// data throws, naming the tensor and the op being faked.
//
// FakeTensorMode is a dispatch mode (Note [The mode stack]). For each op it sees it
//   1. converts real tensor arguments to fake ones (from_tensor; the same real tensor,
//      or a view of the same storage, always maps to the same fake storage);
//   2. works out the output device: the Device argument if one is given, else the
//      device all fake tensor arguments share (0-d cpu tensors mix with any, as in
//      PyTorch), else cpu;
//   3. runs the op's fake implementation, read from the op's Meta slot:
//        - a fake impl (register_fake): called with the fake tensors, the mode pushed
//          again so the ops it calls make fake tensors, and get_ctx() valid;
//        - a Meta kernel (every core:: op has one): called with meta tensors that stand
//          for the fake ones; its meta results become fake tensors on the output
//          device, sharing the fake storage of any argument they alias (views). Not
//          for an op tagged data_dependent_output or dynamic_output_shape (strata/
//          tag.h): its output depends on data, so only a fake impl can describe it,
//          and without one the call is an error (PyTorch's DataDependentOutput and
//          DynamicOutputShape exceptions);
//        - a CompositeImplicitAutograd kernel: run with the fake tensors, so the ops it
//          decomposes into come back to the mode;
//      and anything else (a CPU-only kernel, a "default" kernel) is an error naming
//      the op and saying how to add a fake implementation. No real kernel ever runs.
// An op on fake tensors outside any FakeTensorMode reaches the Fake key, whose
// fallback pushes the tensors' own mode and runs the op under it (PyTorch's
// FakeTensor.__torch_dispatch__). Fake tensors of two different modes do not mix.
//
// A register_fake impl is a Meta kernel marked as fake (dump shows kind "fake"):
// it also serves meta tensors, and an admin who disables (op, meta) disables it under
// FakeTensorMode too.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <unordered_map>

#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/modes/dispatch_mode.h"
#include "strata/modes/export.h"
#include "strata/sym_int.h"
#include "strata/tensor.h"

namespace strata::modes {

class STRATA_MODES_API FakeTensorMode : public DispatchMode, public std::enable_shared_from_this<FakeTensorMode> {
 public:
  FakeTensorMode();
  ~FakeTensorMode() override;

  Stack dispatch(const OperatorHandle& op, const TensorTypes& types, Stack args) override;
  std::string name() const override { return "FakeTensorMode"; }
  std::string summary() const override;

  // PyTorch's from_tensor / from_real_tensor: a fake tensor with t's sizes, strides,
  // offset, dtype, device and requires_grad. Memoized: the same tensor gives the same
  // fake tensor, and tensors sharing a storage give fake tensors sharing one. A fake
  // tensor of this mode comes back as it is; one of another mode is Error(Value).
  // The mode keeps the real tensors it converted alive until it dies.
  Tensor from_tensor(const Tensor& t);
  // A fake tensor with these sizes (symbolic ones allowed; Note [Symbolic sizes]),
  // contiguous, on device.
  Tensor empty(IntArrayRef sizes, ScalarType dtype, Device device);

  // A new symbol u<N> (N counts from 0 in each mode) with its range.
  SymInt new_symbol(int64_t min, std::optional<int64_t> max);
  size_t num_symbols() const { return next_symbol_.load(); }
  size_t num_fake_tensors_made() const { return made_.load(); }

 private:
  friend struct FakeAccess;
  struct Memo;
  std::unique_ptr<Memo> memo_;
  std::atomic<size_t> next_symbol_{0};
  const uint64_t id_;  // unique in the process: a fake tensor names its mode by it
  std::atomic<size_t> made_{0};
};

// True when t is a fake tensor (of any mode).
STRATA_MODES_API bool is_fake(const Tensor& t);
// The mode that made a fake tensor; null for a real tensor or when the mode is gone.
STRATA_MODES_API std::shared_ptr<FakeTensorMode> fake_mode_of(const Tensor& t);

// What get_ctx() returns inside a fake impl (PyTorch's FakeImplCtx).
class STRATA_MODES_API FakeImplCtx {
 public:
  FakeImplCtx(FakeTensorMode& mode, const OperatorHandle& op) : mode_(mode), op_(op) {}
  // A symbolic size for an output size that depends on data (the number of nonzeros):
  // a new symbol u<N> with range [min, max] (max none = unbounded). Error(Value) when
  // min < 0 or max < min.
  SymInt new_dynamic_size(int64_t min = 0, std::optional<int64_t> max = std::nullopt);
  const OperatorHandle& op() const { return op_; }
  FakeTensorMode& mode() const { return mode_; }

 private:
  FakeTensorMode& mode_;
  OperatorHandle op_;
};

// The context of the fake impl running on this thread. Error(Value) outside one
// (including a fake impl serving meta tensors, which has no mode to make symbols in).
STRATA_MODES_API FakeImplCtx& get_ctx();

namespace detail {
STRATA_MODES_API RegistrationHandleRAII registerFake(std::string_view op, KernelFunction kernel, bool allow_override,
                                                     std::source_location where);
// A fake impl that pops num_args arguments and returns nothing, for a custom op that
// only writes its arguments; any register_fake replaces it.
STRATA_MODES_API RegistrationHandleRAII registerTrivialFake(std::string_view op, size_t num_args,
                                                            std::source_location where);
}  // namespace detail

// Registers fn as op's fake implementation (torch.library.register_fake): fn has the
// op's C++ signature, computes its outputs' metadata from its inputs' (through core::
// ops, never their data), and serves FakeTensorMode and meta tensors alike. Errors
// (Error(Value) unless noted), each naming the op and the reason: no such op
// (NotImplemented); the op already has a fake impl (unless allow_override); it has a
// Meta kernel (a Meta kernel already is its fake implementation); it has a
// CompositeImplicitAutograd kernel (it decomposes, so it needs none); fn's signature
// does not fit the schema (Schema). Owned (RegistrationOwnerGuard), RAII, in dump
// (kind "fake" at Meta) and the store, like every kernel.
template <typename F>
RegistrationHandleRAII register_fake(std::string_view op, F&& fn, bool allow_override = false,
                                     std::source_location where = std::source_location::current()) {
  return detail::registerFake(op, KernelFunction::make(std::forward<F>(fn)), allow_override, where);
}
template <typename F>
void register_fake(std::string_view op, F&& fn, Library& lib, bool allow_override = false,
                   std::source_location where = std::source_location::current()) {
  lib.keep(register_fake(op, std::forward<F>(fn), allow_override, where));
}

}  // namespace strata::modes
