// libFuzzer target for boxed calls: a random stack against a random real operator
// (every operator the dispatcher knows, core:: included) through callBoxed. The
// stack is built from the schema, then bent: wrong types, missing or extra values,
// extreme integers, NaNs, empty, meta, strided and requires-grad tensors. The call
// must succeed (leaving one value per return) or throw strata::Error; anything else,
// and any sanitizer report, is a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <sstream>
#include <typeinfo>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "strata/dispatcher.h"
#include "strata/modes/autograd.h"
#include "strata/ops.h"
#include "strata/tensor.h"

namespace strata::fuzz {
namespace {

const ScalarType kDtypes[] = {ScalarType::Float, ScalarType::Double, ScalarType::Long, ScalarType::Int,
                              ScalarType::Half,  ScalarType::BFloat16, ScalarType::Bool, ScalarType::Byte,
                              ScalarType::Char};

int64_t anInt(Input& in) {
  static const int64_t kExtreme[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                     int64_t{1} << 62, -(int64_t{1} << 40), int64_t{1} << 31};
  const uint8_t b = in.byte();
  if (b < 240) return static_cast<int64_t>(b % 12) - 3;  // -3..8: dims, sizes, indices
  return kExtreme[b % std::size(kExtreme)];
}

double aDouble(Input& in) {
  static const double kSpecial[] = {0.0, -0.0, 1.0, -1.5, 1e300, -1e-300, std::numeric_limits<double>::infinity(),
                                    std::numeric_limits<double>::quiet_NaN()};
  const uint8_t b = in.byte();
  return b < 200 ? static_cast<double>(b % 20) / 4 - 2 : kSpecial[b % std::size(kSpecial)];
}

Tensor aTensor(Input& in) {
  const uint8_t shape = in.byte();
  if (shape == 255) return Tensor();  // undefined
  std::vector<int64_t> sizes(shape % 4);
  for (auto& s : sizes) s = in.byte() % 5;
  const ScalarType dtype = kDtypes[in.pick(std::size(kDtypes))];
  const uint8_t how = in.byte();
  const Device device = (how & 3) == 3 ? kMeta : kCPU;
  Tensor t = ops::rand(sizes, ScalarType::Double, device);
  if (device == kCPU) t = ops::sub(ops::mul(t, 8.0), 4.0);
  t = t.to(dtype);
  if ((how & 4) && t.dim() >= 2) t = t.transpose(0, 1);                        // not contiguous
  if ((how & 8) && t.dim() >= 1 && t.size(0) > 1) t = t.slice(0, 0, t.size(0), 2);  // strided
  if ((how & 16) && isFloatingType(dtype)) t.set_requires_grad(true);
  return t;
}

IValue valueOf(const Type& type, Input& in, int depth);

IValue aList(const Type& element, Input& in, int depth) {
  const size_t n = in.pick(5);
  switch (element.valueKind()) {
    case TypeKind::Int:
    case TypeKind::SymInt: {
      std::vector<int64_t> v(n);
      for (auto& x : v) x = anInt(in);
      return IValue(std::move(v));
    }
    case TypeKind::Float: {
      std::vector<double> v(n);
      for (auto& x : v) x = aDouble(in);
      return IValue(std::move(v));
    }
    case TypeKind::Bool: {
      std::vector<bool> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = in.flag();
      return IValue(std::move(v));
    }
    case TypeKind::Tensor: {
      std::vector<Tensor> v(n);
      for (auto& x : v) x = aTensor(in);
      return IValue(std::move(v));
    }
    default: {
      std::vector<IValue> v;
      for (size_t i = 0; i < n; ++i) v.push_back(valueOf(element, in, depth + 1));
      return IValue(std::move(v));
    }
  }
}

// A value of `type`, or now and then one of another type.
IValue valueOf(const Type& type, Input& in, int depth) {
  const uint8_t bend = in.byte();
  if (bend >= 248 || depth > 3) {
    switch (bend % 5) {
      case 0: return IValue();
      case 1: return IValue(anInt(in));
      case 2: return IValue(aDouble(in));
      case 3: return IValue(std::string("x"));
      default: return IValue(aTensor(in));
    }
  }
  switch (type.valueKind()) {
    case TypeKind::Tensor: return IValue(aTensor(in));
    case TypeKind::Int:
    case TypeKind::SymInt:
    case TypeKind::Layout:
    case TypeKind::MemoryFormat: return IValue(anInt(in));
    case TypeKind::Float: return IValue(aDouble(in));
    case TypeKind::Bool: return IValue(in.flag());
    case TypeKind::Str: return IValue(std::string(in.pick(4), 'a'));
    case TypeKind::Scalar:
      switch (in.pick(3)) {
        case 0: return IValue(anInt(in));
        case 1: return IValue(aDouble(in));
        default: return IValue(in.flag());
      }
    case TypeKind::ScalarType:
      if (in.flag()) return IValue(kDtypes[in.pick(std::size(kDtypes))]);
      return IValue(anInt(in));  // as an int, maybe not a dtype at all
    case TypeKind::Device:
      switch (in.pick(3)) {
        case 0: return IValue(kCPU);
        case 1: return IValue(kMeta);
        default: return IValue(Device(DeviceType::CUDA, 0));
      }
    case TypeKind::List: return aList(*type.element(), in, depth);
    case TypeKind::Optional: return in.flag() ? IValue() : valueOf(*type.element(), in, depth + 1);
    default: return IValue();
  }
}

std::vector<OperatorHandle> allOps() {
  modes::initialize_autograd();  // the autograd layer, as a host has it
  Dispatcher& d = Dispatcher::singleton();
  std::vector<OperatorHandle> ops;
  for (const OperatorName& name : d.operatorNames()) {
    if (auto op = d.findSchema(name)) ops.push_back(*op);
  }
  return ops;
}

}  // namespace
}  // namespace strata::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const std::vector<OperatorHandle> ops = fuzz::allOps();
  fuzz::Input in(data, size);
  const OperatorHandle& op = ops[in.pick(ops.size())];
  const FunctionSchema& schema = op.schema();
  Stack stack;
  const uint8_t arity = in.byte();
  size_t n = schema.arguments().size();
  if (arity >= 240 && n > 0) n -= 1 + arity % n;  // too few
  for (size_t i = 0; i < n; ++i) stack.push_back(fuzz::valueOf(*schema.arguments()[i].type, in, 0));
  if (arity == 239) stack.push_back(IValue(1.0));  // one too many
  try {
    op.callBoxed(stack);
    if (!schema.is_varret() && stack.size() != schema.returns().size()) {
      std::fprintf(stderr, "%s left %zu values for %zu returns\n", schema.str().c_str(), stack.size(),
                   schema.returns().size());
      std::abort();
    }
    std::ostringstream printed;  // printing a result never crashes either
    for (const IValue& v : stack) printed << v;
  } catch (const Error&) {
    // A clean refusal.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw a %s, not a strata::Error: %s\n", schema.str().c_str(), typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}
