// Symbolic sizes: PyTorch's SymInt, for sizes that depend on a tensor's data.
//
// Note [Symbolic sizes]
// ~~~~~~~~~~~~~~~~~~~~~
// A fake implementation of an op whose output size depends on data (nonzero, unique,
// a filter) cannot know that size: it asks get_ctx().new_dynamic_size() (modes/fake.h)
// for a *symbol*, `u0`, with a range [min, max]. A symbolic size is a first-class size
// value: it goes into a tensor's sizes like any int64_t, prints as `u0`, and the Meta
// kernels of the core ops carry it through (elementwise ops over equal symbols,
// reductions over a symbolic dim, matmul with a symbolic batch, views).
//
// Representation: a size is an int64_t, as it always was. A symbolic one is a
// negative value with a tag in its low 16 bits (concrete sizes are never negative),
// naming an interned expression in a process-wide table: a symbol, or a polynomial
// over symbols with integer coefficients (`3*u0`, `u0 + u1`, `2*u0*u1 + 1`), so that
// strides and numel of a tensor with symbolic sizes are symbolic too. Interning makes
// equal expressions equal values: `u0 == u0` and `2*u0 == u0 + u0` hold as plain
// int64_t comparisons. The table only grows (as PyTorch's ShapeEnv does).
//
// What stays fast: a tensor whose sizes are all concrete never touches any of this;
// TensorImpl notices a symbolic size only on the path that rejects a negative one.
// What is never silent: deciding something about a symbol that its range does not
// decide (`u0 == 3`, `u0 < 5` for u0 in [0, inf)) throws Error(Value) saying it is
// data-dependent, never a guess. Plain int64_t arithmetic on a symbolic size gives a
// value without the tag (or with a broken one), which every size check rejects as a
// negative size: use SymInt's operators or sym::mul/add/sub instead.
//
// Storage: only tensors without data (meta, fake) may have symbolic sizes.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/export.h"

namespace strata {

namespace sym {

inline constexpr uint64_t kTagMask = 0xFFFF;
inline constexpr uint64_t kTag = 0x5A17;
// Unbounded, for a range's max.
inline constexpr int64_t kInf = std::numeric_limits<int64_t>::max();

// True when v is a symbolic size (one load-free test on a concrete one: v >= 0).
constexpr bool isSymbolic(int64_t v) {
  return v < 0 && (static_cast<uint64_t>(v) & kTagMask) == kTag;
}
inline bool anySymbolic(std::span<const int64_t> sizes) {
  for (int64_t s : sizes) {
    if (s < 0 && isSymbolic(s)) return true;
  }
  return false;
}

struct Range {
  int64_t min = 0;
  int64_t max = kInf;  // kInf: unbounded
  std::string str() const;  // "[0, inf]", "[2, 10]"
};

// A new symbol named `name` ("u0") with its range. Error(Value) when min < 0 or
// max < min (sizes are never negative).
STRATA_API int64_t newSymbol(std::string name, int64_t min = 0, int64_t max = kInf);

// Arithmetic: exact on concrete values (Error(Value) on overflow), symbolic otherwise.
STRATA_API int64_t add(int64_t a, int64_t b);
STRATA_API int64_t sub(int64_t a, int64_t b);
STRATA_API int64_t mul(int64_t a, int64_t b);
// a / b when it divides exactly (a concrete b dividing every coefficient of a, or a
// monomial b dividing every term); nullopt otherwise.
STRATA_API std::optional<int64_t> divExact(int64_t a, int64_t b);
// The product of sizes (numel); the concrete product when none is symbolic.
STRATA_API int64_t product(std::span<const int64_t> sizes);

// The range of a value: [v, v] for a concrete one.
STRATA_API Range range(int64_t v);
// "u0", "3*u0 + 1", "5".
STRATA_API std::string str(int64_t v);
// "[u0, 3]".
STRATA_API std::string shapeStr(std::span<const int64_t> sizes);
// The symbols an expression mentions, with their ranges, for messages:
// "u0 in [0, inf]". Empty for a concrete value.
STRATA_API std::string rangesStr(std::span<const int64_t> values);

// Decisions. nullopt: the ranges do not decide it.
STRATA_API std::optional<bool> tryEq(int64_t a, int64_t b);
STRATA_API std::optional<bool> tryLt(int64_t a, int64_t b);
// The same, or Error(Value) naming `what`, both values and their ranges, and saying
// it is data-dependent.
STRATA_API bool eq(int64_t a, int64_t b, std::string_view what);
STRATA_API bool lt(int64_t a, int64_t b, std::string_view what);
inline bool le(int64_t a, int64_t b, std::string_view what) { return !lt(b, a, what); }

}  // namespace sym

// A size that may be symbolic (PyTorch's c10::SymInt). Converts to and from int64_t
// so it goes into sizes ({nnz, x.dim()}); its operators keep the symbol, where plain
// int64_t arithmetic would not.
class SymInt {
 public:
  constexpr SymInt(int64_t v = 0) : v_(v) {}  // NOLINT: a concrete size is a SymInt
  constexpr operator int64_t() const { return v_; }  // NOLINT: a SymInt is a size
  constexpr bool is_symbolic() const { return sym::isSymbolic(v_); }
  // The concrete value, or nullopt.
  std::optional<int64_t> maybe_as_int() const {
    return is_symbolic() ? std::nullopt : std::optional<int64_t>(v_);
  }
  // The concrete value; Error(Value) naming the symbol when it is symbolic.
  STRATA_API int64_t expect_int() const;
  sym::Range range() const { return sym::range(v_); }
  std::string str() const { return sym::str(v_); }

  friend SymInt operator+(SymInt a, SymInt b) { return SymInt(sym::add(a.v_, b.v_)); }
  friend SymInt operator-(SymInt a, SymInt b) { return SymInt(sym::sub(a.v_, b.v_)); }
  friend SymInt operator*(SymInt a, SymInt b) { return SymInt(sym::mul(a.v_, b.v_)); }
  // With a plain integer on either side (exact matches, so never the built-in int64_t ones).
  template <std::integral T> friend SymInt operator+(SymInt a, T b) { return a + SymInt(int64_t(b)); }
  template <std::integral T> friend SymInt operator+(T a, SymInt b) { return SymInt(int64_t(a)) + b; }
  template <std::integral T> friend SymInt operator-(SymInt a, T b) { return a - SymInt(int64_t(b)); }
  template <std::integral T> friend SymInt operator-(T a, SymInt b) { return SymInt(int64_t(a)) - b; }
  template <std::integral T> friend SymInt operator*(SymInt a, T b) { return a * SymInt(int64_t(b)); }
  template <std::integral T> friend SymInt operator*(T a, SymInt b) { return SymInt(int64_t(a)) * b; }

  // Comparisons decide by the values' ranges (u0 in [2, 9] < 10 is true), and what
  // the ranges cannot decide (u0 == 3) is Error(Value) saying it is data-dependent,
  // never the comparison of two encodings (PyTorch's GuardOnDataDependentSymNode).
  friend bool operator==(SymInt a, SymInt b) { return sym::eq(a.v_, b.v_, "SymInt =="); }
  friend bool operator!=(SymInt a, SymInt b) { return !sym::eq(a.v_, b.v_, "SymInt !="); }
  friend bool operator<(SymInt a, SymInt b) { return sym::lt(a.v_, b.v_, "SymInt <"); }
  friend bool operator>(SymInt a, SymInt b) { return sym::lt(b.v_, a.v_, "SymInt >"); }
  friend bool operator<=(SymInt a, SymInt b) { return !sym::lt(b.v_, a.v_, "SymInt <="); }
  friend bool operator>=(SymInt a, SymInt b) { return !sym::lt(a.v_, b.v_, "SymInt >="); }
#define STRATA_SYMINT_CMP(op)                                                                \
  template <std::integral T> friend bool operator op(SymInt a, T b) { return a op SymInt(int64_t(b)); } \
  template <std::integral T> friend bool operator op(T a, SymInt b) { return SymInt(int64_t(a)) op b; }
  STRATA_SYMINT_CMP(==)
  STRATA_SYMINT_CMP(!=)
  STRATA_SYMINT_CMP(<)
  STRATA_SYMINT_CMP(>)
  STRATA_SYMINT_CMP(<=)
  STRATA_SYMINT_CMP(>=)
#undef STRATA_SYMINT_CMP

 private:
  int64_t v_;
};

inline std::ostream& operator<<(std::ostream& os, SymInt s) { return os << s.str(); }

}  // namespace strata
