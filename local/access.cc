#include "local/access.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace ptstore::local {

bool Credentials::InGroup(uint32_t g) const {
  return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
}

Result<Credentials> PeerCredentials(int fd) {
  struct ucred uc {};
  socklen_t len = sizeof(uc);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0) return ErrnoError("SO_PEERCRED", errno);
  Credentials c;
  c.pid = uc.pid;
  c.uid = uc.uid;
  c.gid = uc.gid;
  std::vector<gid_t> groups(64);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0 && errno == ERANGE) {
    groups.resize(glen / sizeof(gid_t));
    glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0) glen = 0;
  }
  groups.resize(glen / sizeof(gid_t));
  c.groups.assign(groups.begin(), groups.end());
  return c;
}

Status CheckAccess(const NamespaceInfo& ns, const Credentials& who, Access access) {
  if (who.uid == 0) return Status::OK();
  const uint32_t bit = static_cast<uint32_t>(access);
  uint32_t allowed;
  if (who.uid == ns.uid) allowed = (ns.mode >> 6) & 7;
  else if (who.InGroup(ns.gid)) allowed = (ns.mode >> 3) & 7;
  else allowed = ns.mode & 7;
  if (allowed & bit) return Status::OK();
  return PermissionDenied(std::string("uid ") + std::to_string(who.uid) + " may not " +
                          (access == Access::kRead ? "read" : "write") + " namespace '" + ns.name +
                          "' (owner " + std::to_string(ns.uid) + ":" + std::to_string(ns.gid) + ", mode " +
                          [&] { char b[8]; snprintf(b, sizeof(b), "%04o", ns.mode); return std::string(b); }() + ")");
}

}  // namespace ptstore::local
