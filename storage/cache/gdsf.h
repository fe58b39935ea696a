// Greedy-Dual-Size-Frequency eviction (DESIGN.md §4).
//
//   priority = L + frequency * cost / size
//
// where L is the priority of the last victim (it "inflates" so that entries
// that were hot long ago age out), frequency is 1 + hits, size the bytes held
// and cost the time to recompute the increment's tokens at their position:
// attention makes a token at position p cost about 1 + p / kAttentionKnee
// token-units, so later tokens are worth more per byte. The Store also keeps
// an ancestor's priority at least that of its descendants, because every
// load of a descendant is a hit on the ancestor.
//
// Thread safety: none (used under the Store's mutex).
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>

#include "storage/index/tensor.h"

namespace ptstore::storage {

class Gdsf {
 public:
  static constexpr double kAttentionKnee = 2048.0;

  // Cost units to recompute tokens [start, start + tokens).
  static double RecomputeCost(uint64_t start, uint64_t tokens) {
    double mid = static_cast<double>(start) + static_cast<double>(tokens) / 2.0;
    return static_cast<double>(tokens) * (1.0 + mid / kAttentionKnee);
  }
  // Priority of `t` as of now (without the ancestor rule).
  double Priority(const Tensor& t) const {
    double size_kib = std::max<double>(1.0, static_cast<double>(t.bytes) / 1024.0);
    return inflation_ + static_cast<double>(t.hits + 1) * t.cost / size_kib;
  }
  void OnEvict(const Tensor& t) { inflation_ = std::max(inflation_, t.priority); }
  double inflation() const { return inflation_; }

 private:
  double inflation_ = 0;
};

// Tensors of one cache class ordered by priority, lowest first, and the
// same per namespace (Tensor::ns, which never changes while queued): a
// namespace over its quota picks its own victims without walking others'.
class EvictionQueue {
 public:
  void Add(Tensor* t) {
    set_.insert({t->priority, t});
    by_ns_[t->ns].insert({t->priority, t});
  }
  void Remove(Tensor* t) {
    if (set_.erase({t->priority, t}) == 0) return;
    auto it = by_ns_.find(t->ns);
    if (it == by_ns_.end()) return;
    it->second.erase({t->priority, t});
    if (it->second.empty()) by_ns_.erase(it);
  }
  void Update(Tensor* t, double priority) {
    Remove(t);
    t->priority = priority;
    Add(t);
  }
  // Lowest-priority tensor for which `may_go` holds; nullptr when none.
  template <typename Pred>
  Tensor* PickVictim(Pred may_go) const {
    for (const auto& [prio, t] : set_) {
      if (may_go(t)) return t;
    }
    return nullptr;
  }
  // The same among the tensors of namespace `ns` only.
  template <typename Pred>
  Tensor* PickVictimIn(const Namespace* ns, Pred may_go) const {
    auto it = by_ns_.find(ns);
    if (it == by_ns_.end()) return nullptr;
    for (const auto& [prio, t] : it->second) {
      if (may_go(t)) return t;
    }
    return nullptr;
  }
  bool Contains(Tensor* t) const { return set_.count({t->priority, t}) != 0; }
  size_t size() const { return set_.size(); }

 private:
  std::set<std::pair<double, Tensor*>> set_;
  std::unordered_map<const Namespace*, std::set<std::pair<double, Tensor*>>> by_ns_;
};

}  // namespace ptstore::storage
