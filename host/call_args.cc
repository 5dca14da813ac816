#include "call_args.h"
#include "operator_info.h"

#include <cctype>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cmath>
#include <optional>
#include <vector>

#include "strata/error.h"
#include "strata/ops.h"
#include "strata/tensor.h"

namespace strata::host {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<int64_t> asInt(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> asDouble(std::string_view s) {
  s = trim(s);
  const std::string t(s);
  if (t == "inf" || t == "+inf") return INFINITY;
  if (t == "-inf") return -INFINITY;
  if (t == "nan") return NAN;
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

std::optional<bool> asBool(std::string_view s) {
  s = trim(s);
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  return std::nullopt;
}

bool isNone(std::string_view s) {
  s = trim(s);
  return s == "None" || s == "none" || s == "null";
}



// The parts of "[a, [b, c], d]" at the top level: {"a", "[b, c]", "d"}.
std::vector<std::string_view> splitList(std::string_view s, std::string_view whole) {
  s = trim(s);
  STRATA_CHECK(s.size() >= 2 && s.front() == '[' && s.back() == ']', Value, "'", shortened(whole), "': expected a list in [ ]");
  std::string_view body = trim(s.substr(1, s.size() - 2));
  std::vector<std::string_view> parts;
  if (body.empty()) return parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    STRATA_CHECK(depth >= 0, Value, "'", shortened(whole), "': unbalanced brackets");
    if (c == ',' && depth == 0) {
      parts.push_back(trim(body.substr(start, i - start)));
      start = i + 1;
    }
  }
  STRATA_CHECK(depth == 0, Value, "'", shortened(whole), "': unbalanced brackets");
  parts.push_back(trim(body.substr(start)));
  for (std::string_view p : parts) STRATA_CHECK(!p.empty(), Value, "'", shortened(whole), "': an empty list element");
  return parts;
}


// Flattens a nested list literal, checking it is rectangular.
struct Nested {
  std::vector<int64_t> shape;
  std::vector<std::string_view> leaves;
  std::optional<size_t> leaf_depth;  // where the first number was: every number is there, no list is
};
void flatten(std::string_view s, size_t depth, Nested& out, std::string_view whole) {
  s = trim(s);
  if (!s.empty() && s.front() == '[') {
    STRATA_CHECK(depth < kMaxLiteralDims, Value, "'", shortened(whole), "': lists nest more than ",
                 kMaxLiteralDims, " deep (a tensor literal has at most ", kMaxLiteralDims, " dims)");
    STRATA_CHECK(!out.leaf_depth || depth < *out.leaf_depth, Value, "'", shortened(whole),
                 "': a ragged nested list (numbers and lists at the same depth)");
    const auto parts = splitList(s, whole);
    if (out.shape.size() == depth) out.shape.push_back(static_cast<int64_t>(parts.size()));
    STRATA_CHECK(out.shape.size() > depth && out.shape[depth] == static_cast<int64_t>(parts.size()), Value, "'", shortened(whole),
                 "': a ragged nested list (every list at one depth must have the same length)");
    for (std::string_view p : parts) flatten(p, depth + 1, out, whole);
    return;
  }
  STRATA_CHECK(!out.leaf_depth || *out.leaf_depth == depth, Value, "'", shortened(whole),
               "': a ragged nested list (numbers and lists at the same depth)");
  if (!out.leaf_depth) out.leaf_depth = depth;
  STRATA_CHECK(out.shape.size() == depth, Value, "'", shortened(whole),
               "': a ragged nested list (numbers and lists at the same depth)");
  STRATA_CHECK(static_cast<int64_t>(out.leaves.size()) < kMaxLiteralElements, Value, "'", shortened(whole),
               "': more than ", kMaxLiteralElements, " elements, the most a command-line tensor literal may have");
  out.leaves.push_back(s);
}

// numel *= size, refused past `most` (so never overflowing either).
void checkLiteralSize(int64_t& numel, int64_t size, std::string_view whole, int64_t most) {
  STRATA_CHECK(size == 0 || numel <= most / size, Value, "'", shortened(whole), "': more than ", most,
               " elements, the most a command-line tensor literal may have");
  numel *= size;
}

}  // namespace

std::optional<ScalarType> dtypeName(std::string_view s) {
  static const std::pair<const char*, ScalarType> kShort[] = {
      {"f16", kFloat16}, {"bf16", kBFloat16}, {"f32", kFloat32}, {"f64", kFloat64}, {"i8", kInt8},
      {"u8", kUInt8},    {"i32", kInt32},     {"i64", kInt64},   {"b8", kBool}};
  for (const auto& [n, t] : kShort) {
    if (s == n) return t;
  }
  return scalarTypeFromString(s);
}

Tensor LiteralParser::parseTensor(std::string_view text) {
  const std::string_view whole = text;
  text = trim(text);
  STRATA_CHECK(!text.empty(), Value, "an empty tensor literal");
  // The base ends where its first bracket closes; ':' modifiers follow.
  size_t end = 0;
  if (text.front() == '[') {
    int depth = 0;
    for (; end < text.size(); ++end) {
      if (text[end] == '[') ++depth;
      if (text[end] == ']' && --depth == 0) break;
    }
    STRATA_CHECK(end < text.size(), Value, "'", shortened(whole), "': unbalanced brackets");
    ++end;
  } else {
    end = text.find(')');
    STRATA_CHECK(end != std::string_view::npos, Value, "'", shortened(whole),
                 "': not a tensor literal (expected [..], ones(..), zeros(..), randn(..), rand(..), arange(..) "
                 "or empty(..))");
    ++end;
  }
  const std::string_view base = text.substr(0, end);
  std::string_view rest = text.substr(end);
  // Methods (.reshape(2,2), .to(f16), ...) follow the ':' modifiers, and apply in turn.
  std::string_view methods;
  if (const size_t dot = rest.find('.'); dot != std::string_view::npos) {
    methods = rest.substr(dot);
    rest = rest.substr(0, dot);
  }

  std::optional<ScalarType> dtype;
  Device device = kCPU;
  bool requires_grad = false;
  while (!rest.empty()) {
    STRATA_CHECK(rest.front() == ':', Value, "'", shortened(whole), "': expected ':' before a modifier, found '", rest, "'");
    rest.remove_prefix(1);
    size_t next = rest.find(':');
    std::string_view mod = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next);
    if (mod == "cuda" && !rest.empty() && rest.size() > 1 && std::isdigit(static_cast<unsigned char>(rest[1]))) {
      // cuda:N
      size_t n2 = rest.find(':', 1);
      const std::string_view idx = rest.substr(1, n2 == std::string_view::npos ? std::string_view::npos : n2 - 1);
      device = Device(std::string("cuda:") + std::string(idx));
      rest = n2 == std::string_view::npos ? std::string_view() : rest.substr(n2);
      continue;
    }
    if (auto t = dtypeName(mod)) {
      dtype = *t;
    } else if (mod == "requires_grad" || mod == "grad") {
      requires_grad = true;
    } else {
      try {
        device = Device(mod);
      } catch (const Error&) {
        STRATA_FAIL(Value, "'", shortened(whole), "': unknown modifier '", mod,
                    "' (expected a dtype such as f16/float32/int64, a device such as cpu/meta/cuda, or requires_grad)");
      }
    }
  }

  Tensor t;
  if (base.front() == '[') {
    Nested n;
    flatten(base, 0, n, whole);
    bool any_float = false, all_bool = !n.leaves.empty();
    for (std::string_view leaf : n.leaves) {
      if (asBool(leaf)) continue;
      all_bool = false;
      if (asInt(leaf)) continue;
      STRATA_CHECK(asDouble(leaf).has_value(), Value, "'", shortened(whole), "': '", leaf, "' is not a number");
      any_float = true;
    }
    const ScalarType inferred = n.leaves.empty() ? kFloat32 : all_bool ? kBool : any_float ? kFloat32 : kInt64;
    // Bools count as 0 and 1 among numbers, as in torch.tensor([True, 2]).
    std::vector<int64_t> ints;  // a float leaf's is filled in below, for an integer dtype
    std::vector<double> values;
    std::vector<size_t> float_leaves;
    for (std::string_view leaf : n.leaves) {
      if (auto b = asBool(leaf)) {
        ints.push_back(*b ? 1 : 0);
        values.push_back(*b ? 1 : 0);
      } else if (auto i = asInt(leaf)) {
        ints.push_back(*i);
        values.push_back(static_cast<double>(*i));
      } else {
        float_leaves.push_back(values.size());
        ints.push_back(0);
        values.push_back(*asDouble(leaf));
      }
    }
    // An integer dtype takes only values it can hold, as torch.tensor([300],
    // dtype=torch.uint8) refuses (c10::checked_convert): a float as it is, not rounded
    // (-0.5 and 255.5 do not fit uint8; NaN and the infinities fit no integer); an
    // integer in the type's range, or for uint8 down to -255, which wraps as PyTorch's
    // does; bools always fit.
    if (dtype && (*dtype == kUInt8 || *dtype == kInt8 || *dtype == kInt32 || *dtype == kInt64)) {
      const auto [lo, hi] = *dtype == kUInt8  ? std::pair<int64_t, int64_t>{0, 255}
                            : *dtype == kInt8  ? std::pair<int64_t, int64_t>{-128, 127}
                            : *dtype == kInt32 ? std::pair<int64_t, int64_t>{INT32_MIN, INT32_MAX}
                                               : std::pair<int64_t, int64_t>{INT64_MIN, INT64_MAX};
      for (size_t i = 0; i < n.leaves.size(); ++i) {
        const std::string_view leaf = n.leaves[i];
        bool fits = true;
        if (auto v = asInt(leaf)) {
          fits = *v <= hi && (*v >= lo || (*dtype == kUInt8 && *v >= -255));
        } else if (!asBool(leaf)) {
          const double d = values[i];
          fits = d >= static_cast<double>(lo) && d < static_cast<double>(hi) + 1.0 &&
                 (*dtype == kInt64 || d <= static_cast<double>(hi));  // int64's max is not a double
        }
        STRATA_CHECK(fits, Value, "'", shortened(whole), "': value ", leaf, " cannot be converted to type ",
                     toString(*dtype), " without overflow");
      }
    }
    // Each value converted once, from what was written to the dtype, as torch.tensor
    // does: for an integer dtype the integers exactly (a trip through double would
    // round above 2^53) and the floats truncated (the check above kept them in range);
    // for a float or bool dtype everything from double ([1e300]:f64 is 1e300, not
    // float32's inf).
    const ScalarType target = dtype.value_or(inferred);
    if (!isFloatingType(target) && target != kBool) {
      for (size_t i : float_leaves) ints[i] = static_cast<int64_t>(values[i]);
      t = from_vector(ints, n.shape).to(target);
    } else {
      t = from_vector(values, n.shape).to(target);
    }
  } else {
    const size_t open = base.find('(');
    STRATA_CHECK(open != std::string_view::npos, Value, "'", shortened(whole), "': expected NAME(sizes)");
    const std::string_view name = trim(base.substr(0, open));
    const std::string_view args = base.substr(open + 1, base.size() - open - 2);
    std::vector<int64_t> sizes;
    int64_t numel = 1;
    if (!trim(args).empty()) {
      size_t start = 0;
      while (true) {
        const size_t comma = args.find(',', start);
        const std::string_view part = args.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        auto v = asInt(part);
        STRATA_CHECK(v && *v >= 0, Value, "'", shortened(whole), "': '", trim(part), "' is not a size (a non-negative int)");
        STRATA_CHECK(sizes.size() < kMaxLiteralDims, Value, "'", shortened(whole), "': more than ",
                     kMaxLiteralDims, " sizes (a tensor literal has at most ", kMaxLiteralDims, " dims)");
        sizes.push_back(*v);
        checkLiteralSize(numel, *v, whole, max_elements_);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    }
    const ScalarType dt = dtype.value_or(name == "arange" ? kInt64 : kFloat32);
    if (name == "ones") {
      t = ones(sizes, dt);
    } else if (name == "zeros") {
      t = zeros(sizes, dt);
    } else if (name == "empty") {
      t = zeros(sizes, dt);  // deterministic output for a command line
    } else if (name == "arange") {
      STRATA_CHECK(sizes.size() == 1, Value, "'", shortened(whole), "': arange(N) takes one size");
      t = arange(Scalar(int64_t{0}), Scalar(sizes[0]), Scalar(int64_t{1}), TensorOptions(dt));
    } else if (name == "randn" || name == "rand") {
      // As torch.randn(3, dtype=torch.int64) refuses ("normal_kernel_cpu" not
      // implemented for 'Long'), rather than make a tensor of zeros.
      STRATA_CHECK(isFloatingType(dt), Value, "'", shortened(whole), "': ", name, " makes floating-point values, and ",
                   toString(dt), " is not a floating-point type (convert after: ", name, "(..).to(", toString(dt),
                   "))");
      std::vector<double> v(static_cast<size_t>(numel));
      std::normal_distribution<double> normal;
      std::uniform_real_distribution<double> uniform;
      for (double& x : v) x = name == "randn" ? normal(rng_) : uniform(rng_);
      t = from_vector(v, sizes).to(dt);
    } else {
      STRATA_FAIL(Value, "'", shortened(whole), "': unknown tensor factory '", name,
                  "' (expected ones, zeros, empty, arange, randn or rand)");
    }
  }
  if (device != kCPU) t = t.to(device);
  if (requires_grad) t.set_requires_grad(true);
  return applyMethods(std::move(t), methods, whole);
}

namespace {

// The integers of a method's arguments: "2,3", "(2,3)", "[2, 3]" or "" (none).
std::vector<int64_t> methodInts(std::string_view args, std::string_view method, std::string_view whole) {
  args = trim(args);
  if (args.size() >= 2 && ((args.front() == '(' && args.back() == ')') || (args.front() == '[' && args.back() == ']'))) {
    args = trim(args.substr(1, args.size() - 2));
  }
  std::vector<int64_t> out;
  if (args.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = args.find(',', start);
    const std::string_view part = trim(args.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (!(part.empty() && comma == std::string_view::npos && !out.empty())) {  // a trailing comma, as in (2,)
      const auto v = asInt(part);
      STRATA_CHECK(v.has_value(), Value, "'", shortened(whole), "': .", method, "(...) takes integers, not '", part, "'");
      STRATA_CHECK(out.size() < kMaxLiteralDims, Value, "'", shortened(whole), "': .", method, "(...) takes at most ",
                   kMaxLiteralDims, " integers");
      out.push_back(*v);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

Tensor LiteralParser::applyMethods(Tensor t, std::string_view methods, std::string_view whole) {
  while (!methods.empty()) {
    STRATA_CHECK(methods.front() == '.', Value, "'", shortened(whole), "': expected '.' before a method, found '",
                 shortened(methods), "' (':' modifiers come before methods)");
    methods.remove_prefix(1);
    size_t name_end = 0;
    while (name_end < methods.size() && (std::isalnum(static_cast<unsigned char>(methods[name_end])) || methods[name_end] == '_')) {
      ++name_end;
    }
    const std::string name(methods.substr(0, name_end));
    methods.remove_prefix(name_end);
    std::string_view args;
    bool called = false;
    if (!methods.empty() && methods.front() == '(') {
      int depth = 0;
      size_t close = 0;
      for (; close < methods.size(); ++close) {
        if (methods[close] == '(' || methods[close] == '[') ++depth;
        if ((methods[close] == ')' || methods[close] == ']') && --depth == 0) break;
      }
      STRATA_CHECK(close < methods.size(), Value, "'", shortened(whole), "': unbalanced parentheses after .", name);
      args = methods.substr(1, close - 1);
      methods.remove_prefix(close + 1);
      called = true;
    }
    auto ints = [&] { return methodInts(args, name, whole); };
    auto noArgs = [&] {
      STRATA_CHECK(trim(args).empty(), Value, "'", shortened(whole), "': .", name, "() takes no arguments");
    };
    auto count = [&](const std::vector<int64_t>& v, size_t n) {
      STRATA_CHECK(v.size() == n, Value, "'", shortened(whole), "': .", name, "(...) takes ", n, " integer(s), got ",
                   v.size());
      return v;
    };
    static const std::pair<const char*, ScalarType> kCasts[] = {
        {"float", kFloat32}, {"double", kFloat64}, {"half", kFloat16}, {"bfloat16", kBFloat16},
        {"int", kInt32},     {"long", kInt64},     {"bool", kBool},    {"byte", kUInt8}, {"char", kInt8}};
    const ScalarType* cast = nullptr;
    for (const auto& [n, dt] : kCasts) {
      if (name == n) cast = &dt;
    }
    if (name == "T" || name == "mT") {
      STRATA_CHECK(!called, Value, "'", shortened(whole), "': .", name, " is an attribute: no parentheses");
    } else {
      STRATA_CHECK(called, Value, "'", shortened(whole), "': .", name.empty() ? std::string("?") : name,
                   " needs its parentheses (", kLiteralMethods, ")");
    }
    if (name == "reshape" || name == "view") {
      const std::vector<int64_t> shape = ints();
      t = name == "reshape" ? t.reshape(shape) : t.view(shape);
    } else if (name == "to") {
      std::string_view a = trim(args);
      STRATA_CHECK(!a.empty(), Value, "'", shortened(whole), "': .to(...) takes a dtype, a device, or both");
      size_t start = 0;
      while (start <= a.size()) {
        const size_t comma = a.find(',', start);
        std::string_view part = trim(a.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
        for (std::string_view prefix : {"dtype=", "device="}) {
          if (part.substr(0, prefix.size()) == prefix) part = trim(part.substr(prefix.size()));
        }
        if (part.size() >= 2 && (part.front() == '\'' || part.front() == '"') && part.back() == part.front()) {
          part = part.substr(1, part.size() - 2);
        }
        if (part.substr(0, 6) == "torch.") part.remove_prefix(6);
        if (auto dt = dtypeName(part)) {
          t = t.to(*dt);
        } else {
          std::optional<Device> device;
          try {
            device = Device(std::string(part));
          } catch (const Error&) {
            STRATA_FAIL(Value, "'", shortened(whole), "': .to(", a, "): '", part,
                        "' is neither a dtype (f16, float32, int64, ...) nor a device (cpu, meta, cuda)");
          }
          t = t.to(*device);
        }
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else if (cast != nullptr) {
      noArgs();
      t = t.to(*cast);
    } else if (name == "t" || name == "T") {
      if (called) noArgs();
      t = t.dim() < 2 ? t : ops::t(t);
    } else if (name == "mT") {
      STRATA_CHECK(t.dim() >= 2, Value, "'", shortened(whole), "': .mT needs at least 2 dims");
      t = t.transpose(-2, -1);
    } else if (name == "transpose") {
      const auto d = count(ints(), 2);
      t = t.transpose(d[0], d[1]);
    } else if (name == "permute") {
      t = t.permute(ints());
    } else if (name == "unsqueeze") {
      t = t.unsqueeze(count(ints(), 1)[0]);
    } else if (name == "squeeze") {
      const auto d = ints();
      STRATA_CHECK(d.size() <= 1, Value, "'", shortened(whole), "': .squeeze() takes at most one dim");
      t = d.empty() ? ops::squeeze(t) : ops::squeeze(t, d[0]);
    } else if (name == "expand") {
      t = ops::expand(t, ints());
    } else if (name == "narrow") {
      const auto d = count(ints(), 3);
      t = ops::narrow(t, d[0], d[1], d[2]);
    } else if (name == "select") {
      const auto d = count(ints(), 2);
      t = t.select(d[0], d[1]);
    } else if (name == "contiguous" || name == "clone" || name == "detach") {
      noArgs();
      t = name == "contiguous" ? t.contiguous() : name == "clone" ? t.clone() : t.detach();
    } else if (name == "requires_grad_") {
      const std::string_view a = trim(args);
      const auto b = a.empty() ? std::optional<bool>(true) : asBool(a.substr(0, 14) == "requires_grad=" ? a.substr(14) : a);
      STRATA_CHECK(b.has_value(), Value, "'", shortened(whole), "': .requires_grad_(", a, "): expected True or False");
      t.set_requires_grad(*b);
    } else {
      STRATA_FAIL(Value, "'", shortened(whole), "': unknown method '.", name, "' (", kLiteralMethods, ")");
    }
    STRATA_CHECK(t.numel() <= max_elements_, Value, "'", shortened(whole), "': more than ", max_elements_,
                 " elements, the most a command-line tensor literal may have");
    STRATA_CHECK(t.dim() <= static_cast<int64_t>(kMaxLiteralDims), Value, "'", shortened(whole), "': .", name,
                 "(...) makes ", t.dim(), " dims (a tensor literal has at most ", kMaxLiteralDims, " dims)");
  }
  return t;
}

IValue LiteralParser::parse(std::string_view text, const Type& type) {
  const std::string_view s = trim(text);
  auto fail = [&](const char* what) -> IValue {
    STRATA_FAIL(Value, "cannot read '", shortened(text), "' as ", what);
  };
  switch (type.kind()) {
    case TypeKind::Optional:
      if (isNone(s)) return IValue();
      return parse(s, *type.element());
    case TypeKind::Tensor:
      return parseTensor(s);
    case TypeKind::Int:
    case TypeKind::SymInt:
      if (auto v = asInt(s)) return *v;
      return fail("an int");
    case TypeKind::Float:
    case TypeKind::SymFloat:
      if (auto v = asDouble(s)) return *v;
      return fail("a float");
    case TypeKind::Bool:
    case TypeKind::SymBool:
      if (auto v = asBool(s)) return *v;
      return fail("a bool (true or false)");
    case TypeKind::Str:
      if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) {
        return std::string(s.substr(1, s.size() - 2));
      }
      return std::string(s);
    case TypeKind::Scalar:
      if (auto v = asBool(s)) return *v;
      if (auto v = asInt(s)) return *v;
      if (auto v = asDouble(s)) return *v;
      return fail("a Scalar (a number or a bool)");
    case TypeKind::ScalarType:
      if (auto t = dtypeName(s)) return *t;
      return fail("a dtype (float32, f16, int64, bool, ...)");
    case TypeKind::Device:
      return Device(s);
    case TypeKind::List: {
      const Type& e = *type.element();
      if (s.empty() || s.front() != '[') {
        if (e.kind() == TypeKind::Int || e.kind() == TypeKind::SymInt) {
          if (auto v = asInt(s)) return std::vector<int64_t>{*v};  // int[N] given one int
        }
        return fail(("a list " + type.str() + " in [ ]").c_str());
      }
      const auto parts = splitList(s, text);
      if (e.kind() == TypeKind::Int || e.kind() == TypeKind::SymInt) {
        std::vector<int64_t> v;
        for (auto p : parts) v.push_back(parse(p, e).toInt());
        return v;
      }
      if (e.valueKind() == TypeKind::Float) {
        std::vector<double> v;
        for (auto p : parts) v.push_back(parse(p, e).toDouble());
        return v;
      }
      if (e.valueKind() == TypeKind::Bool) {
        std::vector<bool> v;
        for (auto p : parts) v.push_back(parse(p, e).toBool());
        return v;
      }
      if (e.kind() == TypeKind::Tensor) {
        std::vector<Tensor> v;
        for (auto p : parts) v.push_back(parseTensor(p));
        return v;
      }
      std::vector<IValue> v;
      for (auto p : parts) v.push_back(parse(p, e));
      return v;
    }
    default: {
      // No type to go by: the most specific reading.
      if (isNone(s)) return IValue();
      if (auto v = asBool(s)) return *v;
      if (auto v = asInt(s)) return *v;
      if (auto v = asDouble(s)) return *v;
      try {
        return parseTensor(s);
      } catch (const Error&) {
        return std::string(s);
      }
    }
  }
}


}  // namespace strata::host
