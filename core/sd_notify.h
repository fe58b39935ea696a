// The service manager's readiness protocol (sd_notify(3)), without
// libsystemd: one datagram of "KEY=VALUE" lines sent to the unix socket that
// $NOTIFY_SOCKET names. ptstored sends READY=1 once its socket accepts and
// its store is recovered, RELOADING=1 / READY=1 around a SIGHUP reload,
// STOPPING=1 when it starts to shut down, and STATUS= lines (ptstored(8),
// NOTIFY).
//
// Why not libsystemd's sd_notify: the protocol is a sendto() of a few bytes
// (documented in sd_notify(3) as a stable interface); doing it here keeps
// libsystemd-dev out of the dependencies and the build the same on machines
// without systemd.
//
// $NOTIFY_SOCKET: an absolute path ("/run/systemd/notify"), or an abstract
// socket name written with a leading '@' ("@/org/.../notify"; the '@' stands
// for the leading NUL byte). Other forms (vsock:...) are refused.
//
// Thread safety: SdNotify may be called from any thread (one socket per call).
#pragma once

#include <string>
#include <string_view>

#include "ptstore/status.h"

namespace ptstore::core {

// Sends `state` ("READY=1", "STOPPING=1", "STATUS=serving", several lines
// joined by '\n') to $NOTIFY_SOCKET. OK and nothing sent when the variable is
// unset or empty (not started by a service manager that listens).
// InvalidArgument when $NOTIFY_SOCKET is malformed (not '/'- or
// '@'-prefixed, too long for a unix address); the errno of socket()/sendto()
// otherwise (e.g. Unavailable when nothing listens there).
[[nodiscard]] Status SdNotify(std::string_view state);

// The same, to the socket named `address` (in $NOTIFY_SOCKET's syntax).
[[nodiscard]] Status SdNotifyTo(const std::string& address, std::string_view state);

}  // namespace ptstore::core
