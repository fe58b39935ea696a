#include "bench/qa_runner.h"

#include <algorithm>
#include <unordered_set>

namespace ptstore::bench {

namespace {

// Blocks of a prompt that any earlier prompt already had, by chain key: the
// longest match an ideal (never evicting) store can serve.
class Oracle {
 public:
  Oracle(const std::string& ns, uint32_t block_tokens) : root_(RootKey(ns, "")), bt_(block_tokens) {}

  // Longest stored prefix of `tokens`, in whole blocks.
  uint64_t Match(std::span<const uint32_t> tokens, const std::vector<ChainKey>& keys) const {
    uint64_t b = 0;
    while (b < keys.size() && seen_.count(keys[b])) ++b;
    return b;
  }
  std::vector<ChainKey> Keys(std::span<const uint32_t> tokens) const { return ChainKeys(root_, tokens, bt_); }
  // Adds a prompt; returns how many of its blocks were new.
  uint64_t Insert(const std::vector<ChainKey>& keys) {
    uint64_t added = 0;
    for (const ChainKey& k : keys) added += seen_.insert(k).second ? 1 : 0;
    return added;
  }

 private:
  ChainKey root_;
  uint32_t bt_;
  std::unordered_set<ChainKey, ChainKeyHash> seen_;
};

Status CheckBytes(const QaRequest& req, uint64_t tokens, uint64_t bpt, const uint8_t* data, const char* what) {
  auto bad = VerifyKv(std::span<const uint32_t>(req.tokens).first(tokens), 0, bpt, data);
  if (!bad) return Status::OK();
  return Corruption(Format("%s of doc %u question %u (%llu tokens): wrong bytes at %s", what, req.doc, req.question,
                           static_cast<unsigned long long>(tokens), bad->ToString().c_str()));
}

}  // namespace

Result<QaRunReport> RunQa(Client& client, const QaWorkload& workload, const QaRunOptions& o) {
  QaRunReport r;
  const Layout& layout = o.layout;
  const uint32_t bt = layout.block_tokens;
  const uint64_t bpt = layout.BytesPerToken();
  r.bytes_per_token = bpt;
  r.mapped = client.mapped();

  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, client.CreateNamespace(o.ns, layout));
  if (info.layout != layout) {
    return InvalidArgument("namespace '" + o.ns + "' has layout {" + info.layout.ToString() + "}, not {" +
                           layout.ToString() + "}");
  }
  if (info.bytes != 0) {
    return InvalidArgument("namespace '" + o.ns + "' already holds " + HumanBytes(info.bytes) +
                           ": the run needs an empty namespace (drop it first)");
  }
  if (info.salted) return InvalidArgument("namespace '" + o.ns + "' is salted: the oracle needs an unsalted one");

  // One buffer for the largest prompt, faulted in before anything is timed.
  const uint64_t capacity = workload.max_request_tokens() / bt * bt * bpt;
  PTS_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(std::max<uint64_t>(capacity, 1)));

  Oracle oracle(o.ns, bt);
  PTS_ASSIGN_OR_RETURN(r.stats_before, client.Stats());
  const auto t_run = Clock::now();

  for (const QaRequest& req : workload.requests()) {
    std::span<const uint32_t> tokens(req.tokens);
    const uint64_t whole = tokens.size() / bt * bt;
    QaRequestRecord rec;
    rec.doc = req.doc;
    rec.question = req.question;
    rec.tokens = tokens.size();
    const std::vector<ChainKey> keys = oracle.Keys(tokens);
    rec.expected_tokens = oracle.Match(tokens, keys) * bt;

    auto t0 = Clock::now();
    PTS_ASSIGN_OR_RETURN(PrefixInfo look, client.Lookup(o.ns, tokens));
    r.lookup.seconds += SecondsSince(t0);
    r.lookup.calls++;
    rec.lookup_tokens = look.matched_tokens;

    uint64_t loaded = 0;
    if (look.matched_tokens > 0) {
      t0 = Clock::now();
      PTS_ASSIGN_OR_RETURN(loaded, client.Load(o.ns, tokens, buf.data(), buf.size()));
      rec.load_seconds = SecondsSince(t0);
      r.load.seconds += rec.load_seconds;
      r.load.calls++;
      r.load.bytes += loaded * bpt;
      if (loaded % bt != 0 || loaded > whole) {
        return Internal(Format("load of doc %u question %u returned %llu tokens: not whole blocks of the prompt",
                               req.doc, req.question, static_cast<unsigned long long>(loaded)));
      }
      if (o.inject_corruption && loaded > 0 && r.load.calls == 1) buf.data()[loaded * bpt / 2] ^= 0x01;
      if (o.verify && loaded > 0) {
        t0 = Clock::now();
        PTS_RETURN_IF_ERROR(CheckBytes(req, loaded, bpt, buf.data(), "load"));
        r.verify.seconds += SecondsSince(t0);
        r.verify.calls++;
        r.verify.bytes += loaded * bpt;
        r.verified_bytes += loaded * bpt;
      }
    }
    rec.loaded_tokens = loaded;

    // "Prefill": the KV of every token the store did not have.
    t0 = Clock::now();
    FillKv(tokens.subspan(loaded, whole - loaded), loaded, bpt, buf.data() + loaded * bpt);
    r.compute.seconds += SecondsSince(t0);
    r.compute.calls++;
    r.compute.bytes += (whole - loaded) * bpt;

    if (whole > 0) {
      t0 = Clock::now();
      Result<SaveResult> saved = client.Save(o.ns, tokens, buf.data(), whole * bpt);
      rec.save_seconds = SecondsSince(t0);
      r.save.seconds += rec.save_seconds;
      r.save.calls++;
      if (saved.ok()) {
        r.save.bytes += saved->new_bytes;
        rec.stored_tokens = saved->stored_tokens;
        r.stored_bytes += saved->new_bytes;
        r.stored_tokens += saved->stored_tokens;
      } else if (saved.status().code() == Code::kResourceExhausted) {
        rec.save_refused = true;
        r.refused_saves++;
      } else {
        return saved.status().WithContext(Format("save of doc %u question %u", req.doc, req.question));
      }
    }
    r.expected_stored_tokens += oracle.Insert(keys) * bt;

    r.requests++;
    r.prompt_tokens += tokens.size();
    r.block_tokens += whole;
    r.lookup_tokens += rec.lookup_tokens;
    r.served_tokens += loaded;
    r.expected_served_tokens += rec.expected_tokens;
    r.hit_requests += loaded > 0 ? 1 : 0;
    r.doc_hit_requests += loaded > req.system_tokens ? 1 : 0;
    r.whole_bytes += whole * bpt;
    r.records.push_back(rec);
  }

  if (o.final_check) {
    const auto t0 = Clock::now();
    for (const QaRequest& req : workload.requests()) {
      std::span<const uint32_t> tokens(req.tokens);
      PTS_ASSIGN_OR_RETURN(uint64_t n, client.Load(o.ns, tokens, buf.data(), buf.size()));
      PTS_RETURN_IF_ERROR(CheckBytes(req, n, bpt, buf.data(), "final reload"));
      r.final_check.calls++;
      r.final_check.bytes += n * bpt;
      r.final_checked_tokens += n;
    }
    r.final_check.seconds = SecondsSince(t0);
  }
  r.wall_seconds = SecondsSince(t_run);
  PTS_ASSIGN_OR_RETURN(r.stats_after, client.Stats());
  PTS_ASSIGN_OR_RETURN(NamespaceInfo after, client.GetNamespace(o.ns));
  r.namespace_bytes = after.bytes;

  // Without eviction the store must behave exactly like the oracle.
  if (r.evictions() == 0 && r.refused_saves == 0) {
    for (const QaRequestRecord& rec : r.records) {
      if (rec.loaded_tokens != rec.expected_tokens || rec.lookup_tokens != rec.expected_tokens) {
        return Internal(Format("doc %u question %u: the store matched %llu tokens (lookup) and loaded %llu, but "
                               "%llu were saved before by earlier prompts",
                               rec.doc, rec.question, static_cast<unsigned long long>(rec.lookup_tokens),
                               static_cast<unsigned long long>(rec.loaded_tokens),
                               static_cast<unsigned long long>(rec.expected_tokens)));
      }
    }
    if (r.stored_tokens != r.expected_stored_tokens || r.namespace_bytes != r.expected_stored_tokens * bpt) {
      return Internal(Format("the store holds %llu bytes (saves added %llu tokens) but the prompts have %llu unique "
                             "whole-block tokens (%llu bytes)",
                             static_cast<unsigned long long>(r.namespace_bytes),
                             static_cast<unsigned long long>(r.stored_tokens),
                             static_cast<unsigned long long>(r.expected_stored_tokens),
                             static_cast<unsigned long long>(r.expected_stored_tokens * bpt)));
    }
    if (o.final_check && r.final_checked_tokens != r.block_tokens) {
      return Internal(Format("the final reload found %llu of the %llu whole-block tokens saved",
                             static_cast<unsigned long long>(r.final_checked_tokens),
                             static_cast<unsigned long long>(r.block_tokens)));
    }
  }
  return r;
}

nlohmann::json ToJson(const QaRunReport& r, const QaWorkloadOptions& w) {
  using nlohmann::json;
  auto phase = [](const PhaseTimer& p) {
    return json{{"seconds", p.seconds}, {"calls", p.calls}, {"bytes", p.bytes}, {"gb_per_s", GBps(p.bytes, p.seconds)}};
  };
  auto delta = [&](uint64_t StoreStats::*f) { return r.stats_after.*f - r.stats_before.*f; };
  json j;
  j["workload"] = {{"docs", w.docs},
                   {"questions", w.questions},
                   {"min_doc_tokens", w.min_doc_tokens},
                   {"max_doc_tokens", w.max_doc_tokens},
                   {"min_question_tokens", w.min_question_tokens},
                   {"max_question_tokens", w.max_question_tokens},
                   {"system_tokens", w.system_tokens},
                   {"seed", w.seed},
                   {"interleave", w.interleave}};
  j["mapped"] = r.mapped;
  j["bytes_per_token"] = r.bytes_per_token;
  j["requests"] = r.requests;
  j["prompt_tokens"] = r.prompt_tokens;
  j["whole_block_tokens"] = r.block_tokens;
  j["lookup_tokens"] = r.lookup_tokens;
  j["served_tokens"] = r.served_tokens;
  j["expected_served_tokens"] = r.expected_served_tokens;
  j["hit_requests"] = r.hit_requests;
  j["doc_hit_requests"] = r.doc_hit_requests;
  j["token_hit_rate"] = r.token_hit_rate();
  j["request_hit_rate"] = r.request_hit_rate();
  j["stored_tokens"] = r.stored_tokens;
  j["refused_saves"] = r.refused_saves;
  j["evictions"] = r.evictions();
  j["stored_bytes"] = r.stored_bytes;
  j["namespace_bytes"] = r.namespace_bytes;
  j["whole_bytes"] = r.whole_bytes;
  j["dedup_ratio"] = r.dedup_ratio();
  j["verified_bytes"] = r.verified_bytes;
  j["final_checked_tokens"] = r.final_checked_tokens;
  j["wall_seconds"] = r.wall_seconds;
  j["phases"] = {{"lookup", phase(r.lookup)},   {"load", phase(r.load)}, {"verify", phase(r.verify)},
                 {"compute", phase(r.compute)}, {"save", phase(r.save)}, {"final_check", phase(r.final_check)}};
  const StoreStats& s = r.stats_after;
  j["server"] = {{"arena_bytes", s.arena_bytes},       {"used_bytes", s.used_bytes},
                 {"owned_bytes", s.owned_bytes},       {"replica_bytes", s.replica_bytes},
                 {"pinned_bytes", s.pinned_bytes},     {"tensors", s.tensors},
                 {"prefix_nodes", s.prefix_nodes},     {"namespaces", s.namespaces},
                 {"lookups", s.lookups},               {"hits", s.hits},
                 {"misses", s.misses},                 {"hit_tokens", s.hit_tokens},
                 {"requested_tokens", s.requested_tokens}, {"saves", s.saves},
                 {"saved_bytes", s.saved_bytes},       {"dedup_bytes", s.dedup_bytes},
                 {"evictions", s.evictions},           {"evicted_bytes", s.evicted_bytes},
                 {"active_leases", s.active_leases},   {"expired_leases", s.expired_leases}};
  j["server_delta"] = {{"lookups", delta(&StoreStats::lookups)},     {"hits", delta(&StoreStats::hits)},
                       {"misses", delta(&StoreStats::misses)},       {"hit_tokens", delta(&StoreStats::hit_tokens)},
                       {"saves", delta(&StoreStats::saves)},         {"saved_bytes", delta(&StoreStats::saved_bytes)},
                       {"dedup_bytes", delta(&StoreStats::dedup_bytes)}, {"evictions", delta(&StoreStats::evictions)}};
  json recs = json::array();
  for (const auto& x : r.records) {
    recs.push_back({{"doc", x.doc},
                    {"question", x.question},
                    {"tokens", x.tokens},
                    {"lookup_tokens", x.lookup_tokens},
                    {"loaded_tokens", x.loaded_tokens},
                    {"expected_tokens", x.expected_tokens},
                    {"stored_tokens", x.stored_tokens},
                    {"save_refused", x.save_refused},
                    {"load_seconds", x.load_seconds},
                    {"save_seconds", x.save_seconds}});
  }
  j["requests_detail"] = recs;
  return j;
}

}  // namespace ptstore::bench
