// The ioctl fast path of a mount (include/ptstore/ioctl.h, ptstore(7)):
// INFO on a directory or a kv file, PIN (paged) and UNPIN on an open kv
// file.
//
// Leases belong to the open kv file (a LeaseSet per handle): the mount
// holds the store's pins for them and releases them on UNPIN or when the
// file is closed (release: also when the process dies). Lease ids are
// local to the open file. Directories hold none: the mount answers opendir
// with ENOSYS, so their ioctls come without an open handle. A pin also ends
// when the store's lease time passes (30 s by default): copy promptly.
//
// Thread safety: a LeaseSet may be used from many threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/mutex.h"
#include "fs/node.h"
#include "fs/tree.h"
#include "ptstore/client.h"
#include "ptstore/ioctl.h"
#include "local/access.h"

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
  uint64_t Add(Lease lease) EXCLUDES(mu_);
  // Runs fn(lease) under the set's lock; false if there is no such lease.
  template <typename F>
  bool With(uint64_t id, F&& fn) EXCLUDES(mu_) {
    core::MutexLock lock(mu_);
    auto it = leases_.find(id);
    if (it == leases_.end()) return false;
    fn(it->second);
    return true;
  }
  // Releases the pin; false if there is no such lease.
  bool Remove(uint64_t id) EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

 private:
  mutable core::Mutex mu_;
  std::map<uint64_t, Lease> leases_ GUARDED_BY(mu_);
  uint64_t next_ GUARDED_BY(mu_) = 1;
};

// Handles one ioctl on `node` (a directory, or an increment's kv file) for
// `caller`: `leases` are the open kv file's (nullptr for a directory: PIN
// and UNPIN fail with EISDIR); `in` holds the command's argument (in_size
// bytes); on success *out is the reply's argument. Returns 0 or the errno
// documented in include/ptstore/ioctl.h (ENOTTY for other files).
int HandleIoctl(TreeView& tree, const NodeRef& node, LeaseSet* leases, const local::Credentials& caller,
                unsigned int cmd, const void* in, size_t in_size, std::vector<uint8_t>* out);

}  // namespace ptstore::fs
