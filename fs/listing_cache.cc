#include "fs/listing_cache.h"

namespace ptstore::fs {

std::shared_ptr<const Listing> ListingCache::Get(uint64_t ino, uint64_t reader, uint64_t now_ns) {
  core::MutexLock lock(mu_);
  auto it = slots_.find(Key{ino, reader});
  if (it == slots_.end()) return nullptr;
  if (now_ns - it->second.listing->taken_ns > kMaxAgeNs) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.at);
  return it->second.listing;
}

void ListingCache::Put(uint64_t ino, uint64_t reader, std::shared_ptr<const Listing> listing) {
  core::MutexLock lock(mu_);
  const Key key{ino, reader};
  auto it = slots_.find(key);
  if (it != slots_.end()) {
    it->second.listing = std::move(listing);
    lru_.splice(lru_.begin(), lru_, it->second.at);
    return;
  }
  lru_.push_front(key);
  slots_.emplace(key, Slot{std::move(listing), lru_.begin()});
  while (slots_.size() > kMaxListings) {
    slots_.erase(lru_.back());
    lru_.pop_back();
  }
}

size_t ListingCache::size() const {
  core::MutexLock lock(mu_);
  return slots_.size();
}

}  // namespace ptstore::fs
