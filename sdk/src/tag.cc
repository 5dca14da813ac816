#include "strata/tag.h"

#include <array>

#include "strata/error.h"

namespace strata {

namespace {
constexpr std::array<const char*, kNumTags> kTagNames = {
    "core",
    "data_dependent_output",
    "dynamic_output_shape",
    "flexible_layout",
    "generated",
    "inplace_view",
    "maybe_aliasing_or_mutating",
    "needs_exact_strides",
    "needs_fixed_stride_order",
    "nondeterministic_bitwise",
    "nondeterministic_seeded",
    "pointwise",
    "pt2_compliant_tag",
    "view_copy",
};
}  // namespace

const char* toString(Tag tag) {
  const auto i = static_cast<size_t>(tag);
  return i < kTagNames.size() ? kTagNames[i] : "(invalid tag)";
}

Tag parseTag(std::string_view name) {
  std::string_view bare = name;
  for (std::string_view prefix : {"torch.Tag.", "at::Tag::", "strata::Tag::", "Tag::"}) {
    if (bare.starts_with(prefix)) {
      bare.remove_prefix(prefix.size());
      break;
    }
  }
  for (size_t i = 0; i < kTagNames.size(); ++i) {
    if (bare == kTagNames[i]) return static_cast<Tag>(i);
  }
  std::string known;
  for (const char* n : kTagNames) known += std::string(known.empty() ? "" : ", ") + n;
  STRATA_FAIL(Value, "unknown operator tag '", name, "' (the tags are: ", known, ")");
}

std::string TagSet::str() const {
  std::string out;
  for (Tag t : tags()) out += std::string(out.empty() ? "" : ", ") + toString(t);
  return out;
}

const char* toString(AliasAnalysisKind kind) {
  switch (kind) {
    case AliasAnalysisKind::FROM_SCHEMA: return "FROM_SCHEMA";
    case AliasAnalysisKind::CONSERVATIVE: return "CONSERVATIVE";
    case AliasAnalysisKind::PURE_FUNCTION: return "PURE_FUNCTION";
  }
  return "(invalid alias analysis kind)";
}

AliasAnalysisKind parseAliasAnalysisKind(std::string_view text) {
  if (text.empty() || text == "FROM_SCHEMA") return AliasAnalysisKind::FROM_SCHEMA;
  if (text == "CONSERVATIVE") return AliasAnalysisKind::CONSERVATIVE;
  if (text == "PURE_FUNCTION") return AliasAnalysisKind::PURE_FUNCTION;
  STRATA_FAIL(Value, "unknown alias analysis kind '", text,
              "' (expected \"\" or FROM_SCHEMA, CONSERVATIVE, PURE_FUNCTION)");
}

}  // namespace strata
