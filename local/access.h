// Who a local client is, and what a namespace's mode lets it do.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "ptstore/status.h"
#include "ptstore/types.h"

namespace ptstore::local {

struct Credentials {
  pid_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups
  bool InGroup(uint32_t g) const;
};

// The kernel's view of the peer of a connected unix socket (SO_PEERCRED and
// SO_PEERGROUPS), never what the peer claims.
Result<Credentials> PeerCredentials(int fd);

enum class Access { kRead = 4, kWrite = 2 };

// Unix permission semantics on the namespace's owner, group and mode; root
// may do anything. PermissionDenied names the namespace and the access.
Status CheckAccess(const NamespaceInfo& ns, const Credentials& who, Access access);

}  // namespace ptstore::local
