// TCP sockets between nodes: connects with a deadline, listeners, and the
// options every node-to-node connection gets.
#pragma once

#include <cstdint>
#include <string>

#include "ptstore/status.h"

namespace ptstore::rdma {

// Connects to host:port (a name or a numeric address) within timeout_ms.
// The socket gets TCP_NODELAY, and sends that cannot make progress for
// send_timeout_ms fail instead of blocking forever. Unavailable when
// nothing listens there or the host cannot be reached in time.
Result<int> ConnectTcp(const std::string& host, uint16_t port, int timeout_ms, int send_timeout_ms = 10000);
// Binds host:port (port 0: any free port) and listens; *bound_port gets
// the port.
Result<int> ListenTcp(const std::string& host, uint16_t port, uint16_t* bound_port);
// TCP_NODELAY and a send timeout, for an accepted connection.
void TuneTcp(int fd, int send_timeout_ms);

}  // namespace ptstore::rdma
