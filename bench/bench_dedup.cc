// bench_dedup: bytes the store keeps for the QA workload of ptstore-demo,
// against the baseline of storing every request whole, for a few workload
// shapes. Each row runs the workload end to end (lookup, load + verify,
// compute, save) in a fresh namespace; the run fails if the store holds
// other than the prompts' unique whole blocks (checked against an oracle) or
// if any loaded byte is wrong.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/qa_runner.h"
#include "bench/workload.h"
#include "ptstore/client.h"

using namespace ptstore;
using namespace ptstore::bench;

namespace {

struct Options {
  std::string socket, arena_size = "3GiB", ptstored;
  QaWorkloadOptions base;  // the demo's workload
  std::vector<uint32_t> questions = {1, 2, 4, 8};
  double scale = 1.0;
  bool quick = false, json = false;
};

struct Row {
  std::string name;
  QaWorkloadOptions w;
};

Status Run(const Options& o) {
  Layout layout = MistralLayout();
  layout.layers = static_cast<uint32_t>(std::max(1.0, std::round(layout.layers * o.scale)));
  PTS_RETURN_IF_ERROR(layout.Validate());

  std::vector<Row> rows;
  for (uint32_t q : o.questions) {
    Row r{Format("%u docs x %u question%s, system prompt", o.base.docs, q, q == 1 ? "" : "s"), o.base};
    r.w.questions = q;
    rows.push_back(r);
  }
  {
    Row r{Format("%u docs x %u questions, no system prompt", o.base.docs, o.base.questions), o.base};
    r.w.system_tokens = 0;
    rows.push_back(r);
  }

  if (!o.json) {
    std::printf("bench_dedup: stored bytes vs storing every request whole (QA workload of ptstore-demo)\n");
    std::printf("machine: %s\ngeometry: %s = %s per token; documents of %u-%u tokens, questions of %u-%u tokens, "
                "seed %llu\n",
                MachineDescription().c_str(), layout.ToString().c_str(), HumanBytes(layout.BytesPerToken()).c_str(),
                o.base.min_doc_tokens, o.base.max_doc_tokens, o.base.min_question_tokens, o.base.max_question_tokens,
                static_cast<unsigned long long>(o.base.seed));
  }
  PTS_ASSIGN_OR_RETURN(testing::ServerHandle server,
                       testing::ConnectOrStart(o.socket, ServerOptions(o.arena_size, o.ptstored), o.json));
  ClientOptions co;
  co.socket_path = server.socket_path;
  co.client_name = "bench_dedup";
  PTS_ASSIGN_OR_RETURN(auto client, Client::Connect(co));

  Table t({"workload", "requests", "tokens", "served", "whole (baseline)", "stored", "dedup ratio", "load GB/s"});
  nlohmann::json jrows = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const std::string ns = Format("bench-dedup-%d-%zu", static_cast<int>(getpid()), i);
    QaRunOptions ro;
    ro.ns = ns;
    ro.layout = layout;
    ro.final_check = false;
    const QaWorkload w = QaWorkload::Make(row.w);
    Result<QaRunReport> r = RunQa(*client, w, ro);
    client->DropNamespace(ns).status().IgnoreError();
    PTS_RETURN_IF_ERROR(r.status().WithContext(row.name));
    t.Row({row.name, std::to_string(r->requests), std::to_string(r->prompt_tokens),
           Format("%.1f%%", 100 * r->token_hit_rate()), HumanBytes(r->whole_bytes), HumanBytes(r->stored_bytes),
           Format("%.2fx", r->dedup_ratio()), Format("%.2f", GBps(r->load.bytes, r->load.seconds))});
    nlohmann::json j = ToJson(*r, row.w);
    j.erase("requests_detail");
    j["name"] = row.name;
    jrows.push_back(j);
  }
  if (o.json) {
    std::cout << nlohmann::json{{"bench", "bench_dedup"},
                                {"machine", MachineDescription()},
                                {"layout", layout.ToString()},
                                {"rows", jrows}}
                     .dump(2)
              << std::endl;
    return Status::OK();
  }
  std::printf("\n%s\n", t.ToString().c_str());
  std::printf("dedup ratio = bytes if every request were stored whole / bytes the store holds; every row's stored\n"
              "bytes equal the prompts' unique whole blocks (checked), and every loaded byte was verified.\n");
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_dedup: stored bytes vs storing every request whole"};
  Options o;
  app.add_option("--socket", o.socket, "socket of a running ptstored (default: start one)");
  app.add_option("--arena-size", o.arena_size, "arena of the ptstored started for this run")->capture_default_str();
  app.add_option("--ptstored", o.ptstored, "ptstored binary to start");
  app.add_option("--docs", o.base.docs, "documents")->capture_default_str()->check(CLI::Range(1u, 100000u));
  app.add_option("--questions", o.questions, "questions per document, one row each")->capture_default_str();
  app.add_option("--min-doc", o.base.min_doc_tokens, "shortest document, tokens")->capture_default_str();
  app.add_option("--max-doc", o.base.max_doc_tokens, "longest document, tokens")->capture_default_str();
  app.add_option("--seed", o.base.seed, "workload seed")->capture_default_str();
  app.add_option("--scale", o.scale, "KV geometry as a fraction of Mistral-7B's 32 layers")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 32.0));
  app.add_flag("--quick", o.quick, "small run for tests: 3 docs of 256-1024 tokens, 1 and 3 questions, 1 layer");
  app.add_flag("--json", o.json, "print the results as JSON");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    if (!app.count("--docs")) o.base.docs = 3;
    if (!app.count("--questions")) o.questions = {1, 3};
    o.base.questions = 3;  // the no-system-prompt row
    if (!app.count("--min-doc")) o.base.min_doc_tokens = 256;
    if (!app.count("--max-doc")) o.base.max_doc_tokens = 1024;
    if (!app.count("--scale")) o.scale = 1.0 / 32;
    if (!app.count("--arena-size")) o.arena_size = "64MiB";
  }
  if (o.questions.empty()) {
    std::fprintf(stderr, "bench_dedup: --questions needs at least one value\n");
    return 2;
  }
  if (o.base.min_doc_tokens > o.base.max_doc_tokens) {
    std::fprintf(stderr, "bench_dedup: --min-doc must be <= --max-doc\n");
    return 2;
  }
  Status st = Run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "bench_dedup: FAILED: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
