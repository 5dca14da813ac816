// An intrusively ref-counted owning pointer, like c10::intrusive_ptr.
//
// The count lives in the object (intrusive_ptr_target), so a raw T* can be turned
// back into an owner without a control block, and a handle is one pointer wide.
// Thread safety: copying, moving and destroying handles to the same object from
// several threads is safe (the count is atomic); the object itself is not made
// thread safe by this.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace strata {

class intrusive_ptr_target {
 public:
  uint32_t use_count() const noexcept { return refcount_.load(std::memory_order_acquire); }

 protected:
  intrusive_ptr_target() = default;
  // Copying an object does not copy its owners.
  intrusive_ptr_target(const intrusive_ptr_target&) noexcept {}
  intrusive_ptr_target& operator=(const intrusive_ptr_target&) noexcept { return *this; }
  virtual ~intrusive_ptr_target() = default;

 private:
  template <typename T>
  friend class intrusive_ptr;
  friend void intrusive_incref(const intrusive_ptr_target* p) noexcept;
  friend void intrusive_decref(const intrusive_ptr_target* p) noexcept;
  mutable std::atomic<uint32_t> refcount_{0};
};

inline void intrusive_incref(const intrusive_ptr_target* p) noexcept {
  p->refcount_.fetch_add(1, std::memory_order_relaxed);
}
// Deletes the object when the last owner goes.
inline void intrusive_decref(const intrusive_ptr_target* p) noexcept {
  if (p->refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
}

template <typename T>
class intrusive_ptr {
  static_assert(std::is_base_of_v<intrusive_ptr_target, T>,
                "intrusive_ptr<T> needs T to derive from intrusive_ptr_target");

 public:
  constexpr intrusive_ptr() noexcept = default;
  constexpr intrusive_ptr(std::nullptr_t) noexcept {}  // NOLINT

  // Takes a new reference to p (which may already have owners).
  explicit intrusive_ptr(T* p) noexcept : p_(p) {
    if (p_) intrusive_incref(p_);
  }
  // Adopts a reference the caller already holds (the inverse of release()).
  static intrusive_ptr reclaim(T* p) noexcept {
    intrusive_ptr r;
    r.p_ = p;
    return r;
  }
  template <typename... Args>
  static intrusive_ptr make(Args&&... args) {
    return intrusive_ptr(new T(std::forward<Args>(args)...));
  }

  intrusive_ptr(const intrusive_ptr& o) noexcept : p_(o.p_) {
    if (p_) intrusive_incref(p_);
  }
  intrusive_ptr(intrusive_ptr&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
  intrusive_ptr(const intrusive_ptr<U>& o) noexcept : intrusive_ptr(static_cast<T*>(o.get())) {}  // NOLINT

  intrusive_ptr& operator=(const intrusive_ptr& o) noexcept {
    intrusive_ptr(o).swap(*this);
    return *this;
  }
  intrusive_ptr& operator=(intrusive_ptr&& o) noexcept {
    intrusive_ptr(std::move(o)).swap(*this);
    return *this;
  }
  ~intrusive_ptr() {
    if (p_) intrusive_decref(p_);
  }

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  uint32_t use_count() const noexcept { return p_ ? p_->use_count() : 0; }

  // Gives up ownership without decrementing; pair with reclaim().
  T* release() noexcept { return std::exchange(p_, nullptr); }
  void reset() noexcept { intrusive_ptr().swap(*this); }
  void swap(intrusive_ptr& o) noexcept { std::swap(p_, o.p_); }

  friend bool operator==(const intrusive_ptr& a, const intrusive_ptr& b) { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

template <typename T, typename... Args>
intrusive_ptr<T> make_intrusive(Args&&... args) {
  return intrusive_ptr<T>::make(std::forward<Args>(args)...);
}

}  // namespace strata
