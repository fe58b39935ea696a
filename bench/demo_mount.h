// The demo's look at the store through its filesystem view: mount it, walk
// the tree with plain file-system calls, load the deepest prefix by path
// through the ioctl fast path and check every byte.
#pragma once

#include <string>

#include "ptstore/client.h"
#include "ptstore/status.h"

namespace ptstore::bench {

struct MountTour {
  bool mounted = false;
  std::string skipped_because;  // when not mounted
  std::string mountpoint;
  uint64_t increments = 0;      // directories with a kv file
  uint64_t kv_bytes = 0;        // sum of the kv files' sizes (stat)
  uint64_t deepest_tokens = 0;  // the prefix loaded by path
  double load_seconds = 0;
};

// Mounts the store behind `socket` (this build's ptstore-fuse, with the test
// kit's harness: tests/testing/mount.h) on /tmp/ptstore-demo-mnt-<pid>,
// tours namespace `ns`, unmounts. A machine without
// FUSE (or a non-root user) gets `skipped_because`, not an error; wrong
// bytes are an error.
Result<MountTour> TourTheMount(Client& client, const std::string& socket, const std::string& ns,
                               uint64_t bytes_per_token);

}  // namespace ptstore::bench
