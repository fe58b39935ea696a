// Listings of directories read without an open handle.
//
// The mount answers opendir with ENOSYS (fs/dir_ops.cc: a walk then
// costs no opendir and releasedir round trip per directory), so readdir
// comes with no handle to keep a listing in from one call to the next. A
// big directory is read in several calls (as many entries as fit the
// reader's getdents buffer each); taking a new listing at every call would
// cost the whole directory per call. A listing is taken at offset 0 and
// kept here, by inode and reader (the thread that reads: one directory
// stream is read by one thread in practice), for the calls at later
// offsets of the same stream, which come back to back: a call at a later
// offset that finds none, or one older than kMaxAgeNs, takes a new one.
// Bounded: the least recently used of kMaxListings goes.
//
// Thread safety: all methods may be called from many threads at once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "fs/tree.h"

namespace ptstore::fs {

struct Listing {
  uint64_t gen = 0;       // the cache generation it was taken at
  uint64_t taken_ns = 0;  // when (steady clock)
  std::vector<DirEntry> entries;
};

class ListingCache {
 public:
  static constexpr size_t kMaxListings = 64;
  static constexpr uint64_t kMaxAgeNs = 5'000'000'000;

  // The listing kept for (ino, reader) if it was taken at most kMaxAgeNs
  // before `now_ns`, or nullptr.
  std::shared_ptr<const Listing> Get(uint64_t ino, uint64_t reader, uint64_t now_ns) EXCLUDES(mu_);
  // Keeps `listing` for (ino, reader), replacing what was there.
  void Put(uint64_t ino, uint64_t reader, std::shared_ptr<const Listing> listing) EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

 private:
  struct Key {
    uint64_t ino, reader;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.ino * 0x9E3779B97F4A7C15ull ^ k.reader); }
  };
  struct Slot {
    std::shared_ptr<const Listing> listing;
    std::list<Key>::iterator at;  // in lru_
  };
  mutable core::Mutex mu_;
  std::unordered_map<Key, Slot, KeyHash> slots_ GUARDED_BY(mu_);
  std::list<Key> lru_ GUARDED_BY(mu_);  // most recently used first
};

}  // namespace ptstore::fs
