// Options of a libptstore client.
#pragma once

#include <cstdint>
#include <string>

namespace ptstore {

// The socket ptstored listens on unless configured otherwise; the
// PTSTORE_SOCKET environment variable overrides it for clients.
inline constexpr const char* kDefaultSocketPath = "/run/ptstore/ptstored.sock";

struct ClientOptions {
  // Empty: $PTSTORE_SOCKET, else kDefaultSocketPath.
  std::string socket_path;
  // Shown in the server's log.
  std::string client_name = "libptstore";
  // Ask for the zero-copy arena mapping. The server grants it only to
  // clients it trusts with every namespace on the node; the others load by
  // copy into a buffer they registered.
  bool want_mapping = true;
  // Deadline of one request: a server that does not answer in time yields
  // DeadlineExceeded, never a hang.
  int rpc_timeout_ms = 30000;
  // Connections opened in parallel for concurrent callers (each has its own
  // staging buffer).
  int max_connections = 4;
  // Initial size of each connection's staging buffer; it grows to the
  // largest save or copied load seen, and stays (fresh pages are slow).
  uint64_t staging_bytes = 16ull << 20;
  // Threads a large copy (a load out of the arena or a staging buffer, a
  // save into one) is split over: 0 = the CPUs this process may run on, at
  // most 8 ($PTSTORE_COPY_THREADS overrides); 1 = the caller's alone. At
  // each copy never more than the CPUs idle at that moment, and one per
  // 4 MiB at most (client/parallel_copy.h).
  int copy_threads = 0;
  // While replies come within this many microseconds of their request, wait
  // for the next one awake (looking again, yielding the CPU) this long before
  // sleeping: a round trip then costs no wake-up of this thread, 5-7 us on a
  // VM. 0: sleep at once. $PTSTORE_SPIN_US overrides; at most 10000.
  int spin_us = 50;
};

}  // namespace ptstore
