#include "core/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace ptstore::core {

Status SdNotify(std::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || *env == '\0') return Status::OK();
  return SdNotifyTo(env, state);
}

Status SdNotifyTo(const std::string& address, std::string_view state) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (address.size() < 2 || (address[0] != '/' && address[0] != '@')) {
    return InvalidArgument("NOTIFY_SOCKET '" + address +
                           "' is neither an absolute path nor an abstract socket name ('@...')");
  }
  if (address.size() > sizeof(sa.sun_path) - (address[0] == '/' ? 1 : 0)) {
    return InvalidArgument("NOTIFY_SOCKET '" + address + "' is longer than a unix socket address (" +
                           std::to_string(sizeof(sa.sun_path)) + " bytes)");
  }
  std::memcpy(sa.sun_path, address.data(), address.size());
  // An abstract name: a leading NUL, and the address length counts exactly
  // the name's bytes (no terminating NUL: it would be part of the name).
  if (address[0] == '@') sa.sun_path[0] = '\0';
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size() +
                                               (address[0] == '/' ? 1 : 0));
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("sd_notify: socket", errno);
  const ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&sa), len);
  const int err = errno;
  close(fd);
  if (n < 0) return ErrnoError("sd_notify to " + address, err);
  if (static_cast<size_t>(n) != state.size()) return IOError("sd_notify to " + address + ": short send");
  return Status::OK();
}

}  // namespace ptstore::core
