// The cluster side of the KV query API (storage/cluster/cluster.h QueryTiers,
// TokensOfHashes; storage/server/kv_query.h): a prompt's match on every member by
// tier, and the tokens a list of block hashes names, asked of the live
// members in parallel with one PeerTiers each.
#include <algorithm>
#include <thread>

#include "core/logging.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

namespace ptstore::storage {

namespace {
constexpr uint8_t kDram = static_cast<uint8_t>(KvMedium::kCpu);
constexpr uint8_t kSsd = static_cast<uint8_t>(KvMedium::kStorage);

// A member's runs from the prompt's start, from its media per increment
// (ends[i]: the token the i-th increment ends at), as Mooncake's conductor
// walks a rank's blocks (mooncake-conductor/src/prefixindex/prefix_indexer.cpp,
// PrefixCacheTable::Query): through the blocks on GPU (none here), then on
// through those in DRAM (cpu), then on through those on SSD (disk). So
// cpu <= disk, and a DRAM run after an SSD run counts in neither: the walk
// never turns back to an earlier tier.
Cluster::MemberTiers Fold(uint32_t node, const std::vector<uint64_t>& ends, const std::vector<uint8_t>& media) {
  Cluster::MemberTiers t;
  t.node = node;
  const size_t n = std::min(ends.size(), media.size());
  size_t i = 0;
  for (; i < n && (media[i] & kDram); ++i) t.cpu_tokens = ends[i];
  t.disk_tokens = t.cpu_tokens;
  for (; i < n && (media[i] & kSsd); ++i) t.disk_tokens = ends[i];
  return t;
}

// Which media `store` holds each increment of `q` in (0 for one it does not
// hold whole).
std::vector<uint8_t> LocalMedia(Store* store, const core::PeerTiers& q) {
  std::vector<uint8_t> media;
  for (const core::PeerHolds::Entry& e : q.entries) {
    Result<uint8_t> m = store->HeldMedia(q.ns, e.tokens, e.from_block);
    media.push_back(m.ok() ? *m : 0);
  }
  return media;
}
// This node's answer (always the first member), and the question to ask the
// others: the increments of the prompt's match, as this node's index knows
// them, and the token each ends at.
struct LocalTiers {
  Cluster::ClusterTiers tiers;
  std::vector<uint64_t> ends;
  core::PeerTiers question;
};
Result<LocalTiers> AnswerLocally(Store* store, const std::string& ns, std::span<const uint32_t> tokens) {
  core::PeerHolds holds;
  PTS_ASSIGN_OR_RETURN(PrefixLocation loc, LocatePrefixLocal(store, ns, tokens, &holds));
  LocalTiers local;
  local.tiers.matched_tokens = loc.matched_tokens;
  for (const PrefixSpan& s : loc.spans) local.ends.push_back(s.end_token);
  local.question.ns = ns;
  local.question.entries = std::move(holds.entries);
  local.tiers.members.push_back(
      Fold(store->options().node_id, local.ends, LocalMedia(store, local.question)));
  return local;
}
}  // namespace

std::vector<std::pair<uint32_t, std::optional<core::PeerTiersReply>>> Cluster::AskTiers(const core::PeerTiers& q) {
  const std::shared_ptr<const PeerList> peers = Peers();
  std::vector<std::pair<uint32_t, std::optional<core::PeerTiersReply>>> answers(peers->size());
  std::vector<std::thread> calls;
  for (size_t p = 0; p < peers->size(); ++p) {
    Peer* peer = (*peers)[p].get();
    answers[p].first = peer->member.node_id;
    if (!IsAlive(peer)) continue;
    calls.emplace_back([this, peer, &q, &answers, p] {
      Result<core::PeerTiersReply> r =
          peer->link->Call<core::PeerTiers, core::PeerTiersReply>(q, options_.rpc_timeout_ms);
      if (!r.ok()) {
        PTS_DEBUG("cluster", "tiers from node " << peer->member.node_id << ": " << r.status().ToString());
        return;
      }
      if (r->media.size() != q.entries.size()) return;  // not an answer to this question
      answers[p].second = std::move(*r);
    });
  }
  for (std::thread& t : calls) t.join();
  return answers;
}

Result<Cluster::ClusterTiers> Cluster::QueryTiers(const std::string& ns, std::span<const uint32_t> tokens) {
  Refresh(ns, tokens);
  PTS_ASSIGN_OR_RETURN(LocalTiers local, AnswerLocally(store_, ns, tokens));
  ClusterTiers& out = local.tiers;
  const core::PeerTiers& q = local.question;
  if (q.entries.empty()) {
    // Nothing matched anywhere this node knows of: every live member holds nothing.
    for (const auto& p : *Peers()) {
      if (IsAlive(p.get())) out.members.push_back(MemberTiers{p->member.node_id, 0, 0});
      else out.unanswered.push_back(p->member.node_id);
    }
  } else {
    for (auto& [id, answer] : AskTiers(q)) {
      if (answer) out.members.push_back(Fold(id, local.ends, answer->media));
      else out.unanswered.push_back(id);
    }
  }
  std::sort(out.members.begin() + 1, out.members.end(),
            [](const MemberTiers& a, const MemberTiers& b) { return a.node < b.node; });
  std::sort(out.unanswered.begin(), out.unanswered.end());
  return std::move(local.tiers);
}

Result<Cluster::ClusterTiers> QueryTiersLocal(Store* store, const std::string& ns, std::span<const uint32_t> tokens) {
  PTS_ASSIGN_OR_RETURN(LocalTiers local, AnswerLocally(store, ns, tokens));
  return std::move(local.tiers);
}

Result<std::vector<uint32_t>> Cluster::TokensOfHashes(const std::string& ns, std::span<const ChainKey> hashes,
                                                      bool low64) {
  PTS_ASSIGN_OR_RETURN(std::vector<uint32_t> best, store_->TokensOfHashes(ns, hashes, low64));
  PTS_ASSIGN_OR_RETURN(NamespaceDef def, store_->GetNamespaceDef(ns));
  const uint64_t bt = def.info.layout.block_tokens;
  if (best.size() / bt >= hashes.size()) return best;
  core::PeerTiers q;
  q.ns = ns;
  q.hashes.assign(hashes.begin(), hashes.end());
  q.low64 = low64;
  const ChainKey root = RootKey(ns, def.salt);
  for (auto& [id, answer] : AskTiers(q)) {
    if (!answer || answer->tokens.size() <= best.size() || answer->tokens.size() % bt != 0 ||
        answer->tokens.size() / bt > hashes.size()) {
      continue;
    }
    // Only tokens whose chain keys are the hashes asked count.
    const std::vector<ChainKey> keys = ChainKeys(root, answer->tokens, static_cast<uint32_t>(bt));
    bool same = true;
    for (size_t i = 0; i < keys.size() && same; ++i) {
      same = low64 ? keys[i].lo == hashes[i].lo : keys[i] == hashes[i];
    }
    if (same) best = std::move(answer->tokens);
    else PTS_DEBUG("cluster", "node " << id << " named tokens for block hashes whose keys differ: ignored");
  }
  return best;
}

}  // namespace ptstore::storage
