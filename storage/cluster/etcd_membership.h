// Cluster membership kept in etcd (`ptstored --cluster etcd://HOST:PORT/PREFIX`),
// beside the cluster file's (core/membership.h, Cluster::Reload on SIGHUP).
//
// Each node registers itself under PREFIX/members/<node id> with the value
//
//     {"id": 3, "address": "10.0.0.3:7400", "incarnation": "9f2c41d07a1b33e5"}
//
// attached to a lease of lease_ttl_s seconds that it renews every third of
// that. It watches PREFIX/members/ and hands every member list that differs
// from the last one to the cluster (Cluster::ApplyMembership), which applies
// joins, leaves and address changes as a reload does: roots move by
// rendezvous, nothing stored is served wrongly.
//
//  * A node id held in etcd by another address refuses the start (naming the
//    holder); the same address is this node's earlier start: replaced.
//  * A lease that expires (the node died, or was cut off from etcd for longer
//    than the TTL) deletes the key: the others drop the node.
//  * A graceful leave (SIGTERM: Leave) revokes the lease first, so the others
//    drop the node at once: they lose misses, not time.
//  * etcd unreachable: the last member list stays in force, nothing blocks
//    longer than one call's timeout, and the node registers again (a new
//    lease) if its lease expired meanwhile. This node is always a member of
//    its own list.
//  * An entry that does not parse (not JSON, an id that is not its key's, a
//    bad address, an address another id has) is logged once and skipped.
//
// Thread safety: Join and Leave from one thread; the callback of Run is
// called from the membership's own thread, never after Leave or the
// destructor returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/membership.h"
#include "core/mutex.h"
#include "ptstore/status.h"
#include "storage/cluster/etcd_client.h"

namespace ptstore::storage {

struct EtcdMembershipOptions {
  std::string url;           // etcd://HOST:PORT[,HOST:PORT...]/PREFIX
  core::Member self;         // this node: its id and the address others reach it at
  uint64_t incarnation = 0;  // told in its entry (which start of the node it is)
  int lease_ttl_s = 5;
  int timeout_ms = 1000;     // each call to etcd
};

struct EtcdMembershipCounters {
  std::atomic<uint64_t> updates{0};         // member lists handed to the cluster
  std::atomic<uint64_t> registrations{0};   // puts of this node's key (1 + re-registrations)
  std::atomic<uint64_t> failures{0};        // calls to etcd that failed
  std::atomic<uint64_t> bad_entries{0};     // entries skipped (logged once each)
  std::atomic<bool> reachable{true};
};

class EtcdMembership {
 public:
  // Registers this node and reads the members: `*initial` is the list to
  // start the cluster with. InvalidArgument for a bad URL, Unavailable when
  // no etcd endpoint answers within two lease TTLs (etcd may be electing a
  // leader: Join keeps trying meanwhile), AlreadyExists when
  // another address holds the id.
  static Result<std::unique_ptr<EtcdMembership>> Join(const EtcdMembershipOptions& options,
                                                       core::Membership* initial);
  ~EtcdMembership();  // stops without leaving (the lease then expires)

  // Starts renewing the lease and watching; `on_change` gets each new list.
  void Run(std::function<void(const core::Membership&)> on_change);
  // Revokes the lease (the others drop this node now) and stops.
  void Leave() EXCLUDES(mu_);

  const EtcdMembershipCounters& counters() const { return counters_; }
  std::string url() const { return client_->url().ToString(); }

 private:
  EtcdMembership(const EtcdMembershipOptions& options, EtcdUrl url);
  Status Register() EXCLUDES(mu_);
  // The member list in `range` (this node always included).
  core::Membership ToMembership(const EtcdRange& range);
  void Stop() EXCLUDES(mu_);
  void KeepAliveLoop() EXCLUDES(mu_);
  void WatchLoop() EXCLUDES(mu_);
  // Waits up to `ms` unless stopping; false when stopping.
  bool SleepFor(int ms) EXCLUDES(mu_);

  const EtcdMembershipOptions options_;
  const std::string members_prefix_;  // PREFIX/members/
  const std::string own_key_;
  const std::string own_value_;
  std::unique_ptr<EtcdClient> client_;
  std::function<void(const core::Membership&)> on_change_;
  EtcdMembershipCounters counters_;

  core::Mutex mu_;
  core::CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  int64_t lease_ GUARDED_BY(mu_) = 0;
  std::vector<core::Member> last_;          // the watch thread's: the list last handed on
  std::set<std::pair<std::string, int64_t>> warned_;  // the watch thread's: (key, mod_revision) logged
  std::thread keepalive_;
  std::thread watch_;
};

}  // namespace ptstore::storage
