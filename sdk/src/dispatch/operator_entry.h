// The dispatcher's record of one operator. Internal to the SDK.
#pragma once

#include <array>
#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include "strata/dispatcher.h"

namespace strata {

// One kernel registration (impl or fallback).
struct KernelRecord {
  uint64_t id = 0;
  std::string op;  // "" for a fallback
  DispatchKey key = DispatchKey::Undefined;
  KernelFunction kernel;
  std::string owner;
  std::string debug;
  std::atomic<bool> removed{false};
};

// What the boxed call path reads from the schema. Immutable once published; every
// version stays alive with its entry (defs change rarely), so a call that loaded it
// may keep using it.
struct OperatorInfo {
  FunctionSchema schema;
  std::vector<size_t> tensor_args;  // indices of Tensor, Tensor?, Tensor[], Tensor?[] arguments
  // Indices of Device and Device? arguments, when there is no tensor argument: Note
  // [Dispatching on a Device argument].
  std::vector<size_t> device_args;
  // Per argument, the tag that passes without a closer look (Tensor for Tensor, Int
  // for int, ...), or kNoFastTag when every value needs the full check.
  std::vector<IValue::Tag> fast_tags;
  // Indices of the arguments the schema declares written (Tensor(a!), Tensor(a!)[]):
  // Note [One write, one bump] in dispatcher.cc.
  std::vector<size_t> written_args;
  static constexpr IValue::Tag kNoFastTag = static_cast<IValue::Tag>(0xff);
  // What the def said besides the schema (strata/tag.h).
  TagSet op_tags;
  AliasAnalysisKind alias_analysis = AliasAnalysisKind::FROM_SCHEMA;
  explicit OperatorInfo(FunctionSchema s, TagSet tags = {},
                        AliasAnalysisKind alias = AliasAnalysisKind::FROM_SCHEMA);

  // Fills defaults and checks types; see Note [Boxed argument checks]. The stack
  // holds this call's arguments and nothing else. Inline: a stack whose every value
  // has its argument's exact type is the common case.
  void checkArguments(Stack& stack) const {
    const size_t n = fast_tags.size();
    if (__builtin_expect(stack.size() == n, 1)) {
      const IValue* v = stack.data();
      size_t i = 0;
      while (i < n && v[i].tag() == fast_tags[i]) ++i;
      if (__builtin_expect(i == n, 1)) return;
    }
    checkArgumentsSlow(stack);
  }
  void checkArgumentsSlow(Stack& stack) const;
  // The keys the tensor-like arguments on a checked stack contribute.
  DispatchKeySet argumentKeys(const Stack& stack) const {
    DispatchKeySet ks;
    for (size_t i : tensor_args) {
      const IValue& v = stack[i];
      ks = ks | (__builtin_expect(v.isTensor(), 1) ? detail::keysOf(v.toTensor()) : keysOfValue(v));
    }
    if (__builtin_expect(!device_args.empty(), 0)) {
      for (size_t i : device_args) {
        if (stack[i].isDevice()) ks = ks | detail::deviceKeysOf(stack[i].toDevice());
      }
    }
    return ks;
  }
  // The keys one boxed value contributes (Tensor, Tensor[], Tensor?[]; else none).
  static DispatchKeySet keysOfValue(const IValue& v);
};

struct DefRecord {
  uint64_t id = 0;
  std::string owner;
  std::string debug;
};

// One rule (Note [Operator rules]).
struct RuleRecord {
  uint64_t id = 0;
  std::string kind;
  const std::type_info* target = nullptr;
  std::string target_name;
  std::shared_ptr<const void> payload;
  std::string owner;
  std::string debug;
};

// An operator's rules, immutable once published; replaced whole on every change.
struct RuleSet {
  std::vector<std::shared_ptr<const RuleRecord>> rules;
};

struct SlotState {
  const char* source = "missing";
  std::shared_ptr<KernelRecord> record;
};

class OperatorEntry {
 public:
  explicit OperatorEntry(OperatorName n) : name(std::move(n)), qualified(name.str()) {}

  detail::OperatorCore core;
  const OperatorName name;
  const std::string qualified;

  std::optional<DefRecord> def;
  std::atomic<const OperatorInfo*> info{nullptr};
  // A batch took the def down and keeps `info` up for other threads until it ends
  // (Note [Registration batches]); the batch's own thread must not find it.
  std::atomic<bool> def_down_in_batch{false};
  std::vector<std::unique_ptr<const OperatorInfo>> info_versions;

  // Per key, newest first.
  std::map<DispatchKey, std::list<std::shared_ptr<KernelRecord>>> kernels;

  // The C++ signature unboxed kernels and typed calls must share.
  // Note [Who keeps a typed signature]: a typed<>() call fixes the signature, since
  // the handle it returns may be called at any time after. It stays while any owner
  // that made one may still hold it: an owner that is a bundle lets go when the
  // bundle's registrations are dropped (its code, and so its handles, go with them;
  // detail::releaseTypedSignatures); any other owner ("user", "builtin") keeps it for
  // the process's life. A bundle loaded again fixes its signatures again before it
  // registers (detail::refixTypedSignatures): its statics may still hold handles.
  // Left open: a kernel of the old version still running when a swap that changes
  // the signature is published could call through its old handle.
  std::optional<CppSignature> typed_signature;
  std::vector<std::string> typed_owners;  // who made the handles that keep it

  std::array<SlotState, kNumRuntimeKeySlots> slot_state;

  // Read lock-free by OperatorHandle::findRule; null when the op has none.
  std::atomic<const RuleSet*> rules{nullptr};
  std::unique_ptr<const RuleSet> rules_owned;  // what `rules` points at

  bool alive() const { return def.has_value() || !kernels.empty(); }
  OperatorHandle handle() { return OperatorHandle(this, &core); }
};

}  // namespace strata
