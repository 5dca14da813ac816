// Literal arguments for `strata call`: command-line words turned into IValues by
// the schema type they are given for.
//
//   ints 3 -1, floats 2.0 1e-3, bools true/false, None, strings (quotes optional),
//   lists [1,2,3], dtypes float16/f16, devices cpu/meta,
//   tensors: nested lists  [1,2,3]  [[1,2],[3,4]]  [1.5,2]
//            factories     ones(2,3)  zeros(4)  randn(3)  rand(2,2)  arange(5)
//            with modifiers after ':'  [[1,2],[3,4]]:f16   ones(2,3):meta   randn(3):f64:requires_grad
//            then methods, as PyTorch users write them (kLiteralMethods):
//                          arange(4).reshape(2,2)   ones(2,3).to(f16)   randn(2,3).t().contiguous()
//   tensor lists [ones(2), [1,2]]
// A nested list without a float is int64, with one float32, of only bools bool, as
// torch.tensor infers. randn/rand draw from a generator seeded with `seed`.
// A literal has at most kMaxLiteralDims dims and kMaxLiteralElements elements (64 MiB
// of float32): a typo such as ones(1000000000) is refused, not a 4 GB allocation.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "strata/ivalue.h"
#include "strata/schema.h"

namespace strata::host {

inline constexpr size_t kMaxLiteralDims = 64;
inline constexpr int64_t kMaxLiteralElements = int64_t{1} << 24;
// Every method a tensor literal takes, as the error for another one lists them.
inline constexpr const char* kLiteralMethods =
    "the methods are .reshape(2,3) .view(2,3) .to(f16) .to(meta) .to(cuda, f16) .float() .double() .half() "
    ".bfloat16() .int() .long() .bool() .byte() .char() .t() .T .mT .transpose(0,1) .permute(1,0) .unsqueeze(0) "
    ".squeeze() .squeeze(0) .expand(2,3) .narrow(0,0,2) .select(0,1) .contiguous() .clone() .detach() "
    ".requires_grad_()";

// A dtype by its short name (f16, bf16, f32, f64, i8, u8, i32, i64, b8) or its torch
// name (float16, bfloat16, half, ...); nullopt for anything else.
std::optional<ScalarType> dtypeName(std::string_view s);

class LiteralParser {
 public:
  // max_elements caps ones(...), zeros(...), randn(...), rand(...) and arange(...);
  // lower than kMaxLiteralElements only where big tensors cost too much (a fuzzer).
  explicit LiteralParser(uint64_t seed, int64_t max_elements = kMaxLiteralElements)
      : rng_(seed), max_elements_(max_elements) {}
  // The value of `text` for an argument of type `type`. Throws strata::Error(Value)
  // saying what could not be read and why.
  IValue parse(std::string_view text, const Type& type);
  // A tensor literal on its own.
  Tensor parseTensor(std::string_view text);

 private:
  // ".reshape(2,2).to(f16)" applied to t in turn.
  Tensor applyMethods(Tensor t, std::string_view methods, std::string_view whole);
  std::mt19937_64 rng_;
  int64_t max_elements_;
};

}  // namespace strata::host
