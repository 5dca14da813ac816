// extension_cpp::mymuladd / mymul / myadd_out (and, from 1.1.0, mysub): the
// operators of PyTorch's custom C++ ops tutorial, with CPU and Meta kernels, and
// CUDA kernels when built with the toolkit. From 1.1.0, mymuladd also has autocast
// rules, and mymuladd / mymul take float16 and bfloat16 tensors (what autocast casts
// them to): the float32 kernels below, or the core ops for the 16-bit dtypes.
#include "muladd.h"

#include <strata/cuda.h>
#include <strata/dispatcher.h>
#include <strata/modes/autocast.h>
#include <strata/modes/autograd.h>
#include <strata/modes/opcheck.h>
#include <strata/modes/fake.h>
#include <strata/modes/vmap.h>
#include <strata/ops.h>
#include <strata/tensor.h>

#include <string>
#include <vector>

namespace extension_cpp {

using strata::Tensor;

namespace {

std::vector<int64_t> shape(const Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); }
std::string shapeStr(const Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.sizes().size(); ++i) s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
  return s + "]";
}

// kLowPrecision (1.1.0): float16 and bfloat16 are accepted too.
template <bool kLowPrecision>
void checkPair(const Tensor& a, const Tensor& b, const char* op) {
  STRATA_CHECK(a.device() == b.device(), Device, op, ": expected a and b on the same device, got ", a.device().str(),
               " and ", b.device().str());
  STRATA_CHECK(shape(a) == shape(b), Value, op, ": a and b must have the same shape, got ", shapeStr(a), " and ",
               shapeStr(b));
  const auto t = a.dtype();
  if constexpr (kLowPrecision) {
    STRATA_CHECK(t == b.dtype() && (t == strata::ScalarType::Float || t == strata::ScalarType::Half ||
                                    t == strata::ScalarType::BFloat16),
                 Value, op, ": a and b must be both float32, both float16 or both bfloat16, got ", toString(a.dtype()),
                 " and ", toString(b.dtype()));
  } else {
    STRATA_CHECK(t == strata::ScalarType::Float && b.dtype() == strata::ScalarType::Float, Value, op,
                 ": a and b must be float32, got ", toString(a.dtype()), " and ", toString(b.dtype()));
  }
}

bool isFloat32(const Tensor& a) { return a.dtype() == strata::ScalarType::Float; }

template <bool kLowPrecision>
Tensor mymuladd_cpu(const Tensor& a, const Tensor& b, double c) {
  checkPair<kLowPrecision>(a, b, "mymuladd");
  if (!isFloat32(a)) return strata::ops::add(strata::ops::mul(a, b), c);
  const Tensor ac = strata::ops::contiguous(a), bc = strata::ops::contiguous(b);
  Tensor out = strata::ops::empty(shape(a), strata::ScalarType::Float);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] * pb[i] + static_cast<float>(c);
  return out;
}

template <bool kLowPrecision>
Tensor mymul_cpu(const Tensor& a, const Tensor& b) {
  checkPair<kLowPrecision>(a, b, "mymul");
  if (!isFloat32(a)) return strata::ops::mul(a, b);
  const Tensor ac = strata::ops::contiguous(a), bc = strata::ops::contiguous(b);
  Tensor out = strata::ops::empty(shape(a), strata::ScalarType::Float);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] * pb[i];
  return out;
}

Tensor mysub_cpu(const Tensor& a, const Tensor& b) {
  checkPair<false>(a, b, "mysub");
  return strata::ops::sub(a, b);
}

// myadd_out writes its result into out: a contiguous float32 tensor of a's shape, on
// a's device.
void checkOut(const Tensor& a, const Tensor& b, const Tensor& out) {
  checkPair<false>(a, b, "myadd_out");
  STRATA_CHECK(out.device() == a.device(), Device, "myadd_out: expected out on ", a.device().str(), ", got ",
               out.device().str());
  STRATA_CHECK(shape(out) == shape(a) && out.dtype() == strata::ScalarType::Float && out.is_contiguous(), Value,
               "myadd_out: out must be a contiguous float32 tensor of shape ", shapeStr(a), ", got ",
               toString(out.dtype()), " ", shapeStr(out), out.is_contiguous() ? "" : " (not contiguous)");
}

void myadd_out_cpu(const Tensor& a, const Tensor& b, Tensor& out) {
  checkOut(a, b, out);
  const Tensor ac = strata::ops::contiguous(a), bc = strata::ops::contiguous(b);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + pb[i];
}

// Fake implementations (torch.library.register_fake): shapes, dtypes and devices only,
// made with core:: ops so that FakeTensorMode makes fake tensors and meta tensors
// give meta ones.
template <bool kLowPrecision>
Tensor mymuladd_meta(const Tensor& a, const Tensor& b, double) {
  checkPair<kLowPrecision>(a, b, "mymuladd");
  return strata::ops::empty(shape(a), a.dtype(), a.device());
}
template <bool kLowPrecision>
Tensor mymul_meta(const Tensor& a, const Tensor& b) {
  checkPair<kLowPrecision>(a, b, "mymul");
  return strata::ops::empty(shape(a), a.dtype(), a.device());
}
void myadd_out_meta(const Tensor& a, const Tensor& b, Tensor& out) { checkOut(a, b, out); }

}  // namespace

}  // namespace extension_cpp

#ifdef MULADD_WITH_CUDA
// From muladd_cuda.cu (C++17, no SDK headers): null, or why the launch failed. Each
// launches on stream (a cudaStream_t) of device.
extern "C" const char* extension_cpp_muladd_launch(const float* a, const float* b, float c, float* out, int64_t n,
                                                   void* stream, int device);
extern "C" const char* extension_cpp_mul_launch(const float* a, const float* b, float* out, int64_t n, void* stream,
                                                int device);
extern "C" const char* extension_cpp_add_launch(const float* a, const float* b, float* out, int64_t n, void* stream,
                                                int device);

namespace extension_cpp {
namespace {
void checkLaunch(const char* error, const char* op) {
  STRATA_CHECK(error == nullptr, Device, op, ": the CUDA kernel failed to launch: ", error);
}
// Strata's current stream of t's device: where the SDK's own work on t runs.
strata::cuda::Stream streamOf(const Tensor& t) { return strata::cuda::getCurrentStream(t.device().index); }
template <bool kLowPrecision>
Tensor mymuladd_cuda(const Tensor& a, const Tensor& b, double c) {
  checkPair<kLowPrecision>(a, b, "mymuladd");
  if (!isFloat32(a)) return strata::ops::add(strata::ops::mul(a, b), c);
  const Tensor ac = strata::ops::contiguous(a), bc = strata::ops::contiguous(b);
  Tensor out = strata::ops::empty(shape(a), strata::ScalarType::Float, a.device());
  const strata::cuda::Stream s = streamOf(out);
  checkLaunch(extension_cpp_muladd_launch(ac.data_ptr<float>(), bc.data_ptr<float>(), static_cast<float>(c),
                                          out.data_ptr<float>(), out.numel(), s.handle(), s.device_index()),
              "mymuladd");
  return out;
}
template <bool kLowPrecision>
Tensor mymul_cuda(const Tensor& a, const Tensor& b) {
  checkPair<kLowPrecision>(a, b, "mymul");
  if (!isFloat32(a)) return strata::ops::mul(a, b);
  const Tensor ac = strata::ops::contiguous(a), bc = strata::ops::contiguous(b);
  Tensor out = strata::ops::empty(shape(a), strata::ScalarType::Float, a.device());
  const strata::cuda::Stream s = streamOf(out);
  checkLaunch(extension_cpp_mul_launch(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), out.numel(),
                                       s.handle(), s.device_index()),
              "mymul");
  return out;
}
void myadd_out_cuda(const Tensor& a, const Tensor& b, Tensor& out) {
  checkOut(a, b, out);
  const Tensor ac = strata::ops::contiguous(a), bc = strata::ops::contiguous(b);
  const strata::cuda::Stream s = streamOf(out);
  checkLaunch(extension_cpp_add_launch(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), out.numel(),
                                       s.handle(), s.device_index()),
              "myadd_out");
}
}  // namespace
}  // namespace extension_cpp
#endif

namespace extension_cpp {

void registerMulAdd(strata::BundleRegistrar& r, bool with_mysub) {
  auto& m = r.library(strata::Library::DEF, "extension_cpp");
  m.def("mymuladd(Tensor a, Tensor b, float c) -> Tensor");
  m.def("mymul(Tensor a, Tensor b) -> Tensor");
  m.def("myadd_out(Tensor a, Tensor b, Tensor(a!) out) -> ()");
  if (with_mysub) m.def("mysub(Tensor a, Tensor b) -> Tensor");

  auto& cpu = r.library(strata::Library::IMPL, "extension_cpp", strata::DispatchKey::CPU);
  // 1.1.0's kernels also take the 16-bit dtypes its autocast rules hand them.
  const bool low = with_mysub;
  cpu.impl("mymuladd", low ? &mymuladd_cpu<true> : &mymuladd_cpu<false>);
  cpu.impl("mymul", low ? &mymul_cpu<true> : &mymul_cpu<false>);
  cpu.impl("myadd_out", &myadd_out_cpu);
  if (with_mysub) cpu.impl("mysub", &mysub_cpu);

  // They serve meta tensors too (`strata dump` shows them as kind "fake" at Meta).
  strata::modes::register_fake("extension_cpp::mymuladd", low ? &mymuladd_meta<true> : &mymuladd_meta<false>, m);
  strata::modes::register_fake("extension_cpp::mymul", low ? &mymul_meta<true> : &mymul_meta<false>, m);
  strata::modes::register_fake("extension_cpp::myadd_out", &myadd_out_meta, m);

#ifdef MULADD_WITH_CUDA
  auto& cuda = r.library(strata::Library::IMPL, "extension_cpp", strata::DispatchKey::CUDA);
  cuda.impl("mymuladd", low ? &mymuladd_cuda<true> : &mymuladd_cuda<false>);
  cuda.impl("mymul", low ? &mymul_cuda<true> : &mymul_cuda<false>);
  cuda.impl("myadd_out", &myadd_out_cuda);
#endif

  if (with_mysub) {
    // 1.1.0: under autocast, mymuladd runs in the lower precision. On cpu, in the
    // dtype the autocast scope asks for (torch.autocast("cpu", dtype)); on cuda in
    // float16 whatever the scope says, as torch.library.register_autocast does.
    // Admins switch either off with `strata kernel disable extension_cpp::mymuladd
    // autocast:cpu`.
    strata::modes::register_autocast_policy("extension_cpp::mymuladd", "cpu",
                                            strata::modes::CastPolicy::lower_precision_fp, m);
    strata::modes::register_autocast("extension_cpp::mymuladd", "cuda", strata::ScalarType::Half, m);

    // 1.1.0: a batching rule for mymuladd (torch.library.register_vmap), so
    // vmap(mymuladd) is one call over the whole batch: both batch dims to the front
    // (an unmapped argument expanded to the batch, a view), one mymuladd of [B, ...].
    // It is written in the typed form (functorch's C++ form: each Tensor with its
    // batch dim, the output with its out_dim), which a typed call reaches without
    // boxing; the boxed form (in_dims and a Stack, as the seeds' examples) works too.
    // 1.0.0 has none, and vmap runs its for-loop fallback. `strata kernel disable
    // extension_cpp::mymuladd batched` switches this rule off.
    using MulAddSig = Tensor(const Tensor&, const Tensor&, double);
    const auto op = strata::Dispatcher::singleton().findSchemaOrThrow("extension_cpp::mymuladd").typed<MulAddSig>();
    strata::modes::register_vmap<MulAddSig>(
        "extension_cpp::mymuladd",
        [op](const strata::modes::VmapInfo& info, const Tensor& a, strata::modes::Dim a_bdim, const Tensor& b,
             strata::modes::Dim b_bdim, double c) {
          return std::make_tuple(op.call(strata::modes::move_bdim_to_front(a, a_bdim, info.batch_size),
                                         strata::modes::move_bdim_to_front(b, b_bdim, info.batch_size), c),
                                 0);
        },
        m);

    // 1.1.0: training, as the tutorial ends (torch.library.register_autograd). The
    // backward calls mymul, an op of this bundle, so every layer sees it and it is
    // differentiable in turn. `strata kernel disable extension_cpp::mymuladd autograd`
    // switches a formula off (a backward through the op then raises).
    const auto mymul = strata::Dispatcher::singleton()
                           .findSchemaOrThrow("extension_cpp::mymul")
                           .typed<Tensor(const Tensor&, const Tensor&)>();
    // Saves only what the other input's gradient needs (the tutorial's _setup_context).
    const strata::modes::SetupContextFn save_ab = [](strata::modes::AutogradContext& ctx, const strata::Stack& in,
                                                     const strata::Stack&) {
      ctx.save_for_backward({ctx.needs_input_grad(1) ? in[0].toTensor() : Tensor(),
                             ctx.needs_input_grad(0) ? in[1].toTensor() : Tensor()});
    };
    auto backward = [mymul](size_t num_inputs) {
      return [mymul, num_inputs](strata::modes::AutogradContext& ctx, const std::vector<Tensor>& grads) {
        const std::vector<Tensor> saved = ctx.saved_tensors();
        std::vector<strata::IValue> out(num_inputs);  // None for c
        if (ctx.needs_input_grad(0)) out[0] = mymul.call(grads[0], saved[1]);
        if (ctx.needs_input_grad(1)) out[1] = mymul.call(grads[0], saved[0]);
        return out;
      };
    };
    strata::modes::register_autograd("extension_cpp::mymuladd", backward(3), save_ab, m);
    strata::modes::register_autograd("extension_cpp::mymul", backward(2), save_ab, m);

    // The tutorial's sample_inputs: what `strata check` (and `serve --check`) runs
    // opcheck and gradcheck on. Tensors with and without requires_grad, an int and a
    // float c.
    strata::modes::register_sample_inputs(
        "extension_cpp::mymuladd",
        [](std::string_view) {
          std::vector<strata::modes::SampleInput> samples;
          for (bool requires_grad : {true, false}) {
            auto make = [&](std::vector<int64_t> s) { return strata::ops::rand(s).set_requires_grad(requires_grad); };
            auto nondiff = [](std::vector<int64_t> s) { return strata::ops::rand(s); };
            samples.push_back({{make({3}), make({3}), int64_t{1}}});
            samples.push_back({{make({20}), make({20}), 3.14}});
            samples.push_back({{make({20}), nondiff({20}), int64_t{-123}}});
            samples.push_back({{nondiff({2, 3}), make({2, 3}), -0.3}});
          }
          return samples;
        },
        m);
    strata::modes::register_sample_inputs(
        "extension_cpp::mymul",
        [](std::string_view) {
          return std::vector<strata::modes::SampleInput>{
              {{strata::ops::rand({3}).set_requires_grad(true), strata::ops::rand({3}).set_requires_grad(true)}},
              {{strata::ops::rand({2, 3}), strata::ops::rand({2, 3}).set_requires_grad(true)}},
              {{strata::ops::rand({4}), strata::ops::rand({4})}}};
        },
        m);
  }
}

}  // namespace extension_cpp
