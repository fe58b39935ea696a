#include "sched/store_index.h"

#include <algorithm>
#include <map>

namespace ptstore::sched {

StoreIndex::StoreIndex(std::vector<Node> nodes, bool cluster) : nodes_(std::move(nodes)), cluster_(cluster) {}

PrefixLocation MergeIndependent(const std::vector<std::pair<uint32_t, uint64_t>>& held_by_node) {
  // Distinct held lengths, ascending; a span up to each, held by every node
  // that holds at least its end.
  std::map<uint64_t, std::vector<uint32_t>> by_length;
  for (const auto& [node, held] : held_by_node) {
    if (held > 0) by_length[held].push_back(node);
  }
  PrefixLocation loc;
  for (auto it = by_length.begin(); it != by_length.end(); ++it) {
    PrefixSpan s;
    s.end_token = it->first;
    for (auto jt = it; jt != by_length.end(); ++jt) s.nodes.insert(s.nodes.end(), jt->second.begin(), jt->second.end());
    std::sort(s.nodes.begin(), s.nodes.end());
    s.owner = s.nodes.front();
    loc.matched_tokens = s.end_token;
    loc.spans.push_back(std::move(s));
  }
  return loc;
}

Result<PrefixLocation> StoreIndex::Locate(const std::string& ns, std::span<const uint32_t> tokens) {
  if (nodes_.empty()) return Unavailable("the prefix index has no store to ask");
  if (cluster_) {
    // Any node answers for the cluster; spread the asking over them and
    // move on past one that fails.
    // A node that does not know the namespace (created on other nodes
    // only) cannot say: ask the next; if none knows it, a miss.
    const size_t first = next_.fetch_add(1, std::memory_order_relaxed);
    Status last;
    bool unknown_ns = false;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Node& n = nodes_[(first + i) % nodes_.size()];
      Result<PrefixLocation> r = n.client->LocatePrefix(ns, tokens);
      if (r.ok()) return r;
      if (r.status().code() == Code::kNotFound) {
        unknown_ns = true;
      } else {
        last = r.status();
      }
    }
    if (unknown_ns) return PrefixLocation{};
    return Unavailable("no store of the cluster answered the prefix probe: " + last.ToString());
  }
  std::vector<std::pair<uint32_t, uint64_t>> held;
  size_t answered = 0;
  Status last;
  for (const Node& n : nodes_) {
    Result<PrefixLocation> r = n.client->LocatePrefix(ns, tokens);
    if (r.ok()) {
      ++answered;
      held.emplace_back(n.id, r->HeldBy(n.id));
    } else if (r.status().code() == Code::kNotFound) {
      ++answered;
    } else {
      last = r.status();
    }
  }
  if (answered == 0) return Unavailable("no store answered the prefix probe: " + last.ToString());
  return MergeIndependent(held);
}

}  // namespace ptstore::sched
