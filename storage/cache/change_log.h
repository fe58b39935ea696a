// The change log of a node's index: every increment that appeared or went
// (saves, splits, removals, evictions, another node's increments and
// removals), every use that changed times, every namespace created or
// dropped, in order, with a position (seq) each. Mounts poll it
// (Client::Changes, one RPC per interval) to push exact invalidations into
// the kernel's cache (ptstore(7) "Caching").
//
// Bounded: it keeps the last `capacity` changes. A reader whose position
// fell out of it, or who asks with another epoch (the log of an earlier
// ptstored), gets `lost` and must drop everything it cached. A run of kTimes
// changes of the same key is kept once (a hot prefix used a thousand times
// in a row is one change).
//
// Thread safety: all methods may be called from any thread (one mutex of
// its own; the Store appends under its own mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "core/mutex.h"
#include "ptstore/types.h"

namespace ptstore::storage {

class ChangeLog {
 public:
  static constexpr size_t kDefaultCapacity = 1 << 16;
  // `epoch` 0: a random one.
  explicit ChangeLog(size_t capacity = kDefaultCapacity, uint64_t epoch = 0);

  void Append(ChangeKind kind, const std::string& ns, const ChainKey& key, const ChainKey& parent)
      EXCLUDES(mu_);

  // The changes from position `since` on, at most `max` of them. With
  // `epoch` not this log's (0 for a reader's first call), nothing but the
  // current position, with `lost` set.
  TreeChanges Since(uint64_t epoch, uint64_t since, size_t max) const EXCLUDES(mu_);

  uint64_t epoch() const { return epoch_; }
  uint64_t next() const EXCLUDES(mu_);

 private:
  const size_t capacity_;
  const uint64_t epoch_;
  mutable core::Mutex mu_;
  std::deque<TreeChange> entries_ GUARDED_BY(mu_);  // entries_[i] is position first_ + i
  uint64_t first_ GUARDED_BY(mu_) = 0;
};

}  // namespace ptstore::storage
