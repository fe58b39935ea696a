#include "storage/server/node.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>

#include "core/logging.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/etcd_membership.h"
#include "storage/events/kv_event_publisher.h"

namespace ptstore::storage {

namespace {

// The KV-event stream's incarnation: seconds since the Unix epoch, and with
// an SSD tier more than the last one recorded there (a restart within the
// same second, or a clock set back, still gets a new one).
uint32_t NextIncarnation(const std::string& ssd_dir) {
  uint32_t inc = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  if (ssd_dir.empty()) return inc;
  const std::string path = ssd_dir + "/kv-events.incarnation";
  uint64_t last = 0;
  if (std::ifstream in(path); in >> last) inc = static_cast<uint32_t>(std::max<uint64_t>(inc, last + 1));
  std::ofstream(path, std::ios::trunc) << inc << "\n";
  return inc;
}

}  // namespace

Node::Node(std::unique_ptr<Store> store, std::unique_ptr<Cluster> cluster)
    : store_(std::move(store)), cluster_(std::move(cluster)) {}

Node::~Node() { Stop(); }

Result<std::unique_ptr<Node>> Node::Open(const DaemonConfig& cfg) {
  std::unique_ptr<Node> node(new Node());
  auto t0 = std::chrono::steady_clock::now();
  auto store = Store::Open(cfg.store);
  if (!store.ok()) return store.status().WithContext("opening the store");
  node->store_ = std::move(*store);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  PTS_INFO("store", "arena of " << node->store_->arena_bytes() / double(1 << 20) << " MiB ready in " << secs << " s"
                                << (node->store_->huge_pages() ? " (huge pages)" : "")
                                << (cfg.store.prefault ? ", pre-faulted" : "") << "; node " << cfg.store.node_id
                                << ", replica share " << cfg.store.replica_share);
  PTS_RETURN_IF_ERROR(node->JoinCluster(cfg));
  PTS_RETURN_IF_ERROR(node->StartEvents(cfg));
  return node;
}

Status Node::JoinCluster(const DaemonConfig& cfg) {
  if (cfg.cluster.cluster_file.empty()) return Status::OK();
  if (!IsEtcdUrl(cfg.cluster.cluster_file)) {
    auto cluster = Cluster::Start(store_.get(), cfg.cluster);
    if (!cluster.ok()) return cluster.status().WithContext("joining the cluster");
    cluster_ = std::move(*cluster);
    return Status::OK();
  }
  // Members from etcd (storage/cluster/etcd_membership.h): register, then start the
  // cluster with the members registered now; changes follow.
  EtcdMembershipOptions eo;
  eo.url = cfg.cluster.cluster_file;
  eo.lease_ttl_s = cfg.cluster.etcd_lease_s;
  eo.timeout_ms = cfg.cluster.rpc_timeout_ms;
  eo.incarnation = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  if (cfg.cluster.advertise.empty()) {
    return InvalidArgument("--cluster " + eo.url +
                           " needs this node's address: set [cluster] advertise or --advertise HOST:PORT");
  }
  PTS_ASSIGN_OR_RETURN(eo.self, core::ParseMemberAddress(cfg.cluster.advertise, "[cluster] advertise / --advertise"));
  eo.self.node_id = cfg.store.node_id;
  core::Membership initial;
  auto joined = EtcdMembership::Join(eo, &initial);
  if (!joined.ok()) return joined.status().WithContext("joining the cluster");
  etcd_ = std::move(*joined);
  auto started = Cluster::Start(store_.get(), cfg.cluster, std::move(initial));
  if (!started.ok()) return started.status().WithContext("joining the cluster");
  cluster_ = std::move(*started);
  Cluster* cluster = cluster_.get();
  const std::string origin = "members in " + etcd_->url();
  etcd_->Run([cluster, origin](const core::Membership& m) {
    Result<std::string> r = cluster->ApplyMembership(m, origin);
    if (!r.ok()) PTS_ERROR("cluster", r.status().ToString());
  });
  return Status::OK();
}

// The publisher announces AllBlocksCleared and what the store recovered
// before anything else can change it.
Status Node::StartEvents(const DaemonConfig& cfg) {
  if (!cfg.events.enabled) return Status::OK();
  KvEventsOptions options = cfg.events;
  options.node_id = cfg.store.node_id;
  options.incarnation = NextIncarnation(cfg.store.ssd.dir);
  Store* store = store_.get();
  PTS_ASSIGN_OR_RETURN(events_, KvEventPublisher::Start(options, [store] { store->AnnounceEvents(); }));
  store_->SetEventSink(events_.get());
  PTS_INFO("events", "kv events on " << events_->endpoint() << " replay " << events_->replay_endpoint()
                                     << " incarnation " << events_->incarnation());
  for (const std::string& p : options.exclude) PTS_INFO("events", "namespaces matching '" << p << "' publish nothing");
  return Status::OK();
}

Result<SaveResult> Node::Save(const std::string& ns, std::span<const uint32_t> tokens, const uint8_t* data,
                              uint64_t length, uint64_t first_block) {
  // Blocks other nodes hold are not stored again: learn of them first, and
  // make sure their owners still hold them.
  if (cluster_) {
    cluster_->Refresh(ns, tokens);
    cluster_->CheckRemoteMatch(ns, tokens);
  }
  PTS_ASSIGN_OR_RETURN(SaveResult r, store_->Save(ns, tokens, data, length, first_block));
  if (cluster_ && r.stored_tokens > 0) cluster_->Announce(ns, tokens);
  return r;
}

Result<PrefixResult> Node::Lookup(const std::string& ns, std::span<const uint32_t> tokens) {
  if (cluster_) cluster_->Refresh(ns, tokens);
  return store_->Lookup(ns, tokens);
}

Result<PrefixResult> Node::Pin(const std::string& ns, std::span<const uint32_t> tokens, uint64_t session) {
  if (cluster_) cluster_->Refresh(ns, tokens);
  return store_->Pin(ns, tokens, session);
}

Result<uint64_t> Node::LoadCopy(const std::string& ns, std::span<const uint32_t> tokens, uint8_t* dst,
                                uint64_t capacity) {
  if (cluster_) cluster_->Refresh(ns, tokens);
  return store_->LoadCopy(ns, tokens, dst, capacity);
}

// Cluster-wide: no node serves the removed bytes afterwards. The root's
// shard is asked first, as before a load, so that a removal sent to a node
// that never saw the prompt finds what other nodes hold.
Result<RemoveResult> Node::Remove(const std::string& ns, std::span<const uint32_t> tokens) {
  if (cluster_) cluster_->Refresh(ns, tokens);
  RemovalPoint point;
  PTS_ASSIGN_OR_RETURN(RemoveResult r, store_->Remove(ns, tokens, &point));
  if (cluster_) cluster_->PropagateRemoval(point);
  return r;
}

Result<RemoveResult> Node::RemoveByKey(const std::string& ns, const ChainKey& key) {
  RemovalPoint point;
  PTS_ASSIGN_OR_RETURN(RemoveResult r, store_->RemoveByKey(ns, key, &point));
  if (cluster_) cluster_->PropagateRemoval(point);
  return r;
}

Result<std::vector<IncrementLocation>> Node::Locate(const std::string& ns, const std::vector<ChainKey>& keys) {
  return cluster_ ? cluster_->Locate(ns, keys) : LocateLocal(store_.get(), ns, keys);
}

Result<PrefixLocation> Node::LocatePrefix(const std::string& ns, std::span<const uint32_t> tokens) {
  return cluster_ ? cluster_->LocatePrefix(ns, tokens) : LocatePrefixLocal(store_.get(), ns, tokens);
}

core::ClusterStatusReply Node::ClusterStatus() const {
  if (cluster_) return cluster_->MemberStatus();
  core::ClusterStatusReply rep;
  rep.self_id = store_->options().node_id;
  return rep;
}

size_t Node::member_count() const { return cluster_ ? cluster_->member_count() : 0; }

Result<std::string> Node::Reload() {
  if (!cluster_) return std::string("no cluster file (one node alone): nothing to reload; send SIGTERM to stop");
  if (etcd_) return "the members come from " + etcd_->url() + " and follow it: nothing to reload";
  return cluster_->Reload();
}

void Node::Leave() {
  if (etcd_) etcd_->Leave();
}

void Node::Stop(bool persist) {
  if (stopped_) return;
  stopped_ = true;
  etcd_.reset();  // its watch calls into the cluster: stopped first
  if (cluster_) cluster_->Stop();
  if (persist && !store_->options().ssd.dir.empty()) {
    Result<uint64_t> n = store_->PersistAll();
    if (!n.ok()) PTS_WARN("main", "persisting to SSD at shutdown: " << n.status().ToString());
  } else {
    store_->SyncTimes();  // what is on SSD comes back with the times it has now
  }
  if (events_) {
    store_->SetEventSink(nullptr);
    events_.reset();  // sends what is queued
  }
}

}  // namespace ptstore::storage
