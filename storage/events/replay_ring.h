// The publisher's replay buffer (storage/events/kv_event_publisher.h): the
// last batches sent, by seq, in one byte ring made and pre-faulted once, so
// that keeping a batch allocates nothing and touches no fresh page (on the
// build machine's VM fresh pages come at 0.25-0.3 GB/s, a 4 KiB page as long
// as copying ~150 KiB; a stream at full save speed would fault ~10 MB/s into
// a growing buffer).
//
// Bounded twice: at most `batches` batches and `bytes` bytes; the oldest go
// first. A batch larger than the whole ring is not kept (a replay from it
// is then answered from the next one on, as for any batch dropped).
//
// Thread safety: none; the publisher's thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>

#include "ptstore/status.h"

namespace ptstore::storage {

class ReplayRing {
 public:
  ReplayRing() = default;
  ~ReplayRing();
  ReplayRing(const ReplayRing&) = delete;
  ReplayRing& operator=(const ReplayRing&) = delete;

  // Maps `bytes` of ring.
  Status Init(uint64_t batches, uint64_t bytes);
  // Touches every page of it now (once; the thread does it before its
  // first batch).
  void Prefault();

  void Add(uint64_t seq, std::string_view payload);
  // Calls `f` with every kept batch of seq >= start, oldest first.
  void ForEachFrom(uint64_t start, const std::function<void(uint64_t, std::string_view)>& f) const;

  bool empty() const { return entries_.empty(); }
  uint64_t oldest_seq() const { return entries_.front().seq; }  // not empty()
  uint64_t batches() const { return entries_.size(); }
  uint64_t bytes() const { return used_; }

 private:
  struct Entry {
    uint64_t seq, offset, size;
  };
  void PopOldest();

  char* data_ = nullptr;
  uint64_t capacity_ = 0, max_batches_ = 0;
  uint64_t head_ = 0;  // where the next batch goes unless it must wrap
  uint64_t used_ = 0;  // payload bytes kept
  std::deque<Entry> entries_;  // oldest first; in ring order from the oldest's offset
};

}  // namespace ptstore::storage
