// ptstore-demo: a long-document QA workload against ptstored, end to end.
//
// Every request looks up its prompt, loads the stored prefix and checks each
// byte, "computes" the KV of the rest, and saves the whole prompt. The report
// shows how much was served from the store, how much the store holds against
// storing every prompt whole (deduplication), the load throughput, per-phase
// times and the server's counters. Exit status 0 only if every byte was
// right and every request succeeded.
//
//   ptstore-demo                      # starts its own ptstored (3 GiB arena)
//   ptstore-demo --socket /run/ptstore/ptstored.sock --docs 8 --json
//   ptstore-demo --quick              # a few seconds; run by ctest
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "bench/bench_util.h"
#include "bench/demo_mount.h"
#include "bench/qa_runner.h"
#include "bench/workload.h"
#include "ptstore/client.h"

using namespace ptstore;
using namespace ptstore::bench;

namespace {

struct DemoOptions {
  std::string socket, arena_size = "4GiB", ptstored, ns = "ptstore-demo", order = "interleaved";
  std::string ssd;  // capacity of an SSD tier for the server started here; empty: none
  QaWorkloadOptions workload;
  double scale = 1.0;
  bool json = false, quick = false, keep = false, verbose = false, no_final_check = false, inject = false;
  bool no_mount = false;
};

Layout ScaledMistral(double scale) {
  Layout l = MistralLayout();
  l.layers = static_cast<uint32_t>(std::max(1.0, std::round(l.layers * scale)));
  return l;
}

void PrintReport(const DemoOptions& o, const Layout& layout, const QaWorkload& w, const QaRunReport& r,
                 const std::string& socket) {
  const auto& wo = w.options();
  auto pct = [](uint64_t a, uint64_t b) { return b ? 100.0 * double(a) / double(b) : 0.0; };
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  uint32_t shortest = ~0u, longest = 0;
  for (uint32_t d : w.doc_lengths()) shortest = std::min(shortest, d), longest = std::max(longest, d);

  std::printf("PTStore demo: long-document QA (WikiQA-like) against ptstored on %s\n", socket.c_str());
  std::printf("  geometry   %s = %s per token (Mistral-7B x %.3g)\n", layout.ToString().c_str(),
              HumanBytes(layout.BytesPerToken()).c_str(), o.scale);
  std::printf("  workload   %u documents of %u-%u tokens (drawn: %u-%u), %u questions each (%u-%u tokens),\n",
              wo.docs, wo.min_doc_tokens, wo.max_doc_tokens, shortest, longest, wo.questions,
              wo.min_question_tokens, wo.max_question_tokens);
  std::printf("             system prompt %u tokens, %s order, seed %llu\n", wo.system_tokens,
              wo.interleave ? "interleaved" : "sequential", u(wo.seed));
  std::printf("  client     %s\n\n",
              r.mapped ? "arena mapped: loads copy straight out of the shared arena"
                       : "no arena mapping: loads are copied by the server into a staging buffer");

  if (o.verbose) {
    Table t({"#", "doc", "question", "tokens", "lookup", "loaded", "oracle", "saved new", "load ms", "save ms",
             "save GB/s"});
    for (size_t i = 0; i < r.records.size(); ++i) {
      const auto& x = r.records[i];
      t.Row({std::to_string(i), std::to_string(x.doc), std::to_string(x.question), std::to_string(x.tokens),
             std::to_string(x.lookup_tokens), std::to_string(x.loaded_tokens), std::to_string(x.expected_tokens),
             x.save_refused ? std::string("refused") : std::to_string(x.stored_tokens), Format("%.1f", 1e3 * x.load_seconds),
             Format("%.1f", 1e3 * x.save_seconds),
             Format("%.2f", GBps(x.stored_tokens * r.bytes_per_token, x.save_seconds))});
    }
    std::printf("%s\n", t.ToString().c_str());
  }

  Table s({"result", "value"});
  s.Row({"requests", std::to_string(r.requests)});
  s.Row({"tokens requested", Format("%llu (%llu in whole blocks)", u(r.prompt_tokens), u(r.block_tokens))});
  s.Row({"tokens served from the store",
         Format("%llu = %.1f%% of requested (ideal cache: %llu)", u(r.served_tokens),
                100 * r.token_hit_rate(), u(r.expected_served_tokens))});
  s.Row({"requests with a hit", Format("%llu of %llu = %.1f%%", u(r.hit_requests), u(r.requests),
                                       100 * r.request_hit_rate())});
  s.Row({"  ... beyond the system prompt", Format("%llu = %.1f%%", u(r.doc_hit_requests),
                                                 pct(r.doc_hit_requests, r.requests))});
  s.Row({"bytes stored in the store", Format("%s (%llu tokens; held at the end: %s)",
                                             HumanBytes(r.stored_bytes).c_str(), u(r.stored_tokens),
                                             HumanBytes(r.namespace_bytes).c_str())});
  s.Row({"bytes if every request were stored whole", HumanBytes(r.whole_bytes)});
  s.Row({"dedup ratio (whole / stored)", Format("%.2fx", r.dedup_ratio())});
  s.Row({"load throughput", Format("%.2f GB/s (%llu loads, %s)", GBps(r.load.bytes, r.load.seconds),
                                   u(r.load.calls), HumanBytes(r.load.bytes).c_str())});
  s.Row({"bytes verified", Format("%s, every byte right", HumanBytes(r.verified_bytes + r.final_check.bytes).c_str())});
  s.Row({"evictions during the run", std::to_string(r.evictions())});
  if (r.refused_saves) s.Row({"saves refused (arena full)", std::to_string(r.refused_saves)});
  std::printf("%s\n", s.ToString().c_str());

  Table p({"phase", "calls", "seconds", "ms/call", "GB/s"});
  auto row = [&](const char* name, const PhaseTimer& t, bool rate) {
    p.Row({name, std::to_string(t.calls), Format("%.3f", t.seconds),
           t.calls ? Format("%.3f", 1e3 * t.seconds / double(t.calls)) : "-",
           rate && t.seconds > 0 ? Format("%.2f", GBps(t.bytes, t.seconds)) : "-"});
  };
  row("lookup", r.lookup, false);
  row("load (Client::Load)", r.load, true);
  row("verify loaded bytes", r.verify, true);
  row("compute (generate KV)", r.compute, true);
  row("save (new bytes)", r.save, true);
  if (r.final_check.calls) row("final reload + verify", r.final_check, true);
  p.Separator();
  p.Row({"whole run", std::to_string(r.requests), Format("%.3f", r.wall_seconds), "-", "-"});
  std::printf("%s", p.ToString().c_str());
  if (r.records.size() > 1 && r.records[0].stored_tokens > 0 && r.save.calls > 1) {
    // The first save allocates the client's staging buffer: fresh pages,
    // faulted in once (PERF-NOTES: ~0.3-1 GB/s). Show it apart.
    const auto& first = r.records[0];
    const uint64_t first_bytes = first.stored_tokens * r.bytes_per_token;
    std::printf("  first save: %s in %.1f ms = %.2f GB/s (includes faulting in the client's staging buffer);\n"
                "  the other %llu saves: %s in %.1f ms = %.2f GB/s\n",
                HumanBytes(first_bytes).c_str(), 1e3 * first.save_seconds, GBps(first_bytes, first.save_seconds),
                u(r.save.calls - 1), HumanBytes(r.save.bytes - first_bytes).c_str(),
                1e3 * (r.save.seconds - first.save_seconds),
                GBps(r.save.bytes - first_bytes, r.save.seconds - first.save_seconds));
  }
  std::printf("\n");

  std::printf("%s\n", StatsTable(r.stats_after).c_str());
  std::printf("OK: %llu requests, every loaded byte matched the KV generator.\n", u(r.requests));
}

Status Run(DemoOptions& o) {
  QaWorkloadOptions& wo = o.workload;
  wo.interleave = o.order != "sequential";
  if (wo.min_doc_tokens > wo.max_doc_tokens) return InvalidArgument("--min-doc must be <= --max-doc");
  if (wo.min_question_tokens > wo.max_question_tokens) {
    return InvalidArgument("--min-question must be <= --max-question");
  }
  const Layout layout = ScaledMistral(o.scale);
  PTS_RETURN_IF_ERROR(layout.Validate());
  const QaWorkload w = QaWorkload::Make(wo);

  // With --ssd, the server gets an SSD tier in a fresh directory on disk
  // (removed at the end): with an arena smaller than the working set,
  // evicted prefixes are then served from SSD instead of recomputed.
  std::vector<std::string> server_args;
  std::string ssd_dir;
  if (!o.ssd.empty()) {
    char tmpl[] = "/var/tmp/ptstore-demo-ssd-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return IOError(std::string("mkdtemp /var/tmp: ") + std::strerror(errno));
    ssd_dir = tmpl;
    server_args = {"--ssd-dir", ssd_dir, "--ssd-capacity", o.ssd};
  }
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } remove_ssd{ssd_dir};
  PTS_ASSIGN_OR_RETURN(testing::ServerHandle server,
                       testing::ConnectOrStart(o.socket, ServerOptions(o.arena_size, o.ptstored, server_args), o.json));
  ClientOptions co;
  co.socket_path = server.socket_path;
  co.client_name = "ptstore-demo";
  // Size the save staging buffer for the largest prompt up front: it then
  // is allocated (and faulted in) once, at the first save, instead of
  // growing by doubling (each growth is a fresh, slow-to-touch region).
  co.staging_bytes = std::max<uint64_t>(co.staging_bytes, w.max_request_tokens() * layout.BytesPerToken());
  PTS_ASSIGN_OR_RETURN(auto client, Client::Connect(co));

  // A fresh namespace: the oracle checks need an empty one.
  if (client->GetNamespace(o.ns).ok()) {
    PTS_ASSIGN_OR_RETURN(RemoveResult dropped, client->DropNamespace(o.ns));
    if (!o.json) {
      std::fprintf(stderr, "dropped the existing namespace '%s' (%s)\n", o.ns.c_str(),
                   HumanBytes(dropped.bytes).c_str());
    }
  }
  QaRunOptions ro;
  ro.ns = o.ns;
  ro.layout = layout;
  ro.final_check = !o.no_final_check;
  ro.inject_corruption = o.inject;
  Result<QaRunReport> r = RunQa(*client, w, ro);
  // The same store through its filesystem view, before the namespace goes.
  Result<MountTour> tour = MountTour{};
  if (r.ok() && !o.no_mount) tour = TourTheMount(*client, server.socket_path, o.ns, layout.BytesPerToken());
  if (!o.keep || !r.ok()) client->DropNamespace(o.ns).status().IgnoreError();
  PTS_RETURN_IF_ERROR(r.status());
  PTS_RETURN_IF_ERROR(tour.status());

  if (o.json) {
    nlohmann::json j = ToJson(*r, wo);
    j["layout"] = layout.ToString();
    j["socket"] = server.socket_path;
    std::cout << j.dump(2) << std::endl;
  } else {
    PrintReport(o, layout, w, *r, server.socket_path);
    if (tour->mounted) {
      std::printf("\nmounted the store at %s (ptstore-fuse): %llu increments in %s of kv files under %s/; loaded "
                  "the deepest prefix (%llu tokens) by path through the ioctl fast path in %.1f ms, every byte "
                  "right; unmounted\n",
                  tour->mountpoint.c_str(), static_cast<unsigned long long>(tour->increments),
                  HumanBytes(tour->kv_bytes).c_str(), o.ns.c_str(),
                  static_cast<unsigned long long>(tour->deepest_tokens), tour->load_seconds * 1e3);
    } else if (!o.no_mount) {
      std::printf("\nfilesystem view not shown: %s\n", tour->skipped_because.c_str());
    }
  }
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptstore-demo: a long-document QA workload against ptstored, with every byte verified"};
  DemoOptions o;
  QaWorkloadOptions& w = o.workload;
  // The README's job: documents of 1k-8k tokens in Mistral-7B geometry,
  // about 3 GiB of unique KV, inside the default 4 GiB arena.
  w.docs = 4;
  w.max_doc_tokens = 8192;
  app.add_option("--socket", o.socket, "socket of a running ptstored (default: start one for this run)");
  app.add_option("--arena-size", o.arena_size, "arena of the ptstored started for this run")->capture_default_str();
  app.add_option("--ptstored", o.ptstored, "ptstored binary to start (default: this build's)");
  app.add_option("--ssd", o.ssd,
                 "give the ptstored started for this run an SSD tier of this capacity (e.g. 8GiB) in a "
                 "temporary directory under /var/tmp; try it with an --arena-size below the working set");
  app.add_option("--namespace", o.ns, "namespace to use (dropped first if it exists)")->capture_default_str();
  app.add_option("--docs", w.docs, "documents")->capture_default_str()->check(CLI::Range(1u, 100000u));
  app.add_option("--questions", w.questions, "questions per document")->capture_default_str()->check(CLI::Range(1u, 100000u));
  app.add_option("--min-doc", w.min_doc_tokens, "shortest document, tokens")->capture_default_str();
  app.add_option("--max-doc", w.max_doc_tokens, "longest document, tokens")->capture_default_str();
  app.add_option("--min-question", w.min_question_tokens, "shortest question, tokens")->capture_default_str();
  app.add_option("--max-question", w.max_question_tokens, "longest question, tokens")->capture_default_str();
  app.add_option("--system-tokens", w.system_tokens, "shared system prompt, tokens (0: none)")->capture_default_str();
  app.add_option("--seed", w.seed, "workload seed")->capture_default_str();
  app.add_option("--order", o.order, "request order")->check(CLI::IsMember({"interleaved", "sequential"}))->capture_default_str();
  app.add_option("--scale", o.scale,
                 "KV geometry as a fraction of Mistral-7B's 32 layers (1 = 128 KiB/token, 0.125 = 4 layers)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 32.0));
  app.add_flag("--quick", o.quick, "small run for tests: 3 docs of 256-1024 tokens, 3 questions, scale 0.125, 256MiB arena");
  app.add_flag("--json", o.json, "print the report as JSON");
  app.add_flag("--verbose,-v", o.verbose, "print one line per request");
  app.add_flag("--no-final-check", o.no_final_check, "skip reloading every prompt at the end");
  app.add_flag("--no-mount", o.no_mount,
               "do not mount the store at the end (by default, as root with /dev/fuse, the demo mounts it, "
               "walks the tree and loads the deepest prefix by path)");
  app.add_flag("--keep", o.keep, "keep the namespace at the end (with --socket)");
  app.add_flag("--inject-corruption", o.inject, "test hook: flip a loaded byte (the run must fail)")
      ->group("");  // hidden
  CLI11_PARSE(app, argc, argv);

  if (o.quick) {
    // Quick values for whatever the user did not set.
    auto unset = [&](const char* name) { return app.count(name) == 0; };
    if (unset("--docs")) w.docs = 3;
    if (unset("--questions")) w.questions = 3;
    if (unset("--min-doc")) w.min_doc_tokens = 256;
    if (unset("--max-doc")) w.max_doc_tokens = 1024;
    if (unset("--scale")) o.scale = 0.125;
    if (unset("--arena-size")) o.arena_size = "256MiB";
  }
  Status st = Run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "ptstore-demo: FAILED: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
