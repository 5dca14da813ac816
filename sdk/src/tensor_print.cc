// Printing tensors the way torch prints them, in short: nested brackets, floats
// with a trailing '.' when every value is whole and four decimals otherwise,
// dtype and device noted when they are not the defaults.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "strata/tensor.h"
#include "tensor_internal.h"

namespace strata {

namespace {

constexpr int64_t kSummarizeAbove = 1000;  // elements; torch's print threshold
constexpr int64_t kEdgeItems = 3;
// Values are printed one nested level per dim; past this many dims only the size is
// (a tensor of 40,000 dims of size 1 would otherwise nest 40,000 calls deep).
constexpr int64_t kMaxPrintedDims = 64;

struct Formatter {
  bool whole = true;  // every float value is an integer (prints "1." not "1.0000")
  size_t width = 0;   // every value is right-aligned to the widest, as torch does

  std::string operator()(double v) const {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    if (whole) std::snprintf(buf, sizeof buf, "%.0f.", v);
    else std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }
  // Integral dtypes print exactly, from int64 (a double would round above 2^53).
  std::string operator()(int64_t v) const { return std::to_string(v); }
};

template <typename T>
void printDim(std::ostringstream& os, const Tensor& t, const T* values, int64_t dim, int64_t offset,
              const std::vector<int64_t>& strides, const Formatter& fmt, bool summarize, bool is_bool) {
  if (dim == t.dim()) {
    const std::string v = is_bool ? (values[offset] != 0 ? "True" : "False") : fmt(values[offset]);
    if (v.size() < fmt.width) os << std::string(fmt.width - v.size(), ' ');
    os << v;
    return;
  }
  const int64_t n = t.sizes()[dim];
  const bool inner = dim + 1 == t.dim();
  // torch's separators: ", " between values; between rows a comma, one newline per
  // dim below (a blank line between matrices), and the indent of "tensor([".
  auto separate = [&] {
    if (inner) os << ", ";
    else os << "," << std::string(static_cast<size_t>(t.dim() - dim - 1), '\n')
            << std::string(static_cast<size_t>(dim + 8), ' ');
  };
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) separate();
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (inner ? " ..." : "...");  // torch: "1., 1., 1.,  ..., 1." and a "...," row
      separate();
      i = n - kEdgeItems;
    }
    printDim(os, t, values, dim + 1, offset + i * strides[dim], strides, fmt, summarize, is_bool);
  }
  os << "]";
}

// Calls f(offset) for each element printDim prints, in order.
template <typename F>
void forEachPrinted(const Tensor& t, int64_t dim, int64_t offset, const std::vector<int64_t>& strides, bool summarize,
                    const F& f) {
  if (dim == t.dim()) {
    f(offset);
    return;
  }
  const int64_t n = t.sizes()[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    forEachPrinted(t, dim + 1, offset + i * strides[dim], strides, summarize, f);
  }
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const bool fake = key_set().has(DispatchKey::Fake);
  if (wrapper() != nullptr && !fake) return wrapper()->str();
  std::ostringstream os;
  std::string suffix;
  if (dtype() != ScalarType::Float && dtype() != ScalarType::Long && dtype() != ScalarType::Bool) {
    suffix += std::string(", dtype=") + toString(dtype());
  }
  if (!is_cpu()) suffix = ", device='" + device().str() + "'" + suffix;
  // As torch: a result of a differentiable op names its node, a leaf says it requires grad.
  if (const std::string fn = grad_fn_name(); !fn.empty()) suffix += ", grad_fn=<" + fn + ">";
  else if (requires_grad()) suffix += ", requires_grad=True";
  if (is_meta() || fake || dim() > kMaxPrintedDims) {
    // A fake tensor prints as PyTorch prints one: FakeTensor(..., size=(2, 3)), its
    // device and dtype when they are not the defaults; sizes may be symbolic (u0).
    // A tensor with more dims than kMaxPrintedDims prints so too.
    os << (fake ? "FakeTensor" : "tensor") << "(..., size=(";
    for (int64_t d = 0; d < dim(); ++d) os << (d ? ", " : "") << sym::str(sizes()[d]);
    os << (dim() == 1 ? ",)" : ")") << suffix << ")";
    return os.str();
  }
  const bool floating = isFloatingType(dtype());
  const Tensor data = requires_grad() ? detach() : *this;  // printing is not part of the graph
  const Tensor host = data.to(kCPU).contiguous().to(floating ? ScalarType::Double : ScalarType::Long);
  // As torch's _Formatter, the format is chosen from what is printed (the edge items
  // when summarizing), not from every value: 12 M values took seconds to format.
  const std::vector<int64_t> strides(host.strides().begin(), host.strides().end());
  const bool summarize = numel() > kSummarizeAbove;
  const bool is_bool = dtype() == ScalarType::Bool;
  Formatter fmt;
  // Only when there is something to print: with no elements a size may still be huge
  // (empty({1 << 40, 0})), and walking it would take for ever.
  if (floating && host.numel() > 0) {
    const double* values = host.data_ptr<double>();
    forEachPrinted(host, 0, 0, strides, summarize, [&](int64_t i) {
      if (std::isfinite(values[i]) && values[i] != std::trunc(values[i])) fmt.whole = false;
    });
  }
  if (host.numel() > 1) {
    auto widest = [&](const auto* values) {
      forEachPrinted(host, 0, 0, strides, summarize, [&](int64_t i) {
        const size_t w = is_bool ? (values[i] != 0 ? 4 : 5) : fmt(values[i]).size();
        fmt.width = std::max(fmt.width, w);
      });
    };
    if (floating) widest(host.data_ptr<double>());
    else widest(host.data_ptr<int64_t>());
  }
  os << "tensor(";
  if (numel() == 0) {
    os << "[]";
  } else {
    if (floating) printDim(os, host, host.data_ptr<double>(), 0, 0, strides, fmt, summarize, is_bool);
    else printDim(os, host, host.data_ptr<int64_t>(), 0, 0, strides, fmt, summarize, is_bool);
  }
  os << suffix << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace strata
