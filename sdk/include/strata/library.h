// Library: defining operators and registering kernels, as torch::Library does.
//
//   STRATA_LIBRARY(mylib, m) {
//     m.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
//     m.def("twice", [](const Tensor& x) { return x; });   // schema inferred
//   }
//   STRATA_LIBRARY_IMPL(mylib, CPU, m) { m.impl("muladd", &muladd_cpu); }
//   STRATA_LIBRARY_IMPL(_, Mode, m) { m.fallback(CppFunction::makeFallthrough()); }
//
// Or, without static initializers (what plugin bundles do):
//
//   Library m(Library::DEF, "mylib");
//   m.def("sin(Tensor x) -> Tensor");
//   Library cpu(Library::IMPL, "mylib", DispatchKey::CPU);
//   cpu.impl("sin", &sin_cpu);
//
// Kinds: one DEF library per namespace (it may def and impl); any number of FRAGMENT
// libraries (def and impl, for namespaces split across files); IMPL libraries only
// impl, for their key when they have one. Namespace `_` is for fallbacks only.
//
// Every registration is owned by its Library: destroying the Library removes them
// and recomputes the tables. Each records an owner (RegistrationOwnerGuard, default
// "user") and a debug string with the file and line of the call.
//
// A kernel may not replace another kernel at the same (op, key), its own owner's
// included, unless allow_override is set (on the Library, or per impl); the replaced
// kernel comes back when the newer registration is removed.
#pragma once

#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "strata/dispatch_key.h"
#include "strata/dispatcher.h"
#include "strata/export.h"
#include "strata/kernel_function.h"
#include "strata/schema.h"
#include "strata/tag.h"

namespace strata {

// A kernel of any kind, type-erased, as torch::CppFunction.
class CppFunction {
 public:
  // A function pointer, lambda or functor: unboxed, or boxed when its signature is
  // void(const OperatorHandle&, DispatchKeySet, Stack&) / void(const OperatorHandle&, Stack&).
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, CppFunction>>>
  explicit CppFunction(F&& f) : kernel_(KernelFunction::make(std::forward<F>(f))) {}

  static CppFunction makeFallthrough() { return CppFunction(KernelFunction::makeFallthrough(), 0); }
  template <typename F>
  static CppFunction makeFromBoxedFunctor(F f) {
    return CppFunction(KernelFunction::makeFromBoxedFunctor(std::move(f)), 0);
  }
  template <auto* Fn>
  static CppFunction makeFromBoxedFunction() {
    return CppFunction(KernelFunction::makeFromBoxedFunctor(Fn), 0);
  }
  template <typename F>
  static CppFunction makeFromUnboxedFunction(F f) {
    return CppFunction(KernelFunction::makeFromUnboxedFunctor(std::move(f)), 0);
  }

  const KernelFunction& kernel() const& { return kernel_; }
  KernelFunction&& kernel() && { return std::move(kernel_); }

 private:
  CppFunction(KernelFunction k, int) : kernel_(std::move(k)) {}
  KernelFunction kernel_;
};

struct ImplOptions {
  bool allow_override = false;
};

class STRATA_API Library {
 public:
  enum Kind { DEF, IMPL, FRAGMENT };

  // Throws Error(Value) for PyTorch's misuses: a second DEF library for a namespace,
  // DEF/FRAGMENT for `_`, an IMPL library's key that is not a dispatch key.
  Library(Kind kind, std::string ns, std::optional<DispatchKey> key = std::nullopt,
          std::source_location where = std::source_location::current());
  Library(Kind kind, std::string ns, std::optional<DispatchKey> key, const char* file, uint32_t line);
  Library(Library&&) noexcept;
  Library& operator=(Library&&) noexcept;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();

  // Declares an operator from its full schema ("name(Tensor x) -> Tensor"; the
  // namespace may be given, and must be this library's), with its tags
  // (strata/tag.h) and alias analysis kind: FROM_SCHEMA, or what strata::schema()
  // gives, as torch::Library::def(torch::schema(text, kind), tags).
  Library& def(std::string_view schema, std::source_location where = std::source_location::current()) &;
  Library& def(std::string_view schema, const std::vector<Tag>& tags,
               std::source_location where = std::source_location::current()) &;
  Library& def(const SchemaSpec& schema, const std::vector<Tag>& tags = {},
               std::source_location where = std::source_location::current()) &;
  // Declares an operator and registers f as its CompositeImplicitAutograd kernel. The
  // first argument is a full schema, or a bare name whose schema is inferred from f
  // (its alias analysis is then CONSERVATIVE, as PyTorch's).
  template <typename F>
  Library& def(std::string_view name_or_schema, F&& f, std::source_location where = std::source_location::current()) & {
    return defImpl(name_or_schema, toKernel(std::forward<F>(f)), where);
  }

  // Registers f for the operator `name` (no schema; "name", "name.overload" or
  // "ns::name..."). The key is the library's (IMPL) or CompositeImplicitAutograd.
  template <typename F>
  Library& impl(std::string_view name, F&& f, std::source_location where = std::source_location::current()) & {
    return implImpl(name, toKernel(std::forward<F>(f)), std::nullopt, ImplOptions{}, where);
  }
  // At an explicit key: a DispatchKey, or a name parseDispatchKey accepts ("cpu", "default").
  template <typename F>
  Library& impl(std::string_view name, F&& f, DispatchKey key, ImplOptions options = {},
                std::source_location where = std::source_location::current()) & {
    return implImpl(name, toKernel(std::forward<F>(f)), key, options, where);
  }
  template <typename F>
  Library& impl(std::string_view name, F&& f, std::string_view device_or_key, ImplOptions options = {},
                std::source_location where = std::source_location::current()) & {
    return implImpl(name, toKernel(std::forward<F>(f)), parseDispatchKey(device_or_key), options, where);
  }

  // Registers a boxed (or fallthrough) kernel for every operator at this IMPL
  // library's key. Only from an IMPL library of namespace `_` with a key.
  template <typename F>
  Library& fallback(F&& f, std::source_location where = std::source_location::current()) & {
    return fallbackImpl(toKernel(std::forward<F>(f)), where);
  }

  // Ties another registration (e.g. a register_torch_dispatch rule) to this library:
  // it is removed with the library's own, in reverse order.
  Library& keep(RegistrationHandleRAII registration) & {
    registrations_.push_back(std::move(registration));
    return *this;
  }
  // Lets this library's later impls replace kernels other owners registered.
  Library& allow_override(bool allow = true) & {
    allow_override_ = allow;
    return *this;
  }

  Kind kind() const { return kind_; }
  const std::string& ns() const { return ns_; }
  std::optional<DispatchKey> key() const { return key_; }
  const std::string& owner() const { return owner_; }
  size_t numRegistrations() const { return registrations_.size(); }
  // Removes every registration made through this library, newest first.
  void reset();

 private:
  template <typename F>
  static KernelFunction toKernel(F&& f) {
    if constexpr (std::is_same_v<std::decay_t<F>, CppFunction>) return std::forward<F>(f).kernel();
    else return KernelFunction::make(std::forward<F>(f));
  }
  void checkMayDefine(std::source_location where) const;
  // Registers the def (qualified with this namespace); returns the operator's name.
  OperatorName defSchema(FunctionSchema schema, std::source_location where, TagSet tags = {},
                         AliasAnalysisKind alias_analysis = AliasAnalysisKind::FROM_SCHEMA);
  Library& defImpl(std::string_view name_or_schema, KernelFunction kernel, std::source_location where);
  Library& implImpl(std::string_view name, KernelFunction kernel, std::optional<DispatchKey> key,
                    ImplOptions options, std::source_location where);
  Library& fallbackImpl(KernelFunction kernel, std::source_location where);
  OperatorName qualify(std::string_view name, const char* what) const;
  std::string where(std::source_location loc) const;

  Kind kind_;
  std::string ns_;
  std::optional<DispatchKey> key_;
  std::string file_;
  uint32_t line_ = 0;
  std::string owner_;
  bool allow_override_ = false;
  std::vector<RegistrationHandleRAII> registrations_;
};

STRATA_API const char* toString(Library::Kind kind);

namespace detail {
// What the macros expand to: builds the library at static-initialization time and
// runs the block. A block that throws leaves nothing registered (the library is
// reset) and reports to stderr; see staticRegistrationErrors(). In a bundle the host
// is loading, the block is deferred instead and runs inside the bundle's load
// transaction, owned by the bundle (Note [Static registrations in bundles]).
class STRATA_API LibraryInit {
 public:
  using InitFn = void (*)(Library&);
  LibraryInit(Library::Kind kind, InitFn fn, const char* ns, std::optional<DispatchKey> key, const char* file,
              uint32_t line);

 private:
  std::optional<Library> lib_;
};
STRATA_API std::vector<std::string> staticRegistrationErrors();

// A STRATA_LIBRARY block whose run was deferred because a host was loading the
// library that holds it (Note [Static registrations in bundles] in strata/plugin.h).
struct StaticLibraryBlock {
  Library::Kind kind = Library::DEF;
  LibraryInit::InitFn fn = nullptr;
  std::string ns;
  std::optional<DispatchKey> key;
  std::string file;
  uint32_t line = 0;
};
// Defers the block when a capture is active on this thread (returns true).
STRATA_API bool deferStaticBlock(StaticLibraryBlock block);
}  // namespace detail

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)
#define STRATA_UID(prefix) STRATA_CONCAT(prefix, __COUNTER__)

// The one DEF library of namespace ns.
#define STRATA_LIBRARY(ns, m)                                                                    \
  static void STRATA_LIBRARY_init_##ns(::strata::Library&);                                     \
  static const ::strata::detail::LibraryInit STRATA_LIBRARY_static_init_##ns(                   \
      ::strata::Library::DEF, &STRATA_LIBRARY_init_##ns, #ns, std::nullopt, __FILE__, __LINE__); \
  void STRATA_LIBRARY_init_##ns(::strata::Library& m)

// A FRAGMENT of namespace ns (any number of them).
#define STRATA_LIBRARY_FRAGMENT(ns, m) STRATA_LIBRARY_FRAGMENT_UID(ns, m, STRATA_UID(STRATA_LIBRARY_FRAGMENT_))
#define STRATA_LIBRARY_FRAGMENT_UID(ns, m, uid)                                                       \
  static void STRATA_CONCAT(uid, _init)(::strata::Library&);                                          \
  static const ::strata::detail::LibraryInit STRATA_CONCAT(uid, _static_init)(                        \
      ::strata::Library::FRAGMENT, &STRATA_CONCAT(uid, _init), #ns, std::nullopt, __FILE__, __LINE__); \
  void STRATA_CONCAT(uid, _init)(::strata::Library & m)

// An IMPL library of namespace ns (or `_` for fallbacks) at key k, an unqualified
// DispatchKey name (CPU, AutogradCPU, CompositeExplicitAutograd, ...).
#define STRATA_LIBRARY_IMPL(ns, k, m) STRATA_LIBRARY_IMPL_UID(ns, k, m, STRATA_UID(STRATA_LIBRARY_IMPL_))
#define STRATA_LIBRARY_IMPL_UID(ns, k, m, uid)                                                    \
  static void STRATA_CONCAT(uid, _init)(::strata::Library&);                                      \
  static const ::strata::detail::LibraryInit STRATA_CONCAT(uid, _static_init)(                    \
      ::strata::Library::IMPL, &STRATA_CONCAT(uid, _init), #ns, ::strata::DispatchKey::k, __FILE__, \
      __LINE__);                                                                                  \
  void STRATA_CONCAT(uid, _init)(::strata::Library & m)
