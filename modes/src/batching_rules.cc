// The core:: ops' batching rules (owner "builtin"), as functorch writes them: move
// the batch dim to the front, shift the op's dims by one, call the op once on the
// whole batch. Each runs with its level off the stack (Note [vmap levels]), so the
// ops it calls on the values are plain calls (or an outer level's).
//
// Ops without a rule: the factories (no tensor argument, so no batched one: they
// run as they are and give an unbatched result) and allclose (it returns a bool,
// one per batch element, which a tensor-stacking loop cannot return: under vmap it
// fails, as in PyTorch).
#include <algorithm>
#include <string>

#include "registered_at.h"
#include "strata/ops.h"
#include "vmap_internal.h"

namespace strata::modes::detail {

namespace {

int64_t rankOf(const Tensor& v, Dim bdim) { return v.dim() - (bdim ? 1 : 0); }

// A logical dim of a tensor of logical rank `rank`, wrapped (PyTorch's maybe_wrap_dim;
// a 0-d tensor takes 0 and -1).
int64_t wrapDim(int64_t d, int64_t rank) {
  const int64_t n = std::max<int64_t>(rank, 1);
  STRATA_CHECK(d >= -n && d < n, Index, "Dimension out of range (expected to be in range of [", -n, ", ", n - 1,
               "], but got ", d, ")");
  return d < 0 ? d + n : d;
}

// v with its batch dim at 0 (v must be batched).
Tensor front(const Tensor& v, Dim bdim) { return *bdim == 0 ? v : ops::movedim(v, *bdim, 0); }

// v (batch dim at 0, logical rank `rank`) with size-1 dims after the batch dim up to
// logical rank `target`, so it broadcasts against tensors of that rank.
Tensor padTo(Tensor v, int64_t rank, int64_t target) {
  for (int64_t i = rank; i < target; ++i) v = ops::unsqueeze(v, 1);
  return v;
}

int category(ScalarType t) {
  if (t == ScalarType::Bool) return 0;
  return isFloatingType(t) ? 2 : 1;
}

// ops::resultType on the logical tensors (a zero-dim tensor ranks below a dimensioned
// one within a category), which the batch dim would change.
ScalarType logicalResultType(ScalarType a, bool a_zero, ScalarType b, bool b_zero) {
  if (a_zero == b_zero) return ops::promoteTypes(a, b);
  const ScalarType zero = a_zero ? a : b, dimmed = a_zero ? b : a;
  return category(zero) > category(dimmed) ? zero : dimmed;
}

VmapResult one(IValue v, Dim d) {
  VmapResult r;
  r.outputs.push_back(std::move(v));
  r.out_dims.push_back(d);
  return r;
}

// The op called on the arguments as they are; the output keeps the first argument's
// batch dim (elementwise unary ops, casts, clone, empty_like).
VmapRule sameDim(OperatorHandle op) {
  return [op](const VmapInfo&, const InDims& in_dims, Stack& args) {
    op.callBoxed(args);
    return one(std::move(args[0]), in_dims[0]);
  };
}

// Broadcasting binary ops: both batch dims to the front, the logical ranks padded to
// the larger, the dtypes promoted as the logical tensors would be.
VmapRule binary(OperatorHandle op) {
  return [op](const VmapInfo&, const InDims& in_dims, Stack& args) {
    Tensor x = args[0].toTensor(), y = args[1].toTensor();
    const int64_t rx = rankOf(x, in_dims[0]), ry = rankOf(y, in_dims[1]);
    if (x.dtype() != y.dtype()) {
      // The op promotes the values it is given, where a batched 0-d tensor is 1-d ([B]).
      // Only where that would differ from the logical promotion (a batched 0-d beside a
      // dimensioned tensor of its category) are both cast; otherwise the op sees its
      // operands' own dtypes, and its own checks (sub refuses a bool) still run.
      const ScalarType dt = logicalResultType(x.dtype(), rx == 0, y.dtype(), ry == 0);
      if (dt != logicalResultType(x.dtype(), !in_dims[0] && rx == 0, y.dtype(), !in_dims[1] && ry == 0)) {
        x = ops::to(x, dt);
        y = ops::to(y, dt);
      }
    }
    const int64_t r = std::max(rx, ry);
    if (in_dims[0]) x = padTo(front(x, in_dims[0]), rx, r);
    if (in_dims[1]) y = padTo(front(y, in_dims[1]), ry, r);
    args[0] = IValue(x);
    args[1] = IValue(y);
    op.callBoxed(args);
    return one(std::move(args[0]), 0);
  };
}

VmapRule contiguousRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    return one(IValue(ops::contiguous(front(args[0].toTensor(), in_dims[0]))), 0);
  };
}

// sum(self, *, dtype): every logical dim reduced.
VmapRule sumAll() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    Tensor x = front(args[0].toTensor(), in_dims[0]);
    const std::optional<ScalarType> dtype =
        args[1].isNone() ? std::nullopt : std::optional<ScalarType>(args[1].toScalarType());
    if (x.dim() == 1) x = ops::unsqueeze(x, 1);
    std::vector<int64_t> dims;
    for (int64_t d = 1; d < x.dim(); ++d) dims.push_back(d);
    return one(IValue(ops::sum(x, dims, false, dtype)), 0);
  };
}

// sum.dim_IntList(self, dim?, keepdim, *, dtype).
VmapRule sumDim() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const int64_t rank = rankOf(args[0].toTensor(), in_dims[0]);
    Tensor x = front(args[0].toTensor(), in_dims[0]);
    const bool keepdim = args[2].toBool();
    const std::optional<ScalarType> dtype =
        args[3].isNone() ? std::nullopt : std::optional<ScalarType>(args[3].toScalarType());
    std::vector<int64_t> dims;
    if (args[1].isNone() || args[1].toIntList().empty()) {
      for (int64_t d = 0; d < rank; ++d) dims.push_back(d + 1);
    } else {
      for (int64_t d : args[1].toIntList()) dims.push_back(wrapDim(d, rank) + 1);
    }
    if (rank == 0) {
      // A 0-d tensor reduces over its one pseudo dim: a [B] value stays [B]. Given
      // twice ({0, -1}), it is the plain op's error.
      STRATA_CHECK(dims.size() <= 1, Value, "core::sum: dim 0 appears multiple times in the list of dims");
      x = ops::unsqueeze(x, 1);
      dims = {1};
      Tensor out = ops::sum(x, dims, false, dtype);
      return one(IValue(out), 0);
    }
    return one(IValue(ops::sum(x, dims, keepdim, dtype)), 0);
  };
}

// matmul: 1-d operands as a row (left) or column (right) matrix, batched ones with the
// batch dim in front and padded to the same logical rank, then one broadcasting
// matmul; the added dims are squeezed out again.
VmapRule matmulRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    Tensor x = args[0].toTensor(), y = args[1].toTensor();
    int64_t rx = rankOf(x, in_dims[0]), ry = rankOf(y, in_dims[1]);
    STRATA_CHECK(rx >= 1 && ry >= 1, Value, "core::matmul: both arguments to matmul need to be at least 1D, but they are ",
                 rx, "D and ", ry, "D");
    if (in_dims[0]) x = front(x, in_dims[0]);
    if (in_dims[1]) y = front(y, in_dims[1]);
    const bool x_vec = rx == 1, y_vec = ry == 1;
    if (x_vec) {
      x = ops::unsqueeze(x, -2);
      rx = 2;
    }
    if (y_vec) {
      y = ops::unsqueeze(y, -1);
      ry = 2;
    }
    const int64_t r = std::max(rx, ry);
    if (in_dims[0]) x = padTo(x, rx, r);
    if (in_dims[1]) y = padTo(y, ry, r);
    Tensor out = ops::matmul(x, y);
    if (y_vec) out = ops::squeeze(out, -1);
    if (x_vec) out = ops::squeeze(out, y_vec ? -1 : -2);
    return one(IValue(out), 0);
  };
}

VmapRule tRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    STRATA_CHECK(rank <= 2, Value, "core::t: t() expects a tensor with <= 2 dimensions, but self is ", rank, "D");
    if (rank < 2) return one(IValue(v), in_dims[0]);
    return one(IValue(ops::transpose(front(v, in_dims[0]), 1, 2)), 0);
  };
}

VmapRule transposeRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    const int64_t d0 = wrapDim(args[1].toInt(), rank), d1 = wrapDim(args[2].toInt(), rank);
    if (rank == 0) return one(IValue(v), in_dims[0]);
    return one(IValue(ops::transpose(front(v, in_dims[0]), d0 + 1, d1 + 1)), 0);
  };
}

VmapRule movedimRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    const int64_t s = wrapDim(args[1].toInt(), rank), d = wrapDim(args[2].toInt(), rank);
    if (rank == 0) return one(IValue(v), in_dims[0]);
    return one(IValue(ops::movedim(front(v, in_dims[0]), s + 1, d + 1)), 0);
  };
}

VmapRule permuteRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    const auto& dims = args[1].toIntList();
    STRATA_CHECK(static_cast<int64_t>(dims.size()) == rank, Value, "permute(", dims.size(),
                 " dims): the number of dims does not match the tensor's ", rank);
    std::vector<int64_t> perm{0};  // the batch dim stays in front
    for (int64_t d : dims) perm.push_back(wrapDim(d, rank) + 1);
    return one(IValue(ops::permute(front(v, in_dims[0]), perm)), 0);
  };
}

VmapRule unsqueezeRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t d = wrapDim(args[1].toInt(), rankOf(v, in_dims[0]) + 1);
    return one(IValue(ops::unsqueeze(front(v, in_dims[0]), d + 1)), 0);
  };
}

VmapRule squeezeRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    Tensor x = front(args[0].toTensor(), in_dims[0]);
    for (int64_t d = x.dim() - 1; d >= 1; --d) {
      if (x.sizes()[d] == 1) x = ops::squeeze(x, d);
    }
    return one(IValue(x), 0);
  };
}

VmapRule squeezeDimRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    const int64_t d = wrapDim(args[1].toInt(), rank);
    if (rank == 0) return one(IValue(v), in_dims[0]);
    return one(IValue(ops::squeeze(front(v, in_dims[0]), d + 1)), 0);
  };
}

VmapRule selectRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    STRATA_CHECK(rank > 0, Index, "select() cannot be applied to a 0-d tensor");
    const int64_t d = wrapDim(args[1].toInt(), rank);
    return one(IValue(ops::select(front(v, in_dims[0]), d + 1, args[2].toInt())), 0);
  };
}

VmapRule narrowRule() {
  return [](const VmapInfo&, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    STRATA_CHECK(rank > 0, Index, "core::narrow: narrow() cannot be applied to a 0-dim tensor");
    const int64_t d = wrapDim(args[1].toInt(), rank);
    return one(IValue(ops::narrow(front(v, in_dims[0]), d + 1, args[2].toInt(), args[3].toInt())), 0);
  };
}

VmapRule expandRule() {
  return [](const VmapInfo& info, const InDims& in_dims, Stack& args) {
    const Tensor& v = args[0].toTensor();
    const int64_t rank = rankOf(v, in_dims[0]);
    const std::vector<int64_t>& size = args[1].toIntList();
    const int64_t n = static_cast<int64_t>(size.size());
    STRATA_CHECK(n >= rank, Value, "core::expand: the number of sizes provided (", n,
                 ") must be greater or equal to the number of dimensions in the tensor (", rank, ")");
    for (int64_t i = 0; i < n - rank; ++i) {
      STRATA_CHECK(size[static_cast<size_t>(i)] >= 0, Value, "core::expand: the expanded size of the tensor (",
                   size[static_cast<size_t>(i)], ") isn't allowed in a leading, non-existing dimension ", i);
    }
    Tensor x = front(v, in_dims[0]);
    for (int64_t i = rank; i < n; ++i) x = ops::unsqueeze(x, 1);  // new leading logical dims
    std::vector<int64_t> physical{info.batch_size};
    physical.insert(physical.end(), size.begin(), size.end());
    return one(IValue(ops::expand(x, physical, args[2].toBool())), 0);
  };
}

// reshape / view: the batch dim in front, then the same op on [B, shape...].
VmapRule reshapeLike(bool view) {
  return [view](const VmapInfo& info, const InDims& in_dims, Stack& args) {
    Tensor x = front(args[0].toTensor(), in_dims[0]);
    std::vector<int64_t> shape{info.batch_size};
    const std::vector<int64_t>& s = args[1].toIntList();
    shape.insert(shape.end(), s.begin(), s.end());
    return one(IValue(view ? ops::view(x, shape) : ops::reshape(x, shape)), 0);
  };
}

// stack / cat: the layer gives every element batched at 0 (Tensor[] arguments).
VmapRule stackLike(bool cat) {
  return [cat](const VmapInfo&, const InDims&, Stack& args) {
    const std::vector<Tensor>& all = args[0].toTensorList();
    STRATA_CHECK(!all.empty(), Value, cat ? "core::cat: expected a non-empty list of Tensors"
                                          : "core::stack: stack expects a non-empty TensorList");
    // cat skips an element whose logical shape is [0] (the legacy empty tensor), as
    // the plain op and PyTorch's rule do; here it is [B, 0].
    std::vector<Tensor> kept;
    if (cat) {
      for (const Tensor& t : all) {
        if (!(t.dim() == 2 && t.size(1) == 0)) kept.push_back(t);
      }
    }
    const std::vector<Tensor>& ts = cat && !kept.empty() ? kept : all;
    const int64_t rank = ts[0].dim() - 1;
    if (cat) {
      STRATA_CHECK(rank > 0, Value, "core::cat: zero-dimensional tensor (at position 0) cannot be concatenated");
      Tensor out = ops::cat(ts, wrapDim(args[1].toInt(), rank) + 1);
      // A skipped element still takes part in the result's dtype, as in the plain op.
      ScalarType dtype = out.dtype();
      for (const Tensor& t : all) dtype = ops::promoteTypes(dtype, t.dtype());
      if (dtype != out.dtype()) out = ops::to(out, dtype);
      return one(IValue(std::move(out)), 0);
    }
    return one(IValue(ops::stack(ts, wrapDim(args[1].toInt(), rank + 1) + 1)), 0);
  };
}

// A tensor's sizes without its batch dim (the shape each example sees).
std::vector<int64_t> logicalSizes(const Tensor& v, Dim bdim) {
  std::vector<int64_t> sizes(v.sizes().begin(), v.sizes().end());
  if (bdim) sizes.erase(sizes.begin() + *bdim);
  return sizes;
}

// copy_(self!, src): self must be batched; src is broadcast to each example's self,
// as the plain op broadcasts it to self. That is checked on the logical shapes, so
// errors name the shapes each example has, and because the physical [B, ...] self
// would also take an unbatched src of one more dim whose first size is B (or 1),
// each example then getting a row that is not its own.
VmapRule copyRule(OperatorHandle op) {
  return [op](const VmapInfo&, const InDims& in_dims, Stack& args) {
    STRATA_CHECK(in_dims[0].has_value(), Value,
                 "vmap: core::copy_(self, *extra_args) is not possible because there exists a Tensor `other` in "
                 "extra_args that has more elements than `self`. This happened due to `other` being vmapped over but "
                 "`self` not being vmapped over in a vmap. Please try to use out-of-place operators instead of "
                 "core::copy_.");
    const Tensor& self = args[0].toTensor();
    const int64_t rank = rankOf(self, in_dims[0]);
    Tensor src = args[1].toTensor();
    {
      const std::vector<int64_t> dst_shape = logicalSizes(self, in_dims[0]), src_shape = logicalSizes(src, in_dims[1]);
      const std::vector<int64_t> shape = ops::broadcastShapes(dst_shape, src_shape);
      STRATA_CHECK(shape == dst_shape, Value, "core::copy_: the source of shape ", sym::shapeStr(src_shape),
                   " cannot be broadcast to the destination's shape ", sym::shapeStr(dst_shape));
    }
    Tensor dst = front(self, in_dims[0]);  // a view: the copy writes into self
    if (in_dims[1]) src = padTo(front(src, in_dims[1]), rankOf(src, in_dims[1]), rank);
    Stack call{IValue(dst), IValue(src), args[2]};
    op.callBoxed(call);
    return one(IValue(self), in_dims[0]);
  };
}

[[noreturn]] void randomError() {
  STRATA_FAIL(Value, "vmap: called random operation while in randomness error mode. Please either use the 'same' or "
              "'different' randomness flags on vmap or perform the randomness operation out of vmap");
}

// rand(size, *, dtype, device): runs for every call under vmap (no tensor argument).
VmapRule randRule(OperatorHandle op) {
  return [op](const VmapInfo& info, const InDims&, Stack& args) {
    if (info.randomness == Randomness::error) randomError();
    if (info.randomness == Randomness::same) {
      op.callBoxed(args);
      return one(std::move(args[0]), std::nullopt);
    }
    std::vector<int64_t> size{info.batch_size};
    const std::vector<int64_t>& s = args[0].toIntList();
    size.insert(size.end(), s.begin(), s.end());
    args[0] = IValue(size);
    op.callBoxed(args);
    return one(std::move(args[0]), 0);
  };
}

// rand_like(self, *, dtype, device).
VmapRule randLikeRule() {
  return [](const VmapInfo& info, const InDims& in_dims, Stack& args) {
    if (info.randomness == Randomness::error) randomError();
    const Tensor& v = args[0].toTensor();
    const std::optional<ScalarType> dtype =
        args[1].isNone() ? std::optional<ScalarType>(v.dtype()) : std::optional<ScalarType>(args[1].toScalarType());
    const std::optional<Device> device =
        args[2].isNone() ? std::optional<Device>(v.device()) : std::optional<Device>(args[2].toDevice());
    std::vector<int64_t> logical;
    for (int64_t d = 0; d < v.dim(); ++d) {
      if (!in_dims[0] || d != *in_dims[0]) logical.push_back(v.sizes()[d]);
    }
    if (info.randomness == Randomness::same) return one(IValue(ops::rand(logical, dtype, device)), std::nullopt);
    logical.insert(logical.begin(), info.batch_size);
    return one(IValue(ops::rand(logical, dtype, device)), 0);
  };
}

struct CoreRule {
  const char* op;
  VmapRule (*make)(OperatorHandle op);
  bool runs_unbatched;
};

// The table's entry for a rule that calls ops by their ops:: names, not its own handle.
template <VmapRule (*F)()>
VmapRule ignoringOp(OperatorHandle) {
  return F();
}
VmapRule reshapeRule(OperatorHandle) { return reshapeLike(false); }
VmapRule viewRule(OperatorHandle) { return reshapeLike(true); }
VmapRule stackRule(OperatorHandle) { return stackLike(false); }
VmapRule catRule(OperatorHandle) { return stackLike(true); }

constexpr CoreRule kCoreRules[] = {
    {"core::empty_like", &sameDim, false},
    {"core::clone", &sameDim, false},
    {"core::copy_", &copyRule, false},
    {"core::fill_.Scalar", &sameDim, false},  // self is the only tensor: it is batched
    {"core::zero_", &sameDim, false},
    {"core::to.dtype", &sameDim, false},
    {"core::contiguous", &ignoringOp<contiguousRule>, false},
    {"core::add.Tensor", &binary, false},
    {"core::add.Scalar", &sameDim, false},
    {"core::sub.Tensor", &binary, false},
    {"core::sub.Scalar", &sameDim, false},
    {"core::mul.Tensor", &binary, false},
    {"core::mul.Scalar", &sameDim, false},
    {"core::div.Tensor", &binary, false},
    {"core::div.Scalar", &sameDim, false},
    {"core::neg", &sameDim, false},
    {"core::sin", &sameDim, false},
    {"core::cos", &sameDim, false},
    {"core::exp", &sameDim, false},
    {"core::sum", &ignoringOp<sumAll>, false},
    {"core::sum.dim_IntList", &ignoringOp<sumDim>, false},
    {"core::matmul", &ignoringOp<matmulRule>, false},
    {"core::t", &ignoringOp<tRule>, false},
    {"core::transpose.int", &ignoringOp<transposeRule>, false},
    {"core::movedim.int", &ignoringOp<movedimRule>, false},
    {"core::permute", &ignoringOp<permuteRule>, false},
    {"core::unsqueeze", &ignoringOp<unsqueezeRule>, false},
    {"core::squeeze", &ignoringOp<squeezeRule>, false},
    {"core::squeeze.dim", &ignoringOp<squeezeDimRule>, false},
    {"core::select.int", &ignoringOp<selectRule>, false},
    {"core::narrow", &ignoringOp<narrowRule>, false},
    {"core::expand", &ignoringOp<expandRule>, false},
    {"core::reshape", &reshapeRule, false},
    {"core::view", &viewRule, false},
    {"core::stack", &stackRule, false},
    {"core::cat", &catRule, false},
    {"core::rand", &randRule, true},
    {"core::rand_like", &ignoringOp<randLikeRule>, true},
};

}  // namespace

void registerCoreBatchingRules(std::vector<RegistrationHandleRAII>& keep) {
  RegistrationOwnerGuard owner("builtin");
  const std::string debug = registeredAt(std::source_location::current());
  Dispatcher& d = Dispatcher::singleton();
  for (const CoreRule& r : kCoreRules) {
    keep.push_back(addVmapRule(r.op, r.make(d.findSchemaOrThrow(r.op)), r.runs_unbatched, false, debug,
                               "register_vmap"));
  }
}

}  // namespace strata::modes::detail

namespace strata::modes {

std::vector<std::string> core_ops_with_batching_rules() {
  std::vector<std::string> out;
  for (const auto& r : detail::kCoreRules) out.emplace_back(r.op);
  return out;
}

}  // namespace strata::modes
