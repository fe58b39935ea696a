// Where a prefix's increments are (storage/cluster/cluster.h Locate,
// LocatePrefix, LocateLocal, LocatePrefixLocal): this node's own answer
// (owner by the ownership ranges, held here or not), then every live member
// asked in parallel with one PeerHolds (AskHolders) which of them it holds;
// the holders of each increment listed owner first, then by id.
#include <algorithm>
#include <thread>

#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

namespace ptstore::storage {

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

}  // namespace ptstore::storage
