// torch::Library and the TORCH_LIBRARY macros for PyTorch extension sources built
// against Strata (strata/torch_compat.h says what the shim covers).
//
//   TORCH_LIBRARY(extension_cpp, m) { m.def("mymuladd(Tensor a, Tensor b, float c) -> Tensor"); }
//   TORCH_LIBRARY_IMPL(extension_cpp, CPU, m) { m.impl("mymuladd", &mymuladd_cpu); }
//
// TORCH_LIBRARY, TORCH_LIBRARY_FRAGMENT and TORCH_LIBRARY_IMPL are STRATA_LIBRARY,
// STRATA_LIBRARY_FRAGMENT and STRATA_LIBRARY_IMPL blocks whose body sees a
// torch::Library: in a bundle the host is loading they do not run at library load
// but inside the bundle's load transaction, owned by the bundle (Note [Static
// registrations in bundles] in strata/plugin.h); anywhere else they run at static
// initialization, as PyTorch's do.
//
// Note [Kernels with at::Tensor]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Strata's boxing knows strata::Tensor, not its subclass at::Tensor, so
// torch::Library::impl/def/fallback wrap a kernel that takes or returns at:: types
// (at::Tensor, c10::IntArrayRef, at::TensorList, c10::Device, std::optional and
// std::vector of them) in a functor with the Strata types, which makes the at::
// values and calls it. The wrapper's C++ signature is the normalized one every
// Strata kernel of the op uses: `at::Tensor` and `const at::Tensor&` both become
// `const strata::Tensor&`, `at::Tensor&` stays a mutable `strata::Tensor&`. So a
// CPU kernel taking `at::Tensor a` and a CUDA kernel taking `const at::Tensor& a`
// (as the tutorial's do) register on one op, and a typed call uses
// `Tensor(const Tensor&, const Tensor&, double)`. Each at::Tensor argument costs one
// reference count increment; an `at::Tensor&` argument the kernel reseats is
// written back; a kernel returning `at::Tensor&` returns one of its `at::Tensor&`
// arguments, and the caller gets that argument. A kernel with Strata types only is
// registered as it is.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/dispatch_key.h"
#include "strata/kernel_function.h"
#include "strata/library.h"
#include "strata/tag.h"
#include "strata/torch_compat/tensor.h"

namespace c10 {
// TORCH_FN(f): a function known at compile time (c10::CompileTimeFunctionPointer).
template <class FuncType, FuncType* func_ptr>
struct CompileTimeFunctionPointer {
  static_assert(std::is_function_v<FuncType>, "TORCH_FN can only wrap function types");
  using FuncType_ = FuncType;
  static constexpr FuncType* func_ptr_ = func_ptr;
};
}  // namespace c10
#define TORCH_FN_TYPE(func) \
  ::c10::CompileTimeFunctionPointer<std::remove_pointer_t<std::remove_reference_t<decltype(func)>>, func>
#define TORCH_FN(func) TORCH_FN_TYPE(func)()
#define TORCH_SELECTIVE_NAME(n) n
#define TORCH_SELECTIVE_SCHEMA(n) n

namespace torch {

using CppFunction = strata::CppFunction;
using strata::schema;

namespace detail {

template <typename T>
struct IsCompileTimeFn : std::false_type {};
template <class F, F* fn>
struct IsCompileTimeFn<c10::CompileTimeFunctionPointer<F, fn>> : std::true_type {};

// A kernel registered at an explicit key: torch::dispatch(key, f).
template <typename F>
struct Dispatched {
  strata::DispatchKey key;
  F f;
};
template <typename T>
struct IsDispatched : std::false_type {};
template <typename F>
struct IsDispatched<Dispatched<F>> : std::true_type {};

// --- at:: value types <-> the Strata types the boxing knows (Note [Kernels with at::Tensor]). ---
template <typename T>
struct Convert {  // a type both sides share
  static constexpr bool kChanged = false;
  using type = T;
};
template <>
struct Convert<at::Tensor> {
  static constexpr bool kChanged = true;
  using type = strata::Tensor;
  static at::Tensor toAt(const strata::Tensor& t) { return at::Tensor(t); }
  static strata::Tensor toStrata(at::Tensor&& t) { return strata::Tensor(std::move(t)); }
};
template <>
struct Convert<c10::IntArrayRef> {
  static constexpr bool kChanged = true;
  using type = strata::IntArrayRef;
  static c10::IntArrayRef toAt(strata::IntArrayRef s) { return c10::IntArrayRef(s); }
  static strata::IntArrayRef toStrata(c10::IntArrayRef s) { return s; }
};
template <>
struct Convert<c10::Device> {
  static constexpr bool kChanged = true;
  using type = strata::Device;
  static c10::Device toAt(strata::Device d) { return c10::Device(d); }
  static strata::Device toStrata(c10::Device d) { return d; }
};
template <typename T>
struct Convert<std::optional<T>> {
  static constexpr bool kChanged = Convert<T>::kChanged;
  using type = std::optional<typename Convert<T>::type>;
  static std::optional<T> toAt(const type& s) { return s ? std::optional<T>(Convert<T>::toAt(*s)) : std::nullopt; }
  static type toStrata(std::optional<T>&& v) { return v ? type(Convert<T>::toStrata(std::move(*v))) : std::nullopt; }
};
template <typename T>
struct Convert<std::vector<T>> {
  static constexpr bool kChanged = Convert<T>::kChanged;
  using type = std::vector<typename Convert<T>::type>;
  static std::vector<T> toAt(const type& s) {
    std::vector<T> v;
    v.reserve(s.size());
    for (const auto& e : s) v.push_back(Convert<T>::toAt(e));
    return v;
  }
  static type toStrata(std::vector<T>&& v) {
    type s;
    s.reserve(v.size());
    for (auto& e : v) s.push_back(Convert<T>::toStrata(std::move(e)));
    return s;
  }
};
template <typename... T>
struct Convert<std::tuple<T...>> {
  static constexpr bool kChanged = (Convert<T>::kChanged || ...);
  using type = std::tuple<typename Convert<T>::type...>;
  static type toStrata(std::tuple<T...>&& v) {
    return std::apply([](T&... e) { return type(Convert<T>::toStrata(std::move(e))...); }, v);
  }
};
template <>
struct Convert<at::TensorList> {  // a view: the argument holds the tensors it views
  static constexpr bool kChanged = true;
  using type = std::vector<strata::Tensor>;
};

template <typename T>
inline constexpr bool kChanged = Convert<std::remove_cvref_t<T>>::kChanged;

// One argument of a wrapped kernel: built from the Strata parameter, gives the
// kernel's own parameter type A with get(), lives until the call's end.
template <typename A, typename = void>
struct Arg {  // A type both sides share: passed on as it is
  using Param = A;
  std::add_lvalue_reference_t<A> ref;
  explicit Arg(std::add_lvalue_reference_t<A> r) : ref(r) {}
  A get() { return std::forward<A>(ref); }
};
template <>
struct Arg<at::Tensor&> {  // a mutable tensor: written back when the kernel reseats it
  using Param = strata::Tensor&;
  strata::Tensor& src;
  at::Tensor t;
  explicit Arg(strata::Tensor& s) : src(s), t(s) {}
  Arg(const Arg&) = delete;
  Arg& operator=(const Arg&) = delete;
  ~Arg() {
    if (t.unsafeGetTensorImpl() != src.unsafeGetTensorImpl()) src = t;
  }
  at::Tensor& get() { return t; }
};
template <typename A>
struct Arg<A, std::enable_if_t<std::is_same_v<std::remove_cvref_t<A>, at::TensorList>>> {
  using Param = const std::vector<strata::Tensor>&;
  std::vector<at::Tensor> held;
  explicit Arg(Param s) : held(s.begin(), s.end()) {}
  at::TensorList get() { return at::TensorList(held); }
};
template <typename A>
struct Arg<A, std::enable_if_t<kChanged<A> && !std::is_same_v<A, at::Tensor&> &&
                               !std::is_same_v<std::remove_cvref_t<A>, at::TensorList>>> {
  static_assert(!std::is_lvalue_reference_v<A> || std::is_const_v<std::remove_reference_t<A>>,
                "torch::Library: a kernel takes at:: types by value or const reference (or at::Tensor& for a "
                "mutated tensor)");
  using D = std::remove_cvref_t<A>;
  using Param = const typename Convert<D>::type&;
  D v;
  explicit Arg(Param s) : v(Convert<D>::toAt(s)) {}
  A get() {
    if constexpr (std::is_reference_v<A>) return v;
    else return std::move(v);
  }
};

template <typename R>
struct Ret {
  using type = std::conditional_t<kChanged<R>, typename Convert<std::remove_cvref_t<R>>::type, R>;
};
template <>
struct Ret<at::Tensor&> {
  using type = strata::Tensor&;
};
template <>
struct Ret<void> {
  using type = void;
};

[[noreturn]] inline void throwNotAnArgument() {
  strata::detail::throwError(strata::ErrorKind::Value,
                             "a kernel returning at::Tensor& must return one of its at::Tensor& arguments");
}

// The kernel f, with Strata types (Note [Kernels with at::Tensor]).
template <typename F, typename R, typename... A>
struct AtKernel {
  F f;

  typename Ret<R>::type operator()(typename Arg<A>::Param... args) const {
    if constexpr (std::is_void_v<R>) {
      f(Arg<A>(args).get()...);
    } else if constexpr (std::is_same_v<R, at::Tensor&>) {
      // The Arg temporaries (and their write-backs) end with this statement.
      const strata::TensorImpl* impl = f(Arg<A>(args).get()...).unsafeGetTensorImpl();
      return returnedArgument(impl, args...);
    } else if constexpr (kChanged<R>) {
      return Convert<std::remove_cvref_t<R>>::toStrata(f(Arg<A>(args).get()...));
    } else {
      return f(Arg<A>(args).get()...);
    }
  }

  template <typename... P>
  static strata::Tensor& returnedArgument(const strata::TensorImpl* impl, P&... args) {
    strata::Tensor* found = nullptr;
    auto consider = [&]<typename T>(T& a) {
      if constexpr (std::is_same_v<T, strata::Tensor>) {
        if (found == nullptr && a.unsafeGetTensorImpl() == impl) found = &a;
      }
    };
    (consider(args), ...);
    if (found == nullptr) throwNotAnArgument();
    return *found;
  }
};

template <typename F, typename Tuple>
struct MakeAtKernel;
template <typename F, typename... A>
struct MakeAtKernel<F, std::tuple<A...>> {
  using Traits = strata::detail::infer::FunctionTraits<F>;
  using R = typename Traits::Return;
  static constexpr bool kNeeded = kChanged<R> || (kChanged<A> || ...);
  using type = AtKernel<F, R, A...>;
};

// What strata::Library registers for f: f itself, or f wrapped.
template <typename F>
decltype(auto) adapt(F&& f) {
  using D = std::decay_t<F>;
  if constexpr (std::is_same_v<D, strata::CppFunction> || std::is_same_v<D, strata::KernelFunction> ||
                strata::detail::boxing::kIsBoxedWithKeys<D> || strata::detail::boxing::kIsBoxedNoKeys<D>) {
    return std::forward<F>(f);
  } else if constexpr (IsCompileTimeFn<D>::value) {
    return adapt(D::func_ptr_);
  } else {
    using Make = MakeAtKernel<D, typename strata::detail::infer::FunctionTraits<D>::ArgTuple>;
    if constexpr (Make::kNeeded) {
      return typename Make::type{std::forward<F>(f)};
    } else {
      return D(std::forward<F>(f));
    }
  }
}

}  // namespace detail

// torch::dispatch(key, f): f registered at key whatever the library's key.
template <typename F>
detail::Dispatched<std::decay_t<F>> dispatch(c10::DispatchKey key, F&& f) {
  return {key, std::forward<F>(f)};
}
template <typename F>
detail::Dispatched<std::decay_t<F>> dispatch(c10::DeviceType type, F&& f) {
  return {strata::backendKey(type), std::forward<F>(f)};
}

// What a TORCH_LIBRARY block's `m` is: the strata::Library the block runs in, with
// torch::Library's methods. Registrations belong to that library (and so, in a
// bundle, to the bundle), with the file and line of the call.
class Library {
 public:
  explicit Library(strata::Library& lib) : lib_(&lib) {}

  Library& def(std::string_view schema, std::source_location where = std::source_location::current()) & {
    lib_->def(schema, where);
    return *this;
  }
  Library& def(std::string_view schema, const std::vector<at::Tag>& tags,
               std::source_location where = std::source_location::current()) & {
    lib_->def(schema, tags, where);
    return *this;
  }
  Library& def(const strata::SchemaSpec& schema, const std::vector<at::Tag>& tags = {},
               std::source_location where = std::source_location::current()) & {
    lib_->def(schema, tags, where);
    return *this;
  }
  // Defines the op and registers f as its CompositeImplicitAutograd kernel; a bare
  // name infers the schema from f.
  template <typename F>
  Library& def(std::string_view name_or_schema, F&& f, std::source_location where = std::source_location::current()) & {
    lib_->def(name_or_schema, detail::adapt(std::forward<F>(f)), where);
    return *this;
  }

  // Registers f for op `name` at the library's key (or torch::dispatch's).
  template <typename F>
  Library& impl(std::string_view name, F&& f, std::source_location where = std::source_location::current()) & {
    if constexpr (detail::IsDispatched<std::decay_t<F>>::value) {
      lib_->impl(name, detail::adapt(std::forward<F>(f).f), f.key, strata::ImplOptions{}, where);
    } else {
      lib_->impl(name, detail::adapt(std::forward<F>(f)), where);
    }
    return *this;
  }

  // A boxed or fallthrough kernel for every op at this `_` IMPL library's key.
  template <typename F>
  Library& fallback(F&& f, std::source_location where = std::source_location::current()) & {
    lib_->fallback(detail::adapt(std::forward<F>(f)), where);
    return *this;
  }

  // Where PyTorch's Python fake impls live; there is no Python here: no effect.
  Library& impl_abstract_pystub(const char* /*python_module*/, const char* /*context*/ = "") & { return *this; }
  Library& set_python_module(const char* /*python_module*/, const char* /*context*/ = "") & { return *this; }

  // The Strata library itself, for what torch::Library does not spell.
  strata::Library& strata_library() const { return *lib_; }

 private:
  strata::Library* lib_;
};

namespace detail {
// The dispatch key names TORCH_LIBRARY_IMPL accepts, as PyTorch spells them. A name
// missing here fails to compile, naming this namespace.
namespace strata_supports_dispatch_key {
using K = strata::DispatchKey;
inline constexpr K CPU = K::CPU;
inline constexpr K CUDA = K::CUDA;
inline constexpr K Meta = K::Meta;
inline constexpr K PrivateUse1 = K::PrivateUse1;
inline constexpr K AutogradCPU = K::AutogradCPU;
inline constexpr K AutogradCUDA = K::AutogradCUDA;
inline constexpr K AutogradMeta = K::AutogradMeta;
inline constexpr K Autograd = K::Autograd;
inline constexpr K AutocastCPU = K::AutocastCPU;
inline constexpr K AutocastCUDA = K::AutocastCUDA;
inline constexpr K AutocastPrivateUse1 = K::AutocastPrivateUse1;
inline constexpr K Autocast = K::AutocastCUDA;  // PyTorch's alias of AutocastCUDA
inline constexpr K CompositeImplicitAutograd = K::CompositeImplicitAutograd;
inline constexpr K CompositeExplicitAutograd = K::CompositeExplicitAutograd;
// No functionalization here: the functional kernel is the explicit one.
inline constexpr K CompositeExplicitAutogradNonFunctional = K::CompositeExplicitAutograd;
inline constexpr K Python = K::Mode;  // __torch_dispatch__: Strata's dispatch-mode key
inline constexpr K FuncTorchBatched = K::Batched;
inline constexpr K Batched = K::Batched;
inline constexpr K Mode = K::Mode;
inline constexpr K Fake = K::Fake;
}  // namespace strata_supports_dispatch_key

// A block's body sees a torch::Library over the strata::Library the block runs in.
inline void runTorchBlock(strata::Library& lib, void (*body)(Library&)) {
  Library m(lib);
  body(m);
}
}  // namespace detail

}  // namespace torch

// The one DEF library of namespace ns.
#define TORCH_LIBRARY(ns, m)                                                               \
  static void TORCH_LIBRARY_init_##ns(::torch::Library&);                                  \
  STRATA_LIBRARY(ns, torch_compat_strata_library_##ns) {                                   \
    ::torch::detail::runTorchBlock(torch_compat_strata_library_##ns, &TORCH_LIBRARY_init_##ns); \
  }                                                                                        \
  void TORCH_LIBRARY_init_##ns(::torch::Library& m)

// A FRAGMENT of namespace ns (any number of them).
#define TORCH_LIBRARY_FRAGMENT(ns, m) TORCH_LIBRARY_FRAGMENT_UID_(ns, m, STRATA_UID(TORCH_LIBRARY_FRAGMENT_))
#define TORCH_LIBRARY_FRAGMENT_UID_(ns, m, uid)                                               \
  static void STRATA_CONCAT(uid, _torch)(::torch::Library&);                                 \
  STRATA_LIBRARY_FRAGMENT(ns, STRATA_CONCAT(uid, _lib)) {                                    \
    ::torch::detail::runTorchBlock(STRATA_CONCAT(uid, _lib), &STRATA_CONCAT(uid, _torch));   \
  }                                                                                          \
  void STRATA_CONCAT(uid, _torch)(::torch::Library & m)

// An IMPL library of namespace ns (or `_` for fallbacks) at key k, spelled as in
// PyTorch (CPU, CUDA, Meta, Autograd, CompositeExplicitAutograd, Python, ...). It
// expands as STRATA_LIBRARY_IMPL does, with PyTorch's key names mapped to Strata's.
#define TORCH_LIBRARY_IMPL(ns, k, m) TORCH_LIBRARY_IMPL_UID_(ns, k, m, STRATA_UID(TORCH_LIBRARY_IMPL_))
#define TORCH_LIBRARY_IMPL_UID_(ns, k, m, uid)                                                          \
  static void STRATA_CONCAT(uid, _torch)(::torch::Library&);                                           \
  static void STRATA_CONCAT(uid, _init)(::strata::Library & lib) {                                     \
    ::torch::detail::runTorchBlock(lib, &STRATA_CONCAT(uid, _torch));                                  \
  }                                                                                                    \
  static const ::strata::detail::LibraryInit STRATA_CONCAT(uid, _static_init)(                         \
      ::strata::Library::IMPL, &STRATA_CONCAT(uid, _init), #ns,                                        \
      ::torch::detail::strata_supports_dispatch_key::k, __FILE__, __LINE__);                          \
  void STRATA_CONCAT(uid, _torch)(::torch::Library & m)
