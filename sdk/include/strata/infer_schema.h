// infer_schema: the schema of a C++ kernel, from its type.
//
//   infer_schema<Tensor(const Tensor&, const Tensor&, double)>("mylib::muladd")
//     -> mylib::muladd(Tensor _0, Tensor _1, float _2) -> Tensor
//
// C++ type                                  schema type
//   Tensor, const Tensor&                   Tensor
//   Tensor&                                 Tensor(a!)  (a mutated argument; b, c, ... after)
//   int64_t / double / bool                 int / float / bool
//   std::string, std::string_view           str
//   Scalar, ScalarType, Device              Scalar, ScalarType, Device
//   std::optional<T>                        T?
//   std::vector<T>, ArrayRef<T> (std::span)  T[]
//   void / T / std::tuple<T...> (returns)   () / T / (T, ...)
// Arguments are named _0, _1, ... as PyTorch's C++ inference names them. A
// leading DispatchKeySet parameter (a kernel that redispatches) is not part of
// the schema. Any other type is a compile-time error saying which types work.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "strata/dispatch_key.h"
#include "strata/schema.h"
#include "strata/tensor.h"

namespace strata {

namespace detail::infer {

template <typename T>
inline constexpr bool kAlwaysFalse = false;

// The schema type of a value type (no references, no cv). The primary template is
// every unsupported type: it fails to compile with the most helpful message.
template <typename T>
struct Base {
  static TypePtr type() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      static_assert(kAlwaysFalse<T>, "strata::infer_schema: use int64_t for integer arguments (schema 'int')");
    } else if constexpr (std::is_floating_point_v<T>) {
      static_assert(kAlwaysFalse<T>, "strata::infer_schema: use double for floating arguments (schema 'float')");
    } else {
      static_assert(kAlwaysFalse<T>,
                    "strata::infer_schema: unsupported argument or return type. Supported: Tensor, "
                    "const Tensor&, Tensor& (mutated), int64_t, double, bool, std::string, "
                    "std::string_view, Scalar, ScalarType, Device, std::optional<T>, std::vector<T>, "
                    "ArrayRef<T>; returns may also be void or std::tuple<T...>");
    }
    return nullptr;
  }
};
#define STRATA_INFER_LEAF(CPP, KIND) \
  template <>                        \
  struct Base<CPP> {                 \
    static TypePtr type() { return Type::get(TypeKind::KIND); } \
  };
STRATA_INFER_LEAF(Tensor, Tensor)
STRATA_INFER_LEAF(int64_t, Int)
STRATA_INFER_LEAF(double, Float)
STRATA_INFER_LEAF(bool, Bool)
STRATA_INFER_LEAF(std::string, Str)
STRATA_INFER_LEAF(std::string_view, Str)
STRATA_INFER_LEAF(Scalar, Scalar)
STRATA_INFER_LEAF(ScalarType, ScalarType)
STRATA_INFER_LEAF(Device, Device)
#undef STRATA_INFER_LEAF
template <typename T>
struct Base<std::optional<T>> {
  static TypePtr type() { return Type::optional(Base<T>::type()); }
};
template <typename T>
struct Base<std::vector<T>> {
  static TypePtr type() { return Type::list(Base<T>::type()); }
};
template <typename T, size_t Extent>
struct Base<std::span<const T, Extent>> {
  static TypePtr type() { return Type::list(Base<T>::type()); }
};

template <typename T>
struct Arg {
  static_assert(!std::is_lvalue_reference_v<T> || std::is_const_v<std::remove_reference_t<T>> ||
                    std::is_same_v<T, Tensor&>,
                "strata::infer_schema: a non-const reference argument must be Tensor& (a mutated "
                "tensor); take other types by value or const reference");
  static_assert(!std::is_rvalue_reference_v<T>, "strata::infer_schema: take arguments by value or const reference");
  static constexpr bool kMutated = std::is_same_v<T, Tensor&>;
  static TypePtr type() { return Base<std::remove_cvref_t<T>>::type(); }
};

template <typename R>
struct Returns {
  static std::vector<Argument> get() { return {Argument{"", Base<std::remove_cvref_t<R>>::type(), {}, {}, false, {}}}; }
};
template <>
struct Returns<void> {
  static std::vector<Argument> get() { return {}; }
};
template <typename... Ts>
struct Returns<std::tuple<Ts...>> {
  static std::vector<Argument> get() {
    return {Argument{"", Base<std::remove_cvref_t<Ts>>::type(), {}, {}, false, {}}...};
  }
};

// Function types, pointers and functors (lambdas) -> R(Args...).
template <typename F>
struct FunctionTraits : FunctionTraits<decltype(&F::operator())> {};
template <typename R, typename... A>
struct FunctionTraits<R(A...)> {
  using Return = R;
  using ArgTuple = std::tuple<A...>;
};
template <typename R, typename... A>
struct FunctionTraits<R (*)(A...)> : FunctionTraits<R(A...)> {};
template <typename R, typename... A>
struct FunctionTraits<R (&)(A...)> : FunctionTraits<R(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...)> : FunctionTraits<R(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...) const> : FunctionTraits<R(A...)> {};

// Drops a leading DispatchKeySet.
template <typename Tuple>
struct SchemaArgs {
  using type = Tuple;
};
template <typename... A>
struct SchemaArgs<std::tuple<DispatchKeySet, A...>> {
  using type = std::tuple<A...>;
};

STRATA_API std::string aliasSetName(size_t index);  // "a", "b", ..., "z", "a1", ...

template <typename... A>
std::vector<Argument> arguments(std::tuple<A...>*) {
  std::vector<Argument> args;
  size_t mutated = 0;
  auto add = [&]<typename T>() {
    Argument a;
    a.name = "_" + std::to_string(args.size());
    a.type = Arg<T>::type();
    if constexpr (Arg<T>::kMutated) {
      const std::string set = aliasSetName(mutated++);
      a.alias_info = AliasInfo{{set}, {set}, /*is_write=*/true, {}};
    }
    args.push_back(std::move(a));
  };
  (add.template operator()<A>(), ...);
  return args;
}

}  // namespace detail::infer

// The schema of a kernel with C++ type Func (a function type, a function pointer
// type or a functor/lambda type), named name (may be empty: then print it with
// signatureStr()).
template <typename Func>
FunctionSchema infer_schema(std::string name = "", std::string overload_name = "") {
  using Traits = detail::infer::FunctionTraits<std::remove_cvref_t<Func>>;
  using Args = typename detail::infer::SchemaArgs<typename Traits::ArgTuple>::type;
  return FunctionSchema(std::move(name), std::move(overload_name),
                        detail::infer::arguments(static_cast<Args*>(nullptr)),
                        detail::infer::Returns<typename Traits::Return>::get());
}

// The same, from a value: infer_schema_of(&my_kernel), infer_schema_of(lambda).
template <typename F>
FunctionSchema infer_schema_of(const F&, std::string name = "", std::string overload_name = "") {
  return infer_schema<F>(std::move(name), std::move(overload_name));
}

}  // namespace strata
