// The plugin boundary: the one header a bundle author needs beside the SDK.
//
// A bundle is a Qt plugin module: a QObject that implements strata::Bundle, with its
// metadata embedded from bundle.json. The host reads the metadata without loading
// the library, checks it, then loads the library, checks the ABI the root object
// reports, and calls registerAll() inside a load transaction (Note [The load
// transaction] in host/plugin_host.h). STRATA_LIBRARY blocks in a bundle are run
// there too, owned by the bundle (Note [Static registrations in bundles] below).
//
//   // mybundle.cc (CMake: find_package(strata) and strata_add_bundle(mybundle SOURCES mybundle.cc);
//   // the README, "Write a bundle", has a complete example)
//   #include <strata/plugin.h>
//   class MyBundle : public QObject, public strata::Bundle {
//     Q_OBJECT
//     Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "bundle.json")
//     Q_INTERFACES(strata::Bundle)
//    public:
//     void registerAll(strata::BundleRegistrar& r) override {
//       auto& m = r.library(strata::Library::DEF, "mylib");
//       m.def("sin(Tensor x) -> Tensor");
//       m.impl("sin", &my_sin, "cpu");
//     }
//   };
//   #include "mybundle.moc"
//
// bundle.json:
//   {"name": "mylib", "version": "1.0.0", "abi": {"major": 4, "minor": 4},
//    "description": "...", "defines": ["mylib"], "implements": []}
//
// "defines": the namespaces whose DEF library the bundle holds; "implements": the
// namespaces it registers kernels for without defining them (its dependencies: it
// loads after their definers, and is refused when none is loaded).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/dispatcher.h"
#include "strata/export.h"
#include "strata/library.h"

// The SDK ABI: a bundle built against major M minor m loads in a host of major M
// and minor >= m. The major changes when a change breaks built bundles: 2, the
// TensorImpl layout; 3, typed calls (inlined into the bundle) mark their thread
// for grace periods (strata/call_section.h), which an older bundle's calls miss;
// 4, Stack holds its first values in place (Note [Stacks in place] in
// strata/ivalue.h), so its layout is no longer std::vector's.
// The minor changes when the SDK exports more: 1, the CUDA streams and the caching
// allocator's API (strata/cuda.h), which a bundle built now may call and an older
// host does not have; 2, pooled operator new/delete; 3, OperatorHandle::hasRules()
// reads a field an older host's operators lack; 4, modes::BoxedDispatchMode, a
// class an older host's modes library does not have (minors of major 3; major 4
// starts again at 0); 1, TensorImpl::release_wrapper / reset_wrapper (Note [Reusing
// wrapper tensors] in strata/tensor.h) and modes::vmap_spare_batched_tensors; 2,
// TensorImpl::reset_wrapper_hiding_dim and vmap()'s call in three steps
// (VmapCall::enterTensors / exitTensors / finishTensor, which vmap.h's template calls);
// 3, typed batching rules (modes::register_vmap<Sig>: vmap.h's templates call
// TypedRuleFrame, runBatchedKernel and addTypedVmapRule) and vmap()'s usual call in
// modes::detail::VmapTensorsCall; 4, ops::fill_, ops::zero_ and Tensor::zero_ out of
// line (the core::fill_.Scalar and core::zero_ ops).
#define STRATA_SDK_ABI_MAJOR 4
#define STRATA_SDK_ABI_MINOR 4
// The Qt plugin interface id of every Strata bundle.
#define STRATA_BUNDLE_IID "org.strata.Bundle/1"

namespace strata {

struct AbiVersion {
  int major = 0;
  int minor = 0;
};

// What a bundle registers through: Libraries and other registrations (rules, mode
// types) that the host owns for the bundle's lifetime. Everything registered here
// is removed, newest first, when the bundle is removed, disabled or replaced, or
// when its load fails.
class STRATA_API BundleRegistrar {
 public:
  BundleRegistrar(std::string name, std::string version);
  BundleRegistrar(const BundleRegistrar&) = delete;
  BundleRegistrar& operator=(const BundleRegistrar&) = delete;
  ~BundleRegistrar();

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  // "name@version": the owner of everything this bundle registers.
  std::string owner() const { return name_ + "@" + version_; }

  // A library the host keeps for the bundle (same rules as Library's constructor).
  Library& library(Library::Kind kind, std::string_view ns, std::optional<DispatchKey> key = std::nullopt);
  Library& library(Library::Kind kind, std::string_view ns, std::string_view device_or_key);
  // Keeps any other registration for the bundle's lifetime.
  void keep(RegistrationHandleRAII registration);
  // Takes any other object that owns registrations (a custom_op's CustomOpDef) and
  // keeps it for the bundle's lifetime: it is destroyed, and so what it registered
  // removed, in turn with the rest, newest first.
  //   r.keep(std::move(def));
  // Inline (the object's type is the bundle's): the registrar holds it through a
  // RegistrationHandleRAII.
  template <typename T>
    requires(!std::is_lvalue_reference_v<T> && !std::is_same_v<std::remove_cv_t<T>, RegistrationHandleRAII> &&
             std::is_move_constructible_v<std::remove_cv_t<T>>)
  void keep(T&& owner) {
    auto held = std::make_shared<std::remove_cv_t<T>>(std::move(owner));
    keep(RegistrationHandleRAII([held = std::move(held)]() mutable { held.reset(); }));
  }
  // Runs the STRATA_LIBRARY blocks captured while the bundle's library loaded, each
  // in a library the host keeps for the bundle, as if registerAll had made it.
  void runStaticBlocks(const std::vector<detail::StaticLibraryBlock>& blocks);

  size_t numLibraries() const { return libraries_.size(); }
  // (kind, namespace) of each library, in the order they were made.
  std::vector<std::pair<Library::Kind, std::string>> libraryNamespaces() const;
  // Removes everything, newest first.
  void clear();

 private:
  std::string name_, version_;
  std::vector<std::unique_ptr<Library>> libraries_;
  std::vector<RegistrationHandleRAII> others_;
  std::vector<std::pair<bool, size_t>> order_;  // (is_library, index), in registration order
};

// The interface a bundle's root object implements.
class STRATA_API Bundle {
 public:
  virtual ~Bundle();
  // The ABI the bundle was built with: compiled into the bundle from this header.
  virtual AbiVersion sdkAbi() const { return {STRATA_SDK_ABI_MAJOR, STRATA_SDK_ABI_MINOR}; }
  // Registers everything the bundle provides. May throw: the host then removes what
  // it registered and records the reason.
  virtual void registerAll(BundleRegistrar& registrar) = 0;
};

// The host's ABI (what this SDK build is).
STRATA_API AbiVersion hostSdkAbi();

// Note [Static registrations in bundles]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's habit is to register from static initializers (TORCH_LIBRARY blocks),
// which run while the library is being loaded: before any load transaction, under
// no owner, with handles the host does not hold and cannot drop. So while a host
// loads a bundle's library it keeps a CaptureStaticRegistrations on that thread:
//   - a STRATA_LIBRARY / _FRAGMENT / _IMPL block does not run then; it is recorded
//     (detail::deferStaticBlock) and the host runs it inside the bundle's load
//     transaction (BundleRegistrar::runStaticBlocks), owned by "name@version", checked
//     against bundle.json, published with the rest and removed with the bundle. The
//     library is never unloaded, so the host keeps the blocks of each file it loaded
//     and runs them again whenever that file loads again;
//   - any other registration made then (a namespace-scope Library, a registration
//     function called from a static constructor) is refused: it registers nothing,
//     returns an empty handle, and is recorded, and the host rejects the bundle,
//     naming each one. Nothing of such a bundle reaches a table.
// A static initializer that throws ends the process, as in any C++ program; the
// macros never throw at load (their blocks run later, in the transaction).
struct StaticRegistrations {
  std::vector<detail::StaticLibraryBlock> blocks;  // deferred, in load order
  std::vector<std::string> refused;                // "def ns::f(...) (registered at file:line)", ...
};

// Captures static registrations on this thread while alive (see the Note). Nests:
// the innermost capture receives them.
class STRATA_API CaptureStaticRegistrations {
 public:
  explicit CaptureStaticRegistrations(StaticRegistrations& into);
  CaptureStaticRegistrations(const CaptureStaticRegistrations&) = delete;
  CaptureStaticRegistrations& operator=(const CaptureStaticRegistrations&) = delete;
  ~CaptureStaticRegistrations();

 private:
  StaticRegistrations* saved_;
};

}  // namespace strata

// Bundles build with Qt Core; the SDK itself does not.
#if defined(QT_CORE_LIB) || defined(QT_VERSION)
#include <QtPlugin>
Q_DECLARE_INTERFACE(strata::Bundle, STRATA_BUNDLE_IID)
#endif
