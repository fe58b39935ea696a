// A ptstored node: its Store and, in a cluster, its part of the Cluster,
// the membership that feeds that (the cluster file, or etcd) and the
// KV-event publisher. The node owns them all: it opens them in order and
// stops them in order.
//
// What a client asks goes through the node, so the order the cluster needs
// around each store call lives here and not in the session's message
// dispatch:
//   Save      Refresh (learn what peers hold of the prompt, so it is not
//             stored twice) -> CheckRemoteMatch (their owners still hold it)
//             -> Store::Save -> Announce (the blocks this node now owns)
//   Lookup, Pin, LoadCopy
//             Refresh, then the store call (a prefix a peer holds is fetched
//             by the store through the cluster, storage/cache/remote.h)
//   Remove    Store::Remove -> PropagateRemoval (no node serves it after)
//   Locate, LocatePrefix, ClusterStatus
//             the cluster's answer, or this node's alone without a cluster
// Everything else a session needs (namespaces, listings, leases, quotas) is
// the store's alone: store().
//
//   auto node = Node::Open(cfg);          // store recovered, cluster joined
//   Server server(node->get(), cfg.server);
//   ... serve ...
//   (*node)->Leave();                     // others drop this node now
//   server.Stop();
//   (*node)->Stop();                      // cluster, SSD persist, events
//
// Thread safety: the request methods may be called from any thread (each
// part is thread-safe); Open, Reload, Leave and Stop from the main thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/peer_messages.h"
#include "ptstore/status.h"
#include "storage/server/config.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

class Cluster;
class EtcdMembership;
class KvEventPublisher;

class Node {
 public:
  // Opens the store (recovering its SSD tier), joins the cluster named by
  // cfg.cluster.cluster_file (a file, or etcd:// with cfg.cluster.advertise)
  // and, when cfg.events.enabled, starts the KV-event stream, which first
  // announces what the store recovered. Each failure names its step.
  static Result<std::unique_ptr<Node>> Open(const DaemonConfig& cfg);
  // A node over parts made elsewhere (tests): `cluster` may be null.
  Node(std::unique_ptr<Store> store, std::unique_ptr<Cluster> cluster);
  ~Node();  // Stop()
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Result<SaveResult> Save(const std::string& ns, std::span<const uint32_t> tokens, const uint8_t* data,
                          uint64_t length, uint64_t first_block);
  Result<PrefixResult> Lookup(const std::string& ns, std::span<const uint32_t> tokens);
  Result<PrefixResult> Pin(const std::string& ns, std::span<const uint32_t> tokens, uint64_t session);
  Result<uint64_t> LoadCopy(const std::string& ns, std::span<const uint32_t> tokens, uint8_t* dst,
                            uint64_t capacity);
  Result<RemoveResult> Remove(const std::string& ns, std::span<const uint32_t> tokens);
  Result<RemoveResult> RemoveByKey(const std::string& ns, const ChainKey& key);
  Result<std::vector<IncrementLocation>> Locate(const std::string& ns, const std::vector<ChainKey>& keys);
  Result<PrefixLocation> LocatePrefix(const std::string& ns, std::span<const uint32_t> tokens);
  core::ClusterStatusReply ClusterStatus() const;

  // SIGHUP: the cluster file again. A message for the log: what changed, or
  // why nothing did (one node alone, members from etcd); an error when the
  // file cannot be applied (nothing changes then).
  Result<std::string> Reload();
  // Leaves etcd (the others drop this node at once, not at lease expiry).
  void Leave();
  // Stops the cluster; with `persist` writes what only DRAM holds to the SSD
  // tier (else syncs the times there); then flushes and stops the events.
  // Idempotent.
  void Stop(bool persist = false);

  Store& store() { return *store_; }
  const Store& store() const { return *store_; }
  Cluster* cluster() { return cluster_.get(); }  // null: a single node
  const EtcdMembership* etcd() const { return etcd_.get(); }
  const KvEventPublisher* events() const { return events_.get(); }
  size_t member_count() const;

 private:
  Node() = default;
  Status JoinCluster(const DaemonConfig& cfg);
  Status StartEvents(const DaemonConfig& cfg);

  // Destroyed bottom up: the events and etcd (whose watch calls into the
  // cluster) before the cluster, the cluster before the store it serves.
  std::unique_ptr<Store> store_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<EtcdMembership> etcd_;
  std::unique_ptr<KvEventPublisher> events_;
  bool stopped_ = false;
};

}  // namespace ptstore::storage
