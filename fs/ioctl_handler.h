// The ioctl fast path of a mount (include/ptstore/ioctl.h, ptstore(7)):
// INFO, PIN (paged) and UNPIN on an open namespace or increment directory.
//
// Leases belong to the open directory (a LeaseSet per handle): the mount
// holds the store's pins for them and releases them on UNPIN or when the
// directory is closed (releasedir: also when the process dies). Lease ids
// are local to the open directory. A pin also ends when the store's lease
// time passes (30 s by default): copy promptly.
//
// Thread safety: a LeaseSet may be used from many threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "fs/node.h"
#include "fs/tree.h"
#include "ptstore/client.h"
#include "ptstore/ioctl.h"
#include "storage/access.h"

namespace ptstore::fs {

class LeaseSet {
 public:
  struct Lease {
    PinnedPrefix pin;
    std::vector<ptstore_ioc_extent> extents;
    uint64_t tokens = 0;
    uint64_t bytes = 0;
  };
  // Takes the pin; returns its lease id (never 0).
  uint64_t Add(Lease lease);
  // Runs fn(lease) under the set's lock; false if there is no such lease.
  template <typename F>
  bool With(uint64_t id, F&& fn) {
    std::lock_guard lock(mu_);
    auto it = leases_.find(id);
    if (it == leases_.end()) return false;
    fn(it->second);
    return true;
  }
  // Releases the pin; false if there is no such lease.
  bool Remove(uint64_t id);
  size_t size() const;

 private:
  mutable std::mutex mu_;  // guards leases_, next_
  std::map<uint64_t, Lease> leases_;
  uint64_t next_ = 1;
};

// Handles one ioctl on the open directory `dir` for `caller`: `in` holds
// the command's argument (in_size bytes); on success *out is the reply's
// argument. Returns 0 or the errno documented in include/ptstore/ioctl.h.
int HandleIoctl(TreeView& tree, const NodeRef& dir, LeaseSet& leases, const storage::Credentials& caller,
                unsigned int cmd, const void* in, size_t in_size, std::vector<uint8_t>* out);

}  // namespace ptstore::fs
