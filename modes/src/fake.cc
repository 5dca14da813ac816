// Fake tensors, FakeTensorMode, register_fake and get_ctx. See Note [Fake tensors]
// in strata/modes/fake.h.
#include "strata/modes/fake.h"

#include <algorithm>
#include <functional>

#include "registered_at.h"

namespace strata::modes {

namespace {

// What a fake tensor's TensorWrapper holds.
class FakeInfo final : public TensorWrapper {
 public:
  FakeInfo(Storage meta, std::weak_ptr<FakeTensorMode> mode, uint64_t owner, Device device)
      : meta_storage(std::move(meta)), mode(std::move(mode)), owner(owner), device(device) {}
  std::string what() const override;
  std::string str() const override {
    return "FakeTensor(device=" + device.str() + ")";
  }
  Storage meta_storage;  // what a Meta kernel sees for this tensor's storage
  std::weak_ptr<FakeTensorMode> mode;
  uint64_t owner;  // the mode's id, for "another mode's fake tensor"
  Device device;
};

// The op FakeTensorMode is running on this thread, for messages.
thread_local const OperatorHandle* tls_faking = nullptr;
thread_local FakeImplCtx* tls_ctx = nullptr;

std::string FakeInfo::what() const {
  std::string s = "a fake tensor (" + device.str() + ", no data)";
  if (tls_faking != nullptr) s += " in the fake implementation of " + tls_faking->name();
  return s;
}

FakeInfo* infoOf(const Tensor& t) {
  if (!t.defined() || !t.key_set().has(DispatchKey::Fake)) return nullptr;
  return dynamic_cast<FakeInfo*>(t.wrapper());
}

Tensor makeFake(const std::shared_ptr<FakeTensorMode>& mode, uint64_t owner, Storage fake_storage,
                Storage meta_storage, ScalarType dtype, IntArrayRef sizes, IntArrayRef strides, int64_t offset,
                bool requires_grad) {
  const Device device = fake_storage->device();
  auto info = make_intrusive<FakeInfo>(std::move(meta_storage), mode, owner, device);
  auto impl = make_intrusive<TensorImpl>(std::move(fake_storage), dtype, sizes, strides, offset,
                                         DispatchKeySet(DispatchKey::Fake), std::move(info));
  Tensor t(std::move(impl));
  if (requires_grad) t.set_requires_grad(true);  // with its autograd metadata, before any thread shares it
  return t;
}

Storage fakeStorage(size_t nbytes, Device device) { return make_intrusive<StorageImpl>(DataPtr{}, nbytes, device); }

// The meta tensor a Meta kernel sees for a fake one.
Tensor toMeta(const Tensor& fake, const FakeInfo& info) {
  return Tensor(make_intrusive<TensorImpl>(info.meta_storage, fake.dtype(), fake.sizes(), fake.strides(),
                                           fake.storage_offset()));
}

struct FakingScope {
  const OperatorHandle* saved;
  explicit FakingScope(const OperatorHandle* op) : saved(std::exchange(tls_faking, op)) {}
  ~FakingScope() { tls_faking = saved; }
};
struct CtxScope {
  FakeImplCtx* saved;
  explicit CtxScope(FakeImplCtx* c) : saved(std::exchange(tls_ctx, c)) {}
  ~CtxScope() { tls_ctx = saved; }
};

// Calls f on every tensor slot of a value (Tensor, Tensor[], Tensor?[]).
template <typename F>
void forEachTensor(IValue& v, F&& f) {
  if (v.isTensor()) {
    Tensor t = v.toTensor();
    if (t.defined()) {
      f(t);
      v = IValue(std::move(t));
    }
  } else if (v.isTensorList()) {
    std::vector<Tensor> ts = v.toTensorList();
    for (Tensor& t : ts) {
      if (t.defined()) f(t);
    }
    v = IValue(std::move(ts));
  } else if (v.isGenericList()) {
    std::vector<IValue> items = v.toList();
    bool any = false;
    for (IValue& item : items) {
      if (item.isTensor()) {
        any = true;
        forEachTensor(item, f);
      }
    }
    if (any) v = IValue(std::move(items));
  }
}

bool isDeviceArgument(const Argument& a) {
  const Type* t = a.type.get();
  if (t->kind() == TypeKind::Optional) t = t->contained()[0].get();
  return t->kind() == TypeKind::Device;
}

}  // namespace

// ---------------------------------------------------------------------------

struct FakeTensorMode::Memo {
  std::mutex mu;
  // real impl -> (real, fake): the real one is kept so its address is never reused.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> tensors;
  // real storage -> (fake storage, meta storage), so aliases stay aliases.
  std::unordered_map<const StorageImpl*, std::pair<Storage, Storage>> storages;
};

namespace {
std::atomic<uint64_t> g_next_mode_id{1};
}  // namespace

FakeTensorMode::FakeTensorMode() : memo_(std::make_unique<Memo>()), id_(g_next_mode_id.fetch_add(1)) { initialize(); }
FakeTensorMode::~FakeTensorMode() = default;

std::string FakeTensorMode::summary() const {
  return strata::detail::concat(made_.load(), " fake tensor(s) made, ", next_symbol_.load(), " symbolic size(s)");
}

Tensor FakeTensorMode::from_tensor(const Tensor& t) {
  if (!t.defined()) return t;
  if (FakeInfo* info = infoOf(t)) {
    STRATA_CHECK(info->owner == id_, Value, "a fake tensor of another FakeTensorMode was given to this one: fake "
                 "tensors of two modes do not mix (make them with one mode's from_tensor)");
    return t;
  }
  STRATA_CHECK(t.wrapper() == nullptr, Value, "cannot make a fake tensor from ", t.wrapper()->what());
  std::lock_guard<std::mutex> lock(memo_->mu);
  if (auto it = memo_->tensors.find(t.unsafeGetTensorImpl()); it != memo_->tensors.end()) return it->second.second;
  auto& storages = memo_->storages[t.storage().get()];
  if (!storages.first) {
    storages.first = fakeStorage(t.storage()->nbytes(), t.device());
    storages.second = allocateStorage(t.storage()->nbytes(), kMeta);
  }
  Tensor fake = makeFake(shared_from_this(), id_, storages.first, storages.second, t.dtype(), t.sizes(), t.strides(),
                         t.storage_offset(), t.requires_grad());
  made_.fetch_add(1, std::memory_order_relaxed);
  memo_->tensors.emplace(t.unsafeGetTensorImpl(), std::make_pair(t, fake));
  return fake;
}

Tensor FakeTensorMode::empty(IntArrayRef sizes, ScalarType dtype, Device device) {
  const Tensor meta = strata::empty(sizes, TensorOptions(dtype).with_device(kMeta));
  made_.fetch_add(1, std::memory_order_relaxed);
  return makeFake(shared_from_this(), id_, fakeStorage(meta.storage()->nbytes(), device), meta.storage(), dtype,
                  meta.sizes(), meta.strides(), 0, false);
}

SymInt FakeTensorMode::new_symbol(int64_t min, std::optional<int64_t> max) {
  const size_t n = next_symbol_.fetch_add(1);
  return SymInt(sym::newSymbol("u" + std::to_string(n), min, max.value_or(sym::kInf)));
}

SymInt FakeImplCtx::new_dynamic_size(int64_t min, std::optional<int64_t> max) { return mode_.new_symbol(min, max); }

FakeImplCtx& get_ctx() {
  STRATA_CHECK(tls_ctx != nullptr, Value,
               "get_ctx() is only valid inside a fake implementation that FakeTensorMode runs (register_fake); "
               "called elsewhere, or from a fake impl serving meta tensors, there is no context to make symbolic "
               "sizes in");
  return *tls_ctx;
}

bool is_fake(const Tensor& t) { return infoOf(t) != nullptr; }

std::shared_ptr<FakeTensorMode> fake_mode_of(const Tensor& t) {
  FakeInfo* info = infoOf(t);
  return info != nullptr ? info->mode.lock() : nullptr;
}

Stack FakeTensorMode::dispatch(const OperatorHandle& op, const TensorTypes& /*types*/, Stack args) {
  enum class How { FakeImpl, MetaKernel, Composite };
  const OperatorHandle::SlotSource slot = op.slotSource(DispatchKey::Meta);
  const std::string_view source = slot.source;
  How how;
  if (slot.kernel != nullptr && slot.kernel->isFakeImpl()) {
    how = How::FakeImpl;
  } else if (source != "composite implicit kernel" && (op.hasTag(Tag::data_dependent_output) ||
                                                       op.hasTag(Tag::dynamic_output_shape))) {
    // PyTorch's DataDependentOutputException and DynamicOutputShapeException: a Meta
    // kernel cannot know what the tag says depends on data; only a fake impl, with
    // get_ctx().new_dynamic_size(), can describe it.
    const bool values = op.hasTag(Tag::data_dependent_output);
    STRATA_FAIL(NotImplemented, op.name(), " is tagged ", values ? "data_dependent_output" : "dynamic_output_shape",
                ": its output's ", values ? "values" : "shape", " depend on its inputs' data, which fake tensors do "
                "not have, so FakeTensorMode runs no Meta kernel for it. Register a fake impl that describes the "
                "output with get_ctx().new_dynamic_size(): strata::modes::register_fake(\"", op.name(), "\", fn)");
  } else if (slot.kernel != nullptr && source == "kernel") {
    how = How::MetaKernel;
  } else if (slot.kernel != nullptr && source == "composite implicit kernel") {
    how = How::Composite;
  } else {
    const auto regs = Dispatcher::singleton().registrations(op.operator_name());
    if (std::any_of(regs.begin(), regs.end(), [](const RegistrationInfo& r) {
          return r.what == RegistrationInfo::What::Impl && r.key == DispatchKey::Meta && !r.enabled;
        })) {
      // It has one, switched off: say how to turn it on, not to register another.
      STRATA_FAIL(NotImplemented, op.name(), " has no fake implementation to run: its Meta kernel (the fake impl) "
                  "is disabled, and FakeTensorMode runs an op's fake impl or Meta kernel, never a real one; turn it "
                  "on again (strata kernel enable ", op.name(), " meta, or set_kernel_enabled)");
    }
    STRATA_FAIL(NotImplemented, op.name(), " has no fake implementation",
                ": FakeTensorMode runs an op's fake impl or Meta kernel, never a real one (its Meta slot holds ",
                source == "missing" ? "nothing" : std::string(source), "). Register one with "
                "strata::modes::register_fake(\"", op.name(), "\", fn) (strata/modes/fake.h), or a Meta kernel");
  }

  const std::shared_ptr<FakeTensorMode> self = shared_from_this();
  const auto& schema_args = op.schema().arguments();
  std::optional<Device> device_arg;
  std::optional<Device> common;      // of the tensors with dims
  std::optional<Device> any_device;  // of any tensor (0-d cpu ones too)
  // The fake arguments, and for the Meta kernel path the meta tensors standing for them.
  std::vector<std::pair<const TensorImpl*, Tensor>> meta_of;  // meta impl -> the fake it stands for
  // copy_ copies across devices, as the real op does: its source may be anywhere, and
  // the result is self, on self's device.
  const bool any_source_device = op.operator_name().name == "core::copy_";
  for (size_t i = 0; i < args.size(); ++i) {
    IValue& v = args[i];
    if (i < schema_args.size() && isDeviceArgument(schema_args[i])) {
      if (v.isDevice()) device_arg = v.toDevice();
      if (how == How::MetaKernel) v = IValue(kMeta);  // factories make meta tensors for the kernel
      continue;
    }
    forEachTensor(v, [&](Tensor& t) {
      Tensor fake = from_tensor(t);
      const Device d = fake.device();
      if (!any_device) any_device = d;
      if (!(fake.dim() == 0 && d.is_cpu()) && !(any_source_device && i > 0)) {
        if (!common) {
          common = d;
        } else if (!(*common == d)) {
          STRATA_FAIL(Device, op.name(), ": FakeTensorMode found tensors on two devices, ", common->str(), " and ",
                      d.str(), " (only 0-d cpu tensors mix with other devices)");
        }
      }
      if (how == How::MetaKernel) {
        Tensor meta = toMeta(fake, *infoOf(fake));
        meta_of.emplace_back(meta.unsafeGetTensorImpl(), fake);
        t = std::move(meta);
      } else {
        t = std::move(fake);
      }
    });
  }
  const Device out_device = device_arg ? *device_arg : common ? *common : any_device ? *any_device : kCPU;

  // The kernel the decision above was made on is the one that runs, even if another
  // thread removes it meanwhile (it stays alive until this call ends: Note [Grace periods]): a
  // redispatch would read the table again and could find it gone.
  const KernelFunction& kernel = *slot.kernel;
  const DispatchKeySet meta(DispatchKey::Meta);
  auto run = [&] {
    std::optional<strata::detail::TraceScope> traced;  // explain shows the step as a redispatch would
    if (__builtin_expect(strata::detail::g_dispatch_observers.load(std::memory_order_relaxed) != 0, 0)) {
      traced.emplace(op, meta, /*redispatch=*/true, /*boxed=*/true);
    }
    kernel.callBoxed(op, meta, args);
  };
  FakingScope faking(&op);
  if (how == How::MetaKernel) {
    run();
  } else {
    FakeImplCtx ctx(*this, op);
    CtxScope ctx_scope(how == How::FakeImpl ? &ctx : tls_ctx);
    ModeGuard again(self);  // the ops the impl calls make fake tensors
    run();
  }

  // The results: fake tensors of this mode.
  size_t index = 0;
  for (IValue& v : args) {
    forEachTensor(v, [&](Tensor& t) {
      if (FakeInfo* info = infoOf(t)) {
        STRATA_CHECK(info->owner == id_, Value, op.name(), ": result ", index, " is a fake tensor of another "
                     "FakeTensorMode");
        return;
      }
      STRATA_CHECK(t.wrapper() == nullptr && t.is_meta(), Value, op.name(), ": the fake implementation returned a ",
                   "tensor with data (", t.device().str(), ") for result ", index, ". A fake impl makes its results "
                   "with core:: ops (strata::ops::empty, empty_like, ...), which FakeTensorMode turns into fake "
                   "tensors; strata::empty() and other factories that are not ops allocate real memory");
      for (const auto& [meta_impl, fake] : meta_of) {
        if (meta_impl == t.unsafeGetTensorImpl()) {  // the kernel returned an argument (in-place, out=)
          t = fake;
          return;
        }
      }
      // A view of an argument shares its fake storage; anything else is new.
      Storage fake_storage;
      for (const auto& [meta_impl, fake] : meta_of) {
        if (infoOf(fake)->meta_storage.get() == t.storage().get()) {
          fake_storage = fake.storage();
          break;
        }
      }
      if (!fake_storage) fake_storage = fakeStorage(t.storage()->nbytes(), out_device);
      made_.fetch_add(1, std::memory_order_relaxed);
      t = makeFake(self, id_, std::move(fake_storage), t.storage(), t.dtype(), t.sizes(), t.strides(),
                   t.storage_offset(), t.requires_grad());
    });
    ++index;
  }
  return args;
}

// ---------------------------------------------------------------------------
// The Fake key's fallback: an op on fake tensors with no FakeTensorMode handling it.

namespace {

void fakeFallback(const OperatorHandle& op, DispatchKeySet /*ks*/, Stack& stack) {
  std::shared_ptr<FakeTensorMode> mode;
  uint64_t owner = 0;
  for (IValue& v : stack) {
    forEachTensor(v, [&](Tensor& t) {
      FakeInfo* info = infoOf(t);
      if (info == nullptr) return;
      if (owner == 0) {
        owner = info->owner;
        mode = info->mode.lock();
        STRATA_CHECK(mode != nullptr, Value, op.name(), " was called on a fake tensor whose FakeTensorMode is gone: "
                     "keep the mode alive as long as its fake tensors are used");
      } else {
        STRATA_CHECK(info->owner == owner, Value, op.name(), " was called on fake tensors of two FakeTensorModes; "
                     "fake tensors of two modes do not mix");
      }
    });
  }
  STRATA_INTERNAL_ASSERT(mode != nullptr, "", op.name(), " reached the Fake key with no fake tensor argument");
  ModeGuard guard(mode);
  op.redispatchBoxed(DispatchKeySet(DispatchKey::Mode), stack);
}

}  // namespace

namespace detail {

RegistrationHandleRAII registerFakeFallback() {
  return Dispatcher::singleton().registerFallback(
      DispatchKey::Fake, KernelFunction::makeFromBoxedFunctor(&fakeFallback),
      {RegistrationOwnerGuard::current(), registeredAt(std::source_location::current()), false});
}

namespace {
// How a custom op's trivial fake impl begins its debug string: any register_fake
// replaces it, as PyTorch's register_fake replaces the one custom_op generated.
constexpr std::string_view kTrivialFake = "trivial fake impl of a custom op that writes its arguments and returns nothing";
}  // namespace

RegistrationHandleRAII registerTrivialFake(std::string_view op_text, size_t num_args, std::source_location loc) {
  const OperatorName name = parseOperatorName(op_text);
  KernelFunction kernel = KernelFunction::makeFromBoxedFunctor([num_args](const OperatorHandle&, Stack& stack) {
    stack.resize(stack.size() >= num_args ? stack.size() - num_args : 0);  // writes nothing a fake holds
  });
  kernel.markFakeImpl();
  return Dispatcher::singleton().registerImpl(
      name, DispatchKey::Meta, std::move(kernel),
      {RegistrationOwnerGuard::current(), std::string(kTrivialFake) + "; " + registeredAt(loc), false});
}

RegistrationHandleRAII registerFake(std::string_view op_text, KernelFunction kernel, bool allow_override,
                                    std::source_location loc) {
  initialize();
  const std::string debug = registeredAt(loc);
  const std::string call = "register_fake(" + std::string(op_text) + ")";
  if (strata::detail::capturingStaticRegistrations()) {
    return strata::detail::refuseStaticRegistration(call + " (" + debug + ")");
  }
  const OperatorName name = parseOperatorName(op_text);
  Dispatcher& d = Dispatcher::singleton();
  STRATA_CHECK(d.findSchema(name).has_value(), NotImplemented, call, ": no operator named ", name.str(),
               " (def it first; `strata ops` lists the operators)");
  for (const RegistrationInfo& ri : d.registrations(name)) {
    if (ri.what != RegistrationInfo::What::Impl) continue;
    if (ri.key == DispatchKey::Meta && ri.kind == "fake" && ri.debug.starts_with(kTrivialFake)) {
      allow_override = true;  // the generated one gives way to the author's
      continue;
    }
    if (ri.key == DispatchKey::Meta && ri.kind == "fake" && !allow_override) {
      STRATA_FAIL(Value, call, ": ", name.str(), " already has a fake implementation, registered by '", ri.owner,
                  "' (", ri.debug, "); the new one, by '", RegistrationOwnerGuard::current(), "' (", debug,
                  "), is refused. Pass allow_override to replace it.");
    }
    if (ri.key == DispatchKey::Meta && ri.kind != "fake") {
      STRATA_FAIL(Value, call, ": ", name.str(), " already has a Meta kernel, registered by '", ri.owner, "' (",
                  ri.debug, "), which is its fake implementation already (FakeTensorMode and meta tensors run it). "
                  "Register one or the other, not both");
    }
    if (ri.key == DispatchKey::CompositeImplicitAutograd) {
      STRATA_FAIL(Value, call, ": ", name.str(), " has a CompositeImplicitAutograd kernel, registered by '", ri.owner,
                  "' (", ri.debug, "): it decomposes into other ops, whose fake implementations FakeTensorMode "
                  "runs, so it needs none of its own");
    }
  }
  STRATA_CHECK(!kernel.isFallthrough(), Value, call, ": a fake implementation cannot be a fallthrough");
  kernel.markFakeImpl();
  return d.registerImpl(name, DispatchKey::Meta, std::move(kernel),
                        {RegistrationOwnerGuard::current(), debug, /*allow_override=*/allow_override});
}

}  // namespace detail

}  // namespace strata::modes
