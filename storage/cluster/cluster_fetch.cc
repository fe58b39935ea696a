// Remote loads (storage/cluster/cluster.h): one PeerFetch per owner carrying all of
// that owner's segments, all owners in parallel, each through the owner's
// PeerLink (storage/cluster/peer_transport.h: the TCP stream, RMA reads or
// an in-process copy).
#include <algorithm>
#include <thread>

#include "core/logging.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

namespace ptstore::storage {

void Cluster::Fetch(const NamespaceDef& ns, std::span<const uint32_t> tokens, std::vector<FetchRequest>& requests) {
  std::vector<std::thread> others;
  for (size_t i = 1; i < requests.size(); ++i) {
    others.emplace_back([this, &ns, tokens, &requests, i] {
      if (std::shared_ptr<Peer> p = FindPeer(requests[i].owner)) FetchFrom(p.get(), ns, tokens, requests[i]);
    });
  }
  if (!requests.empty()) {
    if (std::shared_ptr<Peer> p = FindPeer(requests[0].owner)) FetchFrom(p.get(), ns, tokens, requests[0]);
  }
  for (std::thread& t : others) t.join();
}

void Cluster::FetchFrom(Peer* p, const NamespaceDef& ns, std::span<const uint32_t> tokens, FetchRequest& req) {
  if (!IsAlive(p)) return;  // its extents count as missing
  const uint64_t bb = ns.info.layout.BytesPerBlock();
  uint64_t bytes = 0;
  const core::PeerFetch msg = FetchMessage(ns, tokens, req, &bytes);
  const int timeout_ms =
      options_.rpc_timeout_ms + static_cast<int>(static_cast<double>(bytes) / options_.min_fetch_bytes_per_s * 1000);
  counters_.fetch_requests++;
  const auto t0 = Clock::now();
  // The transport picks the path (the stream, RMA reads, an in-process copy).
  const Status st = p->link->Fetch(msg, req, bb, timeout_ms);
  counters_.fetch_latency.Observe(Clock::now() - t0);
  if (!st.ok()) {
    for (FetchSegment& s : req.segments) s.fetched_blocks = 0;  // a partial fetch serves nothing
    counters_.fetch_failures++;
    PTS_DEBUG("cluster", "fetch of " << bytes << " bytes from node " << p->member.node_id << ": " << st.ToString());
    if (st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded) MarkFailed(p, st);
  }
}

}  // namespace ptstore::storage
