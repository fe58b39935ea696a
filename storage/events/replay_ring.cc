#include "storage/events/replay_ring.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ptstore::storage {

ReplayRing::~ReplayRing() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

Status ReplayRing::Init(uint64_t batches, uint64_t bytes) {
  if (batches == 0 || bytes == 0) return InvalidArgument("kv events: the replay buffer needs batches and bytes");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return ErrnoError("kv events: mapping the replay buffer", errno);
  data_ = static_cast<char*>(p);
  capacity_ = bytes;
  max_batches_ = batches;
  return Status::OK();
}

void ReplayRing::Prefault() {
  if (::madvise(data_, capacity_, MADV_POPULATE_WRITE) == 0) return;
  // Kernels before 5.14: one write a page.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (uint64_t at = 0; at < capacity_; at += page) data_[at] = 0;
}

void ReplayRing::PopOldest() {
  used_ -= entries_.front().size;
  entries_.pop_front();
  if (entries_.empty()) head_ = 0;
}

void ReplayRing::Add(uint64_t seq, std::string_view payload) {
  const uint64_t len = payload.size();
  if (len > capacity_) return;
  while (entries_.size() >= max_batches_) PopOldest();
  uint64_t at = head_;
  if (at + len > capacity_) at = 0;  // wrap: the tail of the ring stays unused this lap
  // The free space runs from head_ to the oldest batch in ring order, so
  // what lies in the way is always the oldest: drop until nothing does. A
  // wrapped write also gives up every batch between head_ and the end (the
  // oldest, in a ring that has wrapped before).
  const bool wrapped = at < head_;
  const uint64_t from = head_;
  while (!entries_.empty()) {
    const Entry& e = entries_.front();
    const bool overlaps = e.offset < at + len && at < e.offset + e.size;
    const bool passed = wrapped && e.offset >= from;
    if (!overlaps && !passed) break;
    PopOldest();
  }
  std::memcpy(data_ + at, payload.data(), len);
  entries_.push_back({seq, at, len});
  used_ += len;
  head_ = at + len;
}

void ReplayRing::ForEachFrom(uint64_t start, const std::function<void(uint64_t, std::string_view)>& f) const {
  for (const Entry& e : entries_) {
    if (e.seq >= start) f(e.seq, std::string_view(data_ + e.offset, e.size));
  }
}

}  // namespace ptstore::storage
