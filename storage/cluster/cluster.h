// This node's part in a PTStore cluster (DESIGN.md §5, docs/architecture.md
// "Cluster"): membership and liveness, the index shards, remote loads and
// the propagation of removals.
//
// Every node keeps one index per namespace (the Store's radix trees). It
// holds the node's own increments, replicas, and remote increments: other
// nodes' increments known by tokens and owner. The shard of a root (the
// first block of a prompt in a namespace; rendezvous hashing over the live
// members) is authoritative for it: saves anywhere are announced to it, and
// a node whose index does not match a whole prompt asks it (one RPC) and
// files the answer as remote increments, which then serve as its metadata
// cache (tensors are immutable: a stale entry costs a failed fetch, a miss).
//
// Loads: the Store asks Fetch for the remote increments of a pin; Fetch
// sends one request per owner carrying all of that owner's segments, to all
// owners in parallel, and the bytes land in this node's arena over a TCP
// stream or by one-sided RMA reads (libfabric) from the owner's registered
// arena, or, inside one process, copied from the owner's arena: which, is
// the PeerTransport's business (storage/cluster/peer_transport.h), and every
// peer message goes through it. A dead owner, an unreachable one or a
// deadline is a miss.
//
// Removals (rm -r, Remove, evictions of owned data with no copy left) go to
// the root's shard, which applies them and sends them to every other
// member; a member that cannot be reached gets them when it is back.
// Failures: every RPC has a deadline; members are pinged every heartbeat;
// a member that misses `dead_after` pings (or refuses a connection) is dead
// and its roots move to the next node in rendezvous order; whenever a
// member comes back, dies or restarts, every node announces what it owns
// to the (new) shards.
//
// Membership changes at run time (Reload, on SIGHUP): the cluster file is
// read again and the difference applied -- members that joined are pinged
// and, once alive, take their roots (rendezvous); members that left stop
// being asked, their roots move to the next node, connections from them are
// closed and they are refused from then on; a member at a new address is
// reached there. A file that cannot be applied changes nothing.
//
// Thread safety: all public methods may be called from any thread. The
// member list is an immutable snapshot (PeerList) replaced whole by Reload:
// a caller holds its snapshot (shared_ptr) for as long as it uses a Peer, so
// a member removed meanwhile stays valid, marked removed (never alive),
// until its last user lets go. Lock order: reload_mu_, then peers_mu_, then
// a Peer's mu; negative_mu_, refused_mu_ and wake_mu_ are taken alone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/membership.h"
#include "core/mutex.h"
#include "core/peer_messages.h"
#include "core/prometheus.h"
#include "rdma/auth.h"
#include "storage/cluster/peer_transport.h"
#include "storage/cache/remote.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

using Clock = std::chrono::steady_clock;

struct ClusterOptions {
  std::string cluster_file;           // membership (core/membership.h), or etcd://... (storage/cluster/etcd_membership.h)
  std::string advertise;              // etcd: this node's HOST:PORT as the others reach it
  int etcd_lease_s = 5;               // etcd: the TTL of this node's registration
  std::string secret_file;            // overrides the cluster file's secret_file
  core::DataPath data_path = core::DataPath::kTcp;
  std::string fabric_provider = "tcp";  // libfabric provider for the rma path
  int rpc_timeout_ms = 1000;          // lookups, announces, removals, pings
  int connect_timeout_ms = 500;
  int heartbeat_ms = 500;
  int dead_after = 2;                 // missed pings before a member is dead
  // A shard's answer that it holds nothing past a prefix is trusted this
  // long for other prompts that continue the same prefix (a document and
  // its many new questions ask once per this); 0: always ask.
  int negative_ttl_ms = 250;
  // A fetch may take rpc_timeout_ms plus its bytes at this rate.
  double min_fetch_bytes_per_s = 200e6;
  // Speak only peer-protocol versions whose frames carry MACs
  // (rdma::kPeerProtocolIntegrity on): a node of an older version is
  // refused at authentication. Off during a rolling upgrade from version 1.
  bool require_integrity = false;
};

// Counters and latencies of the cluster layer (metrics).
struct ClusterCounters {
  std::atomic<uint64_t> shard_lookups{0};        // RPCs to remote shards
  std::atomic<uint64_t> shard_lookup_failures{0};
  std::atomic<uint64_t> metadata_hits{0};        // prompts the local index matched whole: no RPC
  std::atomic<uint64_t> local_shard{0};          // prompts whose shard is this node
  std::atomic<uint64_t> announces{0};
  std::atomic<uint64_t> removals_sent{0};
  std::atomic<uint64_t> removals_applied{0};     // from other nodes
  std::atomic<uint64_t> fetch_requests{0};       // requests to owners
  std::atomic<uint64_t> fetch_failures{0};
  std::atomic<uint64_t> fetch_retries{0};        // fetches made again on another connection
  std::atomic<uint64_t> bytes_tcp{0};            // fetched over the TCP stream
  std::atomic<uint64_t> bytes_rma{0};            // fetched by RMA reads
  std::atomic<uint64_t> bytes_loopback{0};       // fetched in-process (tests: LoopbackNet)
  std::atomic<uint64_t> auth_failures{0};        // peers refused (wrong or no secret)
  rdma::WireCounters wire;                       // version refusals, frame MAC failures
  std::atomic<uint64_t> reloads{0};              // cluster file reloads applied (SIGHUP)
  std::atomic<uint64_t> reloads_refused{0};      // and refused (membership unchanged)
  core::LatencyHistogram lookup_latency;
  core::LatencyHistogram fetch_latency;
  core::LatencyHistogram ping_latency;
};

// Where the increments named `keys` are as far as this node alone knows:
// their owner, and this node when it holds their bytes.
Result<std::vector<IncrementLocation>> LocateLocal(Store* store, const std::string& ns,
                                                   const std::vector<ChainKey>& keys);

// The owner and this node's holding of each increment of the longest match
// of `tokens` as far as this node alone knows (one span per increment, not
// merged). With `query`, also the PeerHolds that asks another node about
// each span.
Result<PrefixLocation> LocatePrefixLocal(Store* store, const std::string& ns, std::span<const uint32_t> tokens,
                                         core::PeerHolds* query = nullptr);

class Cluster : public RemoteFetcher, private PeerService {
 public:
  // Reads the membership, loads the secret, listens on this node's address
  // (port 0 in the file picks one: tests), opens the RMA endpoint when the
  // data path is rma, and starts the heartbeats. The store must outlive it.
  static Result<std::unique_ptr<Cluster>> Start(Store* store, const ClusterOptions& options);
  // The same with the members given (etcd: storage/cluster/etcd_membership.h);
  // options.cluster_file then only names where they came from.
  static Result<std::unique_ptr<Cluster>> Start(Store* store, const ClusterOptions& options,
                                                core::Membership membership);
  // The same over `transport` (the tcp or rma one the others make, or an
  // in-process LoopbackNet's: storage/cluster/loopback_transport.h); no
  // secret is read (the transport has it, if it needs one).
  // options.data_path is then only what status reports.
  static Result<std::unique_ptr<Cluster>> Start(Store* store, const ClusterOptions& options,
                                                core::Membership membership,
                                                std::unique_ptr<PeerTransport> transport);
  ~Cluster() override;  // Stop()
  // Stops serving peers, the heartbeats and the maintenance; loads no
  // longer fetch. Idempotent.
  void Stop() EXCLUDES(reload_mu_, peers_mu_);

  // Re-reads options.cluster_file and applies the difference to the running
  // cluster: joins, leaves, address changes (see the top of this file).
  // Refused, with an error naming the file and what is wrong, and nothing
  // changed, when the file does not parse, names a node id or address twice,
  // lacks this node, or moves this node to another address (that needs a
  // restart: the listening socket stays). The secret is not re-read. On
  // success, a one-line summary ("joined 2; left none; moved none").
  Result<std::string> Reload() EXCLUDES(reload_mu_);
  // Applies the member list `next` as Reload applies the file's (the same
  // refusals); `origin` names where it came from in logs and errors.
  Result<std::string> ApplyMembership(core::Membership next, const std::string& origin) EXCLUDES(reload_mu_);

  // Before a lookup, pin or save of `tokens`: unless this node's index
  // matches every whole block, asks the root's shard and files its answer.
  // Failures are misses (logged at debug level), never errors.
  void Refresh(const std::string& ns, std::span<const uint32_t> tokens);
  // Before a save counts blocks other nodes own as stored (and stores only
  // past them): asks their owners whether they still hold them. A run its
  // (live) owner no longer holds, because it restarted without it or lost
  // it unannounced, is removed here and on every node, as the owner would
  // have done, so that the save stores those blocks itself.
  void CheckRemoteMatch(const std::string& ns, std::span<const uint32_t> tokens);
  // After a save that stored something: tells the root's shard.
  void Announce(const std::string& ns, std::span<const uint32_t> tokens);
  // After a local removal: sends it to the root's shard, which sends it on.
  void PropagateRemoval(const RemovalPoint& p);

  // Where the increments named `keys` (in this node's index) are: owner and
  // every alive node holding their bytes (one PeerHolds per peer, in
  // parallel). Without a cluster, LocateLocal.
  Result<std::vector<IncrementLocation>> Locate(const std::string& ns, const std::vector<ChainKey>& keys);

  // Who owns and who holds each run of the longest match of `tokens` in
  // the cluster (after Refresh, so the shard's knowledge counts). Without a
  // cluster, LocatePrefixLocal.
  Result<PrefixLocation> LocatePrefix(const std::string& ns, std::span<const uint32_t> tokens);

  // The KV query API (storage/server/kv_query.h, cluster_query.cc). A prompt's
  // longest match on every member by tier: after Refresh (the root's shard
  // is asked, as a load would), each increment of the match this node's
  // index knows is asked of every live member in parallel (one PeerTiers
  // each); a member answers in which media it holds it (an increment counts
  // for a medium only when all its blocks are there). Each member's entry
  // is then cumulative, as Mooncake's conductor counts (gpu <= cpu <= disk,
  // no GPU here): cpu_tokens the run from the prompt's start in its DRAM,
  // disk_tokens that run and then on through what follows on its SSD. What
  // a member could fetch from another counts for that other only. A member that is dead, departed
  // or does not answer within rpc_timeout_ms has no entry and is named in
  // `unanswered`: never an error, never more than one deadline.
  struct MemberTiers {
    uint32_t node = 0;
    uint64_t cpu_tokens = 0;   // the run in DRAM from the prompt's start
    uint64_t disk_tokens = 0;  // cpu_tokens, then on through the run on SSD after it (>= cpu_tokens)
  };
  struct ClusterTiers {
    uint64_t matched_tokens = 0;          // what this node's index matches (held anywhere or not)
    std::vector<MemberTiers> members;     // self first, then by id; members holding nothing included
    std::vector<uint32_t> unanswered;     // members asked (or dead) without an answer, by id
  };
  Result<ClusterTiers> QueryTiers(const std::string& ns, std::span<const uint32_t> tokens);
  // The tokens that block hashes name in the cluster (Store::TokensOfHashes
  // here, then, unless that names them all, every live member's, the
  // longest answer whose chain keys check out).
  Result<std::vector<uint32_t>> TokensOfHashes(const std::string& ns, std::span<const ChainKey> hashes, bool low64);

  // RemoteFetcher.
  void Fetch(const NamespaceDef& ns, std::span<const uint32_t> tokens, std::vector<FetchRequest>& requests) override;

  core::ClusterStatusReply MemberStatus() const EXCLUDES(peers_mu_);
  // The members as of the last successful Start or Reload (self included).
  size_t member_count() const;
  const ClusterCounters& counters() const { return counters_; }
  uint32_t self_id() const { return self_.node_id; }
  uint16_t port() const { return port_; }

 private:
  struct Peer;
  using PeerList = std::vector<std::shared_ptr<Peer>>;
  Cluster(Store* store, ClusterOptions options, core::Membership membership, core::Member self,
          std::unique_ptr<PeerTransport> transport);

  // PeerService (peer_service.cc): the owner side of every peer message.
  bool Admit(uint32_t peer, const std::string& remote, bool first) override EXCLUDES(refused_mu_);
  uint64_t NewSession() override { return next_session_++; }
  void EndSession(uint64_t session) override;
  void Release(const std::vector<uint64_t>& leases, uint64_t session) override;
  Result<std::vector<uint8_t>> Handle(const local::Frame& f, uint64_t session) override;
  Result<ServedFetch> PinFetch(const core::PeerFetch& req, uint64_t session) override;
  // Creates the namespace a peer names if this node does not have it.
  Status EnsureNamespace(const NamespaceDef& def);

  void HeartbeatLoop(Peer* p) EXCLUDES(wake_mu_);
  void Ping(Peer* p);
  void MarkFailed(Peer* p, const ptstore::Status& why) EXCLUDES(wake_mu_);
  void MarkAlive(Peer* p, const core::PeerPingReply& rep, std::chrono::nanoseconds rtt) EXCLUDES(wake_mu_);
  // Background: re-announces owned data after membership changes, drains
  // lost increments, retries removals.
  void MaintenanceLoop() EXCLUDES(wake_mu_);
  void ReannounceAll() EXCLUDES(wake_mu_);
  void DeliverPending(Peer* p);

  // A new member: its link and heartbeat thread.
  std::shared_ptr<Peer> NewPeer(const core::Member& m);
  // A member that left (or moved): marked removed (its connections to this
  // node close at their next request), heartbeat joined, channel closed;
  // kept in retired_ until no one else holds it.
  void RetirePeer(const std::shared_ptr<Peer>& p) EXCLUDES(peers_mu_);
  // Frees retired members no one holds any more (their RMA addresses).
  void SweepRetired() EXCLUDES(peers_mu_);

  // The current member list (never null).
  std::shared_ptr<const PeerList> Peers() const EXCLUDES(peers_mu_);
  // The live node ids (self included), and the shard of a prompt's root.
  std::vector<uint32_t> AliveIds() const;
  uint32_t ShardFor(const NamespaceDef& def, std::span<const uint32_t> tokens) const;
  // nullptr when `id` is not a member (now).
  std::shared_ptr<Peer> FindPeer(uint32_t id) const;
  // A member that answers its pings and has not been removed.
  bool IsAlive(const Peer* p) const;
  // Whether `id` was a member and a Reload removed it (and none re-added it).
  bool Departed(uint32_t id) const EXCLUDES(peers_mu_);
  // Asks every alive peer, in parallel, which entries of `q` it holds: one
  // (node id, answer per entry) per peer; a peer that did not answer (or is
  // not alive) has an empty answer.
  std::vector<std::pair<uint32_t, std::vector<bool>>> AskHolders(const core::PeerHolds& q);
  // The same for PeerTiers: one answer per member (self excluded), nullopt
  // where it is not alive or did not answer (cluster_query.cc).
  std::vector<std::pair<uint32_t, std::optional<core::PeerTiersReply>>> AskTiers(const core::PeerTiers& q);

  // Fetch from one owner (cluster_fetch.cc).
  void FetchFrom(Peer* p, const NamespaceDef& ns, std::span<const uint32_t> tokens, FetchRequest& req);
  void SendRemoval(const core::PeerRemove& msg, uint32_t skip_id);

  Store* store_;
  const ClusterOptions options_;
  const core::Member self_;
  const uint64_t incarnation_;
  // Declared before the members: their links go before it does.
  const std::unique_ptr<PeerTransport> transport_;
  core::Mutex reload_mu_;                                 // serializes Reload
  core::Membership membership_ GUARDED_BY(reload_mu_);    // the file as last applied
  mutable core::Mutex peers_mu_;
  std::shared_ptr<const PeerList> peers_ GUARDED_BY(peers_mu_);  // replaced whole
  PeerList retired_ GUARDED_BY(peers_mu_);
  std::vector<uint32_t> departed_ GUARDED_BY(peers_mu_);  // ids a Reload removed
  std::atomic<size_t> member_count_{0};
  mutable ClusterCounters counters_;

  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_session_{1ull << 62};
  std::thread maintenance_thread_;

  // Negative shard answers: (namespace, hash of the prefix tokens the
  // shard matched) -> when.
  core::Mutex negative_mu_;
  std::unordered_map<uint64_t, Clock::time_point> negative_ GUARDED_BY(negative_mu_);

  // Nodes refused for not being members -> when that was last logged.
  core::Mutex refused_mu_;
  std::unordered_map<uint32_t, Clock::time_point> refused_ GUARDED_BY(refused_mu_);

  core::Mutex wake_mu_;
  core::CondVar wake_;
  bool reannounce_ GUARDED_BY(wake_mu_) = true;  // set when membership changes
};

// Cluster::QueryTiers without a cluster: this node's own entry alone, by
// the same walk (matched_tokens: what its index matches).
Result<Cluster::ClusterTiers> QueryTiersLocal(Store* store, const std::string& ns, std::span<const uint32_t> tokens);

}  // namespace ptstore::storage
