// Client::LoadPath: a load by path through a PTStore mount's ioctl
// (include/ptstore/ioctl.h), copying out of this client's arena mapping.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "client/connection.h"
#include "client/parallel_copy.h"
#include "ptstore/client.h"
#include "ptstore/ioctl.h"

namespace ptstore {

using client::ClientCore;

namespace {

// An open directory or file of the mount, closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a directory by walking its path one component at a time (openat),
// so that trees deeper than PATH_MAX allows in one string (about 120
// levels of 32-digit keys) can be loaded too. -1 with errno on failure.
int OpenDeep(const std::string& path) {
  if (path.size() < PATH_MAX) return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int dir = ::open(path[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t pos = 0;
  while (dir >= 0 && pos < path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty()) continue;
    const int next = ::openat(dir, part.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const int err = errno;
    ::close(dir);
    errno = err;
    dir = next;
  }
  return dir;
}

Status IoctlError(const std::string& path, const char* what, int err) {
  const std::string where = std::string(what) + " on " + path + ": " + std::strerror(err);
  switch (err) {
    case ENOTTY:
    case EINVAL: return InvalidArgument(where + " (is it a directory of a PTStore mount?)");
    case EPROTO: return Unimplemented(where + " (the mount speaks another version of the ioctl ABI)");
    case ENOENT: return NotFound(where);
    case EACCES:
    case EPERM: return PermissionDenied(where);
    case ENOMEM: return ResourceExhausted(where);
    default: return IOError(where);
  }
}

}  // namespace

Result<uint64_t> Client::LoadPath(const std::string& path, void* dst, uint64_t capacity) {
  if (!mapped()) {
    return PermissionDenied("this client has no arena mapping (not trusted with every namespace): use Load");
  }
  Fd d;
  d.fd = OpenDeep(path);
  if (d.fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("no such directory: " + path);
    if (err == EACCES) return PermissionDenied("cannot open " + path + ": " + std::strerror(err));
    if (err == ENOTDIR) return InvalidArgument(path + " is not a directory (give an increment's directory)");
    return IOError("open " + path + ": " + std::strerror(err));
  }
  ptstore_ioc_info info{};
  info.version = PTSTORE_IOCTL_VERSION;
  if (::ioctl(d.fd, PTSTORE_IOC_INFO, &info) != 0) return IoctlError(path, "PTSTORE_IOC_INFO", errno);

  // The extents are offsets in the arena of the ptstored behind the mount:
  // they mean something only in that server's arena.
  std::shared_ptr<core::SharedMemory> arena;
  {
    PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
    arena = h.conn->arena();
  }
  if (!arena || info.node_id != node_id() || info.arena_bytes != arena->size()) {
    return InvalidArgument(path + " is on a mount of another ptstored (node " + std::to_string(info.node_id) +
                           ", arena " + std::to_string(info.arena_bytes) + " bytes) than this client's (node " +
                           std::to_string(node_id()) + ", arena " + std::to_string(arena ? arena->size() : 0) +
                           " bytes)");
  }
  if (info.kind != PTSTORE_KIND_INCREMENT) return uint64_t{0};  // the root or a namespace: no prefix

  // Pins are held by the increment's open kv file (include/ptstore/ioctl.h).
  Fd kv;
  kv.fd = ::openat(d.fd, "kv", O_RDONLY | O_CLOEXEC);
  if (kv.fd < 0) return IoctlError(path + "/kv", "open", errno);
  auto pin = std::make_unique<ptstore_ioc_pin>();
  pin->version = PTSTORE_IOCTL_VERSION;
  pin->flags = PTSTORE_PIN_WHOLE_PREFIX;
  if (::ioctl(kv.fd, PTSTORE_IOC_PIN, pin.get()) != 0) return IoctlError(path + "/kv", "PTSTORE_IOC_PIN", errno);
  const uint64_t lease = pin->lease;
  auto unpin = [&] {
    ptstore_ioc_unpin u{};
    u.version = PTSTORE_IOCTL_VERSION;
    u.lease = lease;
    (void)::ioctl(kv.fd, PTSTORE_IOC_UNPIN, &u);  // closing the kv file releases it anyway
  };
  const uint64_t total_bytes = pin->bytes;
  const uint64_t tokens = pin->tokens;
  const uint32_t total = pin->total;
  if (total_bytes > capacity) {
    unpin();
    return InvalidArgument("the prefix at " + path + " holds " + std::to_string(total_bytes) +
                           " bytes; the destination has " + std::to_string(capacity));
  }
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t copied = 0;
  std::vector<client::CopySpan> spans;
  for (uint32_t next = 0;;) {
    spans.clear();
    for (uint32_t i = 0; i < pin->count; ++i) {
      const ptstore_ioc_extent& x = pin->extents[i];
      if (x.arena_offset > arena->size() || x.length > arena->size() - x.arena_offset ||
          x.length > total_bytes - copied) {
        unpin();
        return ProtocolError("the mount returned an extent outside the arena or past the pin's bytes");
      }
      spans.push_back({out + copied, arena->data() + x.arena_offset, x.length});
      copied += x.length;
    }
    client::CopyParallel(spans, core_->options().copy_threads);
    next += pin->count;
    if (next >= total || pin->count == 0) break;
    pin->version = PTSTORE_IOCTL_VERSION;
    pin->lease = lease;
    pin->first = next;
    if (::ioctl(kv.fd, PTSTORE_IOC_PIN, pin.get()) != 0) {
      const int err = errno;
      unpin();
      return IoctlError(path, "PTSTORE_IOC_PIN (next page)", err);
    }
  }
  unpin();
  if (copied != total_bytes) {
    return ProtocolError("the mount's extents hold " + std::to_string(copied) + " bytes, it announced " +
                         std::to_string(total_bytes));
  }
  return tokens;
}

}  // namespace ptstore
