// The in-process transport (storage/cluster/peer_transport.h): the nodes of
// a LoopbackNet are Clusters in one process; a link calls the owner's
// PeerService directly (the same Handle and PinFetch the sockets serve) and
// a fetch copies the pinned bytes from the owner's arena into the
// requester's. Messages are encoded and decoded as on the wire.
//
// Faults are injected here, per message, between the two nodes:
//   Partition(a, b)        every message between a and b is lost (a black
//                          hole: the caller's deadline passes) until Heal;
//   Drop(from, to, type)   the next `count` messages of `type` (kUnknown:
//                          any) from `from` to `to` are lost;
//   Delay(from, to, type)  the answers to such messages come `delay` late:
//                          the owner has served the request (and, for a
//                          fetch, pinned the bytes), and a delay past the
//                          caller's deadline loses the answer (its pins are
//                          released, no byte is copied);
//   Kill(node)             the node is gone: calls to and from it are
//                          refused (Unavailable), and a fetch it was serving
//                          fails before its copy; Attach (a restart) revives;
//   OnFetchPinned(hook)    runs after an owner pinned a fetch and before the
//                          copy (a test kills the owner there).
// A message that a fault loses, or answers late, fails with the errors of
// peer_transport.h, so that liveness sees what it would see on a network.
//
// Thread safety: all methods may be called from any thread; mu_ is never
// held while a service runs or a hook is called. The net must outlive every
// transport and link made from it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "storage/cluster/peer_transport.h"

namespace ptstore::storage {

class LoopbackNet {
 public:
  LoopbackNet() = default;
  LoopbackNet(const LoopbackNet&) = delete;
  LoopbackNet& operator=(const LoopbackNet&) = delete;

  // The transport of node `node_id` (one per Cluster); `arena`: the node's
  // arena, the destination of its fetches.
  std::unique_ptr<PeerTransport> Transport(uint32_t node_id, uint8_t* arena);

  void Partition(uint32_t a, uint32_t b) EXCLUDES(mu_);
  void Heal(uint32_t a, uint32_t b) EXCLUDES(mu_);
  void Drop(uint32_t from, uint32_t to, core::MsgType type, int count) EXCLUDES(mu_);
  // delay 0: none.
  void Delay(uint32_t from, uint32_t to, core::MsgType type, std::chrono::milliseconds delay) EXCLUDES(mu_);
  void Kill(uint32_t node) EXCLUDES(mu_);
  void OnFetchPinned(std::function<void(uint32_t owner)> hook) EXCLUDES(mu_);
  // Messages of `type` that reached their node's service (lost ones not).
  uint64_t Delivered(core::MsgType type) const EXCLUDES(mu_);

  // ---- for the transport and its links
  struct Endpoint {
    PeerService* service = nullptr;
    bool killed = false;
    int in_flight = 0;  // GUARDED_BY the net's mu_
  };
  // Serving node `id` by `service` from now on (a restart replaces the old).
  void Attach(uint32_t id, PeerService* service) EXCLUDES(mu_);
  // No longer: returns once no call into `service` runs.
  void Detach(uint32_t id, PeerService* service) EXCLUDES(mu_);
  // A message of `type` from `from` to `to` is on its way: the owner's
  // service to run it (counted in flight until Leave), or the error the
  // caller gets at once (Unavailable) or at `deadline` (lost).
  Result<std::shared_ptr<Endpoint>> Enter(uint32_t from, uint32_t to, core::MsgType type,
                                          std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);
  void Leave(const std::shared_ptr<Endpoint>& e) EXCLUDES(mu_);
  // The answer travels back: OK, or the error a delay past the deadline, a
  // partition or a death meanwhile cost it.
  Status Answer(uint32_t from, uint32_t to, core::MsgType type, std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);
  void RunFetchHook(uint32_t owner) EXCLUDES(mu_);

 private:
  using Key = std::tuple<uint32_t, uint32_t, uint16_t>;  // from, to, type (0: any)
  bool PartitionedLocked(uint32_t a, uint32_t b) const REQUIRES(mu_);
  bool ReachableLocked(uint32_t id) const REQUIRES(mu_);

  mutable core::Mutex mu_;
  core::CondVar drained_;
  std::map<uint32_t, std::shared_ptr<Endpoint>> nodes_ GUARDED_BY(mu_);
  std::set<std::pair<uint32_t, uint32_t>> partitions_ GUARDED_BY(mu_);  // (lower id, higher id)
  std::map<Key, int> drops_ GUARDED_BY(mu_);
  std::map<Key, std::chrono::milliseconds> delays_ GUARDED_BY(mu_);
  std::function<void(uint32_t)> fetch_hook_ GUARDED_BY(mu_);
  std::map<uint16_t, uint64_t> delivered_ GUARDED_BY(mu_);
};

}  // namespace ptstore::storage
