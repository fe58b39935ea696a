// ptstore_soak: the soak (tests/soak/soak.h, docs/soak.md) for as long as
// asked. scripts/soak runs it for 30 minutes; ctest runs a small one
// (soak_test). Exits 0 when no promise broke, 1 when one did, 2 when it
// could not start.
//
//   ptstore_soak --seconds 1800 --nodes 4 --clients 6 --data-path rma --json soak.json
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "tests/soak/soak.h"

int main(int argc, char** argv) {
  ptstore::soak::SoakOptions o;
  std::string json;
  CLI::App app{"ptstore_soak: a real cluster under random client calls and node faults, every byte checked"};
  app.add_option("--seconds", o.seconds, "how long the calls and faults go on")->capture_default_str();
  app.add_option("--nodes", o.nodes, "ptstored processes (loopback ports)")->capture_default_str();
  app.add_option("--clients", o.clients, "worker threads, each with a client of every node")->capture_default_str();
  app.add_option("--data-path", o.data_path, "tcp or rma")->capture_default_str();
  app.add_option("--arena-size", o.arena_size, "each node's DRAM arena")->capture_default_str();
  app.add_option("--ssd-capacity", o.ssd_capacity, "each node's SSD tier")->capture_default_str();
  app.add_flag("!--no-ssd", o.ssd, "no SSD tier (and no damaged segment files)");
  app.add_option("--replicate-after", o.replicate_after, "the nodes' replication rule")->capture_default_str();
  app.add_option("--docs", o.docs, "documents the prompts are about")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the prompts, the calls and the faults")->capture_default_str();
  app.add_option("--fault-every-ms", o.fault_every_ms, "mean time between node faults (0: none)")->capture_default_str();
  app.add_option("--down-ms", o.down_ms, "mean time a faulted node stays down")->capture_default_str();
  app.add_option("--max-down", o.max_down, "nodes down at once at most")->capture_default_str();
  app.add_option("--min-faults", o.min_faults, "go on past --seconds until this many faults (4 x longer at most)")
      ->capture_default_str();
  app.add_flag("!--no-corrupt", o.corrupt, "never damage segment files");
  app.add_flag("!--no-mount", o.mount, "no file-system worker (it needs /dev/fuse and root)");
  app.add_option("--op-deadline-ms", o.op_deadline_ms, "a call running longer is reported as hung")
      ->capture_default_str();
  app.add_option("--node-log-level", o.node_log_level, "ptstored's --log-level (debug: every fetch failure logged)");
  app.add_option("--work-dir", o.work_dir, "SSD directories and node logs (default: a temporary one)");
  app.add_flag("--keep", o.keep_work_dir, "keep the work directory (it is kept anyway after a violation)");
  app.add_option("--json", json, "write the report as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  o.progress = [](const std::string& line) { std::cerr << line << std::endl; };

  auto report = ptstore::soak::RunSoak(o);
  if (!report.ok()) {
    std::cerr << "ptstore_soak: " << report.status().ToString() << "\n";
    return 2;
  }
  std::cout << report->Summary();
  if (!json.empty()) std::ofstream(json) << report->Json() << "\n";
  return report->ok() ? 0 : 1;
}
