#include "storage/cache/change_log.h"

#include <algorithm>
#include <random>

namespace ptstore::storage {

namespace {
uint64_t RandomEpoch() {
  std::random_device rd;
  uint64_t e = 0;
  while (e == 0) e = (uint64_t{rd()} << 32) ^ rd();
  return e;
}
}  // namespace

ChangeLog::ChangeLog(size_t capacity, uint64_t epoch)
    : capacity_(std::max<size_t>(capacity, 1)), epoch_(epoch != 0 ? epoch : RandomEpoch()) {}

void ChangeLog::Append(ChangeKind kind, const std::string& ns, const ChainKey& key, const ChainKey& parent) {
  core::MutexLock lock(mu_);
  if (kind == ChangeKind::kTimes && !entries_.empty()) {
    const TreeChange& last = entries_.back();
    if (last.kind == kind && last.key == key && last.ns == ns) return;  // the same use again
  }
  entries_.push_back(TreeChange{kind, ns, key, parent});
  if (entries_.size() > capacity_) {
    entries_.pop_front();
    ++first_;
  }
}

uint64_t ChangeLog::next() const {
  core::MutexLock lock(mu_);
  return first_ + entries_.size();
}

TreeChanges ChangeLog::Since(uint64_t epoch, uint64_t since, size_t max) const {
  core::MutexLock lock(mu_);
  TreeChanges out;
  out.epoch = epoch_;
  const uint64_t end = first_ + entries_.size();
  if (epoch != epoch_ || since < first_ || since > end) {
    out.lost = true;
    out.next = end;
    return out;
  }
  const uint64_t stop = since + std::min<uint64_t>(max, end - since);
  out.changes.reserve(stop - since);
  for (uint64_t i = since; i < stop; ++i) out.changes.push_back(entries_[i - first_]);
  out.next = stop;
  out.more = stop < end;
  return out;
}

}  // namespace ptstore::storage
