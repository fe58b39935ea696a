// The cluster's lifecycle, membership, liveness (heartbeats), shard routing
// and maintenance thread (storage/cluster/cluster.h). The hooks the local
// sessions call are in cluster_shard.cc (Refresh, Announce) and
// cluster_removal.cc (CheckRemoteMatch, PropagateRemoval), Locate in
// cluster_locate.cc, the peer-facing server in peer_service.cc, remote loads
// in cluster_fetch.cc, the KV query API in cluster_query.cc, membership
// changes in cluster_reload.cc.
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

#include <algorithm>
#include <random>
#include <thread>
#include <utility>

#include "core/logging.h"
#include "core/rendezvous.h"
#include "storage/cluster/rma_transport.h"
#include "storage/cluster/tcp_transport.h"

namespace ptstore::storage {

using core::MemberState;

namespace {
uint64_t NewIncarnation() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}
}  // namespace

Cluster::Cluster(Store* store, ClusterOptions options, core::Membership membership, core::Member self,
                 std::unique_ptr<PeerTransport> transport)
    : store_(store),
      options_(std::move(options)),
      self_(std::move(self)),
      incarnation_(NewIncarnation()),
      transport_(std::move(transport)),
      membership_(std::move(membership)),
      peers_(std::make_shared<const PeerList>()),
      member_count_(0) {}

Result<std::unique_ptr<Cluster>> Cluster::Start(Store* store, const ClusterOptions& options) {
  if (options.require_integrity && rdma::LocalPeerVersions().max < rdma::kPeerProtocolIntegrity) {
    return InvalidArgument("[cluster] require_integrity needs peer protocol " +
                           std::to_string(rdma::kPeerProtocolIntegrity) + " (frame MACs); this ptstored speaks " +
                           rdma::VersionRangeName(rdma::LocalPeerVersions()));
  }
  PTS_ASSIGN_OR_RETURN(core::Membership m, core::Membership::Load(options.cluster_file));
  return Start(store, options, std::move(m));
}

Result<std::unique_ptr<Cluster>> Cluster::Start(Store* store, const ClusterOptions& options,
                                                core::Membership m) {
  PTS_ASSIGN_OR_RETURN(core::Member self, m.Self(store->options().node_id));
  std::string secret_file = options.secret_file.empty() ? m.secret_file() : options.secret_file;
  if (secret_file.empty()) {
    return InvalidArgument("cluster file " + options.cluster_file +
                           ": no secret_file (nodes authenticate each other with a shared secret; set "
                           "secret_file in the cluster file or [cluster] secret_file)");
  }
  PTS_ASSIGN_OR_RETURN(rdma::ClusterSecret secret, rdma::ClusterSecret::Load(secret_file));
  std::unique_ptr<PeerTransport> transport;
  if (options.data_path == core::DataPath::kRma) {
    PTS_ASSIGN_OR_RETURN(transport, RmaTransport::Create(options, self, std::move(secret), store));
  } else {
    transport = std::make_unique<TcpTransport>(options, self, std::move(secret),
                                               const_cast<uint8_t*>(store->arena_base()));
  }
  return Start(store, options, std::move(m), std::move(transport));
}

Result<std::unique_ptr<Cluster>> Cluster::Start(Store* store, const ClusterOptions& options, core::Membership m,
                                                std::unique_ptr<PeerTransport> transport) {
  const uint32_t id = store->options().node_id;
  PTS_ASSIGN_OR_RETURN(core::Member self, m.Self(id));
  const std::vector<core::Member> members = m.members();
  std::unique_ptr<Cluster> c(new Cluster(store, options, std::move(m), std::move(self), std::move(transport)));
  c->member_count_.store(members.size());
  PTS_RETURN_IF_ERROR(c->transport_->Open(c.get(), &c->counters_));
  c->port_ = c->transport_->port();
  auto peers = std::make_shared<PeerList>();
  for (const core::Member& mem : members) {
    if (mem.node_id == id) continue;
    auto p = std::make_shared<Peer>();
    p->member = mem;
    p->link = c->transport_->Connect(mem);
    peers->push_back(std::move(p));
  }
  {
    core::MutexLock lk(c->peers_mu_);
    c->peers_ = peers;
  }
  c->transport_->Serve();
  store->SetFetcher(c.get());
  c->maintenance_thread_ = std::thread([p = c.get()] { p->MaintenanceLoop(); });
  for (const auto& p : *peers) {
    Peer* raw = p.get();
    raw->heartbeat = std::thread([c = c.get(), raw] { c->HeartbeatLoop(raw); });
  }
  const std::string provider = c->transport_->fabric_provider();
  PTS_INFO("cluster", "node " << id << " of " << members.size() << " listening on " << c->self_.host << ":"
                              << c->port_ << ", loads over " << c->transport_->data_path()
                              << (provider.empty() ? std::string() : " (" + provider + ")"));
  return c;
}

Cluster::~Cluster() { Stop(); }

void Cluster::Stop() {
  if (stopping_.exchange(true)) return;
  store_->SetFetcher(nullptr);
  // No peer is served past here (tcp: the listener and every served
  // connection are closed and joined).
  transport_->Stop();
  {
    core::MutexLock lk(wake_mu_);
    wake_.NotifyAll();
  }
  if (maintenance_thread_.joinable()) maintenance_thread_.join();
  // Reload is not running: it holds reload_mu_ throughout.
  core::MutexLock reload(reload_mu_);
  for (const auto& p : *Peers()) {
    {
      core::MutexLock lk(p->hb_mu);
      p->hb_cv.NotifyAll();
    }
    if (p->heartbeat.joinable()) p->heartbeat.join();
    p->link->Reset();
  }
  core::MutexLock lk(peers_mu_);
  retired_.clear();  // their heartbeats are joined; their links go with them
}

// ------------------------------------------------------------ membership

bool Cluster::IsAlive(const Peer* p) const {
  if (p->removed.load()) return false;
  const MemberState s = p->state.load();
  return s == MemberState::kAlive || s == MemberState::kSuspect;
}

std::shared_ptr<const Cluster::PeerList> Cluster::Peers() const {
  core::MutexLock lk(peers_mu_);
  return peers_;
}

std::vector<uint32_t> Cluster::AliveIds() const {
  std::vector<uint32_t> ids{self_.node_id};
  for (const auto& p : *Peers()) {
    if (IsAlive(p.get())) ids.push_back(p->member.node_id);
  }
  return ids;
}

std::shared_ptr<Cluster::Peer> Cluster::FindPeer(uint32_t id) const {
  for (const auto& p : *Peers()) {
    if (p->member.node_id == id) return p;
  }
  return nullptr;
}

bool Cluster::Departed(uint32_t id) const {
  core::MutexLock lk(peers_mu_);
  return std::find(departed_.begin(), departed_.end(), id) != departed_.end();
}

size_t Cluster::member_count() const { return member_count_.load(); }

uint32_t Cluster::ShardFor(const NamespaceDef& def, std::span<const uint32_t> tokens) const {
  const uint32_t bt = def.info.layout.block_tokens;
  const ChainKey root = NextKey(RootKey(def.info.name, def.salt), tokens.first(bt));
  const std::vector<uint32_t> alive = AliveIds();
  return core::ShardOf(root, alive);
}

void Cluster::HeartbeatLoop(Peer* p) {
  core::UniqueLock lk(p->hb_mu);
  while (!stopping_.load() && !p->removed.load()) {
    lk.Unlock();
    Ping(p);
    lk.Lock();
    p->hb_cv.WaitFor(lk, std::chrono::milliseconds(options_.heartbeat_ms),
                     [&] { return stopping_.load() || p->removed.load(); });
  }
}

void Cluster::Ping(Peer* p) {
  const auto t0 = Clock::now();
  Result<core::PeerPingReply> rep = p->link->Call<core::PeerPing, core::PeerPingReply>(
      core::PeerPing{self_.node_id, incarnation_}, std::min(options_.rpc_timeout_ms, options_.heartbeat_ms * 2));
  const auto rtt = Clock::now() - t0;
  if (!rep.ok()) {
    if (rep.status().code() == Code::kPermissionDenied) counters_.auth_failures++;
    MarkFailed(p, rep.status());
    return;
  }
  if (rep->node_id != p->member.node_id) {
    MarkFailed(p, ProtocolError("the node at " + p->member.Address() + " says it is node " +
                                std::to_string(rep->node_id)));
    return;
  }
  counters_.ping_latency.Observe(std::chrono::duration_cast<std::chrono::nanoseconds>(rtt));
  MarkAlive(p, *rep, std::chrono::duration_cast<std::chrono::nanoseconds>(rtt));
}

void Cluster::MarkAlive(Peer* p, const core::PeerPingReply& rep, std::chrono::nanoseconds rtt) {
  bool changed = false;
  bool restarted = false;
  p->link->OnPing(rep);  // rma: the peer's fabric address, before loads see it alive
  {
    core::MutexLock lk(p->mu);
    restarted = p->seen && p->last.incarnation != rep.incarnation;
    changed = p->state.load() == MemberState::kDead || restarted;
    if (restarted) PTS_INFO("cluster", "node " << p->member.node_id << " restarted");
    p->last = rep;
    p->seen = true;
    p->last_seen = Clock::now();
    p->rtt_us = static_cast<uint64_t>(rtt.count() / 1000);
    p->misses = 0;
    p->state.store(MemberState::kAlive);
  }
  if (restarted) {
    // Its DRAM is gone: the replicas kept here of its increments may be the
    // only copies left. They become this node's, announced below.
    const uint64_t adopted = store_->AdoptReplicasOf(p->member.node_id);
    if (adopted > 0) {
      PTS_INFO("cluster", "node " << p->member.node_id << " restarted: " << adopted
                                  << " replica(s) of its increments kept here are this node's now");
    }
  }
  if (changed) {
    PTS_INFO("cluster", "node " << p->member.node_id << " at " << p->member.Address() << " is alive");
    core::MutexLock lk(wake_mu_);
    reannounce_ = true;
    wake_.NotifyAll();
  }
}

void Cluster::MarkFailed(Peer* p, const ptstore::Status& why) {
  bool died = false;
  {
    core::MutexLock lk(p->mu);
    p->misses++;
    const MemberState before = p->state.load();
    // A refused connection is a dead node; a silent one gets dead_after tries.
    const bool refused = why.code() == Code::kUnavailable;
    if (before != MemberState::kDead && (refused || p->misses >= options_.dead_after)) {
      p->state.store(MemberState::kDead);
      died = true;
    } else if (before == MemberState::kAlive) {
      p->state.store(MemberState::kSuspect);
    }
  }
  if (died) {
    PTS_WARN("cluster", "node " << p->member.node_id << " at " << p->member.Address()
                                << " is dead: " << why.ToString());
    p->link->Reset();
    core::MutexLock lk(wake_mu_);
    reannounce_ = true;  // its roots moved to other shards
    wake_.NotifyAll();
  } else {
    PTS_DEBUG("cluster", "node " << p->member.node_id << ": " << why.ToString());
  }
}

core::ClusterStatusReply Cluster::MemberStatus() const {
  core::ClusterStatusReply r;
  r.self_id = self_.node_id;
  r.enabled = true;
  r.data_path = core::DataPathName(options_.data_path);
  r.fabric_provider = transport_->fabric_provider();
  const StoreStats s = store_->Stats();
  core::MemberInfo me;
  me.id = self_.node_id;
  me.address = self_.host + ":" + std::to_string(port_);
  me.state = MemberState::kSelf;
  me.incarnation = incarnation_;
  me.arena_bytes = s.arena_bytes;
  me.used_bytes = s.used_bytes;
  me.owned_bytes = s.owned_bytes;
  me.replica_bytes = s.replica_bytes;
  r.members.push_back(me);
  const auto now = Clock::now();
  for (const auto& p : *Peers()) {
    core::MutexLock lk(p->mu);
    core::MemberInfo m;
    m.id = p->member.node_id;
    m.address = p->member.Address();
    m.state = p->state.load();
    if (p->seen) {
      m.incarnation = p->last.incarnation;
      m.arena_bytes = p->last.arena_bytes;
      m.used_bytes = p->last.used_bytes;
      m.owned_bytes = p->last.owned_bytes;
      m.replica_bytes = p->last.replica_bytes;
      m.rtt_us = p->rtt_us;
      m.last_seen_ms = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(now - p->last_seen).count());
    }
    r.members.push_back(std::move(m));
  }
  std::sort(r.members.begin(), r.members.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return r;
}

// ------------------------------------------------------------ maintenance

void Cluster::MaintenanceLoop() {
  while (!stopping_.load()) {
    bool reannounce = false;
    {
      core::UniqueLock lk(wake_mu_);
      wake_.WaitFor(lk, std::chrono::milliseconds(100), [&]() REQUIRES(wake_mu_) { return stopping_.load() || reannounce_; });
      if (stopping_.load()) return;
      reannounce = std::exchange(reannounce_, false);
    }
    for (const RemovalPoint& pt : store_->TakeLostIncrements()) PropagateRemoval(pt);
    for (const auto& p : *Peers()) {
      if (IsAlive(p.get())) DeliverPending(p.get());
    }
    SweepRetired();
    if (reannounce) ReannounceAll();
  }
}

}  // namespace ptstore::storage
