#include "tests/soak/soak.h"

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "tests/soak/corpus.h"
#include "tests/soak/fs_worker.h"
#include "tests/soak/soak_state.h"
#include "tests/soak/worker.h"
#include "tests/testing/client.h"
#include "tests/testing/cluster.h"
#include "tests/testing/mount.h"
#include "tools/fsck.h"

namespace ptstore::soak {

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;


// Whether process `pid` has exited (a zombie nobody has waited for yet, or gone).
bool Exited(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return true;
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z' || stat[paren + 2] == 'X';
}

std::string Tail(const std::string& log, size_t lines) {
  size_t pos = log.size();
  for (size_t n = 0; n <= lines && pos > 0; ++n) pos = log.rfind('\n', pos - 1);
  return pos == std::string::npos || pos == 0 ? log : log.substr(pos + 1);
}

// A prefix's location as "[end owner:holders ...]" (for reports).
std::string Spans(const Result<PrefixLocation>& r) {
  if (!r.ok()) return r.status().ToString();
  std::string out = "[";
  for (const PrefixSpan& s : r->spans) {
    if (out.size() > 1) out += " ";
    out += std::to_string(s.end_token) + " owner " + std::to_string(s.owner) + " held by";
    for (uint32_t n : s.nodes) out += " " + std::to_string(n);
  }
  return out + "]";
}

// A node's remote-fetch counters (for reports).
std::string FetchCounters(const Result<StoreStats>& r) {
  if (!r.ok()) return r.status().ToString();
  return "fetches " + std::to_string(r->remote_fetches) + ", failed " + std::to_string(r->remote_fetch_failures) +
         ", replicas " + std::to_string(r->replica_bytes) + " B, used " + std::to_string(r->used_bytes) + " of " +
         std::to_string(r->arena_bytes) + " B, pinned " + std::to_string(r->pinned_bytes) + " B";
}

// The fault loop, the final checks and the report: everything that touches
// the cluster's processes runs on the calling thread (the nodes are its
// children: PR_SET_PDEATHSIG ends them with the thread that started them).
class Soak {
 public:
  static constexpr size_t kMounted = 0;  // the node the file-system worker's mount fronts

  explicit Soak(const SoakOptions& o)
      : o_(o), corpus_(o.seed, o.docs), view_(o.nodes), rng_(storage::testkv::Mix(o.seed ^ 0x50a6)) {}

  Result<SoakReport> Run();

 private:
  Status Start();
  void FaultLoop();
  void Fault(size_t i);
  void Restart(size_t i);
  Status MountNode();  // (again) on kMounted's current socket
  void Watch();
  void FinalChecks();
  void CheckLeasesAndStats();
  void StopAll();
  // Before the soak gives up (std::abort runs no destructor): kills what
  // it started and keeps their logs.
  void KillAll();
  void Fsck();
  void KeepLog(size_t i, const std::string& why);
  void KeepMountLog(const std::string& why);
  void Event(const std::string& what);  // a line of events.log (UTC, as the nodes' logs)
  void Progress(bool force);
  std::string SsdDir(size_t i) const { return work_dir_ + "/ssd" + std::to_string(i); }

  const SoakOptions& o_;
  Corpus corpus_;
  NodeView view_;
  Violations violations_;
  std::mt19937_64 rng_;
  std::string work_dir_;
  bool own_work_dir_ = false;
  std::unique_ptr<testing::TestCluster> cluster_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<testing::Mount> mount_;  // of node kMounted (none without --mount)
  MountPoint mount_point_;
  std::unique_ptr<FsWorker> fs_worker_;
  std::vector<const CallClock*> clocks_;   // every worker's, for the watchdog
  std::atomic<bool> stop_{false};
  std::vector<int64_t> restart_at_ms_;   // per node: when a down node comes back (0: up)
  std::vector<bool> corrupt_before_restart_;
  std::vector<bool> paused_;             // per node: stopped by SIGSTOP, resumed instead of restarted
  std::vector<int64_t> hang_reported_;   // per worker: the call already reported as hung
  SoakReport report_;
  int64_t start_ms_ = 0;
  int64_t last_progress_ms_ = 0;
};

Status Soak::Start() {
  work_dir_ = o_.work_dir;
  if (work_dir_.empty()) {
    work_dir_ = testing::MakeTempDir("ptstore-soak");
    if (work_dir_.empty()) return ErrnoError("mkdtemp", errno);
    own_work_dir_ = true;
  } else {
    std::error_code ec;
    fs::create_directories(work_dir_, ec);
    if (ec) return IOError("cannot create the soak's directory " + work_dir_ + ": " + ec.message());
  }
  testing::TestCluster::Options co;
  co.nodes = o_.nodes;
  co.arena_size = o_.arena_size;
  co.data_path = o_.data_path;
  co.replicate_after = o_.replicate_after;
  co.heartbeat_ms = 100;
  co.rpc_timeout_ms = 500;
  if (!o_.node_log_level.empty()) co.extra_args = {"--log-level", o_.node_log_level};
  for (size_t i = 0; i < o_.nodes; ++i) {
    std::vector<std::string> args;
    if (o_.ssd) {
      args = {"--ssd-dir", SsdDir(i), "--ssd-capacity", o_.ssd_capacity};
      if (i % 2 == 1) args.push_back("--ssd-compress");
    }
    co.node_args.push_back(std::move(args));
  }
  cluster_ = std::make_unique<testing::TestCluster>(co);
  PTS_RETURN_IF_ERROR(cluster_->Start());
  PTS_RETURN_IF_ERROR(cluster_->WaitConverged(20000));
  if (o_.mount) {
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
      report_.mount_skipped = "no /dev/fuse (or not allowed to open it): no file-system worker";
    } else {
      PTS_RETURN_IF_ERROR(MountNode());
    }
  }
  for (size_t i = 0; i < o_.nodes; ++i) view_.MarkUp(i, cluster_->node(i).socket_path());
  restart_at_ms_.assign(o_.nodes, 0);
  corrupt_before_restart_.assign(o_.nodes, false);
  paused_.assign(o_.nodes, false);
  return Status::OK();
}

void Soak::Event(const std::string& what) {
  std::ofstream(work_dir_ + "/events.log", std::ios::app) << core::LogTimestamp() << " " << what << "\n";
}

Status Soak::MountNode() {
  if (mount_) {
    const int rc = mount_->Unmount();
    Event("ptstore-fuse of node " + std::to_string(kMounted) + " unmounted, status " + std::to_string(rc));
    KeepMountLog("remounted");
  }
  mount_point_.Set("");
  mount_ = std::make_unique<testing::Mount>();
  Status s = mount_->Start(cluster_->node(kMounted).socket_path());
  if (!s.ok()) return s.WithContext("mount of node " + std::to_string(kMounted));
  mount_point_.Set(mount_->path());
  Event("node " + std::to_string(kMounted) + " mounted at " + mount_->path());
  return Status::OK();
}

void Soak::KeepMountLog(const std::string& why) {
  std::ofstream f(work_dir_ + "/ptstore-fuse.log", std::ios::app);
  f << "=== ptstore-fuse of node " << kMounted << " (" << why << ")\n" << mount_->ReadLog();
}

void Soak::KeepLog(size_t i, const std::string& why) {
  std::ofstream f(work_dir_ + "/node" + std::to_string(i) + ".log", std::ios::app);
  f << "=== ptstored node " << i << " (" << why << ")\n" << cluster_->node(i).ReadLog();
}

void Soak::Fault(size_t i) {
  const uint32_t r = static_cast<uint32_t>(rng_() % 100);
  view_.MarkDown(i);  // before the signal: a call failing from now on is the fault's
  std::exponential_distribution<double> down(1.0 / std::max(1, o_.down_ms));
  restart_at_ms_[i] = SteadyMs() + std::clamp<int64_t>(static_cast<int64_t>(down(rng_)), 50, 5LL * o_.down_ms + 50);
  if (r < 15) {
    // Frozen, not dead (SIGSTOP, and stopped: Freeze): its peers' calls to
    // it must time out into misses, and it must carry on when it wakes up.
    const Status frozen = cluster_->node(i).Freeze();
    if (frozen.ok()) {
      paused_[i] = true;
      ++report_.faults["pause"];
      Event("node " + std::to_string(i) + ": paused (SIGSTOP)");
      return;
    }
    // It died before it could stop, or would not stop: reported, then
    // killed (if it still runs) and started again like a killed node.
    violations_.Add("node " + std::to_string(i) + " could not be paused: " + frozen.ToString());
    cluster_->Kill(i);
    KeepLog(i, "could not be paused");
    return;
  }
  if (r < 50) {
    const int rc = cluster_->Stop(i);
    ++report_.faults["term"];
    Event("node " + std::to_string(i) + ": stopped (SIGTERM), status " + std::to_string(rc));
    if (rc != 0) {
      violations_.Add("node " + std::to_string(i) + " exited with status " + std::to_string(rc) +
                      " on SIGTERM; its log ends:\n" + Tail(cluster_->node(i).ReadLog(), 20));
    }
  } else {
    cluster_->Kill(i);
    ++report_.faults["kill"];
    Event("node " + std::to_string(i) + ": killed (SIGKILL)");
  }
  KeepLog(i, r < 50 ? "stopped" : "killed");
  corrupt_before_restart_[i] = o_.corrupt && o_.ssd && r >= 80;
}

void Soak::Restart(size_t i) {
  if (paused_[i]) {
    if (Status s = cluster_->node(i).Thaw(); !s.ok()) {
      violations_.Add("node " + std::to_string(i) + " could not be resumed: " + s.ToString());
    }
    paused_[i] = false;
    ++report_.faults["resume"];
    Event("node " + std::to_string(i) + ": resumed (SIGCONT)");
    restart_at_ms_[i] = 0;
    view_.MarkUp(i, cluster_->node(i).socket_path());
    return;
  }
  if (corrupt_before_restart_[i]) {
    // Damage a segment file: a few bytes anywhere (headers, payloads, the
    // segment header). The restart must skip what they broke and serve the rest.
    std::vector<fs::path> segs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(SsdDir(i), ec)) {
      if (e.path().extension() == ".pts" && e.file_size(ec) > 0) segs.push_back(e.path());
    }
    if (!segs.empty()) {
      const fs::path seg = segs[rng_() % segs.size()];
      const uint64_t size = fs::file_size(seg, ec);
      std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
      const int flips = 1 + static_cast<int>(rng_() % 4);
      for (int k = 0; k < flips && f && size > 0; ++k) {
        const uint64_t at = rng_() % size;
        char b = 0;
        f.seekg(static_cast<std::streamoff>(at));
        f.read(&b, 1);
        b = static_cast<char>(b ^ static_cast<char>(1 + rng_() % 255));
        f.seekp(static_cast<std::streamoff>(at));
        f.write(&b, 1);
        ++report_.bytes_damaged;
      }
      ++report_.faults["corrupt"];
      Event("node " + std::to_string(i) + ": " + std::to_string(flips) + " bytes of " + seg.filename().string() +
            " damaged");
    }
    corrupt_before_restart_[i] = false;
  }
  Status s = cluster_->StartNode(i);
  if (!s.ok()) {
    violations_.Add("node " + std::to_string(i) + " did not start again: " + s.ToString());
    KeepLog(i, "failed to start");
    restart_at_ms_[i] = SteadyMs() + 1000;  // tried again: one failure is reported, the soak goes on
    return;
  }
  ++report_.faults["restart"];
  Event("node " + std::to_string(i) + ": started again");
  if (i == kMounted && mount_) {
    if (Status m = MountNode(); !m.ok()) violations_.Add("the restarted node could not be mounted: " + m.ToString());
  }
  restart_at_ms_[i] = 0;
  view_.MarkUp(i, cluster_->node(i).socket_path());
}

// Hung calls and nodes that died on their own.
void Soak::Watch() {
  const int64_t now = SteadyMs();
  for (size_t w = 0; w < clocks_.size(); ++w) {
    const int64_t since = clocks_[w]->busy_since_ms();
    if (since != 0 && now - since > o_.op_deadline_ms && hang_reported_[w] != since) {
      hang_reported_[w] = since;
      violations_.Add("worker " + std::to_string(w) + ": a " + clocks_[w]->what() + " has run for " +
                      std::to_string((now - since) / 1000) + " s");
    }
  }
  for (size_t i = 0; i < o_.nodes; ++i) {
    if (restart_at_ms_[i] != 0 || cluster_->node(i).pid() <= 0 || !Exited(cluster_->node(i).pid())) continue;
    view_.MarkDown(i);
    const int rc = cluster_->Stop(i);  // reaps it
    violations_.Add("node " + std::to_string(i) + " died on its own (status " + std::to_string(rc) +
                    "); its log ends:\n" + Tail(cluster_->node(i).ReadLog(), 30));
    KeepLog(i, "died on its own");
    restart_at_ms_[i] = SteadyMs() + 100;
  }
}

void Soak::Progress(bool force) {
  const int64_t now = SteadyMs();
  if (!o_.progress || (!force && now - last_progress_ms_ < 5000)) return;
  last_progress_ms_ = now;
  uint64_t down = 0;
  for (int64_t t : restart_at_ms_) down += t != 0;
  std::ostringstream line;
  line << "soak " << (now - start_ms_) / 1000 << " s: faults";
  for (const auto& [k, v] : report_.faults) line << " " << k << "=" << v;
  line << ", nodes down " << down << ", violations " << violations_.count();
  o_.progress(line.str());
}

void Soak::FaultLoop() {
  const int64_t end = start_ms_ + static_cast<int64_t>(o_.seconds * 1000);
  const int64_t hard_end = end + static_cast<int64_t>(4 * o_.seconds * 1000);
  auto faults_made = [&] { return report_.faults["kill"] + report_.faults["term"] + report_.faults["pause"]; };
  std::exponential_distribution<double> gap(1.0 / std::max(1, o_.fault_every_ms));
  int64_t next_fault = o_.fault_every_ms > 0 ? SteadyMs() + static_cast<int64_t>(gap(rng_)) : INT64_MAX;
  while (SteadyMs() < end || (o_.fault_every_ms > 0 && faults_made() < o_.min_faults && SteadyMs() < hard_end)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Watch();
    const int64_t now = SteadyMs();
    for (size_t i = 0; i < o_.nodes; ++i) {
      if (restart_at_ms_[i] != 0 && now >= restart_at_ms_[i]) Restart(i);
    }
    if (now >= next_fault) {
      std::vector<size_t> up;
      for (size_t i = 0; i < o_.nodes; ++i) {
        if (restart_at_ms_[i] == 0) up.push_back(i);
      }
      if (o_.nodes - up.size() < o_.max_down && up.size() > 1) Fault(up[rng_() % up.size()]);
      next_fault = SteadyMs() + static_cast<int64_t>(gap(rng_));
    }
    Progress(false);
  }
}

// With every node up again and no fault: each node loads, byte exact and
// whole, what another node saves (the question the workers never save).
void Soak::FinalChecks() {
  std::vector<std::unique_ptr<Client>> clients;
  for (size_t i = 0; i < o_.nodes; ++i) {
    auto c = testing::ConnectTo(cluster_->node(i).socket_path());
    if (!c.ok()) {
      violations_.Add("final check: cannot connect to node " + std::to_string(i) + ": " + c.status().ToString());
      return;
    }
    for (const SoakNamespace& ns : kSoakNamespaces) {
      auto created = (*c)->CreateNamespace(ns.name, storage::testkv::SmallLayout(ns.block_tokens));
      if (!created.ok()) {
        violations_.Add("final check: namespace " + std::string(ns.name) + " on node " + std::to_string(i) + ": " +
                        created.status().ToString());
        return;
      }
    }
    clients.push_back(std::move(*c));
  }
  const uint32_t prompts = std::min<uint32_t>(o_.docs, 6);
  for (uint32_t d = 0; d < prompts; ++d) {
    const SoakNamespace& ns = kSoakNamespaces[d % 2];
    const std::vector<uint32_t> p = corpus_.Prompt(d, Corpus::kQuestions - 1, 1);
    const uint64_t whole = p.size() / ns.block_tokens * ns.block_tokens;
    const size_t saver = d % o_.nodes;
    const std::vector<uint8_t> kv = storage::testkv::Kv(p, 0, whole);
    auto saved = clients[saver]->Save(ns.name, p, kv.data(), kv.size());
    if (!saved.ok()) {
      violations_.Add("final check: save on node " + std::to_string(saver) + ": " + saved.status().ToString());
      continue;
    }
    for (size_t j = 0; j < o_.nodes; ++j) {
      std::vector<uint8_t> out(p.size() * storage::testkv::kBpt);
      uint64_t got = 0;
      std::string wrong;
      const int64_t deadline = SteadyMs() + 5000;
      do {
        auto n = clients[j]->Load(ns.name, p, out.data(), out.size());
        if (!n.ok()) {
          wrong = n.status().ToString();
          break;
        }
        got = *n;
        wrong = CheckKv(p, ns.block_tokens, got, out.data());
        if (got == whole || !wrong.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      } while (SteadyMs() < deadline);
      ++report_.final_prompts_checked;
      if (wrong.empty() && got < whole) {
        // A miss (the store promises no more): the node's client computes
        // the prompt and saves it, as after any miss; then it must load.
        report_.final_misses.push_back("node " + std::to_string(j) + " loaded " + std::to_string(got) + " of " +
                                       std::to_string(whole) + " tokens of a prompt saved on node " +
                                       std::to_string(saver) + "; node " + std::to_string(j) + " locates " +
                                       Spans(clients[j]->LocatePrefix(ns.name, p)) + ", node " +
                                       std::to_string(saver) + " " + Spans(clients[saver]->LocatePrefix(ns.name, p)) +
                                       "; node " + std::to_string(j) + ": " + FetchCounters(clients[j]->Stats()));
        auto resaved = clients[j]->Save(ns.name, p, kv.data(), kv.size());
        auto n = resaved.ok() ? clients[j]->Load(ns.name, p, out.data(), out.size()) : Result<uint64_t>(resaved.status());
        if (!n.ok()) {
          wrong = n.status().ToString();
        } else {
          got = *n;
          wrong = CheckKv(p, ns.block_tokens, got, out.data());
        }
      }
      if (!wrong.empty() || got != whole) {
        violations_.Add("final check: node " + std::to_string(j) + " loads " + std::to_string(got) + " of " +
                        std::to_string(whole) + " tokens of a prompt saved on node " + std::to_string(saver) +
                        " and saved again there" + (wrong.empty() ? "" : ": " + wrong));
      }
    }
  }
}

// No client holds anything now: no lease or pinned byte may be left.
void Soak::CheckLeasesAndStats() {
  for (size_t i = 0; i < o_.nodes; ++i) {
    auto c = testing::ConnectTo(cluster_->node(i).socket_path());
    if (!c.ok()) {
      violations_.Add("cannot connect to node " + std::to_string(i) + ": " + c.status().ToString());
      continue;
    }
    Result<StoreStats> s = Unavailable("not asked");
    const int64_t deadline = SteadyMs() + 5000;
    do {
      s = (*c)->Stats();
      if (!s.ok() || (s->active_leases == 0 && s->pinned_bytes == 0)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (SteadyMs() < deadline);
    if (!s.ok()) {
      violations_.Add("stats of node " + std::to_string(i) + ": " + s.status().ToString());
    } else if (s->active_leases != 0 || s->pinned_bytes != 0) {
      violations_.Add("node " + std::to_string(i) + " keeps " + std::to_string(s->active_leases) + " leases and " +
                      std::to_string(s->pinned_bytes) + " pinned bytes with no client holding any");
    } else if (s->used_bytes > s->arena_bytes) {
      violations_.Add("node " + std::to_string(i) + " uses more than its arena");
    }
  }
}

void Soak::StopAll() {
  for (size_t i = 0; i < o_.nodes; ++i) {
    view_.MarkDown(i);
    const int rc = cluster_->Stop(i);
    KeepLog(i, "final stop");
    if (rc != 0) {
      violations_.Add("node " + std::to_string(i) + " exited with status " + std::to_string(rc) +
                      " on the final SIGTERM; its log ends:\n" + Tail(cluster_->node(i).ReadLog(), 20));
    }
  }
}

// The mount first: aborting its connection ends the calls hung on it and
// lets ptstore-fuse die even when it is blocked in the kernel (a plain
// SIGKILL would wait for that). Then every node, frozen ones too (SIGKILL
// ends a stopped process). The logs stay in the work directory.
void Soak::KillAll() {
  if (mount_) {
    const bool ended = mount_->Abort();
    KeepMountLog(ended ? "aborted" : "aborted, but ptstore-fuse did not exit");
    if (ended) {
      mount_.reset();  // its temporary directory too
    } else {
      std::fprintf(stderr, "soak: ptstore-fuse (pid %d) did not exit on SIGKILL\n", mount_->pid());
    }
  }
  for (size_t i = 0; i < o_.nodes; ++i) {
    cluster_->Kill(i);
    KeepLog(i, "killed: the soak gave up");
  }
}

// The SSD directories after the last clean stop: only what the soak damaged
// or tore (a SIGKILL mid-write, one record per writer) may be corrupt.
void Soak::Fsck() {
  if (!o_.ssd) return;
  for (size_t i = 0; i < o_.nodes; ++i) {
    std::ostringstream out, err;
    tools::FsckOptions fo;
    fo.dir = SsdDir(i);
    fo.json = true;
    tools::RunFsck(fo, out, err);
    auto j = nlohmann::json::parse(out.str(), nullptr, false);
    if (j.is_discarded() || !j.contains("summary")) {
      violations_.Add("ptstore-fsck of " + fo.dir + " gave no report: " + err.str());
      continue;
    }
    report_.fsck_corrupt_records += j["summary"].value("corrupt_records", uint64_t{0});
  }
  const uint64_t writers = 2;  // SsdOptions::io_threads
  const uint64_t allowed = report_.bytes_damaged + writers * report_.faults["kill"];
  if (report_.fsck_corrupt_records > allowed) {
    violations_.Add("ptstore-fsck finds " + std::to_string(report_.fsck_corrupt_records) +
                    " corrupt records; the soak damaged " + std::to_string(report_.bytes_damaged) + " bytes and killed " +
                    std::to_string(report_.faults["kill"]) + " times");
  }
}

Result<SoakReport> Soak::Run() {
  if (Status s = Start(); !s.ok()) {
    mount_.reset();
    cluster_.reset();
    std::error_code ec;
    if (own_work_dir_) fs::remove_all(work_dir_, ec);
    return s;
  }
  start_ms_ = SteadyMs();
  last_progress_ms_ = start_ms_;
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < o_.clients; ++w) {
    workers_.push_back(std::make_unique<Worker>(w, o_.seed, corpus_, view_, violations_, stop_));
    clocks_.push_back(&workers_.back()->clock());
    threads.emplace_back([w = workers_.back().get()] { w->Run(); });
  }
  if (mount_) {
    fs_worker_ = std::make_unique<FsWorker>(kMounted, o_.seed, view_, mount_point_, violations_, stop_);
    clocks_.push_back(&fs_worker_->clock());
    threads.emplace_back([w = fs_worker_.get()] { w->Run(); });
  }
  hang_reported_.assign(clocks_.size(), 0);
  FaultLoop();
  // Every node up again before the workers stop: a call waiting on a frozen
  // node would otherwise wait for its client's deadline.
  for (size_t i = 0; i < o_.nodes; ++i) {
    if (restart_at_ms_[i] != 0) Restart(i);
  }
  stop_.store(true);
  // Calls in flight finish (the watch goes on: a hung one is reported).
  // A call that never returns (a file-system call on a mount that hangs has
  // no deadline) cannot be waited for: the soak ends there, saying so.
  const int64_t give_up = SteadyMs() + o_.op_deadline_ms + 30000;
  for (;;) {
    bool busy = false;
    for (const CallClock* c : clocks_) busy = busy || c->busy_since_ms() != 0;
    Watch();
    if (!busy) break;
    if (SteadyMs() > give_up) {
      for (const std::string& v : violations_.Take()) std::fprintf(stderr, "soak: %s\n", v.c_str());
      std::fprintf(stderr, "soak: calls still running %d s after the end; logs in %s\n",
                   (o_.op_deadline_ms + 30000) / 1000, work_dir_.c_str());
      KillAll();
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : threads) t.join();
  report_.seconds = (SteadyMs() - start_ms_) / 1000.0;
  std::vector<const WorkerTally*> tallies;
  for (auto& w : workers_) tallies.push_back(&w->tally());
  if (fs_worker_) tallies.push_back(&fs_worker_->tally());
  for (const WorkerTally* tp : tallies) {
    const WorkerTally& t = *tp;
    for (const auto& [k, v] : t.ops) report_.ops[k] += v;
    for (const auto& [k, v] : t.allowed_errors) report_.allowed_errors[k] += v;
    report_.loads_verified += t.loads_verified;
    report_.hits += t.hits;
    report_.tokens_verified += t.tokens_verified;
    report_.bytes_verified += t.bytes_verified;
    report_.refused += t.refused;
    report_.skipped_down += t.skipped_down;
    for (const auto& [k, v] : t.max_ms_by_op) report_.max_ms_by_op[k] = std::max(report_.max_ms_by_op[k], v);
    if (t.max_op_ms >= report_.max_op_ms) {
      report_.max_op_ms = t.max_op_ms;
      report_.slowest_op = t.slowest_op;
    }
  }
  clocks_.clear();
  workers_.clear();
  fs_worker_.reset();
  for (size_t i = 0; i < o_.nodes; ++i) {
    if (restart_at_ms_[i] != 0) Restart(i);  // one that failed to start before
  }
  if (Status s = cluster_->WaitConverged(20000); !s.ok()) {
    violations_.Add("the cluster did not converge after the faults: " + s.ToString());
  } else {
    FinalChecks();
    CheckLeasesAndStats();
  }
  if (mount_) {
    const int rc = mount_->Unmount();
    KeepMountLog("final unmount");
    if (rc != 0) {
      violations_.Add("ptstore-fuse exited with status " + std::to_string(rc) + " on the final unmount; its log ends:\n" +
                      Tail(mount_->ReadLog(), 20));
    }
    mount_.reset();
  }
  StopAll();
  Fsck();
  Progress(true);
  report_.violations = violations_.Take();
  const bool keep = o_.keep_work_dir || !report_.ok() || !own_work_dir_;
  report_.work_dir = keep ? work_dir_ : "";
  cluster_.reset();
  if (!keep) {
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
  }
  return report_;
}

}  // namespace

std::string SoakReport::Summary() const {
  std::ostringstream s;
  uint64_t calls = 0;
  for (const auto& [k, v] : ops) calls += v;
  s << "soak: " << calls << " calls in " << seconds << " s; " << loads_verified << " loads and pins checked byte for byte ("
    << hits << " hits, " << bytes_verified / (1024 * 1024) << " MiB)\n";
  s << "  calls:";
  for (const auto& [k, v] : ops) s << " " << k << "=" << v;
  s << "\n  faults:";
  for (const auto& [k, v] : faults) s << " " << k << "=" << v;
  s << " (bytes damaged " << bytes_damaged << ")\n  errors from a node that died under the call:";
  if (allowed_errors.empty()) s << " none";
  for (const auto& [k, v] : allowed_errors) s << " [" << k << "]=" << v;
  s << "\n  refused (arena full of pins): " << refused << "; skipped (node down): " << skipped_down
    << "; slowest call: " << max_op_ms << " ms (" << slowest_op << ")\n";
  s << "  slowest by operation (ms):";
  for (const auto& [k, v] : max_ms_by_op) s << " " << k << "=" << v;
  s << "\n";
  s << "  final check: " << final_prompts_checked << " (prompt, node) loads, " << final_misses.size()
    << " missed until that node saved the prompt itself; fsck corrupt records: " << fsck_corrupt_records << "\n";
  for (const std::string& m : final_misses) s << "    miss: " << m << "\n";
  if (!mount_skipped.empty()) s << "  file-system worker: skipped: " << mount_skipped << "\n";
  if (violations.empty()) {
    s << "  no violation\n";
  } else {
    s << "  VIOLATIONS:\n";
    for (const std::string& v : violations) s << "  - " << v << "\n";
  }
  if (!work_dir.empty()) s << "  logs and SSD directories: " << work_dir << "\n";
  return s.str();
}

std::string SoakReport::Json() const {
  nlohmann::json j;
  j["seconds"] = seconds;
  j["ops"] = ops;
  j["loads_verified"] = loads_verified;
  j["hits"] = hits;
  j["tokens_verified"] = tokens_verified;
  j["bytes_verified"] = bytes_verified;
  j["allowed_errors"] = allowed_errors;
  j["refused"] = refused;
  j["skipped_down"] = skipped_down;
  j["faults"] = faults;
  j["bytes_damaged"] = bytes_damaged;
  j["max_op_ms"] = max_op_ms;
  j["slowest_op"] = slowest_op;
  j["max_ms_by_op"] = max_ms_by_op;
  j["final_prompts_checked"] = final_prompts_checked;
  j["final_misses"] = final_misses;
  j["fsck_corrupt_records"] = fsck_corrupt_records;
  j["mount_skipped"] = mount_skipped;
  j["violations"] = violations;
  j["work_dir"] = work_dir;
  return j.dump(2);
}

Result<SoakReport> RunSoak(const SoakOptions& options) {
  if (options.nodes < 2) return InvalidArgument("the soak needs at least 2 nodes, got " + std::to_string(options.nodes));
  if (options.clients == 0) return InvalidArgument("the soak needs at least 1 client thread");
  if (options.docs == 0) return InvalidArgument("the soak needs at least 1 document");
  if (options.data_path != "tcp" && options.data_path != "rma") {
    return InvalidArgument("data path must be tcp or rma, got '" + options.data_path + "'");
  }
  if (!(options.seconds > 0) || !std::isfinite(options.seconds)) {
    return InvalidArgument("the soak's duration must be a positive number of seconds");
  }
  Soak soak(options);
  return soak.Run();
}

}  // namespace ptstore::soak
