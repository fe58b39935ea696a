// bench_save_lookup: save throughput of new prefixes against memcpy of the
// same bytes, and lookup latency of 8k-token prompts over the unix socket
// against the cheapest round trip (a Stats RPC) and the chain-key hashing a
// lookup implies, all measured in the same run.
//
// Save: each repetition saves a prefix the store has never seen (--save-tokens
// tokens, Mistral-7B geometry), through a plain pointer (the client copies
// into its staging buffer, the server copies into the arena) and through a
// RegisteredBuffer (the server copies once); a re-save of a stored prefix
// shows the dedup path (nothing copied). Every saved prefix is loaded back
// and compared; a wrong byte fails the benchmark.
//
// Saves at a quota: saves of 8 MiB into a namespace whose DRAM quota is full
// (ptstore/quota.h), so that each one first evicts one of the namespace's
// own prefixes, against saves into free space, interleaved in one run; the
// namespace's use never passes its quota, and another namespace's prefixes
// all still load byte-exact afterwards.
//
// Lookup: a tree of QA prompts of 8192 tokens (system prompt, 16 documents,
// 4 questions each) and thousands of lookups of: a stored prompt (hit), a
// new question on a stored document (partial hit), an unknown prompt (miss).
// The matched lengths are checked on every call.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "ptstore/client.h"

using namespace ptstore;
using namespace ptstore::bench;

namespace {

struct Options {
  std::string socket, arena_size = "1GiB", ptstored;
  uint64_t save_tokens = 2048;
  int save_reps = 7;
  int lookups = 3000;
  uint32_t prompt_tokens = 8192;
  uint32_t docs = 16, questions = 4;
  bool quick = false, json = false;
};

std::string Us(double s) { return Format("%.1f", s * 1e6); }

struct Dropper {
  Client* c;
  std::string ns;
  ~Dropper() {
    if (c) c->DropNamespace(ns).status().IgnoreError();
  }
};

// ------------------------------------------------------------------ saves

Status SaveBench(const Options& o, Client& client, nlohmann::json* out, std::string* text) {
  const Layout layout = MistralLayout();
  const uint64_t n = o.save_tokens / layout.block_tokens * layout.block_tokens;
  if (n == 0) return InvalidArgument("--save-tokens must be at least one block (16)");
  const uint64_t bytes = n * layout.BytesPerToken();
  const std::string ns = Format("bench-save-%d", static_cast<int>(getpid()));
  PTS_RETURN_IF_ERROR(client.CreateNamespace(ns, layout).status());
  Dropper drop{&client, ns};

  PTS_ASSIGN_OR_RETURN(HostBuffer src, HostBuffer::Allocate(bytes));
  PTS_ASSIGN_OR_RETURN(HostBuffer dst, HostBuffer::Allocate(bytes));
  PTS_ASSIGN_OR_RETURN(RegisteredBuffer reg, client.AllocateBuffer(bytes));

  uint64_t seed = 1000;
  auto fresh = [&](uint8_t* into) {  // a prefix never seen, its KV in `into` (untimed)
    std::vector<uint32_t> t = RandomTokens(seed++, n);
    FillKv(t, 0, layout.BytesPerToken(), into);
    return t;
  };
  // Loads the prefix back and compares it with what was saved (untimed).
  auto check = [&](const std::vector<uint32_t>& t, const uint8_t* want, const char* what) -> Status {
    std::memset(dst.data(), 0x5a, bytes);
    PTS_ASSIGN_OR_RETURN(uint64_t got, client.Load(ns, t, dst.data(), bytes));
    if (got != n || std::memcmp(dst.data(), want, bytes) != 0) {
      return Corruption(Format("%s: the saved prefix loads back as %llu tokens with different bytes", what,
                               static_cast<unsigned long long>(got)));
    }
    return Status::OK();
  };
  auto expect_new = [&](const SaveResult& r, const char* what) -> Status {
    if (r.new_bytes != bytes) {
      return Internal(Format("%s stored %llu new bytes, expected %llu", what,
                             static_cast<unsigned long long>(r.new_bytes), static_cast<unsigned long long>(bytes)));
    }
    return Status::OK();
  };

  std::vector<double> t_memcpy, t_save, t_save_reg, t_resave;
  for (int rep = -1; rep < o.save_reps; ++rep) {  // rep -1: warm-up
    {
      fresh(src.data());
      std::memset(dst.data(), 0x5a, bytes);
      auto t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      if (rep >= 0) t_memcpy.push_back(SecondsSince(t0));
    }
    {
      std::vector<uint32_t> t = fresh(src.data());
      auto t0 = Clock::now();
      PTS_ASSIGN_OR_RETURN(SaveResult r, client.Save(ns, t, src.data(), bytes));
      if (rep >= 0) t_save.push_back(SecondsSince(t0));
      PTS_RETURN_IF_ERROR(expect_new(r, "Save"));
      // The same prefix again: everything is stored, nothing is copied.
      t0 = Clock::now();
      PTS_ASSIGN_OR_RETURN(SaveResult again, client.Save(ns, t, src.data(), bytes));
      if (rep >= 0) t_resave.push_back(SecondsSince(t0));
      if (again.new_bytes != 0 || again.matched_tokens != n) return Internal("a re-save stored bytes again");
      PTS_RETURN_IF_ERROR(check(t, src.data(), "Save"));
      PTS_RETURN_IF_ERROR(client.Remove(ns, t).status());
    }
    {
      std::vector<uint32_t> t = fresh(reg.data());
      auto t0 = Clock::now();
      PTS_ASSIGN_OR_RETURN(SaveResult r, client.Save(ns, t, reg, 0, bytes));
      if (rep >= 0) t_save_reg.push_back(SecondsSince(t0));
      PTS_RETURN_IF_ERROR(expect_new(r, "Save from a RegisteredBuffer"));
      PTS_RETURN_IF_ERROR(check(t, reg.data(), "Save from a RegisteredBuffer"));
      PTS_RETURN_IF_ERROR(client.Remove(ns, t).status());
    }
  }

  const double base = Summarize(t_memcpy).p50;
  Table t({"save of a new prefix", "median GB/s", "min GB/s", "max GB/s", "median ms", "vs memcpy"});
  nlohmann::json rows = nlohmann::json::array();
  auto add = [&](const std::string& name, const std::vector<double>& secs) {
    Summary s = Summarize(secs);
    t.Row({name, Format("%.2f", GBps(bytes, s.p50)), Format("%.2f", GBps(bytes, s.max)),
           Format("%.2f", GBps(bytes, s.min)), Format("%.2f", 1e3 * s.p50), Format("%.2f", base / s.p50)});
    rows.push_back({{"method", name}, {"median_gb_per_s", GBps(bytes, s.p50)}, {"median_seconds", s.p50},
                    {"ratio_vs_memcpy", base / s.p50}, {"samples", secs}});
  };
  add("memcpy (baseline)", t_memcpy);
  add("Client::Save (pointer: 2 copies)", t_save);
  add("Client::Save (RegisteredBuffer: 1 copy)", t_save_reg);
  add("re-save of a stored prefix (dedup)", t_resave);
  *text += Format("Saves: %s per prefix (%llu tokens, %s), %d repetitions after a warm-up\n\n", HumanBytes(bytes).c_str(),
                  static_cast<unsigned long long>(n), layout.ToString().c_str(), o.save_reps);
  *text += t.ToString();
  (*out)["save"] = {{"bytes", bytes}, {"tokens", n}, {"reps", o.save_reps}, {"methods", rows}};
  return Status::OK();
}

// ------------------------------------------------------------ quota saves

Status QuotaSaveBench(const Options& o, Client& client, nlohmann::json* out, std::string* text) {
  // Prefixes of 64 tokens (8 MiB): the quota's and the other namespace's fit
  // beside each other in the smallest arena of these runs (128 MiB), so the
  // arena itself never evicts.
  const Layout layout = MistralLayout();
  const uint64_t n = 64;
  const uint64_t bytes = n * layout.BytesPerToken();
  const int kept = 4;  // prefixes the quota holds
  const std::string free_ns = Format("bench-free-%d", static_cast<int>(getpid()));
  const std::string quota_ns = Format("bench-quota-%d", static_cast<int>(getpid()));
  const std::string other_ns = Format("bench-other-%d", static_cast<int>(getpid()));
  for (const std::string& ns : {free_ns, quota_ns, other_ns}) PTS_RETURN_IF_ERROR(client.CreateNamespace(ns, layout).status());
  Dropper d1{&client, free_ns}, d2{&client, quota_ns}, d3{&client, other_ns};
  PTS_RETURN_IF_ERROR(client.SetQuota(quota_ns, QuotaChange{kept * bytes, {}}).status());
  PTS_ASSIGN_OR_RETURN(HostBuffer src, HostBuffer::Allocate(bytes));
  PTS_ASSIGN_OR_RETURN(HostBuffer dst, HostBuffer::Allocate(bytes));
  uint64_t seed = 500000;
  auto save = [&](const std::string& ns) -> Result<std::vector<uint32_t>> {
    std::vector<uint32_t> t = RandomTokens(seed++, n);
    FillKv(t, 0, layout.BytesPerToken(), src.data());
    PTS_ASSIGN_OR_RETURN(SaveResult r, client.Save(ns, t, src.data(), bytes));
    if (r.new_bytes != bytes) return Internal("a save at its quota stored " + std::to_string(r.new_bytes) + " bytes");
    return t;
  };
  std::vector<std::vector<uint32_t>> others;
  for (int i = 0; i < kept; ++i) {
    PTS_ASSIGN_OR_RETURN(auto t, save(other_ns));
    others.push_back(std::move(t));
    PTS_RETURN_IF_ERROR(save(quota_ns).status());  // fills the quota
  }
  std::vector<double> t_free, t_quota;
  std::vector<std::vector<uint32_t>> free_kept;
  const int reps = std::max(o.save_reps * 9, 27);
  for (int rep = 0; rep < reps; ++rep) {
    for (int which = 0; which < 2; ++which) {
      const std::string& ns = which == 0 ? free_ns : quota_ns;
      std::vector<uint32_t> t = RandomTokens(seed++, n);
      FillKv(t, 0, layout.BytesPerToken(), src.data());
      auto t0 = Clock::now();
      PTS_ASSIGN_OR_RETURN(SaveResult r, client.Save(ns, t, src.data(), bytes));
      (which == 0 ? t_free : t_quota).push_back(SecondsSince(t0));
      if (r.new_bytes != bytes) return Internal("a save stored " + std::to_string(r.new_bytes) + " bytes");
      if (which == 0) {
        // Free space stays free, and the baseline's saves rotate over as
        // many arena regions as the quota's do (the removal of the oldest is
        // not timed): the two differ only in who makes the room.
        free_kept.push_back(std::move(t));
        if (free_kept.size() > static_cast<size_t>(kept)) {
          PTS_RETURN_IF_ERROR(client.Remove(ns, free_kept.front()).status());
          free_kept.erase(free_kept.begin());
        }
      }
    }
  }
  PTS_ASSIGN_OR_RETURN(auto q, client.Quotas(quota_ns));
  if (q.front().dram_bytes > q.front().dram_quota) return Internal("the namespace went past its quota");
  if (q.front().dram_evictions != static_cast<uint64_t>(reps)) {
    return Internal("expected one eviction per save at the quota, got " + std::to_string(q.front().dram_evictions));
  }
  for (const auto& t : others) {
    std::memset(dst.data(), 0, bytes);
    PTS_ASSIGN_OR_RETURN(uint64_t got, client.Load(other_ns, t, dst.data(), bytes));
    FillKv(t, 0, layout.BytesPerToken(), src.data());
    if (got != n || std::memcmp(dst.data(), src.data(), bytes) != 0) {
      return Corruption("another namespace's prefix did not load back whole after the saves at a quota");
    }
  }
  const Summary f = Summarize(t_free), a = Summarize(t_quota);
  Table t({"save of a new prefix", "median GB/s", "median ms", "vs free space"});
  t.Row({"into free space (baseline)", Format("%.2f", GBps(bytes, f.p50)), Format("%.2f", 1e3 * f.p50), "1.00"});
  t.Row({"at its DRAM quota (evicts one of its own)", Format("%.2f", GBps(bytes, a.p50)), Format("%.2f", 1e3 * a.p50),
         Format("%.2f", f.p50 / a.p50)});
  *text += Format("\nSaves at a quota: %s per prefix, quota of %d prefixes, %d saves of each kind, interleaved\n\n",
                  HumanBytes(bytes).c_str(), kept, reps);
  *text += t.ToString();
  (*out)["quota_save"] = {{"bytes", bytes},
                          {"free_median_seconds", f.p50},
                          {"quota_median_seconds", a.p50},
                          {"ratio_vs_free", f.p50 / a.p50},
                          {"evictions", q.front().dram_evictions}};
  return Status::OK();
}

// ---------------------------------------------------------------- lookups

Status LookupBench(const Options& o, Client& client, nlohmann::json* out, std::string* text) {
  // Lookup cost does not depend on the KV size: a small geometry keeps the
  // tree of 64 prompts of 8k tokens in a few hundred MiB.
  Layout layout;
  layout.layers = 1;
  layout.kv_heads = 2;
  layout.head_dim = 64;
  layout.dtype = DType::kBF16;
  layout.block_tokens = 16;
  const std::string ns = Format("bench-lookup-%d", static_cast<int>(getpid()));
  PTS_RETURN_IF_ERROR(client.CreateNamespace(ns, layout).status());
  Dropper drop{&client, ns};

  QaWorkloadOptions w;
  w.docs = o.docs;
  w.questions = o.questions;
  w.system_tokens = 64;
  w.min_question_tokens = w.max_question_tokens = 128;
  if (o.prompt_tokens < w.system_tokens + 2 * 128) return InvalidArgument("--prompt-tokens is too small");
  w.min_doc_tokens = w.max_doc_tokens = o.prompt_tokens - w.system_tokens - 128;
  w.seed = 7;
  const QaWorkload work = QaWorkload::Make(w);
  const uint64_t bt = layout.block_tokens;
  const uint64_t whole = o.prompt_tokens / bt * bt;
  const uint64_t shared = (w.system_tokens + w.min_doc_tokens) / bt * bt;

  PTS_ASSIGN_OR_RETURN(HostBuffer kv, HostBuffer::Allocate(whole * layout.BytesPerToken()));
  for (const QaRequest& r : work.requests()) {
    FillKv(std::span<const uint32_t>(r.tokens).first(whole), 0, layout.BytesPerToken(), kv.data());
    PTS_RETURN_IF_ERROR(client.Save(ns, r.tokens, kv.data(), whole * layout.BytesPerToken()).status());
  }
  // New questions on stored documents, and prompts the store never saw.
  std::vector<std::vector<uint32_t>> hit, partial, miss;
  for (size_t i = 0; i < work.requests().size(); ++i) {
    hit.push_back(work.requests()[i].tokens);
    std::vector<uint32_t> p = work.requests()[i].tokens;
    std::vector<uint32_t> q = RandomTokens(50000 + i, 128);
    std::copy(q.begin(), q.end(), p.end() - 128);
    partial.push_back(std::move(p));
    miss.push_back(RandomTokens(90000 + i, o.prompt_tokens));
  }
  const ChainKey root = RootKey(ns, "");

  struct Case {
    std::string name;
    std::function<Status(size_t i)> run;
    std::vector<double> seconds;
  };
  auto lookup_case = [&](const std::vector<std::vector<uint32_t>>& prompts, uint64_t want) {
    return [&prompts, &client, &ns, want](size_t i) -> Status {
      PTS_ASSIGN_OR_RETURN(PrefixInfo p, client.Lookup(ns, prompts[i % prompts.size()]));
      if (p.matched_tokens != want) {
        return Internal(Format("lookup matched %llu tokens, expected %llu",
                               static_cast<unsigned long long>(p.matched_tokens), static_cast<unsigned long long>(want)));
      }
      return Status::OK();
    };
  };
  std::vector<Case> cases;
  cases.push_back({"Stats RPC (round-trip floor, baseline)", [&](size_t) { return client.Stats().status(); }, {}});
  cases.push_back({"chain keys of the prompt, in process", [&](size_t i) {
                     const auto& t = work.requests()[i % work.requests().size()].tokens;
                     auto keys = ChainKeys(root, t, layout.block_tokens);
                     if (keys.size() != whole / bt) return Internal("wrong number of chain keys");
                     return Status::OK();
                   }, {}});
  cases.push_back({Format("Lookup hit (%llu of %u tokens)", static_cast<unsigned long long>(whole), o.prompt_tokens),
                   lookup_case(hit, whole), {}});
  cases.push_back({Format("Lookup partial hit (%llu tokens: new question)", static_cast<unsigned long long>(shared)),
                   lookup_case(partial, shared), {}});
  cases.push_back({"Lookup miss (unknown prompt)", lookup_case(miss, 0), {}});

  for (auto& c : cases) {  // warm-up
    for (size_t i = 0; i < 50; ++i) PTS_RETURN_IF_ERROR(c.run(i).WithContext(c.name));
  }
  for (int i = 0; i < o.lookups; ++i) {
    for (auto& c : cases) {
      const auto t0 = Clock::now();
      PTS_RETURN_IF_ERROR(c.run(static_cast<size_t>(i)).WithContext(c.name));
      c.seconds.push_back(SecondsSince(t0));
    }
  }

  const double base = Summarize(cases[0].seconds).p50;
  Table t({"operation", "p50 us", "p90 us", "p99 us", "mean us", "max us", "per s", "p50 vs RPC"});
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& c : cases) {
    Summary s = Summarize(c.seconds);
    t.Row({c.name, Us(s.p50), Us(s.p90), Us(s.p99), Us(s.mean), Us(s.max), Format("%.0f", 1 / s.mean),
           Format("%.2f", s.p50 / base)});
    rows.push_back({{"operation", c.name}, {"p50_us", s.p50 * 1e6}, {"p90_us", s.p90 * 1e6}, {"p99_us", s.p99 * 1e6},
                    {"mean_us", s.mean * 1e6}, {"max_us", s.max * 1e6}, {"ratio_p50_vs_rpc", s.p50 / base}});
  }
  *text += Format("\nLookups: %zu stored prompts of %u tokens (%u documents x %u questions, shared 64-token system "
                  "prompt), %d calls per row, interleaved, one client thread\n\n",
                  work.requests().size(), o.prompt_tokens, o.docs, o.questions, o.lookups);
  *text += t.ToString();
  (*out)["lookup"] = {{"prompt_tokens", o.prompt_tokens}, {"stored_prompts", work.requests().size()},
                      {"calls", o.lookups}, {"rows", rows}};
  return Status::OK();
}

Status Run(const Options& o) {
  if (!o.json) {
    std::printf("bench_save_lookup\nmachine: %s\n", MachineDescription().c_str());
  }
  PTS_ASSIGN_OR_RETURN(testing::ServerHandle server,
                       testing::ConnectOrStart(o.socket, ServerOptions(o.arena_size, o.ptstored), o.json));
  ClientOptions co;
  co.socket_path = server.socket_path;
  co.client_name = "bench_save_lookup";
  PTS_ASSIGN_OR_RETURN(auto client, Client::Connect(co));
  nlohmann::json j{{"bench", "bench_save_lookup"}, {"machine", MachineDescription()}};
  std::string text;
  PTS_RETURN_IF_ERROR(SaveBench(o, *client, &j, &text));
  PTS_RETURN_IF_ERROR(QuotaSaveBench(o, *client, &j, &text));
  PTS_RETURN_IF_ERROR(LookupBench(o, *client, &j, &text));
  if (o.json) {
    std::cout << j.dump(2) << std::endl;
  } else {
    std::printf("%s", text.c_str());
  }
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_save_lookup: save throughput vs memcpy, lookup latency over the unix socket"};
  Options o;
  app.add_option("--socket", o.socket, "socket of a running ptstored (default: start one)");
  app.add_option("--arena-size", o.arena_size, "arena of the ptstored started for this run")->capture_default_str();
  app.add_option("--ptstored", o.ptstored, "ptstored binary to start");
  app.add_option("--save-tokens", o.save_tokens, "tokens per saved prefix (Mistral-7B: 128 KiB each)")->capture_default_str();
  app.add_option("--save-reps", o.save_reps, "timed saves per method")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--lookups", o.lookups, "timed calls per lookup row")->capture_default_str()->check(CLI::Range(1, 10000000));
  app.add_option("--prompt-tokens", o.prompt_tokens, "tokens per looked-up prompt")->capture_default_str();
  app.add_option("--docs", o.docs, "stored documents")->capture_default_str()->check(CLI::Range(1u, 100000u));
  app.add_option("--questions", o.questions, "stored questions per document")->capture_default_str()->check(CLI::Range(1u, 100000u));
  app.add_flag("--quick", o.quick, "small run for tests: 256-token saves, 3 reps, 300 lookups, 4 docs");
  app.add_flag("--json", o.json, "print the results as JSON");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    if (!app.count("--save-tokens")) o.save_tokens = 256;
    if (!app.count("--save-reps")) o.save_reps = 3;
    if (!app.count("--lookups")) o.lookups = 300;
    if (!app.count("--docs")) o.docs = 4;
    if (!app.count("--arena-size")) o.arena_size = "128MiB";
  }
  Status st = Run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "bench_save_lookup: FAILED: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
