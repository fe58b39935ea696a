// A real etcd (Debian's etcd-server, /usr/bin/etcd) for the tests: one
// member or several forming one etcd cluster, on free loopback ports, with
// its data in a temporary directory. Members can be killed and started
// again on the same ports and data (etcd's own recovery).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::testing {

// Where the etcd binary is ($PTSTORE_ETCD, default /usr/bin/etcd); empty
// when there is none (tests then skip, saying so).
std::string EtcdBinary();

class EtcdServer {
 public:
  // Members listen on `host` (a loopback or a lab's bridge address).
  explicit EtcdServer(size_t members = 1, std::string host = "127.0.0.1");
  ~EtcdServer();  // kills every member, removes the directory

  // Starts every member and waits until the cluster answers /health.
  Status Start();
  // SIGKILL to member i (its data stays).
  void Kill(size_t i);
  // Starts member i again (same ports, same data) and waits for its health.
  Status Restart(size_t i);
  bool running(size_t i) const { return pids_[i] > 0; }

  // "HOST:PORT" of member i's client port.
  std::string endpoint(size_t i) const;
  // etcd://EP[,EP...]/prefix with every member's endpoint.
  std::string Url(const std::string& prefix) const;
  size_t size() const { return client_ports_.size(); }

 private:
  Status Spawn(size_t i, bool fresh);
  Status WaitHealthy(size_t i, int timeout_ms);

  std::string host_;
  std::string dir_;
  std::vector<uint16_t> client_ports_, peer_ports_;
  std::vector<pid_t> pids_;
};

}  // namespace ptstore::testing
