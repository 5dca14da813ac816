// custom_op: turn a C++ function into an operator in one call, as
// torch.library.custom_op does.
//
//   auto numpy_sin = strata::modes::custom_op(
//       "mylib::numpy_sin", [](const Tensor& x) { return ...; }, {"x"}, {});  // every device
//   numpy_sin.register_kernel({"cpu"}, [](const Tensor& x) { return ...; });
//   numpy_sin.register_fake([](const Tensor& x) { return strata::ops::empty_like(x); });
//   Tensor y = numpy_sin(x);                                  // a dispatcher call
//
//   auto sin_ = strata::modes::custom_op("mylib::numpy_sin_inplace",
//       [](Tensor& x) { ... }, {"x"}, {"x"}, {"cpu"});        // mutates_args = {"x"}
//
// The schema is inferred from fn's C++ type (strata/infer_schema.h) with the argument
// names the caller gives (C++ has none): one per parameter. A Tensor& parameter is a
// mutated argument, Tensor(a!): mutates_args must name exactly those (Error(Schema)
// otherwise, naming the argument); "unknown" (MutatesArgs::unknown()) marks every
// Tensor argument mutated, as PyTorch does. A `schema` given ("(Tensor x) -> Tensor")
// replaces the inference and must fit fn.
//
// device_types: none = fn is the kernel for every device (CompositeExplicitAutograd,
// "default"); else fn is the kernel of each device type given ("cpu", "cuda"). An op
// with no tensor argument needs a Device argument to have device kernels (Note
// [Dispatching on a Device argument]). The op is opaque: no kernel is
// CompositeImplicitAutograd, so every layer sees it as one op.
//
// The CustomOpDef owns everything registered through it (a FRAGMENT library of the
// op's namespace): the op, its kernels, its fake impl and its rules go when it dies.
// Registered while a RegistrationOwnerGuard is set, they carry that owner.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <source_location>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "strata/dispatcher.h"
#include "strata/library.h"
#include "strata/modes/autocast.h"
#include "strata/modes/autograd.h"
#include "strata/modes/export.h"
#include "strata/modes/fake.h"
#include "strata/modes/vmap.h"

namespace strata::modes {

// The names of the arguments fn mutates, or unknown().
class STRATA_MODES_API MutatesArgs {
 public:
  MutatesArgs() = default;
  MutatesArgs(std::initializer_list<std::string> names) : names_(names) {}  // NOLINT: {"x"} reads well
  explicit MutatesArgs(std::vector<std::string> names) : names_(std::move(names)) {}
  static MutatesArgs unknown() {
    MutatesArgs m;
    m.unknown_ = true;
    return m;
  }
  const std::vector<std::string>& names() const { return names_; }
  bool is_unknown() const { return unknown_; }

 private:
  std::vector<std::string> names_;
  bool unknown_ = false;
};

namespace detail {
// The C++ types a custom op's value may hold tensors in: Tensor and Tensor?
// (tensor-like), lists of those (std::vector, ArrayRef / std::span), an optional list,
// and, for results, tuples of any of these.
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {
  using Inner = T;
};
template <typename T>
constexpr bool kIsTensorLike =
    std::is_same_v<std::remove_cvref_t<T>, Tensor> || std::is_same_v<std::remove_cvref_t<T>, std::optional<Tensor>>;
template <typename T>
struct IsTensorRange : std::false_type {};
template <typename T>
struct IsTensorRange<std::vector<T>> : std::bool_constant<kIsTensorLike<T>> {};
template <typename T, size_t N>
struct IsTensorRange<std::span<T, N>> : std::bool_constant<kIsTensorLike<T>> {};
// A list of tensors, or an optional one.
template <typename T>
constexpr bool kIsTensorList = [] {
  using D = std::remove_cvref_t<T>;
  if constexpr (IsOptional<D>::value) return IsTensorRange<typename IsOptional<D>::Inner>::value;
  else return IsTensorRange<D>::value;
}();
template <typename T>
struct HoldsTensors : std::bool_constant<kIsTensorLike<T> || kIsTensorList<T>> {};
template <typename... T>
struct HoldsTensors<std::tuple<T...>> : std::bool_constant<(HoldsTensors<T>::value || ...)> {};
template <>
struct HoldsTensors<void> : std::false_type {};

inline constexpr uint32_t kAliasWhole = UINT32_MAX;  // not an element of a list
// Calls f(tensor, element) for each defined tensor a holds: element is its index in a
// list, or kAliasWhole.
template <typename T, typename F>
void forEachTensor(const T& a, F&& f, uint32_t element = kAliasWhole) {
  using D = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    if (a.defined()) f(a, element);
  } else if constexpr (IsOptional<D>::value) {
    if constexpr (HoldsTensors<typename IsOptional<D>::Inner>::value) {
      if (a) forEachTensor(*a, f, element);
    }
  } else if constexpr (IsTensorRange<D>::value) {
    uint32_t e = 0;
    for (const auto& t : a) forEachTensor(t, f, e++);
  }
}

// Bumps the version counter of each tensor in a (Note [Version counters]).
template <typename T>
void bumpVersions(const T& a) {
  forEachTensor(a, [](const Tensor& t, uint32_t) {
    if (t.wrapper() == nullptr) t.storage()->bump_version();
  });
}

// Note [A custom op's outputs are new tensors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A custom op is opaque: every layer above its kernel (autograd, fake tensors, a
// trace) takes what it returns as new tensors. So, as PyTorch's custom_op does on
// every call of a kernel (check_aliasing_constraint), an output may not be one of the
// op's input tensors, share storage with one (a view of it), or share storage with
// another output: the call throws Error(Value) naming the op, the output and the
// argument, and asks for a clone. A view op (a schema given by hand with an argument
// that a result may alias and that is not written, "(Tensor(a) x) -> Tensor(a)":
// PyTorch's _is_view_op) is left alone, as in PyTorch; an op that writes an argument
// (Tensor(a!)) may not return it.
// A kernel that returns one Tensor pays a compare per tensor argument, about 2 ns a
// call (custom_op/call_muladd against custom_op/library_muladd); one that returns
// several tensors or a list, or takes a list, pays for two small vectors; one that
// returns no tensor pays nothing.

// What a custom op's kernel does around fn, fixed when it is registered.
struct CustomKernelInfo {
  std::string op;
  DispatchKey key = DispatchKey::Undefined;
  std::vector<bool> written;  // per argument, whether the schema declares it written; empty when none is
  bool view_op = false;       // the schema says a result is a view of an argument: nothing is checked
};
// Reads both off op's schema.
STRATA_MODES_API CustomKernelInfo customKernelInfo(std::string_view op, DispatchKey key);

// One tensor of a call, for the check: its storage (null: none to share), its
// TensorImpl, and where it came from.
struct AliasSeen {
  const void* storage;
  const void* impl;
  uint32_t index;    // the argument's, or the result's
  uint32_t element;  // its index in a list, or kAliasWhole
  bool input;
};

inline AliasSeen aliasSeen(const Tensor& t, uint32_t index, uint32_t element, bool input) {
  const TensorImpl* impl = t.unsafeGetTensorImpl();
  return {impl->storage().get(), impl, index, element, input};
}

// Throws the error of Note [A custom op's outputs are new tensors]: `result` shares
// its storage with `earlier` (an input, or a result before it).
[[noreturn]] STRATA_MODES_API void throwAliasedResult(const CustomKernelInfo& info, const AliasSeen& earlier,
                                                      const AliasSeen& result);
// throwAliasedResult for result r that shares argument n's storage (tensor t): out of
// line and cold, so the hot compare in CustomKernel prepares nothing for it.
[[noreturn, gnu::cold, gnu::noinline]] inline void throwResultIsArgument(const CustomKernelInfo& info,
                                                                         const Tensor& t, uint32_t n,
                                                                         const Tensor& r) {
  throwAliasedResult(info, aliasSeen(t, n, kAliasWhole, true), aliasSeen(r, 0, kAliasWhole, false));
}
// The general check: each result against the inputs and the results before it.
STRATA_MODES_API void checkAliases(const CustomKernelInfo& info, const std::vector<AliasSeen>& inputs,
                                   const std::vector<AliasSeen>& results);

template <typename... T>
void collectResults(std::vector<AliasSeen>& out, const std::tuple<T...>& r) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (forEachTensor(std::get<I>(r),
                   [&](const Tensor& t, uint32_t e) { out.push_back(aliasSeen(t, I, e, false)); }),
     ...);
  }(std::index_sequence_for<T...>{});
}
template <typename T>
void collectResults(std::vector<AliasSeen>& out, const T& r) {
  forEachTensor(r, [&](const Tensor& t, uint32_t e) { out.push_back(aliasSeen(t, 0, e, false)); });
}

// A custom op's kernel as registered: fn, with two things around it, on every call.
// Before it, a bump of the version counter of every argument the schema declares
// written, as PyTorch's custom_op does at ADInplaceOrView: a tensor saved for backward
// and then written by the op is then caught at backward ("modified by an inplace
// operation") whether or not anything in the call required grad. After it, the check
// of Note [A custom op's outputs are new tensors]. fn itself when neither applies. fn
// may take a DispatchKeySet first; it gets the one the call brought.
template <typename Sig>
struct CustomKernel;
template <typename R, typename... A>
struct CustomKernel<R(A...)> {
  static constexpr bool kChecks = HoldsTensors<R>::value;
  // One Tensor back and no list in: the result is compared inline with each tensor
  // argument. Anything else takes the general check.
  static constexpr bool kOneTensor = std::is_same_v<std::remove_cvref_t<R>, Tensor> && !(kIsTensorList<A> || ...);
  // An argument taken by value may be moved into fn and freed there, and its storage's
  // address reused for a result: the check holds its own reference to such a one.
  template <typename T>
  static constexpr bool kByValue = !std::is_reference_v<T> && HoldsTensors<T>::value;
  static constexpr bool kAnyByValue = (kByValue<A> || ...);

  template <typename T>
  __attribute__((always_inline)) static const Tensor* tensorOf(const T& a) {
    if constexpr (std::is_same_v<std::remove_cvref_t<T>, Tensor>) return a.defined() ? &a : nullptr;
    else return a && a->defined() ? &*a : nullptr;
  }
  // The hot compare reads storages alone; the error's details are made only on a clash.
  template <typename T, typename Kept>
  __attribute__((always_inline)) static void checkArgument(const CustomKernelInfo& info, const Tensor& r,
                                                           const void* out, const T& a, const Kept& kept,
                                                           uint32_t n) {
    if constexpr (HoldsTensors<T>::value) {
      const Tensor* t;
      if constexpr (kByValue<T>) t = kept[n].defined() ? &kept[n] : nullptr;
      else t = tensorOf(a);
      if (t != nullptr && __builtin_expect(t->unsafeGetTensorImpl()->storage().get() == out, 0)) {
        throwResultIsArgument(info, *t, n, r);
      }
    }
  }

  // kWrites: the schema writes an argument; kCheck: the results are checked (a result
  // holds tensors and the schema is not a view op's). Both are known at registration,
  // so the call tests neither.
  template <typename Fn, bool kWrites, bool kCheck, typename... Keys>
  __attribute__((always_inline)) static R run(Fn& fn, const CustomKernelInfo& info, Keys... keys, A... a) {
    // Before the call, which may move a by-value argument into fn: the write happens
    // inside fn either way, and what checks a version checks it later.
    if constexpr (kWrites) {
      size_t i = 0;
      ((info.written[i++] ? bumpVersions(a) : void()), ...);
      (void)i;
    }
    if constexpr (!kCheck) {
      return fn(keys..., std::forward<A>(a)...);
    } else if constexpr (kOneTensor) {
      std::array<Tensor, kAnyByValue ? sizeof...(A) : 0> kept;
      if constexpr (kAnyByValue) {
        uint32_t n = 0;
        (([&] {
           if constexpr (kByValue<A>) {
             if (const Tensor* t = tensorOf(a)) kept[n] = *t;
           }
         }(), ++n), ...);
      }
      R r = fn(keys..., std::forward<A>(a)...);
      if (__builtin_expect(r.defined(), 1)) {
        const void* const out = r.unsafeGetTensorImpl()->storage().get();
        if (out != nullptr) {
          uint32_t n = 0;
          (checkArgument<A>(info, r, out, a, kept, n++), ...);
        }
      }
      return r;
    } else {
      std::vector<AliasSeen> in;
      std::vector<Tensor> kept;
      uint32_t n = 0;
      ((forEachTensor(a, [&](const Tensor& t, uint32_t e) {
          in.push_back(aliasSeen(t, n, e, true));
          if constexpr (kByValue<A>) kept.push_back(t);
        }), ++n), ...);
      R r = fn(keys..., std::forward<A>(a)...);
      std::vector<AliasSeen> out;
      collectResults(out, r);
      checkAliases(info, in, out);
      return r;
    }
  }

  // Named function objects, not lambdas: an attribute on a lambda's operator() is
  // spelled differently by each compiler (GCC takes it after `mutable`, Clang 16 in
  // neither place), and this header is built by every bundle's compiler.
  template <typename Fn, bool kWrites, bool kCheck>
  struct Wrapper {
    Fn fn;
    CustomKernelInfo info;
    __attribute__((always_inline)) R operator()(A... a) {
      return run<Fn, kWrites, kCheck>(fn, info, std::forward<A>(a)...);
    }
  };
  template <typename Fn, bool kWrites, bool kCheck>
  struct KeyedWrapper {
    Fn fn;
    CustomKernelInfo info;
    __attribute__((always_inline)) R operator()(DispatchKeySet ks, A... a) {
      return run<Fn, kWrites, kCheck, DispatchKeySet>(fn, info, ks, std::forward<A>(a)...);
    }
  };
  template <bool kWrites, bool kCheck, typename Fn, typename F>
  static void implWrapped(Library& lib, const std::string& op, F& fn, CustomKernelInfo info, ImplOptions options,
                          std::source_location where) {
    const DispatchKey k = info.key;
    if constexpr (std::is_invocable_v<Fn&, A...>) {
      lib.impl(op, Wrapper<Fn, kWrites, kCheck>{Fn(fn), std::move(info)}, k, options, where);
    } else {
      lib.impl(op, KeyedWrapper<Fn, kWrites, kCheck>{Fn(fn), std::move(info)}, k, options, where);
    }
  }

  template <typename F>
  static void impl(Library& lib, F& fn, CustomKernelInfo info, ImplOptions options, std::source_location where) {
    using Fn = std::decay_t<F>;
    const std::string op = info.op;
    const bool writes = !info.written.empty();
    const bool check = kChecks && !info.view_op;
    if (!writes && !check) {
      lib.impl(op, fn, info.key, options, where);
    } else if (!writes) {
      if constexpr (kChecks) implWrapped<false, true, Fn>(lib, op, fn, std::move(info), options, where);
    } else if (check) {
      if constexpr (kChecks) implWrapped<true, true, Fn>(lib, op, fn, std::move(info), options, where);
    } else {
      implWrapped<true, false, Fn>(lib, op, fn, std::move(info), options, where);
    }
  }
};

// Registers fn as op's kernel at k, as CustomKernel says.
template <typename Sig, typename F>
void implCustomKernel(Library& lib, const std::string& op, F& fn, DispatchKey k, ImplOptions options,
                      std::source_location where) {
  CustomKernel<Sig>::impl(lib, fn, customKernelInfo(op, k), options, where);
}
}  // namespace detail

class [[nodiscard("a custom op lasts as long as its CustomOpDef: keep it (BundleRegistrar::keep, a member), or the op is removed at once"), gnu::visibility("default")]] CustomOpDef {  // STRATA_MODES_API
 public:
  CustomOpDef(CustomOpDef&&) noexcept;
  CustomOpDef& operator=(CustomOpDef&&) noexcept;
  ~CustomOpDef();

  // "ns::name".
  const std::string& name() const { return name_; }
  OperatorHandle op() const;
  const FunctionSchema& schema() const { return op().schema(); }

  // fn becomes the kernel of each device type (replacing the one custom_op gave it).
  //
  // Each register_* is for a CustomOpDef that is kept: called on the one custom_op
  // just returned (`custom_op(...).register_fake(...)`, as one chains in Python), it
  // would register on an op that is removed at the end of the statement, so that does
  // not compile (the deleted && overloads). Keep the def first, then register:
  //   auto op = custom_op(...);  op.register_fake(...);  r.keep(std::move(op));
  template <typename F>
  CustomOpDef& register_kernel(std::vector<std::string> device_types, F&& fn,
                               std::source_location where = std::source_location::current()) &;
  template <typename F>
  CustomOpDef& register_kernel(std::vector<std::string>, F&&, std::source_location = {}) && = delete;
  // The op's fake implementation (register_fake). A custom op owns its op, so each of
  // these replaces the one it registered before, as in PyTorch (a bare
  // register_fake/register_autograd/... needs allow_override for that).
  template <typename F>
  CustomOpDef& register_fake(F&& fn, std::source_location where = std::source_location::current()) & {
    modes::register_fake(name_, std::forward<F>(fn), lib(), /*allow_override=*/true, where);
    return *this;
  }
  template <typename F>
  CustomOpDef& register_fake(F&&, std::source_location = {}) && = delete;  // keep the def first (above)
  CustomOpDef& register_autocast(std::string_view device_type, ScalarType cast_inputs,
                                 std::source_location where = std::source_location::current()) & {
    modes::register_autocast(name_, device_type, cast_inputs, lib(), /*allow_override=*/true, where);
    return *this;
  }
  CustomOpDef& register_autocast(std::string_view, ScalarType, std::source_location = {}) && = delete;
  // The op's backward formula (register_autograd): setup_context saves what backward
  // needs; the keyword-only form for an op with keyword-only arguments.
  CustomOpDef& register_autograd(BackwardFn backward, SetupContextFn setup_context = {},
                                 std::source_location where = std::source_location::current()) & {
    modes::register_autograd(name_, std::move(backward), std::move(setup_context), lib(), /*allow_override=*/true,
                             where);
    return *this;
  }
  CustomOpDef& register_autograd(BackwardFn backward, SetupContextKwFn setup_context,
                                 std::source_location where = std::source_location::current()) & {
    modes::register_autograd(name_, std::move(backward), std::move(setup_context), lib(), /*allow_override=*/true,
                             where);
    return *this;
  }
  CustomOpDef& register_autograd(BackwardFn, SetupContextFn = {}, std::source_location = {}) && = delete;
  CustomOpDef& register_autograd(BackwardFn, SetupContextKwFn, std::source_location = {}) && = delete;
  CustomOpDef& register_vmap(VmapRule rule, std::source_location where = std::source_location::current()) & {
    modes::register_vmap(name_, std::move(rule), lib(), /*allow_override=*/true, where);
    return *this;
  }
  CustomOpDef& register_vmap(VmapRule, std::source_location = {}) && = delete;
  // Turns the op's kernel for a device type off (or on) for a scope, as
  // CustomOpDef.set_kernel_enabled does: `auto off = op.set_kernel_enabled("cpu", false);`
  [[nodiscard]] KernelEnabledScope set_kernel_enabled(std::string_view device_type, bool enabled) const {
    return KernelEnabledScope(name_, device_type, enabled);
  }

 protected:
  CustomOpDef(std::string name, std::unique_ptr<Library> lib);
  Library& lib() { return *lib_; }

 public:
  // The backend key of a device type name; Error(Value) naming api otherwise.
  static DispatchKey checkDeviceType(std::string_view device_type, const char* api);

 private:
  std::string name_;
  std::unique_ptr<Library> lib_;
  template <typename Sig>
  friend class TypedCustomOpDef;
};

namespace detail {
// Throws: custom_op `name` was made by a static initializer while a host loaded its
// bundle, so its definition was refused (Note [Static registrations in bundles]).
[[noreturn]] STRATA_MODES_API void refusedAtLoad(const std::string& name);
}  // namespace detail

// What custom_op returns: a CustomOpDef that is also callable with fn's signature.
template <typename Sig>
class TypedCustomOpDef;
template <typename Return, typename... Args>
class [[nodiscard("a custom op lasts as long as its CustomOpDef: keep it (BundleRegistrar::keep, a member), or the op is removed at once")]] TypedCustomOpDef<Return(Args...)> final : public CustomOpDef {
 public:
  TypedCustomOpDef(std::string name, std::unique_ptr<Library> lib) : CustomOpDef(std::move(name), std::move(lib)) {
    // In a bundle's static initializer the def was refused (Note [Static registrations
    // in bundles] in strata/plugin.h): the host rejects the bundle, and nothing here
    // may throw meanwhile, or the process ends. Such an op has no handle.
    if (!strata::detail::capturingStaticRegistrations()) typed_.emplace(op().template typed<Return(Args...)>());
  }
  // A dispatcher call of the op (every layer sees it).
  __attribute__((always_inline)) Return operator()(Args... args) const {
    return typed().call(std::forward<Args>(args)...);
  }
  const TypedOperatorHandle<Return(Args...)>& typed() const {
    if (__builtin_expect(!typed_.has_value(), 0)) detail::refusedAtLoad(name());
    return *typed_;
  }

 private:
  std::optional<TypedOperatorHandle<Return(Args...)>> typed_;
};

namespace detail {
// Builds the schema (inferred, renamed and checked against mutates_args, or parsed)
// and defines the op in a new FRAGMENT library; registers nothing else.
STRATA_MODES_API std::unique_ptr<Library> defineCustomOp(std::string_view name, const FunctionSchema& inferred,
                                                         const std::vector<std::string>& arg_names,
                                                         const MutatesArgs& mutates_args, std::string_view schema,
                                                         const std::vector<Tag>& tags, std::source_location where);
STRATA_MODES_API std::vector<DispatchKey> customOpKeys(std::string_view name,
                                                       const std::vector<std::string>& device_types);
// Error(Schema) when device kernels could never be chosen: no tensor argument and no
// Device one (PyTorch: "Functions without tensor inputs are required to have a
// `device: torch.device` argument").
STRATA_MODES_API void checkDeviceKernelsCanBeReached(std::string_view name, const std::vector<DispatchKey>& keys);
// A mutating op with no results gets a fake impl that does nothing (PyTorch's trivial
// fake impl, can_generate_trivial_fake_impl), unless fn already is its Meta kernel; a
// register_fake replaces it.
STRATA_MODES_API void addTrivialFake(Library& lib, std::string_view name, const std::vector<DispatchKey>& keys,
                                     std::source_location where);

template <typename F>
struct CustomOpSig {
  using Traits = strata::detail::infer::FunctionTraits<std::remove_cvref_t<F>>;
  using Args = typename strata::detail::infer::SchemaArgs<typename Traits::ArgTuple>::type;
  template <typename R, typename Tuple>
  struct Make;
  template <typename R, typename... A>
  struct Make<R, std::tuple<A...>> {
    using type = R(A...);
  };
  using type = typename Make<typename Traits::Return, Args>::type;
};
}  // namespace detail

// torch.library.custom_op. name: "ns::name"; fn: the kernel; arg_names: one per
// parameter of fn; mutates_args: the names fn mutates ({} for none) or
// MutatesArgs::unknown(); device_types: {} for every device, else the device types
// fn serves; schema: "" to infer; tags: the operator's tags (strata/tag.h). Errors (Error(Schema) or Error(Value)) name the op
// and the reason: a bad name, a second def of it, names that do not fit fn, a
// mutates_args that does not match fn's Tensor& parameters, an unknown device type.
template <typename F>
TypedCustomOpDef<typename detail::CustomOpSig<F>::type> custom_op(
    std::string_view name, F&& fn, const std::vector<std::string>& arg_names, const MutatesArgs& mutates_args,
    const std::vector<std::string>& device_types = {}, std::string_view schema = "",
    const std::vector<Tag>& tags = {}, std::source_location where = std::source_location::current()) {
  using Sig = typename detail::CustomOpSig<F>::type;
  const std::vector<DispatchKey> keys = detail::customOpKeys(name, device_types);
  std::unique_ptr<Library> lib =
      detail::defineCustomOp(name, infer_schema<std::remove_cvref_t<F>>(), arg_names, mutates_args, schema, tags,
                             where);
  detail::checkDeviceKernelsCanBeReached(name, keys);  // a throw here undoes the def (lib goes)
  for (DispatchKey k : keys) detail::implCustomKernel<Sig>(*lib, std::string(name), fn, k, ImplOptions{}, where);
  detail::addTrivialFake(*lib, name, keys, where);
  return TypedCustomOpDef<Sig>(std::string(name), std::move(lib));
}

template <typename F>
CustomOpDef& CustomOpDef::register_kernel(std::vector<std::string> device_types, F&& fn,
                                          std::source_location where) & {
  using Sig = typename detail::CustomOpSig<F>::type;
  for (const std::string& d : device_types) {
    detail::implCustomKernel<Sig>(lib(), name_, fn, checkDeviceType(d, "register_kernel"),
                                  ImplOptions{.allow_override = true}, where);
  }
  return *this;
}

}  // namespace strata::modes
