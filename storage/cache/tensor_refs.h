// What keeps a tensor valid while the Store's mutex is dropped part-way
// through a step (for I/O, or to wait): typed references, made and released
// under the mutex.
//
// - TensorHold keeps the tensor's struct alive, and the tensor in the index
//   as far as eviction goes (a held tensor is no eviction's victim; a
//   removal still takes it out of the index, and its struct stays until
//   the last hold goes). Its bytes may move meanwhile (spilled, filled,
//   dropped). Releasing the last reference of a tensor that has left the
//   index frees it (Store::MaybeDestroyLocked).
// - TensorPin keeps the tensor's DRAM bytes where they are (no eviction,
//   no spill frees them) until it goes; a transient replica's bytes go
//   with its last pin.
//
// The rule, which a spill victim freed while its write ran (commit 086d638)
// and a fetch reading a namespace a fill had let go (4c4a135) broke, is
// in the types: a `Tensor*` is valid after a drop of mu_ only if a hold or
// pin on it (or its Tensor::Io, for the I/O's own thread) lives across the
// drop; anything else is looked up again. What each lock-dropping step
// keeps is listed in store.h.
//
// Thread safety: make, move, release and destroy them with the store's mu_
// held, within the scope that holds it (a member of a step's job is
// released before the lock goes for good: Release, or clear the job). The
// constructors are checked by clang's analysis (REQUIRES); it cannot name
// the store's mutex through a reference member, so the destructors and
// Release say what they rely on with AssertHeld, as Store's TransientGuard
// does.
#pragma once

#include <utility>

#include "storage/cache/store.h"
#include "storage/index/tensor.h"

namespace ptstore::storage {

// One typed reference of kind K (TensorHold or TensorPin, store.h): taken
// at construction, released by Release or the destructor; moves hand it on.
template <TensorRefKind K>
class TensorRef {
 public:
  TensorRef() = default;
  TensorRef(Store& store, Tensor* t) REQUIRES(store.mu_) : store_(&store), t_(t) {
    if constexpr (K == TensorRefKind::kHold) {
      t_->AddHold();
    } else {
      store.PinLocked(t);
    }
  }
  TensorRef(TensorRef&& o) noexcept : store_(o.store_), t_(std::exchange(o.t_, nullptr)) {}
  TensorRef& operator=(TensorRef&& o) noexcept {
    if (this != &o) {
      Release();
      store_ = o.store_;
      t_ = std::exchange(o.t_, nullptr);
    }
    return *this;
  }
  TensorRef(const TensorRef&) = delete;
  TensorRef& operator=(const TensorRef&) = delete;
  ~TensorRef() { Release(); }

  // Drops the reference now (a no-op when there is none). A hold's last
  // reference frees a tensor that is out of the index
  // (Store::MaybeDestroyLocked); a pin's goes through Store::UnpinLocked,
  // which frees a transient replica's bytes at its last pin and the tensor
  // if nothing else refers to it.
  void Release() {
    if (t_ == nullptr) return;
    store_->mu_.AssertHeld();
    Tensor* t = std::exchange(t_, nullptr);
    if constexpr (K == TensorRefKind::kHold) {
      t->DropHold();
      store_->MaybeDestroyLocked(t);
    } else {
      store_->UnpinLocked(t);
    }
  }

  Tensor* get() const { return t_; }
  Tensor* operator->() const { return t_; }
  explicit operator bool() const { return t_ != nullptr; }

 private:
  Store* store_ = nullptr;
  Tensor* t_ = nullptr;
};

}  // namespace ptstore::storage
