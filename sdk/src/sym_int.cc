// Symbolic sizes: the expression table and its arithmetic. See Note [Symbolic sizes].
#include "strata/sym_int.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include "strata/error.h"

namespace strata::sym {

namespace {

// A polynomial over symbols: monomial (sorted symbol ids, repeated for powers) ->
// coefficient; the constant term has the empty monomial. No zero coefficients.
using Monomial = std::vector<uint32_t>;
using Poly = std::map<Monomial, int64_t>;

struct Node {
  Poly poly;
  std::string name;  // symbols only
  Range range;       // symbols only
};

constexpr uint64_t kMaxId = (uint64_t{1} << 47) - 1;

struct Table {
  std::mutex mu;
  std::deque<Node> nodes;
  std::unordered_map<std::string, uint32_t> interned;  // canonical key -> node id
};

Table& table() {
  static Table* t = new Table();  // leaked: sizes may be read in static destructors
  return *t;
}

int64_t encode(uint64_t id) {
  return static_cast<int64_t>((uint64_t{1} << 63) | (id << 16) | kTag);
}
uint64_t idOf(int64_t v) { return (static_cast<uint64_t>(v) >> 16) & kMaxId; }

int64_t checkedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  STRATA_CHECK(!__builtin_add_overflow(a, b, &r), Value, "size arithmetic overflows: ", a, " + ", b);
  return r;
}
int64_t checkedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  STRATA_CHECK(!__builtin_mul_overflow(a, b, &r), Value, "size arithmetic overflows: ", a, " * ", b);
  return r;
}

// Caller holds the lock.
const Node& nodeOf(Table& t, int64_t v) {
  const uint64_t id = idOf(v);
  STRATA_CHECK(id < t.nodes.size(), Value, "the size ", v,
               " is not a symbolic size this process made (plain integer arithmetic on a symbolic size? "
               "use SymInt or sym::add/mul; Note [Symbolic sizes])");
  return t.nodes[id];
}

Poly polyOf(Table& t, int64_t v) {
  if (!isSymbolic(v)) {
    Poly p;
    if (v != 0) p[{}] = v;
    return p;
  }
  return nodeOf(t, v).poly;
}

std::string keyOf(const Poly& p) {
  std::string k;
  for (const auto& [m, c] : p) {
    k += std::to_string(c);
    for (uint32_t s : m) k += "*" + std::to_string(s);
    k += ";";
  }
  return k;
}

// A concrete value when p is a constant, else the interned node's value.
int64_t intern(Table& t, Poly p) {
  if (p.empty()) return 0;
  if (p.size() == 1 && p.begin()->first.empty()) return p.begin()->second;
  const std::string key = keyOf(p);
  if (auto it = t.interned.find(key); it != t.interned.end()) return encode(it->second);
  STRATA_CHECK(t.nodes.size() < kMaxId, Value, "too many symbolic sizes in this process");
  const auto id = static_cast<uint32_t>(t.nodes.size());
  t.nodes.push_back(Node{std::move(p), "", {}});
  t.interned.emplace(key, id);
  return encode(id);
}

void addInto(Poly& acc, const Monomial& m, int64_t c) {
  int64_t& slot = acc[m];
  slot = checkedAdd(slot, c);
  if (slot == 0) acc.erase(m);
}

int64_t satMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min() : kInf;
  return r;
}
int64_t satAdd(int64_t a, int64_t b) {
  if (a == kInf || b == kInf) return kInf;
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return a < 0 ? std::numeric_limits<int64_t>::min() : kInf;
  return r;
}

// Interval arithmetic over the symbols' ranges (all non-negative).
Range rangeOf(Table& t, const Poly& p) {
  Range r{0, 0};
  for (const auto& [m, c] : p) {
    int64_t lo = 1, hi = 1;
    for (uint32_t s : m) {
      const Range& sr = t.nodes[s].range;
      lo = satMul(lo, sr.min);
      hi = hi == kInf || sr.max == kInf ? (hi == 0 || sr.max == 0 ? 0 : kInf) : satMul(hi, sr.max);
    }
    int64_t tlo = 0, thi = 0;
    if (c >= 0) {
      tlo = satMul(lo, c);
      thi = hi == kInf ? kInf : satMul(hi, c);
    } else {
      tlo = hi == kInf ? std::numeric_limits<int64_t>::min() : satMul(hi, c);
      thi = satMul(lo, c);
    }
    r.min = r.min == std::numeric_limits<int64_t>::min() || tlo == std::numeric_limits<int64_t>::min()
                ? std::numeric_limits<int64_t>::min()
                : satAdd(r.min, tlo);
    r.max = satAdd(r.max, thi);
  }
  return r;
}

std::string polyStr(Table& t, const Poly& p) {
  if (p.empty()) return "0";
  std::string s;
  // Highest degree first, the constant last: "2*u0*u1 + u0 + 3".
  std::vector<std::pair<Monomial, int64_t>> terms(p.begin(), p.end());
  std::stable_sort(terms.begin(), terms.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  bool first = true;
  for (const auto& [m, c] : terms) {
    int64_t coeff = c;
    if (!first) {
      s += coeff < 0 ? " - " : " + ";
      if (coeff < 0) coeff = -coeff;
    } else if (coeff < 0 && !m.empty()) {
      s += "-";
      coeff = -coeff;
    }
    first = false;
    if (m.empty()) {
      s += std::to_string(coeff);
      continue;
    }
    if (coeff != 1) s += std::to_string(coeff) + "*";
    for (size_t i = 0; i < m.size(); ++i) {
      if (i) s += "*";
      s += t.nodes[m[i]].name;
    }
  }
  return s;
}

std::string maxStr(int64_t m) { return m == kInf ? "inf" : std::to_string(m); }

void symbolsOf(const Poly& p, std::vector<uint32_t>& out) {
  for (const auto& [m, c] : p) {
    for (uint32_t s : m) {
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
  }
}

}  // namespace

std::string Range::str() const { return "[" + std::to_string(min) + ", " + maxStr(max) + "]"; }

int64_t newSymbol(std::string name, int64_t min, int64_t max) {
  STRATA_CHECK(min >= 0, Value, "new_dynamic_size: min must be >= 0 (a size is never negative), got ", min);
  STRATA_CHECK(max >= min, Value, "new_dynamic_size: max (", max, ") must be >= min (", min, ")");
  if (min == max) return min;  // a range of one value is that value
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  STRATA_CHECK(t.nodes.size() < kMaxId, Value, "too many symbolic sizes in this process");
  const auto id = static_cast<uint32_t>(t.nodes.size());
  Poly p;
  p[{id}] = 1;
  t.nodes.push_back(Node{p, std::move(name), Range{min, max}});
  t.interned.emplace(keyOf(p), id);
  return encode(id);
}

int64_t add(int64_t a, int64_t b) {
  if (!isSymbolic(a) && !isSymbolic(b)) return checkedAdd(a, b);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  Poly p = polyOf(t, a);
  for (const auto& [m, c] : polyOf(t, b)) addInto(p, m, c);
  return intern(t, std::move(p));
}

int64_t sub(int64_t a, int64_t b) {
  if (!isSymbolic(a) && !isSymbolic(b)) {
    int64_t r = 0;
    STRATA_CHECK(!__builtin_sub_overflow(a, b, &r), Value, "size arithmetic overflows: ", a, " - ", b);
    return r;
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  Poly p = polyOf(t, a);
  for (const auto& [m, c] : polyOf(t, b)) addInto(p, m, checkedMul(c, -1));
  return intern(t, std::move(p));
}

int64_t mul(int64_t a, int64_t b) {
  if (!isSymbolic(a) && !isSymbolic(b)) return checkedMul(a, b);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const Poly pa = polyOf(t, a);
  const Poly pb = polyOf(t, b);
  Poly p;
  for (const auto& [ma, ca] : pa) {
    for (const auto& [mb, cb] : pb) {
      Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end());
      addInto(p, m, checkedMul(ca, cb));
    }
  }
  return intern(t, std::move(p));
}

std::optional<int64_t> divExact(int64_t a, int64_t b) {
  if (b == 0) return std::nullopt;
  if (!isSymbolic(a) && !isSymbolic(b)) {
    if (a % b != 0) return std::nullopt;
    return a / b;
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const Poly pa = polyOf(t, a);
  const Poly pb = polyOf(t, b);
  if (pb.size() != 1) return a == b ? std::optional<int64_t>(1) : std::nullopt;
  const auto& [mb, cb] = *pb.begin();
  Poly q;
  for (const auto& [ma, ca] : pa) {
    if (ca % cb != 0) return std::nullopt;
    // ma must contain mb (both sorted multisets).
    Monomial rest;
    size_t j = 0;
    for (uint32_t s : ma) {
      if (j < mb.size() && mb[j] == s) {
        ++j;
      } else {
        rest.push_back(s);
      }
    }
    if (j != mb.size()) return std::nullopt;
    addInto(q, rest, ca / cb);
  }
  return intern(t, std::move(q));
}

int64_t product(std::span<const int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n = mul(n, s);
  return n;
}

Range range(int64_t v) {
  if (!isSymbolic(v)) return Range{v, v};
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return rangeOf(t, nodeOf(t, v).poly);
}

std::string str(int64_t v) {
  if (!isSymbolic(v)) return std::to_string(v);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const uint64_t id = idOf(v);
  if (id >= t.nodes.size()) return std::to_string(v);
  return polyStr(t, t.nodes[id].poly);
}

std::string shapeStr(std::span<const int64_t> sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += str(sizes[i]);
  }
  return s + "]";
}

std::string rangesStr(std::span<const int64_t> values) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<uint32_t> syms;
  for (int64_t v : values) {
    if (isSymbolic(v) && idOf(v) < t.nodes.size()) symbolsOf(t.nodes[idOf(v)].poly, syms);
  }
  std::string s;
  for (uint32_t id : syms) {
    if (!s.empty()) s += ", ";
    s += t.nodes[id].name + " in " + t.nodes[id].range.str();
  }
  return s;
}

std::optional<bool> tryEq(int64_t a, int64_t b) {
  if (a == b) return true;
  if (!isSymbolic(a) && !isSymbolic(b)) return false;
  const Range r = range(sub(a, b));
  if (r.min > 0 || r.max < 0) return false;
  if (r.min == 0 && r.max == 0) return true;
  return std::nullopt;
}

std::optional<bool> tryLt(int64_t a, int64_t b) {
  if (!isSymbolic(a) && !isSymbolic(b)) return a < b;
  const Range r = range(sub(a, b));
  if (r.max != kInf && r.max < 0) return true;
  if (r.min >= 0) return false;
  return std::nullopt;
}

namespace {
[[noreturn]] void dataDependent(std::string_view what, int64_t a, const char* op, int64_t b) {
  const int64_t both[] = {a, b};
  STRATA_FAIL(Value, "data-dependent: cannot decide ", str(a), " ", op, " ", str(b), " (", rangesStr(both),
              ") for ", what,
              ": the answer depends on the data of the tensor the size came from. A fake implementation may "
              "only use what the ranges decide; give new_dynamic_size a range that decides it, or keep the "
              "symbolic size out of this check");
}
}  // namespace

bool eq(int64_t a, int64_t b, std::string_view what) {
  if (auto r = tryEq(a, b)) return *r;
  dataDependent(what, a, "==", b);
}

bool lt(int64_t a, int64_t b, std::string_view what) {
  if (auto r = tryLt(a, b)) return *r;
  dataDependent(what, a, "<", b);
}

}  // namespace strata::sym

namespace strata {

int64_t SymInt::expect_int() const {
  STRATA_CHECK(!is_symbolic(), Value, "expected a concrete size, got the symbolic size ", str(), " (",
               sym::rangesStr(std::span<const int64_t>(&v_, 1)), ")");
  return v_;
}

}  // namespace strata
