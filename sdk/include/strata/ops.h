// The core:: operator library: typed entry points that call through the dispatcher.
//
//   Tensor y = ops::add(ops::mul(x, w), b);   // core::mul.Tensor, core::add.Tensor
//
// Every function here is a call of a core:: operator (schemas: `strata ops`), so it
// dispatches like any other op: autocast, vmap, autograd and dispatch modes see it,
// and a kernel registered for a core op (with allow_override) replaces the builtin.
// The builtin kernels (owner "builtin") are CPU and Meta for every op, CUDA for the
// elementwise ops and casts when built with CUDA; factories and views that work on
// any device are CompositeExplicitAutograd ("default") kernels. Semantics follow
// PyTorch: broadcasting, type promotion (a Scalar does not raise a tensor's dtype
// within its category), true division, views sharing storage.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "strata/export.h"
#include "strata/scalar.h"
#include "strata/tensor.h"

namespace strata::ops {

// Factories (core::empty, zeros, ones, full, arange, arange.start, empty_like).
STRATA_API Tensor empty(const std::vector<int64_t>& size, std::optional<ScalarType> dtype = std::nullopt,
                        std::optional<Device> device = std::nullopt);
STRATA_API Tensor zeros(const std::vector<int64_t>& size, std::optional<ScalarType> dtype = std::nullopt,
                        std::optional<Device> device = std::nullopt);
STRATA_API Tensor ones(const std::vector<int64_t>& size, std::optional<ScalarType> dtype = std::nullopt,
                       std::optional<Device> device = std::nullopt);
STRATA_API Tensor full(const std::vector<int64_t>& size, const Scalar& fill_value,
                       std::optional<ScalarType> dtype = std::nullopt, std::optional<Device> device = std::nullopt);
STRATA_API Tensor arange(const Scalar& end, std::optional<ScalarType> dtype = std::nullopt,
                         std::optional<Device> device = std::nullopt);
STRATA_API Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
                         std::optional<ScalarType> dtype = std::nullopt, std::optional<Device> device = std::nullopt);
STRATA_API Tensor empty_like(const Tensor& self, std::optional<ScalarType> dtype = std::nullopt,
                             std::optional<Device> device = std::nullopt);

// Random (core::rand, rand_like): uniform on [0, 1), floating dtypes only, from the
// process's default generator, which manual_seed reseeds (torch.manual_seed). Under
// vmap, `randomness` decides whether batch elements share the values.
STRATA_API Tensor rand(const std::vector<int64_t>& size, std::optional<ScalarType> dtype = std::nullopt,
                       std::optional<Device> device = std::nullopt);
STRATA_API Tensor rand_like(const Tensor& self, std::optional<ScalarType> dtype = std::nullopt,
                            std::optional<Device> device = std::nullopt);
STRATA_API void manual_seed(uint64_t seed);
// The default generator's state (torch.get_rng_state / set_rng_state); set_rng_state
// takes only what get_rng_state returned (Error(Value) otherwise).
STRATA_API std::string get_rng_state();
STRATA_API void set_rng_state(const std::string& state);

// Copies and casts.
STRATA_API Tensor clone(const Tensor& self);
STRATA_API Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking = false);
// Writes value (zero_: 0) into every element of self, as torch.Tensor.fill_ / zero_.
STRATA_API Tensor& fill_(Tensor& self, const Scalar& value);
STRATA_API Tensor& zero_(Tensor& self);
STRATA_API Tensor to(const Tensor& self, ScalarType dtype, bool non_blocking = false, bool copy = false);
STRATA_API Tensor contiguous(const Tensor& self);

// Elementwise arithmetic (broadcasting, type promotion).
STRATA_API Tensor add(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
STRATA_API Tensor add(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
STRATA_API Tensor sub(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
STRATA_API Tensor sub(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
STRATA_API Tensor mul(const Tensor& self, const Tensor& other);
STRATA_API Tensor mul(const Tensor& self, const Scalar& other);
STRATA_API Tensor div(const Tensor& self, const Tensor& other);
STRATA_API Tensor div(const Tensor& self, const Scalar& other);
STRATA_API Tensor neg(const Tensor& self);
STRATA_API Tensor sin(const Tensor& self);
STRATA_API Tensor cos(const Tensor& self);
STRATA_API Tensor exp(const Tensor& self);

// Reductions and linear algebra.
STRATA_API Tensor sum(const Tensor& self, std::optional<ScalarType> dtype = std::nullopt);
STRATA_API Tensor sum(const Tensor& self, std::optional<std::vector<int64_t>> dim, bool keepdim = false,
                      std::optional<ScalarType> dtype = std::nullopt);
STRATA_API Tensor matmul(const Tensor& self, const Tensor& other);

// Shapes and views.
STRATA_API Tensor t(const Tensor& self);
STRATA_API Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1);
STRATA_API Tensor movedim(const Tensor& self, int64_t source, int64_t destination);
// dims: a permutation of the tensor's dims (torch.permute).
STRATA_API Tensor permute(const Tensor& self, const std::vector<int64_t>& dims);
STRATA_API Tensor unsqueeze(const Tensor& self, int64_t dim);
STRATA_API Tensor squeeze(const Tensor& self);
STRATA_API Tensor squeeze(const Tensor& self, int64_t dim);
STRATA_API Tensor select(const Tensor& self, int64_t dim, int64_t index);
// length elements of dim from start: a view (torch.narrow).
STRATA_API Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
STRATA_API Tensor expand(const Tensor& self, const std::vector<int64_t>& size, bool implicit = false);
STRATA_API Tensor reshape(const Tensor& self, const std::vector<int64_t>& shape);
STRATA_API Tensor view(const Tensor& self, const std::vector<int64_t>& size);
STRATA_API Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
STRATA_API Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// |self - other| <= atol + rtol * |other| everywhere (broadcasting); NaNs equal
// only with equal_nan. Needs data: a meta tensor is an error.
STRATA_API bool allclose(const Tensor& self, const Tensor& other, double rtol = 1e-05, double atol = 1e-08,
                         bool equal_nan = false);

// The dtype PyTorch's type promotion gives (torch.promote_types / torch.result_type).
STRATA_API ScalarType promoteTypes(ScalarType a, ScalarType b);
STRATA_API ScalarType resultType(const Tensor& a, const Tensor& b);
STRATA_API ScalarType resultType(const Tensor& a, const Scalar& b);
// The broadcast shape of two shapes; Error(Value) when they do not broadcast.
STRATA_API std::vector<int64_t> broadcastShapes(IntArrayRef a, IntArrayRef b);

}  // namespace strata::ops
