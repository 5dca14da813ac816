#include "strata/dispatcher.h"

#include <cxxabi.h>
#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <sstream>
#include <set>
#include <unordered_map>

#include "dispatch/grace_period.h"
#include "dispatch/operator_entry.h"
#include "strata/library.h"

namespace strata {

namespace detail {
__thread RawLocalDispatchKeySet tls_local_dispatch_key_set __attribute__((tls_model("initial-exec"))) = {0, 0};
std::atomic<int> g_dispatch_observers{0};
void registerBuiltins(std::vector<std::unique_ptr<Library>>& keep);  // builtin_library.cc
}  // namespace detail

// Note [Publishing dispatch table slots]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Calls read a slot (an atomic pointer to a KernelFunction) with an acquire load and
// no lock; every mutation (def, impl, fallback, their removal, a toggle) runs under
// the dispatcher's mutex, recomputes the affected slots and stores them with
// release. A slot always points at a valid kernel: a registration's own, the shared
// fallthrough kernel, or the shared "missing" kernel that raises the error. The
// non-fallthrough mask is stored after the slots; a call that reads the old mask
// with a new slot still runs a correct kernel (a fallthrough slot's kernel
// redispatches below itself).
//
// A call may still be running a kernel whose registration has just been removed, so
// a removed registration's KernelFunction (and the functor state it owns) is not
// freed on removal: it moves to a retired list, and the list (kernels and rule
// sets) is freed after a grace period, outside every lock: see Note [Grace periods]
// in grace_period.cc.

namespace {

[[noreturn]] void throwMissing(const OperatorHandle& op, DispatchKeySet ks);

void fallthroughBoxed(OperatorKernel*, const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
  op.redispatchBoxed(ks & keysBelow(ks.highestPriorityKey()), *stack);
}
void missingBoxed(OperatorKernel*, const OperatorHandle& op, DispatchKeySet ks, Stack*) { throwMissing(op, ks); }

}  // namespace

OperatorKernel::~OperatorKernel() = default;

std::string demangle(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && demangled != nullptr ? demangled : type.name();
  std::free(demangled);
  return out;
}

std::string CppSignature::name() const {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type_.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && demangled != nullptr ? demangled : type_.name();
  std::free(demangled);
  return out;
}

KernelFunction KernelFunction::makeInternal(InternalBoxedFn fn, Kind kind) {
  KernelFunction k;
  k.boxed_ = fn;
  k.kind_ = kind;
  return k;
}

KernelFunction KernelFunction::makeFallthrough() { return makeInternal(&fallthroughBoxed, Kind::Fallthrough); }

const char* KernelFunction::kindName(Kind k) {
  switch (k) {
    case Kind::Unboxed: return "unboxed";
    case Kind::Boxed: return "boxed";
    case Kind::Fallthrough: return "fallthrough";
    case Kind::Invalid: return "invalid";
  }
  return "invalid";
}

namespace detail::boxing {
void throwStackTooShort(size_t have, size_t need) {
  STRATA_FAIL(Value, "boxed call: the stack holds ", have, " values, the kernel takes ", need, " arguments");
}
void throwWrongReturnCount(const OperatorHandle& op, size_t have, size_t need) {
  STRATA_FAIL(Value, op.name(), ": the boxed kernel left ", have, " values on the stack, the schema returns ", need);
}
}  // namespace detail::boxing

// Keyed by mangled C++ signature: see inferredSchemaOf.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>()(s); }
};
using InferredSchemas = std::unordered_map<std::string, FunctionSchema, StringHash, std::equal_to<>>;

// The shared kernels every table may point at. Never freed: calls may race exit.
struct SharedKernels {
  KernelFunction missing;
  KernelFunction fallthrough;
};
static const SharedKernels& sharedKernels() {
  static const SharedKernels* k = [] {
    auto* s = new SharedKernels();
    s->fallthrough = KernelFunction::makeFallthrough();
    s->missing = KernelFunction::makeInternal(&missingBoxed, KernelFunction::Kind::Boxed);
    return s;
  }();
  return *k;
}

// ---------------------------------------------------------------------------
// Boxed argument checks.
//
// Note [Boxed argument checks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// callBoxed() is where untrusted values enter (the CLI, generic code), so it checks
// the stack against the schema before dispatching: too many values, a missing
// argument without a default, or a value of the wrong type is an Error(Type) that
// names the operator, the argument, its position, the type expected and the type
// given. Missing trailing arguments that have defaults are filled in. A few
// conversions are made in place, as PyTorch's argument parser makes them: an int
// where a float is expected, a single int for `int[N]`, a generic list of tensors
// for Tensor[]. Redispatches and unboxed calls are not checked again: their values
// come from checked calls or from C++ types the schema was checked against.

namespace {

bool isTensorLike(const Type& t) {
  switch (t.kind()) {
    case TypeKind::Tensor: return true;
    case TypeKind::Optional:
    case TypeKind::List: return t.element()->kind() == TypeKind::Tensor ||
                                (t.element()->kind() == TypeKind::Optional &&
                                 t.element()->element()->kind() == TypeKind::Tensor);
    default: return false;
  }
}

bool isIntKind(const Type& t) { return t.kind() == TypeKind::Int || t.isIntLike(); }

// Checks v against t, converting in place where allowed. `n` is the int[N] hint.
bool checkValue(const Type& t, IValue& v, std::optional<int32_t> n) {
  switch (t.kind()) {
    case TypeKind::Tensor: return v.isTensor();
    case TypeKind::Int:
    case TypeKind::SymInt:
    case TypeKind::Layout:
    case TypeKind::MemoryFormat: return v.isInt();
    case TypeKind::ScalarType: return v.isInt() ? isValidScalarTypeCode(v.toInt()) : v.isScalarType();
    case TypeKind::Float:
    case TypeKind::SymFloat:
      if (v.isInt()) v = IValue(static_cast<double>(v.toInt()));
      return v.isDouble();
    case TypeKind::Complex:
      if (v.isInt() || v.isDouble()) v = IValue(std::complex<double>(v.isInt() ? static_cast<double>(v.toInt()) : v.toDouble(), 0));
      return v.isComplex();
    case TypeKind::Bool:
    case TypeKind::SymBool: return v.isBool();
    case TypeKind::Str: return v.isString();
    case TypeKind::Scalar: return v.isScalar() || v.isComplex();
    case TypeKind::Device:
      if (v.isString()) {
        try {
          v = IValue(Device(v.toStringView()));
        } catch (const Error&) {
          return false;
        }
      }
      return v.isDevice();
    case TypeKind::NoneType: return v.isNone();
    case TypeKind::Optional: return v.isNone() || checkValue(*t.element(), v, n);
    case TypeKind::List: {
      const Type& e = *t.element();
      if (isIntKind(e)) {
        if (v.isInt() && n) v = IValue(std::vector<int64_t>(static_cast<size_t>(*n), v.toInt()));
        if (v.isGenericList() && v.toList().empty()) v = IValue(std::vector<int64_t>{});
        return v.isIntList();
      }
      if (e.valueKind() == TypeKind::Float) {
        if (v.isIntList()) v = IValue(std::vector<double>(v.toIntList().begin(), v.toIntList().end()));
        if (v.isGenericList() && v.toList().empty()) v = IValue(std::vector<double>{});
        return v.isDoubleList();
      }
      if (e.valueKind() == TypeKind::Bool) {
        if (v.isGenericList() && v.toList().empty()) v = IValue(std::vector<bool>{});
        return v.isBoolList();
      }
      if (e.kind() == TypeKind::Tensor) {
        if (v.isGenericList()) {
          std::vector<Tensor> ts;
          for (const IValue& x : v.toList()) {
            if (!x.isTensor()) return false;
            ts.push_back(x.toTensor());
          }
          v = IValue(std::move(ts));
        }
        return v.isTensorList();
      }
      if (v.isTensorList() || v.isIntList() || v.isDoubleList() || v.isBoolList()) {
        // A typed list where a generic one is expected (Tensor?[] given Tensor[], ...).
        std::vector<IValue> items;
        if (v.isTensorList()) for (const Tensor& x : v.toTensorList()) items.emplace_back(x);
        if (v.isIntList()) for (int64_t x : v.toIntList()) items.emplace_back(x);
        if (v.isDoubleList()) for (double x : v.toDoubleList()) items.emplace_back(x);
        if (v.isBoolList()) for (bool x : v.toBoolList()) items.emplace_back(x);
        v = IValue(std::move(items));
      }
      if (!v.isGenericList()) return false;
      std::vector<IValue> items = v.toList();
      for (IValue& x : items) {
        if (!checkValue(e, x, std::nullopt)) return false;
      }
      v = IValue(std::move(items));
      return true;
    }
    case TypeKind::Union:
      for (const TypePtr& alt : t.contained()) {
        if (checkValue(*alt, v, n)) return true;
      }
      return false;
    default:
      // Any, type variables, and kinds an IValue cannot hold (Dict, Tuple, Future,
      // Generator, ...): accepted as given; the kernel unboxes what it expects.
      return true;
  }
}

}  // namespace

OperatorInfo::OperatorInfo(FunctionSchema s, TagSet tags, AliasAnalysisKind alias)
    : schema(std::move(s)), op_tags(tags), alias_analysis(alias) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (isTensorLike(*args[i].type)) tensor_args.push_back(i);
    const Type* t = args[i].type.get();
    if (t->kind() == TypeKind::Optional) t = t->contained()[0].get();
    if (t->kind() == TypeKind::Device) device_args.push_back(i);
    IValue::Tag fast = kNoFastTag;
    switch (args[i].type->kind()) {
      case TypeKind::Tensor: fast = IValue::Tag::Tensor; break;
      case TypeKind::Int:
      case TypeKind::SymInt: fast = IValue::Tag::Int; break;
      case TypeKind::Float:
      case TypeKind::SymFloat: fast = IValue::Tag::Double; break;
      case TypeKind::Bool:
      case TypeKind::SymBool: fast = IValue::Tag::Bool; break;
      case TypeKind::Str: fast = IValue::Tag::String; break;
      default: break;
    }
    fast_tags.push_back(fast);
    const auto& alias = args[i].alias_info;
    if (alias && (alias->is_write || std::any_of(alias->contained.begin(), alias->contained.end(),
                                                 [](const AliasInfo& c) { return c.is_write; }))) {
      written_args.push_back(i);
    }
  }
  if (!tensor_args.empty()) device_args.clear();
}

void OperatorInfo::checkArgumentsSlow(Stack& stack) const {
  const auto& args = schema.arguments();
  const size_t n = args.size();
  if (__builtin_expect(stack.size() > n && !schema.is_vararg(), 0)) {
    STRATA_FAIL(Type, schema.operator_name().str(), ": expected at most ", n, " argument", n == 1 ? "" : "s", ", got ", stack.size());
  }
  for (size_t i = stack.size(); i < n; ++i) {
    STRATA_CHECK(args[i].default_value.has_value(), Type, schema.operator_name().str(), ": missing argument '",
                 args[i].name, "' (position ", i, ") of type ", args[i].type->str(), ", which has no default");
    stack.push_back(*args[i].default_value);
  }
  for (size_t i = 0; i < n; ++i) {
    IValue& v = stack[i];
    if (v.tag() == fast_tags[i]) continue;
    if (!checkValue(*args[i].type, v, args[i].N)) {
      STRATA_FAIL(Type, schema.operator_name().str(), ": argument '", args[i].name, "' (position ", i, ") expects ",
                  args[i].type->str(), ", got ", v.typeName());
    }
  }
}

DispatchKeySet OperatorInfo::keysOfValue(const IValue& v) {
  if (v.isTensor()) return detail::keysOf(v.toTensor());
  if (v.isTensorList()) return detail::keysOf(v.toTensorList());
  DispatchKeySet ks;
  if (v.isGenericList()) {  // Tensor?[]
    for (const IValue& x : v.toList()) {
      if (x.isTensor()) ks = ks | detail::keysOf(x.toTensor());
    }
  }
  return ks;
}

// ---------------------------------------------------------------------------
// The dispatcher's state.

namespace {
// "a typed<>() call (by 'muladd@1.1.0')", for the mismatch message.
std::string typedFrom(const std::vector<std::string>& owners) {
  std::string s = "a typed<>() call (by ";
  for (size_t i = 0; i < owners.size(); ++i) s.append(i > 0 ? ", '" : "'").append(owners[i]).append("'");
  return s.append(")");
}
}  // namespace

struct Dispatcher::Impl {
  std::mutex mu;
  // Inline, eight bytes a step: the lock-free lookup's cost is mostly this hash
  // (std::hash is an out-of-line call per string). Names are not adversarial input
  // here (they come from registrations), so speed over hash-flooding resistance.
  struct NameHash {
    static uint64_t mix(uint64_t h, uint64_t v) {
      h = (h ^ v) * 0xff51afd7ed558ccdULL;
      return h ^ (h >> 29);
    }
    __attribute__((always_inline)) static uint64_t bytes(uint64_t h, std::string_view s) {
      const char* p = s.data();
      size_t n = s.size();
      for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        h = mix(h, v);
      }
      // The last 0 to 7 bytes without a variable-length copy (wyhash's way): two
      // overlapping 4-byte reads, or up to three single bytes.
      uint64_t tail = 0;
      if (n >= 4) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + n - 4, 4);
        tail = (uint64_t{hi} << 32) | lo;
      } else if (n > 0) {
        const auto* u = reinterpret_cast<const unsigned char*>(p);
        tail = (uint64_t{u[0]} << 16) | (uint64_t{u[n >> 1]} << 8) | u[n - 1];
      }
      return mix(h, tail ^ (uint64_t{s.size()} << 56));
    }
    // Most names have no overload name: that costs no second pass.
    __attribute__((always_inline)) size_t operator()(const OperatorName& n) const noexcept {
      const uint64_t h = bytes(0x9e3779b97f4a7c15ULL, n.name);
      return static_cast<size_t>(n.overload_name.empty() ? h : bytes(h, n.overload_name));
    }
  };
  // Keyed by the name itself, so a lookup builds no string.
  std::unordered_map<OperatorName, std::unique_ptr<OperatorEntry>, NameHash> ops;  // never erased
  // Per key, oldest first; the newest serves (a layer's fallback registered with
  // allow_override shadows the builtin fallthrough until it goes).
  std::array<std::vector<std::shared_ptr<KernelRecord>>, kNumRuntimeKeySlots> fallbacks;
  // (op, key) pairs switched off. Looked up by (string_view, key): a table
  // recomputation asks once per key and kernel kind, and a copied name of more than
  // 15 characters is an allocation each time.
  struct DisabledLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const int c = std::string_view(a.first).compare(std::string_view(b.first));
      return c != 0 ? c < 0 : a.second < b.second;
    }
  };
  std::set<std::pair<std::string, DispatchKey>, DisabledLess> disabled;
  std::map<std::string, std::string> def_libraries;              // ns -> where
  std::vector<std::shared_ptr<KernelRecord>> retired;
  InferredSchemas inferred_schemas;  // see inferredSchemaOf
  std::vector<std::unique_ptr<const RuleSet>> retired_rules;  // Note [Operator rules]
  // What waits for a grace period to end (Note [Grace periods]); one at a time,
  // under reclaim_mu (taken before mu, never inside it).
  struct Waiting {
    detail::GracePeriod grace;
    std::vector<std::shared_ptr<KernelRecord>> kernels;
    std::vector<std::unique_ptr<const RuleSet>> rules;
    size_t size() const { return kernels.size() + rules.size(); }
  };
  std::mutex reclaim_mu;
  std::optional<Waiting> waiting;
  static inline Impl* fork_impl = nullptr;  // the singleton's
  static void forkPrepare();
  static void forkParent();
  static void forkChild();
  uint64_t next_id = 1;
  std::vector<std::unique_ptr<Library>> builtins;  // owner "builtin"; see registerBuiltins
  // The ops each owner made a typed handle of (Note [Who keeps a typed signature]).
  std::unordered_map<std::string, std::vector<OperatorEntry*>> typed_by_owner;
  // What an owner's unload let go, fixed again when it loads again (refixTypedSignatures).
  std::unordered_map<std::string, std::vector<std::pair<OperatorEntry*, CppSignature>>> released_typed;

  // Note [Lock-free operator lookup]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // findSchema() is how code reaches an op by name (a bundle's calls, ops::
  // wrappers, the CLI), so it takes no lock. Entries are never erased, so the names
  // can live in an open-addressing table of entry pointers that only grows:
  //   - a writer (under mu) fills an empty slot with a release store, or, past half
  //     full, builds a table twice the size holding every entry and publishes it;
  //   - a reader probes the table it loaded (acquire) from the name's hash until it
  //     finds the name or an empty slot;
  //   - tables that were replaced are kept while the dispatcher lives (together
  //     smaller than the current one), so a reader never probes freed memory.
  // Whether the op has a schema is its `info` pointer, itself read lock-free.
  struct NameTable {
    explicit NameTable(size_t capacity) : mask(capacity - 1), slots(new std::atomic<OperatorEntry*>[capacity]) {
      for (size_t i = 0; i < capacity; ++i) slots[i].store(nullptr, std::memory_order_relaxed);
    }
    const size_t mask;
    std::unique_ptr<std::atomic<OperatorEntry*>[]> slots;
    size_t used = 0;  // guarded by mu
    void insert(OperatorEntry* e) {
      size_t i = NameHash()(e->name) & mask;
      while (slots[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & mask;
      slots[i].store(e, std::memory_order_release);
      ++used;
    }
  };
  std::atomic<const NameTable*> names{nullptr};
  std::vector<std::unique_ptr<NameTable>> name_tables;  // guarded by mu; back() is `names`

  void indexName(OperatorEntry* e) {
    NameTable* t = name_tables.empty() ? nullptr : name_tables.back().get();
    if (t != nullptr && (t->used + 1) * 2 <= t->mask + 1) {
      t->insert(e);
      return;
    }
    auto bigger = std::make_unique<NameTable>(t == nullptr ? size_t{1024} : (t->mask + 1) * 2);
    for (const auto& [_, entry] : ops) bigger->insert(entry.get());  // e is among them
    names.store(bigger.get(), std::memory_order_release);
    name_tables.push_back(std::move(bigger));
  }
  // String equality without a call to memcmp for names up to 16 bytes (most are):
  // overlapping loads of the first and last bytes, as NameHash reads its tail.
  static bool sameBytes(std::string_view a, std::string_view b) {
    const size_t n = a.size();
    if (n != b.size()) return false;
    const char* p = a.data();
    const char* q = b.data();
    // The first and last sizeof(W) bytes of each (overlapping when n < 2 * sizeof(W)).
    auto ends = [&]<typename W>(W) {
      W p0, p1, q0, q1;
      std::memcpy(&p0, p, sizeof(W));
      std::memcpy(&p1, p + n - sizeof(W), sizeof(W));
      std::memcpy(&q0, q, sizeof(W));
      std::memcpy(&q1, q + n - sizeof(W), sizeof(W));
      return ((p0 ^ q0) | (p1 ^ q1)) == 0;
    };
    if (n >= 8 && n <= 16) return ends(uint64_t{});
    if (n >= 4 && n < 8) return ends(uint32_t{});
    return n == 0 || std::memcmp(p, q, n) == 0;
  }
  // No lock: Note [Lock-free operator lookup].
  __attribute__((always_inline)) OperatorEntry* findLockFree(const OperatorName& name) const {
    const NameTable* t = names.load(std::memory_order_acquire);
    if (t == nullptr) return nullptr;
    for (size_t i = NameHash()(name) & t->mask;; i = (i + 1) & t->mask) {
      OperatorEntry* e = t->slots[i].load(std::memory_order_acquire);
      if (e == nullptr) return nullptr;
      if (sameBytes(e->name.name, name.name) && sameBytes(e->name.overload_name, name.overload_name)) return e;
    }
  }

  OperatorEntry& entry(const OperatorName& name) {
    auto& slot = ops[name];
    if (!slot) {
      slot = std::make_unique<OperatorEntry>(name);
      for (auto& s : slot->core.table) s.store(&sharedKernels().missing, std::memory_order_relaxed);
      indexName(slot.get());
    }
    return *slot;
  }
  OperatorEntry* find(const OperatorName& name) {
    auto it = ops.find(name);
    return it == ops.end() ? nullptr : it->second.get();
  }

  bool isDisabled(std::string_view op, DispatchKey k) const {
    return !disabled.empty() && disabled.find(std::pair<std::string_view, DispatchKey>{op, k}) != disabled.end();
  }

  // Introspection records, all of them (owner == nullptr) or one owner's.
  void appendRegistrations(const OperatorEntry& e, const std::string* owner, std::vector<RegistrationInfo>& out);
  void appendRules(const OperatorEntry& e, const std::string* owner, std::vector<RuleInfo>& out);
  void appendFallbacks(const std::string* owner, std::vector<RegistrationInfo>& out);

  // The serving kernel of e at k (null when none or disabled). A pointer into
  // e.kernels, so that recomputing a table takes no reference count per lookup.
  const std::shared_ptr<KernelRecord>* top(const OperatorEntry& e, DispatchKey k) const {
    if (isDisabled(e.qualified, k)) return nullptr;
    auto it = e.kernels.find(k);
    if (it == e.kernels.end() || it->second.empty()) return nullptr;
    return &it->second.front();
  }

  struct SlotPick {
    const char* source = "missing";
    const std::shared_ptr<KernelRecord>* record = nullptr;
  };
  SlotPick computeSlot(const OperatorEntry& e, DispatchKey k) const {
    using DK = DispatchKey;
    if (e.kernels.empty()) {  // a def with no kernels yet, or every kernel gone
      if (k == DK::Undefined) return {};
      if (const auto& fbs = fallbacks[static_cast<size_t>(k)]; !fbs.empty()) return {"backend fallback", &fbs.back()};
      return {};
    }
    if (k == DK::Undefined) {
      if (auto r = top(e, DK::CompositeExplicitAutograd)) return {"default kernel", r};
      if (auto r = top(e, DK::CompositeImplicitAutograd)) return {"composite implicit kernel", r};
      return {};
    }
    if (auto r = top(e, k)) return {"kernel", r};
    if (kBackendKeys.has(k)) {
      if (auto r = top(e, DK::CompositeExplicitAutograd)) return {"default kernel", r};
    }
    const bool is_autograd = kAutogradKeys.has(k);
    const bool has_backend_kernel =
        is_autograd && (top(e, backendOfAutogradKey(k)) != nullptr || top(e, DK::CompositeExplicitAutograd) != nullptr);
    if (auto r = top(e, DK::CompositeImplicitAutograd)) {
      if (runtimeKeySetFor(DK::CompositeImplicitAutograd).has(k) && (!is_autograd || !has_backend_kernel)) {
        return {"composite implicit kernel", r};
      }
    }
    if (is_autograd) {
      if (auto r = top(e, DK::Autograd)) return {"autograd kernel", r};
    }
    if (const auto& fbs = fallbacks[static_cast<size_t>(k)]; !fbs.empty()) return {"backend fallback", &fbs.back()};
    return {};
  }

  // Note [Registration batches]: while a batch is open, recompute() only marks the
  // entry; the batch publishes every marked entry at once when it ends.
  int batch_depth = 0;
  std::thread::id batch_thread;
  std::condition_variable batch_free;  // notified when batch_depth drops to 0
  std::set<OperatorEntry*> batch_dirty;
  bool batch_all = false;

  bool inBatch() const { return batch_depth > 0 && batch_thread == std::this_thread::get_id(); }

  // The outermost batch ends (depth already 0): every table, schema and rule set it
  // staged is published, under the lock.
  void endBatch() {
    auto publishAll = [this](OperatorEntry& e) {
      publish(e);
      publishStaged(e);
    };
    if (batch_all) {
      for (auto& [_, e] : ops) publishAll(*e);
    } else {
      for (OperatorEntry* e : batch_dirty) publishAll(*e);
    }
    batch_dirty.clear();
    batch_all = false;
    batch_thread = {};
  }

  void recompute(OperatorEntry& e) {
    if (inBatch()) {
      batch_dirty.insert(&e);
      return;
    }
    publish(e);
  }

  // At a batch's end, after its table: what the batch staged of the entry's schema
  // and rules (Note [Registration batches]).
  void publishStaged(OperatorEntry& e) {
    if (!e.def) e.info.store(nullptr, std::memory_order_release);
    e.def_down_in_batch.store(false, std::memory_order_relaxed);
    publishRuleSet(e);
  }
  // The rule set calls read becomes the one registrations hold.
  static void publishRuleSet(OperatorEntry& e) {
    e.rules.store(e.rules_owned.get(), std::memory_order_release);
    e.core.has_rules.store(e.rules_owned != nullptr, std::memory_order_release);
  }

  // Note [Who keeps a typed signature]: owner now keeps e's typed signature too.
  void addTypedOwner(OperatorEntry& e, const std::string& owner) {
    if (std::find(e.typed_owners.begin(), e.typed_owners.end(), owner) != e.typed_owners.end()) return;
    e.typed_owners.push_back(owner);
    typed_by_owner[owner].push_back(&e);
  }

  // The schema registrations are checked against: the def's, not one a batch has
  // yet to take down.
  static const OperatorInfo* definedInfo(const OperatorEntry& e) {
    return e.def ? e.info.load(std::memory_order_relaxed) : nullptr;
  }

  void publish(OperatorEntry& e) {
    uint64_t mask = 0;
    const bool alive = e.alive();
    const SharedKernels& shared = sharedKernels();
    // Slot 0 (no keys) and the runtime keys' slots; the others hold "missing" from
    // the entry's creation on and never change.
    static constexpr std::array<uint8_t, kNumRuntimeKeySlots + 1> kSlots = [] {
      std::array<uint8_t, kNumRuntimeKeySlots + 1> out{};
      size_t n = 0;
      for (size_t i = 0; i < kNumRuntimeKeySlots; ++i) {
        if (i == 0 || isRuntimeKey(static_cast<DispatchKey>(i))) out[n++] = static_cast<uint8_t>(i);
      }
      out[kNumRuntimeKeySlots] = static_cast<uint8_t>(n);
      return out;
    }();
    for (size_t j = 0; j < kSlots[kNumRuntimeKeySlots]; ++j) {
      const size_t i = kSlots[j];
      const auto k = static_cast<DispatchKey>(i);
      SlotPick pick;
      if (alive) pick = computeSlot(e, k);
      KernelRecord* r = pick.record != nullptr ? pick.record->get() : nullptr;
      const bool fallthrough = r != nullptr && r->kernel.isFallthrough();
      const KernelFunction* kf = &shared.missing;
      if (fallthrough) {
        pick.source = "fallthrough";
        kf = &shared.fallthrough;
      } else if (r != nullptr) {
        kf = &r->kernel;
      }
      // Only runtime keys have bits; calls never carry the others.
      if (i != 0 && isRuntimeKey(k) && !fallthrough) mask |= uint64_t{1} << i;
      SlotState& st = e.slot_state[i];
      st.source = pick.source;
      if (st.record.get() != r) st.record = r != nullptr ? *pick.record : nullptr;
      e.core.table[i].store(kf, std::memory_order_release);
    }
    e.core.non_fallthrough.store(mask, std::memory_order_release);
  }

  void recomputeAll() {
    if (inBatch()) {
      batch_all = true;
      return;
    }
    for (auto& [_, e] : ops) publish(*e);
  }

  void retire(std::shared_ptr<KernelRecord> r) {
    r->removed.store(true, std::memory_order_release);
    // Also one that was never in a table: freeing it here would run its functor's
    // destructor under the lock, and user code that deregisters from there would
    // deadlock. The reclaimer frees it outside.
    retired.push_back(std::move(r));
  }

  // Publishes a new rule set for e (null when empty) and retires the old one. Inside
  // a batch it is staged: the set calls read stays (retired, it is not freed while
  // the batch is open) until the batch publishes the entry.
  void publishRules(OperatorEntry& e, std::vector<std::shared_ptr<const RuleRecord>> rules) {
    std::unique_ptr<const RuleSet> next;
    if (!rules.empty()) next = std::make_unique<const RuleSet>(RuleSet{std::move(rules)});
    if (e.rules_owned) retired_rules.push_back(std::move(e.rules_owned));
    e.rules_owned = std::move(next);
    if (inBatch()) batch_dirty.insert(&e);
    else publishRuleSet(e);
  }

  // The C++ signature rule: unboxed kernels and typed handles of one op agree.
  std::optional<std::pair<CppSignature, std::string>> currentSignature(const OperatorEntry& e) const {
    if (e.typed_signature) return std::make_pair(*e.typed_signature, typedFrom(e.typed_owners));
    for (const auto& [k, list] : e.kernels) {
      for (const auto& r : list) {
        if (r->kernel.cppSignature()) return std::make_pair(*r->kernel.cppSignature(), r->debug);
      }
    }
    return std::nullopt;
  }
};

namespace {

// Whether a C++-inferred type fits a declared schema type.
bool typeFits(const Type& declared, const Type& inferred) {
  if (declared.kind() == TypeKind::Var || declared.kind() == TypeKind::Any) return true;
  if (isIntKind(declared) && inferred.kind() == TypeKind::Int) return true;
  // A SymFloat / SymBool argument takes a C++ double / bool, as SymInt takes int64_t.
  if (declared.valueKind() != inferred.kind()) return false;
  if (declared.contained().size() != inferred.contained().size()) return false;
  for (size_t i = 0; i < declared.contained().size(); ++i) {
    if (!typeFits(*declared.contained()[i], *inferred.contained()[i])) return false;
  }
  return true;
}

// "" when inferred fits declared, else the first difference.
std::string schemaDifference(const FunctionSchema& declared, const FunctionSchema& inferred) {
  const auto& da = declared.arguments();
  const auto& ia = inferred.arguments();
  if (da.size() != ia.size()) {
    return detail::concat("the schema has ", da.size(), " arguments, the C++ function ", ia.size());
  }
  for (size_t i = 0; i < da.size(); ++i) {
    if (!typeFits(*da[i].type, *ia[i].type)) {
      return detail::concat("argument '", da[i].name, "' (position ", i, ") is ", da[i].type->str(),
                            " in the schema, ", ia[i].type->str(), " in the C++ function");
    }
  }
  const auto& dr = declared.returns();
  const auto& ir = inferred.returns();
  if (dr.size() != ir.size()) {
    return detail::concat("the schema returns ", dr.size(), " values, the C++ function ", ir.size());
  }
  for (size_t i = 0; i < dr.size(); ++i) {
    if (!typeFits(*dr[i].type, *ir[i].type)) {
      return detail::concat("return ", i, " is ", dr[i].type->str(), " in the schema, ", ir[i].type->str(),
                            " in the C++ function");
    }
  }
  return "";
}

// The schemas inferred from unboxed kernels' C++ signatures, by mangled signature:
// building one allocates its types and arguments, and every registration of a kernel
// (a bundle reloaded, a library registered again) would build it anew. The types are
// Strata's (Type::get, list, optional), so an entry outlives the library whose
// kernel made it. Guarded by the dispatcher's mutex; bounded by the signatures
// compiled into the process.

const FunctionSchema* inferredSchemaOf(const KernelFunction& k, InferredSchemas& cache) {
  const auto& sig = k.cppSignature();
  if (!sig) return nullptr;
  const std::string_view key = sig->mangledName();
  if (auto it = cache.find(key); it != cache.end()) return &it->second;
  auto inferred = k.inferredSchema();
  if (!inferred) return nullptr;
  return &cache.emplace(std::string(key), std::move(*inferred)).first->second;
}

void checkKernelAgainstSchema(const OperatorEntry& e, const FunctionSchema& schema, const KernelRecord& r,
                              InferredSchemas& cache) {
  const FunctionSchema* inferred = inferredSchemaOf(r.kernel, cache);
  if (inferred == nullptr) return;
  const std::string diff = schemaDifference(schema, *inferred);
  STRATA_CHECK(diff.empty(), Schema, e.qualified, ": the kernel for ", toString(r.key), " (", r.debug,
               ") does not match the operator's schema: ", diff, ".\n  schema:           ", schema.str(),
               "\n  kernel signature: ", inferred->signatureStr(), "  [C++: ", r.kernel.cppSignature()->name(), "]");
}

}  // namespace

Dispatcher::Dispatcher() : impl_(std::make_unique<Impl>()) {
  // Note [Grace periods]: fork() finds the reclaimer's locks free in the child.
  Impl::fork_impl = impl_.get();
  pthread_atfork(&Impl::forkPrepare, &Impl::forkParent, &Impl::forkChild);
}

void Dispatcher::Impl::forkPrepare() {
  fork_impl->reclaim_mu.lock();
  fork_impl->mu.lock();
  detail::registryForkPrepare();
}
void Dispatcher::Impl::forkParent() {
  detail::registryForkParent();
  fork_impl->mu.unlock();
  fork_impl->reclaim_mu.unlock();
}
void Dispatcher::Impl::forkChild() {
  detail::registryForkChild();
  // A batch another thread held has no thread to end it in the child: it ends here,
  // published as it stands, or the child's first batch would wait forever. The
  // condition variable is made anew: its waiters were the parent's.
  Impl& impl = *fork_impl;
  new (&impl.batch_free) std::condition_variable();
  if (impl.batch_depth > 0 && impl.batch_thread != std::this_thread::get_id()) {
    impl.batch_depth = 0;
    impl.endBatch();
  }
  fork_impl->mu.unlock();
  fork_impl->reclaim_mu.unlock();
}
Dispatcher::~Dispatcher() = default;

Dispatcher& Dispatcher::singleton() {
  // Leaked on purpose: static Library objects in other libraries deregister from
  // their destructors, which may run after ours would.
  static Dispatcher* d = new Dispatcher();
  // Once the builtins are in, one acquire load: libstdc++'s call_once sets two
  // thread_local pointers (a __tls_get_addr call each) before it even looks at its
  // flag, and `initializing` is another; together ~100 instructions per call, the
  // larger part of a findSchema().
  static std::atomic<bool> ready{false};
  if (__builtin_expect(ready.load(std::memory_order_acquire), 1)) return *d;
  static thread_local bool initializing = false;
  static std::once_flag once;
  if (!initializing) {
    std::call_once(once, [] {
      initializing = true;
      detail::SuspendStaticCapture suspend;  // builtins are Strata's: Note [Static registrations in bundles]
      struct Reset {
        ~Reset() { initializing = false; }
      } reset;
      detail::registerBuiltins(d->impl_->builtins);
    });
    ready.store(true, std::memory_order_release);
  }
  return *d;
}

std::optional<OperatorHandle> Dispatcher::findSchema(const OperatorName& name) {
  // No lock (Note [Lock-free operator lookup]): `info` is set exactly while the op
  // has a def.
  OperatorEntry* e = impl_->findLockFree(name);
  if (e == nullptr || e->info.load(std::memory_order_acquire) == nullptr) return std::nullopt;
  if (e->def_down_in_batch.load(std::memory_order_relaxed)) [[unlikely]] {
    // A batch took the def down: other threads still find it until the batch ends,
    // the batch's own thread (a new version registering) does not.
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->inBatch() && !e->def) return std::nullopt;
  }
  return e->handle();
}

std::optional<OperatorHandle> Dispatcher::findOp(const OperatorName& name) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  OperatorEntry* e = impl_->find(name);
  if (e == nullptr || !e->alive()) return std::nullopt;
  return e->handle();
}

OperatorHandle Dispatcher::findSchemaOrThrow(std::string_view name, std::string_view overload_name) {
  OperatorName op{std::string(name), std::string(overload_name)};
  auto h = findSchema(op);
  if (!h) {
    auto any = findOp(op);
    STRATA_CHECK(!any, NotImplemented, "operator ", op.str(), " has kernels but no schema: def() it first");
    STRATA_FAIL(NotImplemented, "no operator named ", op.str(), " (run `strata ops` to list the operators)");
  }
  return *h;
}

OperatorHandle Dispatcher::findSchemaOrThrow(std::string_view qualified_name) {
  const OperatorName n = parseOperatorName(qualified_name);
  return findSchemaOrThrow(n.name, n.overload_name);
}

std::vector<OperatorName> Dispatcher::operatorNames() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<OperatorName> names;
  for (const auto& [_, e] : impl_->ops) {
    if (e->alive()) names.push_back(e->name);
  }
  std::sort(names.begin(), names.end(), [](const OperatorName& a, const OperatorName& b) { return a.str() < b.str(); });
  return names;
}

RegistrationHandleRAII Dispatcher::registerDef(FunctionSchema schema, RegisterOptions options, TagSet tags,
                                               AliasAnalysisKind alias_analysis) {
  if (detail::capturingStaticRegistrations()) {
    return detail::refuseStaticRegistration(detail::concat("def ", schema.str(), " (", options.debug, ")"));
  }
  if (alias_analysis != AliasAnalysisKind::FROM_SCHEMA) {
    auto annotated = [](const std::vector<Argument>& as) {
      return std::any_of(as.begin(), as.end(), [](const Argument& a) { return a.alias_info.has_value(); });
    };
    STRATA_CHECK(!annotated(schema.arguments()) && !annotated(schema.returns()), Schema,
                 "Tried to register operator ", schema.str(), " (", options.debug, ") with aliasing information in "
                 "the schema but with alias analysis ", toString(alias_analysis), ": only FROM_SCHEMA reads the "
                 "schema's alias annotations. Drop the annotations or use FROM_SCHEMA");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  OperatorEntry& e = impl_->entry(schema.operator_name());
  if (e.def) {
    STRATA_FAIL(Value, "Tried to register an operator (", schema.str(),
                ") with the same name and overload name multiple times. Each overload's schema should only be "
                "registered with a single call to def(). Duplicate registration: ",
                options.debug, ". Original registration: ", e.def->debug);
  }
  for (const auto& [k, list] : e.kernels) {
    for (const auto& r : list) checkKernelAgainstSchema(e, schema, *r, impl_->inferred_schemas);
  }
  const uint64_t id = impl_->next_id++;
  e.def = DefRecord{id, options.owner, options.debug};
  // Schemas read lock-free are kept for the life of the process (a caller may hold
  // schema()'s reference); a def equal to an earlier one reuses it, so a bundle
  // loaded again and again adds nothing.
  const std::string text = schema.str();
  const OperatorInfo* info = nullptr;
  for (const auto& v : e.info_versions) {
    if (v->op_tags == tags && v->alias_analysis == alias_analysis && v->schema == schema && v->schema.str() == text) {
      info = v.get();
    }
  }
  if (info == nullptr) {
    e.info_versions.push_back(std::make_unique<OperatorInfo>(std::move(schema), tags, alias_analysis));
    info = e.info_versions.back().get();
  }
  // The table first, then the schema: findSchema takes no lock (Note [Lock-free
  // operator lookup]), and an op it finds has its kernels in its table. (Inside a
  // RegistrationBatch the table is published when the batch ends; until then the
  // bundle's ops are found and answer "no kernel", as before.)
  impl_->recompute(e);
  if (const OperatorInfo* was = e.info.load(std::memory_order_relaxed); was != nullptr && was != info) {
    // A batch took the def down and puts up another schema (a new version of a bundle):
    // no kernel or rule of the old schema may stay beside the new schema, so the
    // entry's table and rules go out now, with what is registered for the new one.
    impl_->publish(e);
    Impl::publishRuleSet(e);
  }
  e.info.store(info, std::memory_order_release);
  e.def_down_in_batch.store(false, std::memory_order_relaxed);
  OperatorEntry* ep = &e;
  return RegistrationHandleRAII([this, ep, id] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!ep->def || ep->def->id != id) return;
    detail::DroppedDefs::note(ep->def->owner, ep->qualified);
    ep->def.reset();
    // Inside a batch the schema stays up with the table until the batch ends (a new
    // version defining the op again puts the same schema back): calls never see the
    // op missing in between.
    if (!impl_->inBatch()) ep->info.store(nullptr, std::memory_order_release);
    else ep->def_down_in_batch.store(true, std::memory_order_relaxed);
    impl_->recompute(*ep);
  });
}

RegistrationHandleRAII Dispatcher::registerImpl(const OperatorName& op, DispatchKey key, KernelFunction kernel,
                                                RegisterOptions options) {
  if (detail::capturingStaticRegistrations()) {
    return detail::refuseStaticRegistration(
        detail::concat("impl ", op.str(), " at ", toString(key), " (", options.debug, ")"));
  }
  STRATA_CHECK(isRuntimeKey(key) || isAliasKey(key), Value, op.str(), ": cannot register a kernel at ", toString(key),
               " (", options.debug, "): not a dispatch key");
  STRATA_CHECK(kernel.isValid(), Value, op.str(), ": invalid (empty) kernel at ", toString(key), " (", options.debug, ")");
  // Made before the lock: a refused kernel's functor is destroyed after the lock is
  // released (its destructor is user code and may deregister).
  auto record = std::make_shared<KernelRecord>();
  record->key = key;
  record->kernel = std::move(kernel);
  record->owner = options.owner;
  record->debug = options.debug;
  std::lock_guard<std::mutex> lock(impl_->mu);
  OperatorEntry& e = impl_->entry(op);
  record->op = e.qualified;
  if (record->kernel.cppSignature()) {
    if (const OperatorInfo* info = Impl::definedInfo(e)) {
      checkKernelAgainstSchema(e, info->schema, *record, impl_->inferred_schemas);
    }
    if (auto sig = impl_->currentSignature(e); sig && !(sig->first == *record->kernel.cppSignature())) {
      STRATA_FAIL(Schema, e.qualified, ": mismatch in kernel C++ signatures. The kernel for ", toString(key), " (",
                  options.debug, ") has\n  ", record->kernel.cppSignature()->name(), "\nbut the operator's C++ "
                  "signature, from ", sig->second, ", is\n  ", sig->first.name());
    }
  }
  auto& list = e.kernels[key];
  // A second kernel at one (op, key) replaces the first only with allow_override,
  // whoever registers it, the same owner included (torch.library refuses it too).
  if (!list.empty() && !options.allow_override) {
    const auto& prev = *list.front();
    STRATA_FAIL(Value, e.qualified, ": a kernel for ", toString(key), " is already registered by '", prev.owner,
                "' (", prev.debug, "); '", options.owner, "' (", options.debug,
                ") may replace it only with allow_override");
  }
  record->id = impl_->next_id++;
  list.push_front(record);
  impl_->recompute(e);
  OperatorEntry* ep = &e;
  const uint64_t id = record->id;
  return RegistrationHandleRAII([this, ep, key, id] {
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto it = ep->kernels.find(key);
    if (it == ep->kernels.end()) return;
    auto& l = it->second;
    for (auto r = l.begin(); r != l.end(); ++r) {
      if ((*r)->id == id) {
        std::shared_ptr<KernelRecord> gone = std::move(*r);
        l.erase(r);
        if (l.empty()) ep->kernels.erase(it);
        impl_->recompute(*ep);
        impl_->retire(std::move(gone));
        break;
      }
    }
    lock.unlock();
    if (!detail::DeferReclaim::active()) reclaimRetiredKernels();  // Note [Deferred reclamation]
  });
}

RegistrationHandleRAII Dispatcher::registerFallback(DispatchKey key, KernelFunction kernel, RegisterOptions options) {
  if (detail::capturingStaticRegistrations()) {
    return detail::refuseStaticRegistration(detail::concat("fallback at ", toString(key), " (", options.debug, ")"));
  }
  STRATA_CHECK(isRuntimeKey(key), Value, "a backend fallback must be registered at a runtime dispatch key, not ",
               toString(key), " (", options.debug, ")");
  STRATA_CHECK(kernel.isBoxed() || kernel.isFallthrough(), Value, "the fallback for ", toString(key), " (",
               options.debug, ") must be a boxed kernel or a fallthrough: it serves every operator, whatever "
               "its signature, so an unboxed kernel cannot be one");
  auto record = std::make_shared<KernelRecord>();  // before the lock, as in registerImpl
  record->key = key;
  record->kernel = std::move(kernel);
  record->owner = options.owner;
  record->debug = options.debug;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& slot = impl_->fallbacks[static_cast<size_t>(key)];
  if (!slot.empty() && !options.allow_override) {
    STRATA_FAIL(Value, "Tried to register multiple backend fallbacks for the same dispatch key ", toString(key),
                "; previous registration by '", slot.back()->owner, "' (", slot.back()->debug,
                "), new registration by '", options.owner, "' (", options.debug, ")");
  }
  record->id = impl_->next_id++;
  slot.push_back(record);
  impl_->recomputeAll();
  const uint64_t id = record->id;
  return RegistrationHandleRAII([this, key, id] {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      auto& s = impl_->fallbacks[static_cast<size_t>(key)];
      auto it = std::find_if(s.begin(), s.end(), [id](const auto& r) { return r->id == id; });
      if (it == s.end()) return;
      std::shared_ptr<KernelRecord> gone = std::move(*it);
      s.erase(it);
      impl_->recomputeAll();
      impl_->retire(std::move(gone));
    }
    if (!detail::DeferReclaim::active()) reclaimRetiredKernels();
  });
}

RegistrationHandleRAII Dispatcher::registerRule(const OperatorName& op, std::string kind, const std::type_info& target,
                                                std::shared_ptr<const void> payload, RegisterOptions options) {
  if (detail::capturingStaticRegistrations()) {
    return detail::refuseStaticRegistration(detail::concat(kind, " rule for ", op.str(), " (", options.debug, ")"));
  }
  STRATA_CHECK(payload != nullptr, Value, op.str(), ": an empty ", kind, " rule for ", demangle(target), " (",
               options.debug, ")");
  std::shared_ptr<RuleRecord> record;  // outlives the lock: the payload is user state
  std::lock_guard<std::mutex> lock(impl_->mu);
  OperatorEntry* e = impl_->find(op);
  STRATA_CHECK(e != nullptr && e->alive(), NotImplemented, "cannot register a ", kind, " rule for ", demangle(target),
               " (", options.debug, "): no operator named ", op.str());
  std::vector<std::shared_ptr<const RuleRecord>> rules;
  if (const RuleSet* now = e->rules_owned.get()) rules = now->rules;
  for (const auto& r : rules) {
    if (r->kind == kind && *r->target == target) {
      STRATA_FAIL(Value, e->qualified, " already has a ", kind, " rule",
                  r->target_name.empty() ? "" : " for " + r->target_name, ", registered by '",
                  r->owner, "' (", r->debug, "); the new one, by '", options.owner, "' (", options.debug,
                  "), is refused. Remove the old rule first.");
    }
  }
  record = std::make_shared<RuleRecord>();
  record->id = impl_->next_id++;
  record->kind = std::move(kind);
  record->target = &target;
  record->target_name = target == typeid(void) ? std::string() : demangle(target);  // void: no target
  record->payload = std::move(payload);
  record->owner = std::move(options.owner);
  record->debug = std::move(options.debug);
  rules.push_back(record);
  impl_->publishRules(*e, std::move(rules));
  const uint64_t id = record->id;
  return RegistrationHandleRAII([this, e, id] {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      const RuleSet* now = e->rules_owned.get();
      if (now == nullptr) return;
      std::vector<std::shared_ptr<const RuleRecord>> rest;
      for (const auto& r : now->rules) {
        if (r->id != id) rest.push_back(r);
      }
      if (rest.size() == now->rules.size()) return;
      impl_->publishRules(*e, std::move(rest));
    }
    if (!detail::DeferReclaim::active()) reclaimRetiredKernels();
  });
}

RegistrationHandleRAII Dispatcher::registerLibrary(const std::string& ns, std::string debug) {
  if (detail::capturingStaticRegistrations()) {
    return detail::refuseStaticRegistration(detail::concat("library ", ns, " (", debug, ")"));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->def_libraries.find(ns);
  if (it != impl_->def_libraries.end()) {
    STRATA_FAIL(Value, "Only a single STRATA_LIBRARY (a DEF library) can be used to register the namespace ", ns,
                "; please put all of your definitions in a single STRATA_LIBRARY block. If you were trying to "
                "specify implementations, consider using STRATA_LIBRARY_IMPL (which can be duplicated). If you "
                "really intended to define operators for a single namespace in a distributed way, you can use "
                "STRATA_LIBRARY_FRAGMENT to explicitly indicate this. Previous STRATA_LIBRARY: ", it->second,
                "; latest: ", debug);
  }
  impl_->def_libraries.emplace(ns, std::move(debug));
  return RegistrationHandleRAII([this, ns] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->def_libraries.erase(ns);
  });
}

bool Dispatcher::setKernelEnabled(const OperatorName& op, DispatchKey key, bool enabled) {
  STRATA_CHECK(key != DispatchKey::Undefined, Value, op.str(), ": set_kernel_enabled needs a dispatch key");
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::pair<std::string, DispatchKey> k{op.str(), key};
  const bool previous = impl_->disabled.count(k) == 0;
  if (enabled) impl_->disabled.erase(k);
  else impl_->disabled.insert(k);
  if (previous != enabled) {
    if (OperatorEntry* e = impl_->find(op)) impl_->recompute(*e);
  }
  return previous;
}

bool Dispatcher::isKernelEnabled(const OperatorName& op, DispatchKey key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return !impl_->isDisabled(op.str(), key);
}

// The registrations of e (owner == nullptr) or those of one owner, appended to out.
void Dispatcher::Impl::appendRegistrations(const OperatorEntry& e, const std::string* owner,
                                           std::vector<RegistrationInfo>& out) {
  if (e.def && (owner == nullptr || e.def->owner == *owner)) {
    RegistrationInfo r;
    r.what = RegistrationInfo::What::Def;
    r.op = e.qualified;
    r.kind = "def";
    r.owner = e.def->owner;
    r.debug = e.def->debug;
    out.push_back(std::move(r));
  }
  for (const auto& [key, list] : e.kernels) {
    bool first = true;
    for (const auto& k : list) {
      const bool active = std::exchange(first, false);
      if (owner != nullptr && k->owner != *owner) continue;
      RegistrationInfo r;
      r.op = e.qualified;
      r.key = key;
      r.kind = k->kernel.kindLabel();
      r.owner = k->owner;
      r.debug = k->debug;
      r.enabled = !isDisabled(e.qualified, key);
      r.active = active;
      out.push_back(std::move(r));
    }
  }
}

void Dispatcher::Impl::appendRules(const OperatorEntry& e, const std::string* owner, std::vector<RuleInfo>& out) {
  if (e.rules_owned == nullptr) return;
  for (const auto& r : e.rules_owned->rules) {
    if (owner == nullptr || r->owner == *owner) out.push_back({e.qualified, r->kind, r->target_name, r->owner, r->debug});
  }
}

void Dispatcher::Impl::appendFallbacks(const std::string* owner, std::vector<RegistrationInfo>& out) {
  for (const auto& fbs : fallbacks) {
   for (const auto& fb : fbs) {
    if (owner != nullptr && fb->owner != *owner) continue;
    RegistrationInfo r;
    r.what = RegistrationInfo::What::Fallback;
    r.key = fb->key;
    r.kind = fb->kernel.kindLabel();
    r.owner = fb->owner;
    r.debug = fb->debug;
    r.active = fb == fbs.back();
    out.push_back(std::move(r));
   }
  }
}

std::vector<RegistrationInfo> Dispatcher::registrations(const OperatorName& op) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<RegistrationInfo> out;
  if (const OperatorEntry* e = impl_->find(op)) impl_->appendRegistrations(*e, nullptr, out);
  return out;
}

std::vector<RegistrationInfo> Dispatcher::fallbacks() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<RegistrationInfo> out;
  impl_->appendFallbacks(nullptr, out);
  return out;
}

std::vector<RuleInfo> Dispatcher::rules(const OperatorName& op) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<RuleInfo> out;
  if (const OperatorEntry* e = impl_->find(op)) impl_->appendRules(*e, nullptr, out);
  return out;
}

Dispatcher::Owned Dispatcher::ownedBy(const std::string& owner) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Owned out;
  for (const auto& [_, e] : impl_->ops) {
    impl_->appendRegistrations(*e, &owner, out.registrations);
    impl_->appendRules(*e, &owner, out.rules);
  }
  impl_->appendFallbacks(&owner, out.registrations);
  return out;
}

OperatorHandle::SlotSource OperatorHandle::slotSource(DispatchKey k) const {
  STRATA_CHECK(isRuntimeKey(k), Value, "slotSource: ", toString(k), " is not a runtime key");
  Dispatcher& d = Dispatcher::singleton();
  std::lock_guard<std::mutex> lock(d.impl_->mu);
  const SlotState& st = entry_->slot_state[static_cast<size_t>(k)];
  SlotSource out;
  out.source = st.source;
  if (st.record) {
    out.registered_at = st.record->key;
    if (!st.record->kernel.isFallthrough()) out.kernel = &st.record->kernel;
  }
  return out;
}

namespace {
SlotInfo toSlotInfo(DispatchKey key, const SlotState& st) {
  SlotInfo s;
  s.key = key;
  s.source = st.source;
  if (st.record) {
    s.registered_at = st.record->key;
    s.kind = st.record->kernel.kindLabel();
    s.owner = st.record->owner;
    s.debug = st.record->debug;
  }
  return s;
}
}  // namespace

std::vector<SlotInfo> Dispatcher::computedTable(const OperatorName& op) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  OperatorEntry* e = impl_->find(op);
  STRATA_CHECK(e != nullptr && e->alive(), NotImplemented, "no operator named ", op.str());
  std::vector<SlotInfo> out;
  out.push_back(toSlotInfo(DispatchKey::Undefined, e->slot_state[0]));
  for (size_t i = kNumRuntimeKeySlots; i-- > 1;) {
    const auto k = static_cast<DispatchKey>(i);
    if (isRuntimeKey(k)) out.push_back(toSlotInfo(k, e->slot_state[i]));
  }
  return out;
}

std::string Dispatcher::dump(const OperatorName& op) {
  const auto regs = registrations(op);
  STRATA_CHECK(!regs.empty(), NotImplemented, "no operator named ", op.str());
  const auto table = computedTable(op);
  std::ostringstream os;
  auto h = findOp(op);
  os << "name: " << op.str() << "\n";
  os << "schema: " << (h && h->hasSchema() ? h->schema().str() : std::string("(none: no def yet)")) << "\n";
  if (h && h->hasSchema()) {
    const TagSet tags = h->tags();
    os << "tags: " << (tags.empty() ? std::string("(none)") : tags.str()) << "\n";
    os << "alias analysis: " << toString(h->aliasAnalysis()) << "\n";
  }
  os << "\nregistrations (per key, newest first):\n";
  for (const auto& r : regs) {
    std::string key = r.what == RegistrationInfo::What::Def ? "def" : toString(r.key);
    os << "  " << std::left << std::setw(27) << key << std::setw(12) << r.kind << "owner=" << std::setw(14) << r.owner
       << " " << r.debug;
    if (!r.enabled) os << "  [disabled]";
    else if (!r.active) os << "  [shadowed]";
    os << "\n";
  }
  if (const auto rs = rules(op); !rs.empty()) {
    os << "\nrules:\n";
    for (const auto& r : rs) {
      // A long label (a mode type's name) still leaves a space before the owner.
      const std::string label = r.target.empty() ? r.kind : r.kind + "[" + r.target + "]";
      os << "  " << std::left << std::setw(26) << label << " owner=" << std::setw(14) << r.owner << " " << r.debug
         << "\n";
    }
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    bool any = false;
    for (const auto& k : impl_->disabled) {
      if (k.first != op.str()) continue;
      if (!any) os << "\nkernel state:\n";
      any = true;
      os << "  " << toString(k.second) << ": disabled\n";
    }
  }
  os << "\ncomputed table:\n";
  for (const auto& s : table) {
    const std::string key = s.key == DispatchKey::Undefined ? "(no keys)" : toString(s.key);
    os << "  " << std::left << std::setw(21) << key << s.source;
    if (!s.owner.empty()) {
      os << " [" << s.kind;
      if (s.registered_at != s.key && s.registered_at != DispatchKey::Undefined) os << " at " << toString(s.registered_at);
      os << ", owner " << s.owner << ", " << s.debug << "]";
    }
    os << "\n";
  }
  return os.str();
}

KernelHandle Dispatcher::getKernel(const OperatorName& op, DispatchKey key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  OperatorEntry* e = impl_->find(op);
  STRATA_CHECK(e != nullptr && e->alive(), NotImplemented, "get_kernel: no operator named ", op.str());
  KernelHandle h;
  h.op_ = e->qualified;
  h.key_ = key;
  h.op_handle_ = e->handle();
  std::shared_ptr<KernelRecord> r;
  if (isAliasKey(key)) {
    if (const auto* t = impl_->top(*e, key)) r = *t;
    h.source_ = "kernel";
  } else {
    STRATA_CHECK(isRuntimeKey(key), Value, "get_kernel: ", toString(key), " is not a dispatch key");
    const SlotState& st = e->slot_state[static_cast<size_t>(key)];
    r = st.record;
    h.source_ = st.source;
  }
  STRATA_CHECK(r != nullptr, NotImplemented, "get_kernel: ", e->qualified, " has no kernel for ", toString(key));
  h.record_ = r;
  h.owner_ = r->owner;
  h.debug_ = r->debug;
  return h;
}

namespace detail {
namespace {
thread_local int tls_defer_reclaim = 0;  // open DeferReclaims on this thread
}  // namespace
DeferReclaim::DeferReclaim() noexcept { ++tls_defer_reclaim; }
DeferReclaim::~DeferReclaim() {
  if (--tls_defer_reclaim == 0) Dispatcher::singleton().reclaimRetiredKernels();
}
bool DeferReclaim::active() noexcept { return tls_defer_reclaim != 0; }
}  // namespace detail

RegistrationBatch::RegistrationBatch() : d_(&Dispatcher::singleton()) {
  auto& impl = *d_->impl_;
  std::unique_lock<std::mutex> lock(impl.mu);
  // Another thread's batch (a host's rescan) is waited for, as a lock is.
  impl.batch_free.wait(lock, [&] { return impl.batch_depth == 0 || impl.batch_thread == std::this_thread::get_id(); });
  impl.batch_thread = std::this_thread::get_id();
  ++impl.batch_depth;
}

namespace detail {
namespace {
thread_local DroppedDefs* tls_dropped_defs = nullptr;
}  // namespace
DroppedDefs::DroppedDefs(std::string owner) : owner_(std::move(owner)), outer_(tls_dropped_defs) {
  tls_dropped_defs = this;
}
DroppedDefs::~DroppedDefs() { tls_dropped_defs = outer_; }
void DroppedDefs::note(const std::string& owner, const std::string& op) {
  for (DroppedDefs* d = tls_dropped_defs; d != nullptr; d = d->outer_) {
    if (d->owner_ == owner) d->names_.push_back(op);
  }
}

bool registrationBatchHeldByThisThread() {
  auto& impl = *Dispatcher::singleton().impl_;
  std::lock_guard<std::mutex> lock(impl.mu);
  return impl.inBatch();
}
}  // namespace detail

RegistrationBatch::~RegistrationBatch() {
  auto& impl = *d_->impl_;
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    if (--impl.batch_depth > 0) return;
    impl.endBatch();
    impl.batch_free.notify_all();
    if (impl.retired.empty() && impl.retired_rules.empty()) return;
  }
  d_->reclaimRetiredKernels();
}

size_t Dispatcher::reclaimRetiredKernels() {
  // Note [Grace periods]. Each round frees the waiting batch if its grace period has
  // ended, then starts one for what was retired since; a second round catches the
  // common case where no thread is inside a call and the new one ends at once.
  // Nothing here allocates or throws: removals call it from destructors.
  Impl& impl = *impl_;
  size_t freed = 0;
  for (int round = 0; round < 2; ++round) {
    std::optional<Impl::Waiting> done;  // destroyed outside the locks: functor destructors run user code
    bool started = false;
    {
      std::lock_guard<std::mutex> reclaim(impl.reclaim_mu);
      if (impl.waiting) {
        if (!impl.waiting->grace.elapsed(/*spins=*/256)) return freed;
        done = std::move(impl.waiting);
        impl.waiting.reset();
      }
      Impl::Waiting next;
      {
        std::lock_guard<std::mutex> lock(impl.mu);
        // During a batch a retired kernel may still be in a table (it is unpublished
        // when the batch ends), so no grace period may cover it yet.
        if (impl.batch_depth == 0) {
          next.kernels.swap(impl.retired);
          next.rules.swap(impl.retired_rules);
        }
      }
      if (next.size() != 0) {
        next.grace.begin();
        impl.waiting = std::move(next);
        started = true;
      }
    }
    if (done) {
      freed += done->size();
      done.reset();
    }
    if (!started) break;
  }
  return freed;
}

size_t Dispatcher::numRetiredKernels() {
  std::lock_guard<std::mutex> reclaim(impl_->reclaim_mu);
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->retired.size() + impl_->retired_rules.size() + (impl_->waiting ? impl_->waiting->size() : 0);
}

// ---------------------------------------------------------------------------
// OperatorHandle.

const OperatorName& OperatorHandle::operator_name() const { return entry_->name; }

const void* OperatorHandle::findRule(std::string_view kind, const std::type_info& target) const {
  const RuleSet* rs = entry_->rules.load(std::memory_order_acquire);
  if (rs == nullptr) return nullptr;
  for (const auto& r : rs->rules) {
    if (*r->target == target && r->kind == kind) return r->payload.get();
  }
  return nullptr;
}

bool OperatorHandle::hasSchema() const { return entry_->info.load(std::memory_order_acquire) != nullptr; }

const FunctionSchema& OperatorHandle::schema() const {
  const OperatorInfo* info = entry_->info.load(std::memory_order_acquire);
  STRATA_CHECK(info != nullptr, NotImplemented, "operator ", entry_->qualified,
               " has no schema (it has no def(), or was removed)");
  return info->schema;
}

TagSet OperatorHandle::tags() const {
  const OperatorInfo* info = entry_->info.load(std::memory_order_acquire);
  return info != nullptr ? info->op_tags : TagSet();
}

AliasAnalysisKind OperatorHandle::aliasAnalysis() const {
  const OperatorInfo* info = entry_->info.load(std::memory_order_acquire);
  return info != nullptr ? info->alias_analysis : AliasAnalysisKind::FROM_SCHEMA;
}

namespace {
// The boxed entry points' CallSection: enters one only when the thread is in none.
// A section inside another protects nothing more (what the inner call reads stays
// valid until the outermost ends, and only that one advances the generation), and
// boxed calls are the ones made from inside calls: a mode's or a boxed fallback's
// handler calling the layer below. Skipping the nested store and its undo saves a
// per-layer read-modify-write of the call word (Note [Grace periods]).
struct OutermostCallSection {
  bool entered;
  __attribute__((always_inline)) OutermostCallSection() noexcept {
    uint64_t w = detail::tls_call_word;
    entered = (w & detail::kCallDepthMask) == 0;
    if (entered) {
      if (__builtin_expect(w == 0, 0)) w = detail::registerCallingThread();
      __atomic_store_n(&detail::tls_call_word, w + detail::kCallGeneration + 1, __ATOMIC_RELEASE);
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
  }
  __attribute__((always_inline)) ~OutermostCallSection() {
    if (entered) __atomic_store_n(&detail::tls_call_word, detail::tls_call_word - 1, __ATOMIC_RELEASE);
  }
  OutermostCallSection(const OutermostCallSection&) = delete;
  OutermostCallSection& operator=(const OutermostCallSection&) = delete;
};
}  // namespace

// Note [One write, one bump]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A call of an op whose schema writes an argument (Tensor(a!)) moves that tensor's
// version counter by one, as PyTorch's ADInplaceOrView does for every tensor, so that
// a tensor saved for backward and then written is caught at backward ("modified by an
// inplace operation") however it was written: a kernel of one's own that writes
// through data_ptr, under no_grad, on a tensor that does not require grad. The
// dispatcher's entry points count it (call() for a signature with a Tensor&,
// callBoxed() for a schema with a write), after the kernel returned, and only where
// the call left the counter where it was: a kernel that counted its own write
// (core::fill_'s calls Tensor::fill_, which counts a plain tensor's write; custom_op
// counts before its kernel runs) or the autograd layer (which counts before it records
// a node) is not counted twice. A redispatch is inside a call and counts nothing; a
// call that throws counts nothing (as ADInplaceOrView, which counts after the kernel);
// a wrapper tensor (vmap, fake) is its layer's to count. Calls of ops that write
// nothing, every core:: op but copy_, fill_ and zero_ among them, pay nothing: for
// call() the test is compiled out, for callBoxed() it is one load and branch.
// What a typed call cannot see: it knows a written tensor by its Tensor& (the
// schema's Tensor(a!) as infer_schema reads it, checked against the schema at the
// call), so a kernel that takes a written tensor as const Tensor&, a Tensor(a!)? or
// Tensor(a!)[] (no mutable C++ form), and a call compiled into a bundle built before
// this rule, are counted by callBoxed and the autograd layer only. KernelHandle::call
// runs one kernel, not the op, and counts nothing, as a redispatch.
namespace {
struct WrittenVersions {
  // Most writing ops write one or two tensors: no heap for up to four.
  std::array<std::pair<Tensor, uint32_t>, 4> first;
  size_t n = 0;
  std::vector<std::pair<Tensor, uint32_t>> more;

  WrittenVersions(const OperatorInfo& info, const Stack& stack) {
    for (size_t i : info.written_args) {
      if (i < stack.size()) take(stack[i]);
    }
  }
  // A Tensor, a Tensor? (None holds none), a Tensor[], or a Tensor?[] (a generic list).
  void take(const IValue& v) {
    if (v.isTensor()) {
      take(v.toTensor());
    } else if (v.isTensorList()) {
      for (const Tensor& t : v.toTensorList()) take(t);
    } else if (v.isGenericList()) {
      for (const IValue& e : v.toList()) take(e);
    }
  }
  void take(const Tensor& t) {
    if (!t.defined() || t.wrapper() != nullptr) return;
    if (n < first.size()) first[n++] = {t, t._version()};
    else more.emplace_back(t, t._version());
  }
  void bumpUnchanged() const {
    const auto bump = [](const std::pair<Tensor, uint32_t>& e) {
      if (e.first._version() == e.second) e.first.storage()->bump_version();
    };
    for (size_t k = 0; k < n; ++k) bump(first[k]);
    for (const auto& e : more) bump(e);
  }
};
}  // namespace

void OperatorHandle::callBoxed(Stack& stack) const {
  const OutermostCallSection section;  // Note [Grace periods]
  const OperatorInfo* info = entry_->info.load(std::memory_order_acquire);
  if (__builtin_expect(info == nullptr, 0)) {
    STRATA_FAIL(NotImplemented, "cannot call ", entry_->qualified, " boxed: it has no schema (no def(), or it was removed)");
  }
  info->checkArguments(stack);
  const DispatchKeySet ks = detail::computeCallKeys(info->argumentKeys(stack), core_->mask());
  const KernelFunction& kernel = core_->lookup(ks);
  if (__builtin_expect(!info->written_args.empty(), 0)) {  // Note [One write, one bump]
    const WrittenVersions written(*info, stack);
    if (detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0) {
      detail::TraceScope scope(*this, ks, false, true);
      kernel.callBoxed(*this, ks, stack);
    } else {
      kernel.callBoxed(*this, ks, stack);
    }
    written.bumpUnchanged();
    return;
  }
  if (__builtin_expect(detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0, 0)) {
    detail::TraceScope scope(*this, ks, false, true);
    kernel.callBoxed(*this, ks, stack);
    return;
  }
  kernel.callBoxed(*this, ks, stack);
}

void OperatorHandle::redispatchBoxed(DispatchKeySet ks, Stack& stack) const {
  const OutermostCallSection section;
  ks = ks & core_->mask();
  const KernelFunction& kernel = core_->lookup(ks);
  if (__builtin_expect(detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0, 0)) {
    detail::TraceScope scope(*this, ks, true, true);
    kernel.callBoxed(*this, ks, stack);
    return;
  }
  kernel.callBoxed(*this, ks, stack);
}


void OperatorHandle::checkTypedSignature(const CppSignature& sig, const FunctionSchema& inferred) const {
  Dispatcher& d = Dispatcher::singleton();
  std::lock_guard<std::mutex> lock(d.impl_->mu);
  OperatorEntry& e = *entry_;
  // The batch's own thread checks against the def it has staged; another thread
  // against the schema its calls see.
  const OperatorInfo* checked_against =
      d.impl_->inBatch() ? Dispatcher::Impl::definedInfo(e) : e.info.load(std::memory_order_relaxed);
  if (const OperatorInfo* info = checked_against) {
    const std::string diff = schemaDifference(info->schema, inferred);
    STRATA_CHECK(diff.empty(), Schema, e.qualified, ": typed<", sig.name(), ">() does not match the schema: ", diff,
                 ".\n  schema:          ", info->schema.str(), "\n  typed signature: ", inferred.signatureStr());
  }
  if (auto current = d.impl_->currentSignature(e)) {
    STRATA_CHECK(current->first == sig, Schema, e.qualified, ": typed<", sig.name(),
                 ">() does not match the C++ signature of the operator's kernels, ", current->first.name(),
                 " (from ", current->second, "); a typed call must use the kernels' exact C++ signature");
  }
  if (!e.typed_signature) e.typed_signature = sig;
  d.impl_->addTypedOwner(e, RegistrationOwnerGuard::current());
}

namespace detail {
// Note [Who keeps a typed signature] in operator_entry.h.
void releaseTypedSignatures(const std::string& owner) {
  Dispatcher& d = Dispatcher::singleton();
  std::lock_guard<std::mutex> lock(d.impl_->mu);
  auto it = d.impl_->typed_by_owner.find(owner);
  if (it == d.impl_->typed_by_owner.end()) return;
  auto& kept = d.impl_->released_typed[owner];
  for (OperatorEntry* e : it->second) {
    if (e->typed_signature) kept.emplace_back(e, *e->typed_signature);
    std::erase(e->typed_owners, owner);
    if (e->typed_owners.empty()) e->typed_signature.reset();
  }
  d.impl_->typed_by_owner.erase(it);
}

// A bundle's library stays mapped once loaded, its statics with it: a handle a
// kernel keeps in a function-local static (`static auto h = ...typed<S>()`) outlives
// an unload, and loaded again the code never calls typed<>() again. So the
// signatures its owner fixed before are fixed again before it registers, and a load
// where one of them no longer holds is refused.
void refixTypedSignatures(const std::string& owner) {
  Dispatcher& d = Dispatcher::singleton();
  std::lock_guard<std::mutex> lock(d.impl_->mu);
  auto it = d.impl_->released_typed.find(owner);
  if (it == d.impl_->released_typed.end()) return;
  for (const auto& [e, sig] : it->second) {
    if (auto current = d.impl_->currentSignature(*e); current && !(current->first == sig)) {
      STRATA_FAIL(Schema, e->qualified, ": ", owner, " made a typed<", sig.name(), ">() handle of it when it was "
                  "loaded before, and its code may still call through it, but the operator's C++ signature is now ",
                  current->first.name(), " (from ", current->second, "); a bundle built against the new signature "
                  "loads under another version, or in a new process");
    }
  }
  for (const auto& [e, sig] : it->second) {
    if (!e->typed_signature) e->typed_signature = sig;
    d.impl_->addTypedOwner(*e, owner);
  }
  d.impl_->released_typed.erase(it);
}
}  // namespace detail

// ---------------------------------------------------------------------------
// Missing kernels.

namespace {

[[noreturn]] void throwMissing(const OperatorHandle& op, DispatchKeySet ks) {
  Dispatcher& d = Dispatcher::singleton();
  const OperatorName& name = op.operator_name();
  std::vector<RegistrationInfo> regs = d.registrations(name);
  std::ostringstream os;
  os << name.str() << ": ";
  if (regs.empty()) {
    os << "the operator was removed (its last def and kernel were deregistered)";
    STRATA_FAIL(NotImplemented, os.str());
  }
  const DispatchKey k = ks.highestPriorityKey();
  if (k == DispatchKey::Undefined) {
    // As PyTorch says it: an op that takes a Tensor[] was most likely given an empty one.
    const auto& args = op.schema().arguments();
    const bool takes_list = std::any_of(args.begin(), args.end(), [](const Argument& a) {
      return a.type->kind() == TypeKind::List && isTensorLike(*a.type);
    });
    os << "no kernel for a call with an empty key set: the call has no tensor arguments"
       << (takes_list ? " (e.g. an empty list of tensors: this operator needs a non-empty one)" : "")
       << " (and no key is included), and the operator has no enabled CompositeExplicitAutograd (\"default\") "
          "or CompositeImplicitAutograd kernel";
  } else {
    os << "no kernel for dispatch key " << toString(k) << " (call key set " << ks.str() << ")";
  }
  // Each disabled kernel that would have served the call (at k, at an alias key whose
  // set holds it, or a composite one for a call with no keys), named so that a reader
  // (strata call) can say who disabled it.
  const char* sep = ": ";
  for (const auto& r : regs) {
    const bool would_serve = k == DispatchKey::Undefined
                                 ? r.key == DispatchKey::CompositeExplicitAutograd ||
                                       r.key == DispatchKey::CompositeImplicitAutograd
                                 : runtimeKeySetFor(r.key).has(k);
    if (r.what != RegistrationInfo::What::Def && !r.enabled && would_serve) {
      os << sep << "its " << toString(r.key) << " kernel is disabled (set_kernel_enabled)";
      sep = "; ";
    }
  }
  os << ". Registered:";
  bool any = false;
  for (const auto& r : regs) {
    if (r.what == RegistrationInfo::What::Def) continue;
    os << (any ? ";" : "") << " " << toString(r.key) << " [" << r.kind << ", owner " << r.owner << ", " << r.debug
       << (r.enabled ? "" : ", disabled") << "]";
    any = true;
  }
  if (!any) os << " no kernels";
  const auto fbs = d.fallbacks();
  if (!fbs.empty()) {
    os << ". Backend fallbacks:";
    // One per key: the one that serves it (a layer's fallback registered with
    // allow_override shadows the builtin one beneath it).
    for (const auto& f : fbs) {
      if (f.active) os << " " << toString(f.key) << " (" << f.kind << ")";
    }
  }
  STRATA_FAIL(NotImplemented, os.str());
}

}  // namespace

// ---------------------------------------------------------------------------
// Owners.

namespace {
thread_local std::optional<std::string> tls_owner;
const std::string& defaultOwner() {
  static const std::string* s = new std::string("user");
  return *s;
}
}  // namespace

RegistrationOwnerGuard::RegistrationOwnerGuard(std::string owner) {
  if (!tls_owner) tls_owner.emplace(defaultOwner());
  saved_ = std::exchange(*tls_owner, std::move(owner));
}
RegistrationOwnerGuard::~RegistrationOwnerGuard() { *tls_owner = std::move(saved_); }
const std::string& RegistrationOwnerGuard::current() { return tls_owner ? *tls_owner : defaultOwner(); }

// ---------------------------------------------------------------------------
// KernelHandle.

bool KernelHandle::valid() const {
  auto r = record_.lock();
  return r && !r->removed.load(std::memory_order_acquire);
}

std::shared_ptr<KernelRecord> KernelHandle::lock() const {
  auto r = record_.lock();
  STRATA_CHECK(r && !r->removed.load(std::memory_order_acquire), NotImplemented, "the kernel for ", op_, " at ",
               toString(key_), " (owner ", owner_, ", ", debug_, ") was deregistered; call get_kernel again");
  return r;
}

const KernelFunction& KernelHandle::kernelOf(const KernelRecord& r) { return r.kernel; }

void KernelHandle::callBoxed(Stack& stack) const {
  DispatchKeySet ks = DispatchKeySet(key_);
  if (op_handle_ && op_handle_->hasSchema()) {
    const OperatorInfo* info = op_handle_->entry_->info.load(std::memory_order_acquire);
    info->checkArguments(stack);
    const DispatchKeySet call = detail::computeCallKeys(info->argumentKeys(stack), DispatchKeySet::fromRaw(~uint64_t{0}));
    if (!isAliasKey(key_)) ks = (call & DispatchKeySet::fullUpTo(key_)).add(key_);
  }
  callBoxed(ks, stack);
}

void KernelHandle::callBoxed(DispatchKeySet ks, Stack& stack) const {
  std::shared_ptr<KernelRecord> keep = lock();
  keep->kernel.callBoxed(*op_handle_, ks, stack);
}

// ---------------------------------------------------------------------------
// Free functions.

OperatorName parseOperatorName(std::string_view op) {
  try {
    return parseName(op);
  } catch (const SchemaError& e) {
    STRATA_FAIL(Value, "invalid operator name '", detail::shortened(op), "': ", e.reason(),
                " (expected ns::name or ns::name.overload)");
  }
}

bool set_kernel_enabled(std::string_view op, std::string_view device_or_key, bool enabled) {
  return Dispatcher::singleton().setKernelEnabled(parseOperatorName(op), parseDispatchKey(device_or_key), enabled);
}

bool is_kernel_enabled(std::string_view op, std::string_view device_or_key) {
  return Dispatcher::singleton().isKernelEnabled(parseOperatorName(op), parseDispatchKey(device_or_key));
}

KernelEnabledScope::KernelEnabledScope(std::string_view op, std::string_view device_or_key, bool enabled)
    : op_(parseOperatorName(op)), key_(parseDispatchKey(device_or_key)) {
  previous_ = Dispatcher::singleton().setKernelEnabled(op_, key_, enabled);
}
KernelEnabledScope::~KernelEnabledScope() { Dispatcher::singleton().setKernelEnabled(op_, key_, previous_); }

KernelHandle get_kernel(std::string_view op, std::string_view device_or_key) {
  return Dispatcher::singleton().getKernel(parseOperatorName(op), parseDispatchKey(device_or_key));
}

std::string dump(std::string_view op) { return Dispatcher::singleton().dump(parseOperatorName(op)); }

}  // namespace strata
