// Kernels: what a dispatch table slot holds, and the boxing that lets either kind
// of kernel be called either way.
//
// A kernel is one of
//   - unboxed: a function pointer, lambda or stateful functor with a C++ signature
//     (`Tensor(const Tensor&, double)`), optionally taking a leading DispatchKeySet
//     so it can redispatch below itself;
//   - boxed: `void(const OperatorHandle&, DispatchKeySet, Stack&)` (or without the
//     DispatchKeySet), reading its arguments off the stack and pushing its results;
//   - fallthrough: "nothing to do at this key", skipped by the dispatcher at no cost.
//
// An unboxed kernel called boxed has its arguments unboxed off the stack (tensors
// by reference, no refcount traffic) and its results pushed back; a boxed kernel
// called unboxed has its arguments boxed into a fresh stack.
//
// Thread safety: a KernelFunction is immutable once built and may be called from
// any thread; whatever state a functor holds must tolerate that.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <utility>

#include "strata/dispatch_key.h"
#include "strata/error.h"
#include "strata/export.h"
#include "strata/infer_schema.h"
#include "strata/ivalue.h"
#include "strata/schema.h"

namespace strata {

class OperatorHandle;

// Base of kernel functors; the dispatcher owns one per registration.
class STRATA_API OperatorKernel {
 public:
  virtual ~OperatorKernel();
};

// The C++ function type an unboxed kernel has or a typed call uses, with a leading
// DispatchKeySet dropped: two kernels of one operator, and a typed call and the
// kernels it reaches, must agree on it exactly, as in c10.
class STRATA_API CppSignature {
 public:
  template <typename Func>
  static CppSignature make() {
    using Traits = detail::infer::FunctionTraits<std::remove_cvref_t<Func>>;
    using Args = typename detail::infer::SchemaArgs<typename Traits::ArgTuple>::type;
    return CppSignature(typeid(typename FunctionTypeOf<typename Traits::Return, Args>::type));
  }
  // The demangled C++ type, e.g. "strata::Tensor (strata::Tensor const&, double)".
  std::string name() const;
  bool operator==(const CppSignature& o) const { return type_ == o.type_; }
  // The mangled type name: a key that, unlike the type_info, stays valid after the
  // library that made the signature is unloaded (copy it).
  const char* mangledName() const noexcept { return type_.name(); }

 private:
  template <typename R, typename Tuple>
  struct FunctionTypeOf;
  template <typename R, typename... A>
  struct FunctionTypeOf<R, std::tuple<A...>> {
    using type = R(A...);
  };
  explicit CppSignature(std::type_index t) : type_(t) {}
  std::type_index type_;
};

namespace detail::boxing {

template <typename T>
inline constexpr bool kIsMutableTensorRef = std::is_same_v<T, Tensor&>;

// The value of stack slot `v` as parameter type P. Tensors, lists and strings are
// passed by reference into the IValue where P allows it.
template <typename P>
decltype(auto) unboxArg(IValue& v) {
  using D = std::remove_cvref_t<P>;
  if constexpr (std::is_same_v<D, Tensor>) {
    if constexpr (kIsMutableTensorRef<P>) {
      // The stack owns this handle for the call; a Tensor& kernel may reseat it.
      return const_cast<Tensor&>(v.toTensor());
    } else {
      return v.toTensor();
    }
  } else if constexpr (std::is_same_v<D, std::string>) {
    return v.toStringRef();
  } else if constexpr (std::is_same_v<D, std::vector<int64_t>>) {
    return v.toIntList();
  } else if constexpr (std::is_same_v<D, std::vector<double>>) {
    return v.toDoubleList();
  } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
    return v.toTensorList();
  } else {
    return v.template to<D>();
  }
}

// Destroys stack slot `v` after unboxArg<P> took it: its tag is then P's exactly (a
// kernel sees its arguments, never the stack, and a Tensor& kernel may reseat the
// handle but not the tag), so a number needs nothing and a tensor only its handle
// dropped, without the IValue destructor's tests of the tag.
template <typename P>
__attribute__((always_inline)) inline void releaseSlot(IValue& v) noexcept {
  using D = std::remove_cvref_t<P>;
  if constexpr (!std::is_same_v<D, int64_t> && !std::is_same_v<D, double> && !std::is_same_v<D, bool>) {
    if constexpr (std::is_same_v<D, Tensor>) {
      if (v.tag() != IValue::Tag::Tensor) __builtin_unreachable();
    }
    v.~IValue();
  }
}

// A C++ value boxed.
template <typename T>
IValue boxArg(T&& v) {
  using D = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<D, IValue>) {
    return IValue(std::forward<T>(v));
  } else if constexpr (std::is_same_v<D, Tensor>) {
    return IValue(Tensor(std::forward<T>(v)));  // a moved tensor costs no reference count
  } else {
    return IValue(std::forward<T>(v));
  }
}

// Pushes a kernel's return value: nothing for void, each element of a tuple.
template <typename R>
void pushReturn(Stack& stack, R&& r) {
  using D = std::remove_cvref_t<R>;
  if constexpr (requires { std::tuple_size<D>::value; }) {
    std::apply([&](auto&&... e) { (stack.push_back(boxArg(std::forward<decltype(e)>(e))), ...); },
               std::forward<R>(r));
  } else {
    stack.push_back(boxArg(std::forward<R>(r)));
  }
}

template <typename R>
constexpr size_t numReturns() {
  using D = std::remove_cvref_t<R>;
  if constexpr (std::is_void_v<R>) return 0;
  else if constexpr (requires { std::tuple_size<D>::value; }) return std::tuple_size_v<D>;
  else return 1;
}

template <typename T>
T unboxReturn(IValue&& v) {
  if constexpr (std::is_same_v<T, Tensor>) return std::move(v).toTensor();
  else if constexpr (std::is_same_v<T, IValue>) return std::move(v);
  else return v.template to<T>();
}

[[noreturn]] STRATA_API void throwStackTooShort(size_t have, size_t need);
[[noreturn]] STRATA_API void throwWrongReturnCount(const OperatorHandle& op, size_t have, size_t need);

// Wraps any callable into an OperatorKernel.
template <typename F>
struct FunctorKernel final : OperatorKernel {
  explicit FunctorKernel(F fn) : f(std::move(fn)) {}
  F f;
};

template <typename F, bool kTakesKeySet, typename R, typename... P>
struct UnboxedWrapper {
  using Functor = FunctorKernel<F>;

  static R callUnboxed(OperatorKernel* k, DispatchKeySet ks, P... args) {
    auto& f = static_cast<Functor*>(k)->f;
    if constexpr (kTakesKeySet) return f(ks, std::forward<P>(args)...);
    else return f(std::forward<P>(args)...);
  }

  template <size_t... I>
  static void callBoxedImpl(OperatorKernel* k, DispatchKeySet ks, Stack& stack, std::index_sequence<I...>) {
    constexpr size_t N = sizeof...(P);
    IValue* base = stack.data() + (stack.size() - N);
    (void)base;
    if constexpr (std::is_void_v<R>) {
      callUnboxed(k, ks, unboxArg<P>(base[I])...);
      stack.resize(stack.size() - N);
    } else {
      // Hold the result by value before dropping the arguments: R may refer into them.
      std::remove_cvref_t<R> result = callUnboxed(k, ks, unboxArg<P>(base[I])...);
      if constexpr (numReturns<R>() == 1 && N >= 1) {
        // The result takes the first argument's slot: no push, no capacity check; the
        // arguments are released each as its type (releaseSlot).
        using D = std::remove_cvref_t<R>;
        if constexpr (std::is_same_v<D, Tensor> || std::is_arithmetic_v<D>) {
          // A tensor or a number owns what it holds, and boxing it cannot throw: the
          // arguments go first and the result moves in last, so nothing opaque runs
          // between the move and the end of `result`, which the compiler then knows
          // is empty.
          (releaseSlot<P>(base[I]), ...);
          new (base) IValue(boxArg(std::move(result)));
        } else {
          // Anything else is boxed first: it may borrow from the arguments (a span, a
          // string_view) and boxing it may throw, before anything is released.
          IValue boxed = boxArg(std::move(result));
          (releaseSlot<P>(base[I]), ...);
          new (base) IValue(std::move(boxed));
        }
        stack.forgetDestroyed(N - 1);
      } else {
        stack.resize(stack.size() - N);
        pushReturn(stack, std::move(result));
      }
    }
  }

  static void callBoxed(OperatorKernel* k, const OperatorHandle&, DispatchKeySet ks, Stack* stack) {
    if (stack->size() < sizeof...(P)) throwStackTooShort(stack->size(), sizeof...(P));
    callBoxedImpl(k, ks, *stack, std::index_sequence_for<P...>{});
  }
};

template <typename F, typename Tuple, typename R>
struct MakeWrapper;
template <typename F, typename R, typename... A>
struct MakeWrapper<F, std::tuple<DispatchKeySet, A...>, R> {
  using type = UnboxedWrapper<F, true, R, A...>;
};
template <typename F, typename R, typename... A>
struct MakeWrapper<F, std::tuple<A...>, R> {
  using type = UnboxedWrapper<F, false, R, A...>;
};

template <typename F>
inline constexpr bool kIsBoxedWithKeys =
    std::is_invocable_r_v<void, F&, const OperatorHandle&, DispatchKeySet, Stack&>;
template <typename F>
inline constexpr bool kIsBoxedNoKeys = std::is_invocable_r_v<void, F&, const OperatorHandle&, Stack&>;

}  // namespace detail::boxing

class STRATA_API KernelFunction {
 public:
  // The uniform boxed entry: (functor, op, keys of this call, stack).
  using InternalBoxedFn = void (*)(OperatorKernel*, const OperatorHandle&, DispatchKeySet, Stack*);
  enum class Kind : uint8_t { Invalid, Unboxed, Boxed, Fallthrough };

  KernelFunction() = default;

  static KernelFunction makeFallthrough();
  // A boxed kernel: f(const OperatorHandle&, DispatchKeySet, Stack&) or f(const OperatorHandle&, Stack&).
  template <typename F>
  static KernelFunction makeFromBoxedFunctor(F f) {
    using D = std::decay_t<F>;
    static_assert(detail::boxing::kIsBoxedWithKeys<D> || detail::boxing::kIsBoxedNoKeys<D>,
                  "a boxed kernel is void(const OperatorHandle&, DispatchKeySet, Stack&) or "
                  "void(const OperatorHandle&, Stack&)");
    KernelFunction k;
    k.kind_ = Kind::Boxed;
    k.functor_ = std::make_shared<detail::boxing::FunctorKernel<D>>(std::move(f));
    k.boxed_ = [](OperatorKernel* kernel, const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
      auto& fn = static_cast<detail::boxing::FunctorKernel<D>*>(kernel)->f;
      if constexpr (detail::boxing::kIsBoxedWithKeys<D>) fn(op, ks, *stack);
      else fn(op, *stack);
    };
    return k;
  }
  // An unboxed kernel from a function pointer, lambda or functor.
  template <typename F>
  static KernelFunction makeFromUnboxedFunctor(F f) {
    using D = std::decay_t<F>;
    using Traits = detail::infer::FunctionTraits<D>;
    using Wrapper = typename detail::boxing::MakeWrapper<D, typename Traits::ArgTuple,
                                                          typename Traits::Return>::type;
    KernelFunction k;
    k.kind_ = Kind::Unboxed;
    k.functor_ = std::make_shared<detail::boxing::FunctorKernel<D>>(std::move(f));
    k.boxed_ = &Wrapper::callBoxed;
    k.unboxed_ = reinterpret_cast<AnyFn>(&Wrapper::callUnboxed);
    k.signature_ = CppSignature::make<D>();
    k.infer_ = [] { return infer_schema<D>(); };
    return k;
  }
  // Either kind, told apart by the callable's signature.
  template <typename F>
  static KernelFunction make(F&& f) {
    using D = std::decay_t<F>;
    if constexpr (std::is_same_v<D, KernelFunction>) {
      return std::forward<F>(f);
    } else if constexpr (detail::boxing::kIsBoxedWithKeys<D> || detail::boxing::kIsBoxedNoKeys<D>) {
      return makeFromBoxedFunctor(std::forward<F>(f));
    } else {
      return makeFromUnboxedFunctor(std::forward<F>(f));
    }
  }

  Kind kind() const { return kind_; }
  // A fake implementation (register_fake in modes/fake.h): a Meta kernel that
  // FakeTensorMode calls with fake tensors. Dumps show its kind as "fake".
  bool isFakeImpl() const { return role_ == kFakeImplRole; }
  void markFakeImpl() { role_ = kFakeImplRole; }
  // "unboxed", "boxed", "fallthrough", or "fake".
  const char* kindLabel() const { return isFakeImpl() ? "fake" : kindName(kind_); }
  bool isValid() const { return kind_ != Kind::Invalid; }
  bool isFallthrough() const { return kind_ == Kind::Fallthrough; }
  bool isUnboxed() const { return kind_ == Kind::Unboxed; }
  bool isBoxed() const { return kind_ == Kind::Boxed; }
  static const char* kindName(Kind k);  // "unboxed", "boxed", "fallthrough", "invalid"
  // Unboxed kernels only.
  const std::optional<CppSignature>& cppSignature() const { return signature_; }
  std::optional<FunctionSchema> inferredSchema() const {
    if (infer_ == nullptr) return std::nullopt;
    return infer_();
  }

  // The boxed calling convention: arguments on the stack, results pushed back.
  void callBoxed(const OperatorHandle& op, DispatchKeySet ks, Stack& stack) const {
    boxed_(functor_.get(), op, ks, &stack);
  }

  // The unboxed calling convention. Return(Args...) must be the kernel's own
  // signature for an unboxed kernel (the dispatcher checks it when a typed handle
  // is made); a boxed kernel is reached through a stack.
  // Inlined into every call site, so an unboxed kernel is one indirect call away; the
  // boxing detour stays out of line.
  template <typename Return, typename... Args>
  __attribute__((always_inline)) Return call(const OperatorHandle& op, DispatchKeySet ks, Args... args) const {
    if (__builtin_expect(unboxed_ != nullptr, 1)) {
      using Fn = Return (*)(OperatorKernel*, DispatchKeySet, Args...);
      return reinterpret_cast<Fn>(unboxed_)(functor_.get(), ks, std::forward<Args>(args)...);
    }
    return callThroughStack<Return, Args...>(op, ks, std::forward<Args>(args)...);
  }

 private:
  using AnyFn = void (*)();

  template <typename Return, typename... Args>
  __attribute__((noinline)) Return callThroughStack(const OperatorHandle& op, DispatchKeySet ks, Args... args) const {
    // A Stack in this frame (Note [Stacks in place]: no heap for up to 8
    // arguments), its values built in place: no capacity check per value.
    Stack stack(std::in_place, detail::boxing::boxArg(args)...);
    boxed_(functor_.get(), op, ks, &stack);
    if constexpr (std::is_void_v<Return>) {
      return;
    } else if constexpr (std::is_same_v<Return, Tensor&>) {
      // An in-place or out= op: c10 returns the argument it wrote, the first Tensor&.
      if (stack.size() != 1) detail::boxing::throwWrongReturnCount(op, stack.size(), 1);
      return firstMutableTensor(args...);
    } else {
      constexpr size_t n = detail::boxing::numReturns<Return>();
      if (stack.size() != n) detail::boxing::throwWrongReturnCount(op, stack.size(), n);
      if constexpr (requires { std::tuple_size<Return>::value; }) {
        return [&]<size_t... I>(std::index_sequence<I...>) {
          return Return(detail::boxing::unboxReturn<std::tuple_element_t<I, Return>>(std::move(stack[I]))...);
        }(std::make_index_sequence<n>{});
      } else {
        Return r = detail::boxing::unboxReturn<std::remove_cvref_t<Return>>(std::move(stack[0]));
        // A tensor or IValue moved out leaves None: nothing for the destructor to test.
        if constexpr (std::is_same_v<Return, Tensor> || std::is_same_v<Return, IValue>) stack.forgetDestroyed(1);
        return r;
      }
    }
  }

  template <typename First, typename... Rest>
  static Tensor& firstMutableTensor(First&& first, Rest&&... rest) {
    if constexpr (std::is_same_v<First, Tensor&>) return first;
    else return firstMutableTensor(std::forward<Rest>(rest)...);
  }
  static Tensor& firstMutableTensor() {
    STRATA_FAIL(NotImplemented, "a Tensor& return through a boxed kernel needs a Tensor& argument");
  }

  std::shared_ptr<OperatorKernel> functor_;
  InternalBoxedFn boxed_ = nullptr;
  AnyFn unboxed_ = nullptr;
  Kind kind_ = Kind::Invalid;
  static constexpr uint8_t kFakeImplRole = 0xFA;
  uint8_t role_ = 0;  // in what was kind_'s padding: the layout bundles see is unchanged
  std::optional<CppSignature> signature_;
  FunctionSchema (*infer_)() = nullptr;


 public:
  // For the dispatcher's own shared kernels (fallthrough, missing).
  static KernelFunction makeInternal(InternalBoxedFn fn, Kind kind);
};

}  // namespace strata
