// Membership, liveness, shard routing and the hooks the local sessions call
// (storage/cluster/cluster.h). The peer-facing server is in peer_service.cc, remote
// loads in cluster_fetch.cc.
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include <xxhash.h>

#include "core/logging.h"
#include "core/rendezvous.h"
#include "storage/cluster/rma_transport.h"
#include "storage/cluster/tcp_transport.h"

namespace ptstore::storage {

using core::MemberState;


namespace {
constexpr size_t kMaxPendingRemovals = 100000;
constexpr size_t kAnnounceBatch = 256;

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

// ------------------------------------------------------------------ hooks

void Cluster::Refresh(const std::string& ns, std::span<const uint32_t> tokens) {
  Result<NamespaceDef> def = store_->GetNamespaceDef(ns);
  if (!def.ok()) return;
  const uint32_t bt = def->info.layout.block_tokens;
  const uint64_t whole = tokens.size() / bt;
  if (whole == 0) return;
  const uint32_t shard = ShardFor(*def, tokens);
  if (shard == self_.node_id) {
    counters_.local_shard++;
    return;
  }
  Result<Ownership> local = store_->Resolve(ns, tokens);
  if (!local.ok()) return;
  if (local->blocks == whole) {
    counters_.metadata_hits++;
    return;
  }
  std::shared_ptr<Peer> p = FindPeer(shard);
  if (p == nullptr) return;
  // The shard said lately that it holds nothing past this node's match:
  // trust that for a moment (a stale answer costs a miss). Two kinds of
  // entries: "nothing at all past this prefix" (the shard knew no
  // continuation of it: every prompt that continues it, e.g. a new
  // document's many new questions, asks once per TTL), and "nothing past it
  // for this prompt" (the shard knew other continuations: another prompt
  // that shares the prefix, e.g. another document under a common system
  // prompt, is another question).
  const uint64_t seed = XXH3_64bits(ns.data(), ns.size());
  const uint64_t prefix_key = XXH3_64bits_withSeed(tokens.data(), local->blocks * bt * sizeof(uint32_t), seed);
  const uint64_t prompt_key = XXH3_64bits_withSeed(tokens.data(), whole * bt * sizeof(uint32_t), seed ^ 1);
  const auto now = Clock::now();
  // Only past a prefix this node knows (never for a root it knows nothing
  // of: that answer is about one first block only).
  const bool cacheable = options_.negative_ttl_ms > 0 && local->blocks > 0;
  if (cacheable) {
    core::MutexLock lk(negative_mu_);
    for (uint64_t key : {prefix_key, prompt_key}) {
      auto it = negative_.find(key);
      if (it != negative_.end() && now - it->second < std::chrono::milliseconds(options_.negative_ttl_ms)) {
        counters_.metadata_hits++;
        return;
      }
    }
  }
  counters_.shard_lookups++;
  const auto t0 = Clock::now();
  Result<core::ShardLookupReply> rep = p->link->Call<core::ShardLookup, core::ShardLookupReply>(
      core::ShardLookup{*def, std::vector<uint32_t>(tokens.begin(), tokens.begin() + whole * bt)},
      options_.rpc_timeout_ms);
  counters_.lookup_latency.Observe(Clock::now() - t0);
  if (!rep.ok()) {
    counters_.shard_lookup_failures++;
    MarkFailed(p.get(), rep.status());
    return;
  }
  if (rep->blocks > local->blocks) {
    Result<uint64_t> r = store_->InsertRemote(ns, tokens, rep->ranges);
    if (!r.ok()) PTS_DEBUG("cluster", "filing the shard's answer: " << r.status().ToString());
  } else if (cacheable) {
    // The shard matched no more than this node: it knows no continuation of
    // this node's match when it matched less, or when its index stops there.
    const bool nothing_past_prefix = rep->blocks < local->blocks || !rep->continues;
    core::MutexLock lk(negative_mu_);
    if (negative_.size() > 100000) negative_.clear();  // bounded; they expire fast anyway
    negative_[nothing_past_prefix ? prefix_key : prompt_key] = now;
  }
}

void Cluster::CheckRemoteMatch(const std::string& ns, std::span<const uint32_t> tokens) {
  Result<NamespaceDef> def = store_->GetNamespaceDef(ns);
  if (!def.ok()) return;
  const uint32_t bt = def->info.layout.block_tokens;
  Result<Ownership> own = store_->Resolve(ns, tokens, /*per_increment=*/true);
  if (!own.ok() || own->blocks == 0) return;
  // The increments of the match that other nodes own and this node does
  // not hold, asked of their owners (one PeerHolds per owner).
  struct Asked {
    uint64_t from, to;
  };
  std::map<uint32_t, std::pair<core::PeerHolds, std::vector<Asked>>> by_owner;
  uint64_t start = 0;
  for (size_t i = 0; i < own->ranges.size(); ++i) {
    const OwnedRange& r = own->ranges[i];
    if (r.owner != self_.node_id && !own->held[i]) {
      auto& [q, asked] = by_owner[r.owner];
      q.ns = ns;
      q.entries.push_back({std::vector<uint32_t>(tokens.begin(), tokens.begin() + r.end_block * bt), start});
      asked.push_back(Asked{start, r.end_block});
    }
    start = r.end_block;
  }
  // The first increment its live owner no longer holds: everything from it on is gone.
  std::optional<Asked> lost;
  uint32_t lost_owner = 0;
  bool lost_departed = false;  // its owner left the cluster (Reload)
  for (auto& [owner, entry] : by_owner) {
    auto& [q, asked] = entry;
    std::shared_ptr<Peer> p = FindPeer(owner);
    if (p == nullptr && Departed(owner)) {
      // A Reload removed its owner from the cluster: nothing it owned can be
      // loaded any more, so the save stores those blocks itself.
      for (const Asked& a : asked) {
        if (!lost || a.from < lost->from) {
          lost = a;
          lost_owner = owner;
          lost_departed = true;
        }
      }
      continue;
    }
    // A node that is down may come back with its data; one this node's file
    // does not know yet (it joined, and this node has not reloaded) too.
    if (p == nullptr || !IsAlive(p.get())) continue;
    Result<core::PeerHoldsReply> r = p->link->Call<core::PeerHolds, core::PeerHoldsReply>(q, options_.rpc_timeout_ms);
    if (!r.ok()) {
      MarkFailed(p.get(), r.status());
      continue;
    }
    if (r->held.size() != asked.size()) continue;
    for (size_t e = 0; e < asked.size(); ++e) {
      if (!r->held[e] && (!lost || asked[e].from < lost->from)) {
        lost = asked[e];
        lost_owner = owner;
        lost_departed = false;
      }
    }
  }
  if (!lost) return;
  PTS_INFO("cluster", "node " << lost_owner << (lost_departed ? " left the cluster and so" : "")
                              << " no longer holds blocks [" << lost->from << ", " << lost->to
                              << ") of a prefix in '" << ns
                              << "' that a save here matched: removing them on every node; the save stores them");
  RemovalPoint pt{ns, std::vector<uint32_t>(tokens.begin(), tokens.begin() + lost->to * bt), lost->from};
  Result<RemoveResult> removed = store_->RemoveFrom(ns, pt.tokens, pt.from_block);
  if (!removed.ok()) PTS_DEBUG("cluster", "removing a stale run: " << removed.status().ToString());
  PropagateRemoval(pt);
}

void Cluster::Announce(const std::string& ns, std::span<const uint32_t> tokens) {
  Result<NamespaceDef> def = store_->GetNamespaceDef(ns);
  if (!def.ok()) return;
  const uint32_t shard = ShardFor(*def, tokens);
  if (shard == self_.node_id) return;  // this node's index is the shard's
  Result<Ownership> own = store_->Resolve(ns, tokens);
  if (!own.ok() || own->blocks == 0) return;
  std::shared_ptr<Peer> p = FindPeer(shard);
  if (p == nullptr) return;
  core::ShardAnnounce msg;
  msg.ns = *def;
  msg.entries.push_back({std::vector<uint32_t>(tokens.begin(), tokens.begin() + own->blocks * def->info.layout.block_tokens),
                         own->ranges});
  counters_.announces++;
  Result<core::EmptyReply> r = p->link->Call<core::ShardAnnounce, core::EmptyReply>(msg, options_.rpc_timeout_ms);
  if (!r.ok()) {
    MarkFailed(p.get(), r.status());
    core::MutexLock lk(wake_mu_);
    reannounce_ = true;  // the shard learns it later
  }
}

void Cluster::PropagateRemoval(const RemovalPoint& pt) {
  core::PeerRemove msg{pt.ns, pt.tokens, pt.from_block};
  counters_.removals_sent++;
  SendRemoval(msg, self_.node_id);
}

void Cluster::SendRemoval(const core::PeerRemove& msg, uint32_t skip_id) {
  // Every member (the shard, the owners, the replicas, the metadata caches)
  // in parallel; one that cannot take it now gets it when it is back.
  std::vector<std::thread> sends;
  const std::shared_ptr<const PeerList> peers = Peers();
  for (const auto& up : *peers) {
    Peer* p = up.get();
    if (p->member.node_id == skip_id) continue;
    auto queue = [p, &msg] {
      core::MutexLock lk(p->mu);
      if (p->pending.size() < kMaxPendingRemovals) p->pending.push_back(msg);
    };
    if (!IsAlive(p)) {
      queue();
      continue;
    }
    sends.emplace_back([this, p, &msg, queue] {
      Result<core::RemoveReply> r = p->link->Call<core::PeerRemove, core::RemoveReply>(msg, options_.rpc_timeout_ms);
      if (!r.ok()) {
        queue();
        MarkFailed(p, r.status());
      }
    });
  }
  for (std::thread& t : sends) t.join();
}

void Cluster::DeliverPending(Peer* p) {
  for (;;) {
    core::PeerRemove msg;
    {
      core::MutexLock lk(p->mu);
      if (p->pending.empty()) return;
      msg = p->pending.front();
    }
    Result<core::RemoveReply> r = p->link->Call<core::PeerRemove, core::RemoveReply>(msg, options_.rpc_timeout_ms);
    if (!r.ok()) {
      MarkFailed(p, r.status());
      return;
    }
    core::MutexLock lk(p->mu);
    if (!p->pending.empty()) p->pending.pop_front();
  }
}

std::vector<std::pair<uint32_t, std::vector<bool>>> Cluster::AskHolders(const core::PeerHolds& q) {
  const std::shared_ptr<const PeerList> peers = Peers();
  std::vector<std::pair<uint32_t, std::vector<bool>>> answers(peers->size());
  std::vector<std::thread> calls;
  for (size_t p = 0; p < peers->size(); ++p) {
    Peer* peer = (*peers)[p].get();
    if (!IsAlive(peer)) continue;
    calls.emplace_back([this, peer, &q, &answers, p] {
      Result<core::PeerHoldsReply> r =
          peer->link->Call<core::PeerHolds, core::PeerHoldsReply>(q, options_.rpc_timeout_ms);
      if (r.ok() && r->held.size() == q.entries.size()) answers[p] = {peer->member.node_id, std::move(r->held)};
    });
  }
  for (std::thread& t : calls) t.join();
  return answers;
}

namespace {
// The owner first, then by id.
void SortHolders(uint32_t owner, std::vector<uint32_t>* nodes) {
  std::sort(nodes->begin(), nodes->end(),
            [&](uint32_t a, uint32_t b) { return (a == owner) != (b == owner) ? a == owner : a < b; });
}
}  // namespace

Result<std::vector<IncrementLocation>> Cluster::Locate(const std::string& ns, const std::vector<ChainKey>& keys) {
  PTS_ASSIGN_OR_RETURN(std::vector<IncrementLocation> out, LocateLocal(store_, ns, keys));
  core::PeerHolds q;
  q.ns = ns;
  std::vector<size_t> asked;  // index in `out` of each entry of q
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<HeldIncrement> h = store_->PrefixOf(ns, keys[i]);
    if (!h.ok()) continue;
    q.entries.push_back({std::move(h->tokens), h->first_block});
    asked.push_back(i);
  }
  if (q.entries.empty()) return out;
  for (const auto& [id, held] : AskHolders(q)) {
    for (size_t e = 0; e < held.size(); ++e) {
      if (held[e]) out[asked[e]].nodes.push_back(id);
    }
  }
  for (IncrementLocation& l : out) SortHolders(l.owner, &l.nodes);
  return out;
}

Result<PrefixLocation> Cluster::LocatePrefix(const std::string& ns, std::span<const uint32_t> tokens) {
  Refresh(ns, tokens);
  core::PeerHolds q;
  PTS_ASSIGN_OR_RETURN(PrefixLocation loc, LocatePrefixLocal(store_, ns, tokens, &q));
  if (!q.entries.empty()) {
    for (const auto& [id, held] : AskHolders(q)) {
      for (size_t e = 0; e < held.size(); ++e) {
        if (held[e]) loc.spans[e].nodes.push_back(id);
      }
    }
  }
  for (PrefixSpan& s : loc.spans) SortHolders(s.owner, &s.nodes);
  // Increments of one owner that the same nodes hold are one span.
  std::vector<PrefixSpan> merged;
  for (PrefixSpan& s : loc.spans) {
    if (!merged.empty() && merged.back().owner == s.owner && merged.back().nodes == s.nodes) {
      merged.back().end_token = s.end_token;
    } else {
      merged.push_back(std::move(s));
    }
  }
  loc.spans = std::move(merged);
  return loc;
}

Result<PrefixLocation> LocatePrefixLocal(Store* store, const std::string& ns, std::span<const uint32_t> tokens,
                                         core::PeerHolds* query) {
  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store->GetNamespace(ns));
  const uint64_t bt = info.layout.block_tokens;
  PTS_ASSIGN_OR_RETURN(Ownership o, store->Resolve(ns, tokens, /*per_increment=*/true));
  PrefixLocation loc;
  loc.matched_tokens = o.blocks * bt;
  if (query) query->ns = ns;
  uint64_t start = 0;
  for (size_t i = 0; i < o.ranges.size(); ++i) {
    const OwnedRange& r = o.ranges[i];
    PrefixSpan s{r.end_block * bt, r.owner, {}};
    if (o.held[i]) s.nodes.push_back(store->options().node_id);
    if (query) {
      const std::span<const uint32_t> prefix = tokens.first(r.end_block * bt);
      query->entries.push_back({std::vector<uint32_t>(prefix.begin(), prefix.end()), start});
    }
    loc.spans.push_back(std::move(s));
    start = r.end_block;
  }
  return loc;
}

Result<std::vector<IncrementLocation>> LocateLocal(Store* store, const std::string& ns,
                                                   const std::vector<ChainKey>& keys) {
  std::vector<IncrementLocation> out;
  const uint32_t self = store->options().node_id;
  for (const ChainKey& k : keys) {
    IncrementLocation l;
    l.key = k;
    l.owner = self;
    Result<HeldIncrement> h = store->PrefixOf(ns, k);
    if (!h.ok()) {
      if (h.status().code() != Code::kNotFound) return h.status();
      out.push_back(std::move(l));  // gone meanwhile: nobody holds it
      continue;
    }
    PTS_ASSIGN_OR_RETURN(Ownership o, store->Resolve(ns, h->tokens));
    for (const OwnedRange& r : o.ranges) {
      if (r.end_block > h->first_block) {
        l.owner = r.owner;
        break;
      }
    }
    PTS_ASSIGN_OR_RETURN(bool held, store->Holds(ns, h->tokens, h->first_block));
    if (held) l.nodes.push_back(self);
    out.push_back(std::move(l));
  }
  return out;
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

void Cluster::ReannounceAll() {
  // Everything this node owns, to the shard of its root as of now.
  std::map<std::pair<uint32_t, std::string>, core::ShardAnnounce> batches;
  std::map<std::string, NamespaceDef> defs;
  uint64_t entries = 0;
  for (HeldIncrement& h : store_->ListOwned()) {
    auto d = defs.find(h.ns);
    if (d == defs.end()) {
      Result<NamespaceDef> def = store_->GetNamespaceDef(h.ns);
      if (!def.ok()) continue;
      d = defs.emplace(h.ns, *def).first;
    }
    const uint32_t shard = ShardFor(d->second, h.tokens);
    if (shard == self_.node_id) continue;
    Result<Ownership> own = store_->Resolve(h.ns, h.tokens);
    if (!own.ok() || own->blocks == 0) continue;
    core::ShardAnnounce& b = batches[{shard, h.ns}];
    b.ns = d->second;
    h.tokens.resize(own->blocks * d->second.info.layout.block_tokens);
    b.entries.push_back({std::move(h.tokens), own->ranges});
    entries++;
  }
  bool failed = false;
  for (auto& [key, b] : batches) {
    std::shared_ptr<Peer> p = FindPeer(key.first);
    if (p == nullptr || !IsAlive(p.get())) continue;
    for (size_t i = 0; i < b.entries.size(); i += kAnnounceBatch) {
      core::ShardAnnounce part;
      part.ns = b.ns;
      const size_t end = std::min(b.entries.size(), i + kAnnounceBatch);
      part.entries.assign(std::make_move_iterator(b.entries.begin() + i), std::make_move_iterator(b.entries.begin() + end));
      counters_.announces++;
      Result<core::EmptyReply> r =
          p->link->Call<core::ShardAnnounce, core::EmptyReply>(part, options_.rpc_timeout_ms * 4);
      if (!r.ok()) {
        MarkFailed(p.get(), r.status());
        failed = true;
        break;
      }
    }
  }
  if (entries) PTS_DEBUG("cluster", "announced " << entries << " owned increment(s) to their shards");
  if (failed) {
    core::MutexLock lk(wake_mu_);
    reannounce_ = true;
  }
}

}  // namespace ptstore::storage
