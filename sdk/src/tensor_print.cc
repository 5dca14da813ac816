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
  bool sci = false;   // scientific notation ("3.0000e-05"), chosen as torch's _Formatter does
  size_t width = 0;   // every value is right-aligned to the widest, as torch does

  std::string operator()(double v) const {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    if (sci) std::snprintf(buf, sizeof buf, "%.4e", v);
    else if (whole) std::snprintf(buf, sizeof buf, "%.0f.", v);
    else std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }
  // Integral dtypes print exactly, from int64 (a double would round above 2^53).
  std::string operator()(int64_t v) const { return std::to_string(v); }
};

// Which element of the printed data stands for index i of a dim of n elements: when
// summarizing, the data holds only the first and last kEdgeItems of a longer dim
// (torch's get_summarized_data), so the last ones shift down.
inline int64_t printedIndex(int64_t i, int64_t n, bool summarize) {
  return summarize && n > 2 * kEdgeItems && i >= n - kEdgeItems ? i - (n - 2 * kEdgeItems) : i;
}

// sizes are the tensor's; values/strides the printed data's (see printedData).
template <typename T>
void printDim(std::ostringstream& os, const std::vector<int64_t>& sizes, const T* values, int64_t dim,
              int64_t offset, const std::vector<int64_t>& strides, const Formatter& fmt, bool summarize,
              bool is_bool) {
  const auto ndim = static_cast<int64_t>(sizes.size());
  if (dim == ndim) {
    const std::string v = is_bool ? (values[offset] != 0 ? "True" : "False") : fmt(values[offset]);
    if (v.size() < fmt.width) os << std::string(fmt.width - v.size(), ' ');
    os << v;
    return;
  }
  const int64_t n = sizes[static_cast<size_t>(dim)];
  const bool inner = dim + 1 == ndim;
  // torch's separators: ", " between values; between rows a comma, one newline per
  // dim below (a blank line between matrices), and the indent of "tensor([".
  auto separate = [&] {
    if (inner) os << ", ";
    else os << "," << std::string(static_cast<size_t>(ndim - dim - 1), '\n')
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
    printDim(os, sizes, values, dim + 1, offset + printedIndex(i, n, summarize) * strides[static_cast<size_t>(dim)],
             strides, fmt, summarize, is_bool);
  }
  os << "]";
}

// Calls f(index) for each element of the tensor that printDim prints, in order,
// index counting the tensor's own elements along sizes/strides (skipping the
// summarized middles).
template <typename F>
void forEachPrinted(const std::vector<int64_t>& sizes, int64_t dim, int64_t offset,
                    const std::vector<int64_t>& strides, bool summarize, const F& f) {
  if (dim == static_cast<int64_t>(sizes.size())) {
    f(offset);
    return;
  }
  const int64_t n = sizes[static_cast<size_t>(dim)];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    forEachPrinted(sizes, dim + 1, offset + i * strides[static_cast<size_t>(dim)], strides, summarize, f);
  }
}

// The elements that are printed, in a contiguous CPU tensor of Double (floating
// dtypes) or Long (the others): when summarizing, each dim longer than 2*kEdgeItems
// keeps its first and last kEdgeItems. Only those are read and converted, as torch
// does: printing arange of 716 M elements once converted all of them (5.7 GB).
Tensor printedData(const Tensor& data, bool summarize, bool floating) {
  const ScalarType as = floating ? ScalarType::Double : ScalarType::Long;
  if (!summarize) return data.to(kCPU).contiguous().to(as);
  // Another device's data comes to the host as it is (one copy, no conversion); only
  // the edges are then read from it.
  const Tensor src = data.is_cpu() ? data : data.to(kCPU);
  std::vector<int64_t> sizes(src.sizes().begin(), src.sizes().end());
  std::vector<int64_t> printed(sizes);
  for (int64_t& s : printed) s = std::min<int64_t>(s, 2 * kEdgeItems);
  Tensor out = empty(printed, TensorOptions(as));
  const std::vector<int64_t> strides(src.strides().begin(), src.strides().end());
  STRATA_DISPATCH_ALL_TYPES(src.dtype(), "print", [&] {
    const auto* in = static_cast<const scalar_t*>(src.data_ptr());
    int64_t k = 0;
    if (floating) {
      double* o = out.data_ptr<double>();
      forEachPrinted(sizes, 0, 0, strides, true, [&](int64_t i) { o[k++] = detail::convertElement<double>(in[i]); });
    } else {
      int64_t* o = out.data_ptr<int64_t>();
      forEachPrinted(sizes, 0, 0, strides, true, [&](int64_t i) { o[k++] = detail::convertElement<int64_t>(in[i]); });
    }
  });
  return out;
}

// How many values printing shows, saturating; a tensor past kMaxPrintedValues (say
// 9 expanded dims of 7) prints its size only, as one past kMaxPrintedDims does.
constexpr int64_t kMaxPrintedValues = int64_t{1} << 22;
int64_t printedCount(const Tensor& t, bool summarize) {
  int64_t count = 1;
  for (int64_t s : t.sizes()) {
    const int64_t shown = summarize ? std::min<int64_t>(s, 2 * kEdgeItems) : s;
    if (__builtin_mul_overflow(count, shown, &count) || count > kMaxPrintedValues) return kMaxPrintedValues + 1;
  }
  return count;
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const bool fake = key_set().has(DispatchKey::Fake);
  if (wrapper() != nullptr && !fake) return wrapper()->str();
  std::ostringstream os;
  std::string suffix;
  if (!is_cpu()) suffix += ", device='" + device().str() + "'";
  // As torch, an empty tensor with data names its shape unless it is (0,), and its
  // dtype unless it is the default float: it has no values to tell an int64 one by.
  const bool empty_data = numel() == 0 && !is_meta() && !fake;
  if (empty_data && dim() != 1 && dim() <= kMaxPrintedDims) {  // past that, the size is printed below
    suffix += ", size=(";
    for (int64_t d = 0; d < dim(); ++d) suffix += (d ? ", " : "") + sym::str(sizes()[d]);
    suffix += ")";
  }
  if (dtype() != ScalarType::Float && (empty_data || (dtype() != ScalarType::Long && dtype() != ScalarType::Bool))) {
    suffix += std::string(", dtype=") + toString(dtype());
  }
  // As torch: a result of a differentiable op names its node, a leaf says it requires grad.
  if (const std::string fn = grad_fn_name(); !fn.empty()) suffix += ", grad_fn=<" + fn + ">";
  else if (requires_grad()) suffix += ", requires_grad=True";
  const bool summarize = !is_meta() && !fake && numel() > kSummarizeAbove;
  if (is_meta() || fake || dim() > kMaxPrintedDims ||
      (numel() > 0 && printedCount(*this, summarize) > kMaxPrintedValues)) {
    // A fake tensor prints as PyTorch prints one: FakeTensor(..., size=(2, 3)), its
    // device and dtype when they are not the defaults; sizes may be symbolic (u0).
    // A tensor with more dims than kMaxPrintedDims, or more values to show than
    // kMaxPrintedValues, prints so too.
    os << (fake ? "FakeTensor" : "tensor") << "(..., size=(";
    for (int64_t d = 0; d < dim(); ++d) os << (d ? ", " : "") << sym::str(sizes()[d]);
    os << (dim() == 1 ? ",)" : ")") << suffix << ")";
    return os.str();
  }
  const bool floating = isFloatingType(dtype());
  const Tensor data = requires_grad() ? detach() : *this;  // printing is not part of the graph
  const std::vector<int64_t> sizes(data.sizes().begin(), data.sizes().end());
  // Only when there is something to print: with no elements a size may still be huge
  // (empty({1 << 40, 0})), and walking it would take for ever.
  const Tensor host = numel() > 0 ? printedData(data, summarize, floating) : Tensor();
  const std::vector<int64_t> strides = host.defined() ? std::vector<int64_t>(host.strides().begin(), host.strides().end())
                                                      : std::vector<int64_t>();
  // What forEachPrinted walks: the printed data's own (reduced) sizes, every element.
  const std::vector<int64_t> host_sizes = host.defined() ? std::vector<int64_t>(host.sizes().begin(), host.sizes().end())
                                                         : std::vector<int64_t>();
  const bool is_bool = dtype() == ScalarType::Bool;
  Formatter fmt;
  // As torch's _Formatter, the format is chosen from what is printed (the edge items
  // when summarizing), not from every value: 12 M values took seconds to format.
  if (floating && host.defined()) {
    const double* values = host.data_ptr<double>();
    double lo = INFINITY, hi = 0;  // of the finite non-zero magnitudes
    forEachPrinted(host_sizes, 0, 0, strides, false, [&](int64_t i) {
      const double v = values[i];
      if (!std::isfinite(v) || v == 0) return;
      if (v != std::trunc(v)) fmt.whole = false;
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
    });
    // torch: scientific when the magnitudes span more than 1000x, or one is above 1e8,
    // or (not all whole) one is below 1e-4; four decimals in each mode.
    if (hi > 0) fmt.sci = hi / lo > 1000 || hi > 1e8 || (!fmt.whole && lo < 1e-4);
  }
  if (numel() > 1) {
    auto widest = [&](const auto* values) {
      forEachPrinted(host_sizes, 0, 0, strides, false, [&](int64_t i) {
        const size_t w = is_bool ? (values[i] != 0 ? 4 : 5) : fmt(values[i]).size();
        fmt.width = std::max(fmt.width, w);
      });
    };
    if (floating) widest(host.data_ptr<double>());
    else widest(host.data_ptr<int64_t>());
  }
  os << "tensor(";
  if (numel() == 0) {
    // As torch: the shape unless it is (0,), and the dtype unless it is the default
    // float (an empty tensor has no values to tell an int64 one by).
    os << "[]";
  } else {
    if (floating) printDim(os, sizes, host.data_ptr<double>(), 0, 0, strides, fmt, summarize, is_bool);
    else printDim(os, sizes, host.data_ptr<int64_t>(), 0, 0, strides, fmt, summarize, is_bool);
  }
  os << suffix << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace strata
