// Operator tags and alias analysis kinds: what a def() says about its operator
// beyond the schema, as at::Tag (native/tags.yaml) and c10::AliasAnalysisKind.
//
//   m.def("nonzero_(Tensor x) -> Tensor", {Tag::dynamic_output_shape});
//   m.def(strata::schema("fast(Tensor x) -> Tensor", AliasAnalysisKind::PURE_FUNCTION),
//         {Tag::pt2_compliant_tag});
//
// Tags are kept on the operator (OperatorHandle::hasTag), shown by `strata dump`
// and recorded in the store. Layers read some of them: FakeTensorMode refuses an op
// tagged data_dependent_output or dynamic_output_shape that has a Meta kernel but no
// fake impl (its output depends on data a fake tensor does not have).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/export.h"

namespace strata {

// PyTorch's tags, same names and meanings. The values are bit positions (TagSet).
enum class Tag : uint8_t {
  core = 0,                    // in the core ATen opset
  data_dependent_output,       // the output's values (a Scalar) depend on the input's data
  dynamic_output_shape,        // the output's shape depends on the input's data
  flexible_layout,             // the output's strides need not match the eager kernel's
  generated,                   // generated (by codegen) rather than written by hand
  inplace_view,                // mutates the metadata (sizes, strides) of its first argument, a view
  maybe_aliasing_or_mutating,  // may alias or mutate its inputs (a CompositeImplicit op that sometimes does)
  needs_exact_strides,         // a compiler must pass inputs with exactly the strides eager would
  needs_fixed_stride_order,    // a compiler must keep the inputs' stride order
  nondeterministic_bitwise,    // two runs on the same input may differ bitwise
  nondeterministic_seeded,     // random: its output depends on the generator state
  pointwise,                   // elementwise
  pt2_compliant_tag,           // the op passes opcheck: it works with the compile stack
  view_copy,                   // the copy variant of a view op
};
inline constexpr int kNumTags = static_cast<int>(Tag::view_copy) + 1;

STRATA_API const char* toString(Tag tag);
// "pt2_compliant_tag" (also with a "torch.Tag." or "at::Tag::" prefix). Error(Value)
// naming the text and listing the tags otherwise.
STRATA_API Tag parseTag(std::string_view name);

// A set of tags; one bit per Tag.
class TagSet {
 public:
  constexpr TagSet() = default;
  TagSet(const std::vector<Tag>& tags) {  // NOLINT: a list of tags reads as a set
    for (Tag t : tags) add(t);
  }
  constexpr void add(Tag t) { bits_ |= uint32_t{1} << static_cast<int>(t); }
  constexpr bool has(Tag t) const { return (bits_ & (uint32_t{1} << static_cast<int>(t))) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr uint32_t raw() const { return bits_; }
  std::vector<Tag> tags() const {
    std::vector<Tag> out;
    for (int i = 0; i < kNumTags; ++i) {
      if (has(static_cast<Tag>(i))) out.push_back(static_cast<Tag>(i));
    }
    return out;
  }
  // "pt2_compliant_tag, pointwise" (declaration order); "" when empty.
  STRATA_API std::string str() const;
  bool operator==(const TagSet&) const = default;

 private:
  uint32_t bits_ = 0;
};

// How compilers may reason about an operator's aliasing (c10::AliasAnalysisKind).
// FROM_SCHEMA: the schema's alias annotations say it all (the default of a def with a
// schema; the only kind a schema with annotations may have). CONSERVATIVE: assume
// anything (the default of a def whose schema is inferred). PURE_FUNCTION: no
// aliasing, no mutation, no side effects.
enum class AliasAnalysisKind : uint8_t { FROM_SCHEMA, CONSERVATIVE, PURE_FUNCTION };

STRATA_API const char* toString(AliasAnalysisKind kind);
// "", "FROM_SCHEMA", "CONSERVATIVE" or "PURE_FUNCTION" ("" is FROM_SCHEMA, as
// torch.library.Library.define's default). Error(Value) otherwise.
STRATA_API AliasAnalysisKind parseAliasAnalysisKind(std::string_view text);

// A schema string with its alias analysis kind, for Library::def (torch::schema).
struct SchemaSpec {
  std::string schema;
  AliasAnalysisKind alias_analysis = AliasAnalysisKind::FROM_SCHEMA;
};
inline SchemaSpec schema(std::string_view text, AliasAnalysisKind kind = AliasAnalysisKind::FROM_SCHEMA) {
  return SchemaSpec{std::string(text), kind};
}

}  // namespace strata
