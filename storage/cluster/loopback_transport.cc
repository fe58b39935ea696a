// The in-process transport (storage/cluster/loopback_transport.h): the net
// with its faults, then the transport and link every node of it gets.
#include "storage/cluster/loopback_transport.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "storage/cluster/cluster.h"

namespace ptstore::storage {

namespace {

std::string Route(uint32_t from, uint32_t to, core::MsgType type) {
  return std::string(core::MsgTypeName(static_cast<uint16_t>(type))) + " from node " + std::to_string(from) +
         " to node " + std::to_string(to);
}

Status Lost(uint32_t from, uint32_t to, core::MsgType type, Clock::time_point deadline) {
  std::this_thread::sleep_until(deadline);
  return DeadlineExceeded(Route(from, to, type) + ": no answer in time (loopback: lost)");
}

class LoopbackLink : public PeerLink {
 public:
  LoopbackLink(LoopbackNet* net, uint32_t self, uint32_t peer, uint8_t* arena, ClusterCounters* counters)
      : net_(net), self_(self), peer_(peer), arena_(arena), counters_(counters) {}

  Result<std::vector<uint8_t>> Exchange(core::MsgType type, const std::vector<uint8_t>& body,
                                        int timeout_ms) override {
    if (type == core::MsgType::kPeerFetch || type == core::MsgType::kPeerRelease) {
      return ProtocolError(Route(self_, peer_, type) + ": fetches go through PeerLink::Fetch");
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    PTS_ASSIGN_OR_RETURN(std::shared_ptr<LoopbackNet::Endpoint> e, net_->Enter(self_, peer_, type, deadline));
    local::Frame f;
    f.type = static_cast<uint16_t>(type);
    f.request_id = 1;
    f.body = body;
    const uint64_t session = e->service->NewSession();
    Result<std::vector<uint8_t>> rep = e->service->Handle(f, session);
    e->service->EndSession(session);
    net_->Leave(e);
    PTS_RETURN_IF_ERROR(net_->Answer(self_, peer_, type, deadline));
    return rep;
  }

  Status Fetch(const core::PeerFetch& msg, FetchRequest& req, uint64_t bb, int timeout_ms) override {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    constexpr core::MsgType kType = core::MsgType::kPeerFetch;
    PTS_ASSIGN_OR_RETURN(std::shared_ptr<LoopbackNet::Endpoint> e, net_->Enter(self_, peer_, kType, deadline));
    const uint64_t session = e->service->NewSession();
    Status st = Serve(*e->service, msg, req, bb, session, deadline);
    e->service->EndSession(session);
    net_->Leave(e);
    return st;
  }

  void Reset() override {}

 private:
  // The owner's pins, the way back, then the copy; the pins go when it returns.
  Status Serve(PeerService& owner, const core::PeerFetch& msg, FetchRequest& req, uint64_t bb, uint64_t session,
               Clock::time_point deadline) {
    PTS_ASSIGN_OR_RETURN(ServedFetch served, owner.PinFetch(msg, session));
    net_->RunFetchHook(peer_);
    PTS_RETURN_IF_ERROR(net_->Answer(self_, peer_, core::MsgType::kPeerFetch, deadline));
    uint64_t total = 0;
    PTS_RETURN_IF_ERROR(CopyServedFetch(served, req, bb, arena_, &total));
    if (counters_ != nullptr) counters_->bytes_loopback += total;
    return Status::OK();
  }

  LoopbackNet* const net_;
  const uint32_t self_, peer_;
  uint8_t* const arena_;
  ClusterCounters* const counters_;  // the fetching node's; null before Open
};

class LoopbackTransport : public PeerTransport {
 public:
  LoopbackTransport(LoopbackNet* net, uint32_t self, uint8_t* arena) : net_(net), self_(self), arena_(arena) {}
  ~LoopbackTransport() override { Stop(); }

  Status Open(PeerService* service, ClusterCounters* counters) override {
    service_ = service;
    counters_ = counters;
    return Status::OK();
  }
  void Serve() override {
    net_->Attach(self_, service_);
    serving_ = true;
  }
  void Stop() override {
    if (serving_) net_->Detach(self_, service_);
    serving_ = false;
  }
  std::unique_ptr<PeerLink> Connect(const core::Member& m) override {
    return std::make_unique<LoopbackLink>(net_, self_, m.node_id, arena_, counters_);
  }
  uint16_t port() const override { return 0; }
  std::string data_path() const override { return "loopback"; }

 private:
  LoopbackNet* const net_;
  const uint32_t self_;
  uint8_t* const arena_;
  PeerService* service_ = nullptr;
  ClusterCounters* counters_ = nullptr;
  bool serving_ = false;  // Serve and Stop are called by the owning Cluster's Start and Stop only
};

}  // namespace

std::unique_ptr<PeerTransport> LoopbackNet::Transport(uint32_t node_id, uint8_t* arena) {
  return std::make_unique<LoopbackTransport>(this, node_id, arena);
}

// ---------------------------------------------------------------- faults

void LoopbackNet::Partition(uint32_t a, uint32_t b) {
  core::MutexLock lk(mu_);
  partitions_.insert({std::min(a, b), std::max(a, b)});
}

void LoopbackNet::Heal(uint32_t a, uint32_t b) {
  core::MutexLock lk(mu_);
  partitions_.erase({std::min(a, b), std::max(a, b)});
}

void LoopbackNet::Drop(uint32_t from, uint32_t to, core::MsgType type, int count) {
  core::MutexLock lk(mu_);
  drops_[{from, to, static_cast<uint16_t>(type)}] = count;
}

void LoopbackNet::Delay(uint32_t from, uint32_t to, core::MsgType type, std::chrono::milliseconds delay) {
  core::MutexLock lk(mu_);
  const Key k{from, to, static_cast<uint16_t>(type)};
  if (delay.count() > 0) {
    delays_[k] = delay;
  } else {
    delays_.erase(k);
  }
}

void LoopbackNet::Kill(uint32_t node) {
  core::MutexLock lk(mu_);
  auto it = nodes_.find(node);
  if (it != nodes_.end()) it->second->killed = true;
}

void LoopbackNet::OnFetchPinned(std::function<void(uint32_t owner)> hook) {
  core::MutexLock lk(mu_);
  fetch_hook_ = std::move(hook);
}

uint64_t LoopbackNet::Delivered(core::MsgType type) const {
  core::MutexLock lk(mu_);
  auto it = delivered_.find(static_cast<uint16_t>(type));
  return it == delivered_.end() ? 0 : it->second;
}

// ------------------------------------------------------------- the wire

void LoopbackNet::Attach(uint32_t id, PeerService* service) {
  auto e = std::make_shared<Endpoint>();
  e->service = service;
  core::MutexLock lk(mu_);
  nodes_[id] = std::move(e);
}

void LoopbackNet::Detach(uint32_t id, PeerService* service) {
  core::UniqueLock lk(mu_);
  auto it = nodes_.find(id);
  if (it == nodes_.end() || it->second->service != service) return;
  std::shared_ptr<Endpoint> e = it->second;
  nodes_.erase(it);
  drained_.Wait(lk, [&]() REQUIRES(mu_) { return e->in_flight == 0; });
}

bool LoopbackNet::PartitionedLocked(uint32_t a, uint32_t b) const {
  return partitions_.count({std::min(a, b), std::max(a, b)}) > 0;
}

bool LoopbackNet::ReachableLocked(uint32_t id) const {
  auto it = nodes_.find(id);
  return it != nodes_.end() && !it->second->killed;
}

Result<std::shared_ptr<LoopbackNet::Endpoint>> LoopbackNet::Enter(uint32_t from, uint32_t to, core::MsgType type,
                                                                  Clock::time_point deadline) {
  bool lost = false;
  {
    core::MutexLock lk(mu_);
    if (!ReachableLocked(to) || !ReachableLocked(from)) {
      return Unavailable(Route(from, to, type) + ": node " + std::to_string(ReachableLocked(to) ? from : to) +
                         " is not reachable (loopback: stopped or killed)");
    }
    lost = PartitionedLocked(from, to);
    for (uint16_t t : {static_cast<uint16_t>(type), uint16_t{0}}) {
      auto d = drops_.find({from, to, t});
      if (!lost && d != drops_.end() && d->second > 0) {
        lost = true;
        if (--d->second == 0) drops_.erase(d);
      }
    }
    if (!lost) {
      std::shared_ptr<Endpoint> e = nodes_.at(to);
      e->in_flight++;
      delivered_[static_cast<uint16_t>(type)]++;
      return e;
    }
  }
  return Lost(from, to, type, deadline);
}

void LoopbackNet::Leave(const std::shared_ptr<Endpoint>& e) {
  core::MutexLock lk(mu_);
  e->in_flight--;
  drained_.NotifyAll();
}

Status LoopbackNet::Answer(uint32_t from, uint32_t to, core::MsgType type, Clock::time_point deadline) {
  std::chrono::milliseconds delay{0};
  {
    core::MutexLock lk(mu_);
    for (uint16_t t : {static_cast<uint16_t>(type), uint16_t{0}}) {
      auto d = delays_.find({from, to, t});
      if (d != delays_.end()) delay = std::max(delay, d->second);
    }
  }
  if (Clock::now() + delay > deadline) return Lost(from, to, type, deadline);
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  bool partitioned = false;
  {
    core::MutexLock lk(mu_);
    if (!ReachableLocked(to)) {
      return Unavailable(Route(from, to, type) + ": node " + std::to_string(to) +
                         " died before it answered (loopback)");
    }
    partitioned = PartitionedLocked(from, to);
  }
  // Cut off while the answer was on its way: it is lost.
  if (partitioned) return Lost(from, to, type, deadline);
  return Status::OK();
}

void LoopbackNet::RunFetchHook(uint32_t owner) {
  std::function<void(uint32_t)> hook;
  {
    core::MutexLock lk(mu_);
    hook = fetch_hook_;
  }
  if (hook) hook(owner);
}

}  // namespace ptstore::storage
