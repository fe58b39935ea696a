// bench_load: how fast a DRAM-resident prefix reaches a host buffer, against
// a plain memcpy of the same bytes measured in the same run.
//
// One prefix of --tokens tokens (default 8192: 1 GiB in the Mistral-7B
// geometry) is saved once; then each repetition times, in turn,
//   memcpy          host buffer -> host buffer (the baseline)
//   Client::Load    mapped client: pin, copy out of the mapped arena, release
//   Pin+CopyTo+Release, and CopyTo alone
//   copy path       a client without the mapping: the server copies into the
//                   client's staging buffer, the client copies out
//   Load into a RegisteredBuffer (the server copies, once)
//   and what the machine moves with as many threads as a load may use:
//   memcpy (halves: one call each, which glibc streams), a streaming copy
//   in 4 MiB pieces (core/stream_copy.h), and a Pin whose extents are
//   copied by those threads; the best of the first two is the baseline of
//   the >= 0.9 target
// Every buffer is 4 KiB aligned and faulted in before timing, and every
// method gets a warm-up run. Each destination is poisoned before each run
// and compared with the source after it: a wrong byte fails the benchmark.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "client/parallel_copy.h"
#include "core/stream_copy.h"
#include "ptstore/client.h"

using namespace ptstore;
using namespace ptstore::bench;

namespace {

struct Options {
  std::string socket, arena_size = "1536MiB", ptstored;
  uint64_t tokens = 8192;
  int reps = 7;
  bool quick = false, json = false, huge = false, inject = false;
};

struct Method {
  std::string name;
  uint8_t* dst = nullptr;
  std::function<Status(uint8_t* dst)> run;
  std::vector<double> seconds;
  bool is_baseline = false;
};

struct Piece {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t bytes;
};

// Copies the pieces (in order, as one stream of bytes) with `threads`
// threads, each taking an equal, 4 KiB-aligned share of the stream.
void ParallelCopy(const std::vector<Piece>& pieces, int threads) {
  uint64_t total = 0;
  for (const Piece& p : pieces) total += p.bytes;
  const uint64_t share = (total / threads + 4095) & ~uint64_t{4095};
  auto copy_range = [&](uint64_t begin, uint64_t end) {
    uint64_t pos = 0;
    for (const Piece& p : pieces) {
      const uint64_t lo = std::max(begin, pos), hi = std::min(end, pos + p.bytes);
      if (lo < hi) std::memcpy(p.dst + (lo - pos), p.src + (lo - pos), hi - lo);
      pos += p.bytes;
    }
  };
  std::vector<std::thread> workers;
  for (int i = 1; i < threads; ++i) {
    workers.emplace_back(copy_range, std::min(total, i * share), std::min(total, (i + 1) * share));
  }
  copy_range(0, std::min(total, share));
  for (auto& w : workers) w.join();
}

// The same split, each piece by core::StreamCopy.
void StreamParallel(const std::vector<Piece>& pieces, int threads) {
  const size_t per = (pieces.size() + threads - 1) / threads;
  auto copy_range = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < std::min(end, pieces.size()); ++i) {
      core::StreamCopy(pieces[i].dst, pieces[i].src, pieces[i].bytes);
    }
  };
  std::vector<std::thread> workers;
  for (int i = 1; i < threads; ++i) workers.emplace_back(copy_range, i * per, (i + 1) * per);
  copy_range(0, per);
  for (auto& w : workers) w.join();
}

Status CheckCopy(const Method& m, const uint8_t* want, const uint8_t* got, uint64_t bytes) {
  if (std::memcmp(want, got, bytes) == 0) return Status::OK();
  uint64_t i = 0;
  while (want[i] == got[i]) ++i;
  return Corruption(Format("%s: byte %llu of %llu is 0x%02x, expected 0x%02x", m.name.c_str(),
                           static_cast<unsigned long long>(i), static_cast<unsigned long long>(bytes), got[i],
                           want[i]));
}

Status Run(const Options& o) {
  const Layout layout = MistralLayout();
  const uint64_t tokens_n = o.tokens / layout.block_tokens * layout.block_tokens;
  if (tokens_n == 0) return InvalidArgument("--tokens must be at least one block (16)");
  const uint64_t bytes = tokens_n * layout.BytesPerToken();
  const std::vector<uint32_t> tokens = RandomTokens(8192, tokens_n);

  if (!o.json) {
    std::printf("bench_load: load of a %s DRAM-resident prefix (%llu tokens, %s) into a host buffer\n",
                HumanBytes(bytes).c_str(), static_cast<unsigned long long>(tokens_n), layout.ToString().c_str());
    std::printf("machine: %s\n", MachineDescription().c_str());
  }
  PTS_ASSIGN_OR_RETURN(testing::ServerHandle server,
                       testing::ConnectOrStart(o.socket, ServerOptions(o.arena_size, o.ptstored), o.json));

  // Host buffers first: pre-faulted, 4 KiB aligned.
  auto t_setup = Clock::now();
  PTS_ASSIGN_OR_RETURN(HostBuffer src, HostBuffer::Allocate(bytes, o.huge));
  PTS_ASSIGN_OR_RETURN(HostBuffer dst, HostBuffer::Allocate(bytes, o.huge));
  FillKv(tokens, 0, layout.BytesPerToken(), src.data());

  ClientOptions mo;
  mo.socket_path = server.socket_path;
  mo.client_name = "bench_load";
  PTS_ASSIGN_OR_RETURN(auto mapped, Client::Connect(mo));
  ClientOptions co = mo;
  co.want_mapping = false;
  co.client_name = "bench_load-copy";
  PTS_ASSIGN_OR_RETURN(auto copier, Client::Connect(co));
  ClientOptions one = mo;
  one.copy_threads = 1;
  one.client_name = "bench_load-1-thread";
  PTS_ASSIGN_OR_RETURN(auto single, Client::Connect(one));
  // The machine's best memcpy: as many threads as a load may use
  // (client/parallel_copy.h), measured beside the loads.
  const int threads = client::DefaultCopyThreads();

  const std::string ns = Format("bench-load-%d", static_cast<int>(getpid()));
  PTS_RETURN_IF_ERROR(mapped->CreateNamespace(ns, layout).status());
  struct Dropper {
    Client* c;
    std::string ns;
    ~Dropper() { c->DropNamespace(ns).status().IgnoreError(); }
  } dropper{mapped.get(), ns};

  // Save once, through a registered buffer (one copy, by the server).
  PTS_ASSIGN_OR_RETURN(RegisteredBuffer reg, mapped->AllocateBuffer(bytes));
  std::memcpy(reg.data(), src.data(), bytes);
  auto t0 = Clock::now();
  PTS_ASSIGN_OR_RETURN(SaveResult saved, mapped->Save(ns, tokens, reg, 0, bytes));
  const double save_s = SecondsSince(t0);
  if (saved.new_bytes != bytes) {
    return Internal(Format("the save stored %llu bytes, expected %llu", static_cast<unsigned long long>(saved.new_bytes),
                           static_cast<unsigned long long>(bytes)));
  }
  PTS_ASSIGN_OR_RETURN(PrefixInfo look, mapped->Lookup(ns, tokens));
  if (look.matched_tokens != tokens_n) return Internal("the saved prefix is not found whole by Lookup");
  const double setup_s = SecondsSince(t_setup);

  const bool have_map = mapped->mapped();
  std::vector<Method> methods;
  methods.push_back({"memcpy (baseline)", dst.data(), [&](uint8_t* d) {
                       std::memcpy(d, src.data(), bytes);
                       return Status::OK();
                     }, {}, true});
  auto load_with = [&](Client* c) {
    return [&, c](uint8_t* d) -> Status {
      PTS_ASSIGN_OR_RETURN(uint64_t n, c->Load(ns, tokens, d, bytes));
      if (n != tokens_n) return Internal(Format("Load returned %llu tokens", static_cast<unsigned long long>(n)));
      return Status::OK();
    };
  };
  std::vector<double> copyto_seconds;
  if (have_map) {
    methods.push_back({"Client::Load (mapped arena)", dst.data(), load_with(mapped.get()), {}, false});
    methods.push_back({"Client::Load, copy_threads=1", dst.data(), load_with(single.get()), {}, false});
    methods.push_back({"Pin + CopyTo + Release", dst.data(), [&](uint8_t* d) -> Status {
                         PTS_ASSIGN_OR_RETURN(PinnedPrefix pin, mapped->Pin(ns, tokens));
                         if (pin.tokens() != tokens_n) return Internal("Pin did not match the whole prefix");
                         auto c0 = Clock::now();
                         PTS_RETURN_IF_ERROR(pin.CopyTo(d, bytes));
                         copyto_seconds.push_back(SecondsSince(c0));
                         return pin.Release();
                       }, {}, false});
  }
  methods.push_back({"Client::Load, copy path (no mapping)", dst.data(), load_with(copier.get()), {}, false});
  methods.push_back({"Load into RegisteredBuffer (server copy)", reg.data(), [&](uint8_t* d) -> Status {
                       PTS_ASSIGN_OR_RETURN(uint64_t n, mapped->Load(ns, tokens, reg, 0, bytes));
                       if (n != tokens_n) return Internal("Load into the registered buffer was short");
                       return Status::OK();
                     }, {}, false});

  // What the machine can do: the same copies split over `threads` threads
  // (the baseline of the >= 0.9 target; Client::Load splits its copy the
  // same way, over the CPUs idle at that moment).
  const std::string best_name = Format("memcpy, %d threads, one call per thread", threads);
  methods.push_back({best_name, dst.data(), [&](uint8_t* d) {
                       ParallelCopy({{d, src.data(), bytes}}, threads);
                       return Status::OK();
                     }, {}, false});
  // The same with streaming stores (core/stream_copy.h), each thread's half
  // in 4 MiB pieces as a load's extents come: what the machine moves when
  // the copy does not go through the cache. The best of the two is the
  // baseline of the >= 0.9 target.
  const std::string stream_name = Format("streaming copy, %d threads, 4 MiB pieces", threads);
  methods.push_back({stream_name, dst.data(), [&](uint8_t* d) {
                       std::vector<Piece> pieces;
                       for (uint64_t at = 0; at < bytes; at += 4u << 20) {
                         pieces.push_back({d + at, src.data() + at, std::min<uint64_t>(4u << 20, bytes - at)});
                       }
                       StreamParallel(pieces, threads);
                       return Status::OK();
                     }, {}, false});
  if (have_map) {
    methods.push_back({Format("Pin + %d-thread copy from the arena + Release", threads), dst.data(),
                       [&](uint8_t* d) -> Status {
                         PTS_ASSIGN_OR_RETURN(PinnedPrefix pin, mapped->Pin(ns, tokens));
                         if (pin.tokens() != tokens_n) return Internal("Pin did not match the whole prefix");
                         std::vector<Piece> pieces;
                         uint8_t* out = d;
                         for (const Extent& e : pin.extents()) {
                           pieces.push_back({out, pin.data(e), e.length});
                           out += e.length;
                         }
                         ParallelCopy(pieces, threads);
                         return pin.Release();
                       }, {}, false});
  }

  // Diagnostic: the same memcpy from a shared memfd mapping (4 KiB shmem
  // pages, like the arena) instead of anonymous memory. Last, because the
  // row above leaves the prefix in `reg`.
  methods.push_back({"memcpy from a memfd mapping (arena-like source)", dst.data(), [&](uint8_t* d) {
                       std::memcpy(d, reg.data(), bytes);
                       return Status::OK();
                     }, {}, false});

  // Warm-up (untimed): grows staging buffers, maps pages, checks the bytes
  // against the generator itself.
  for (Method& m : methods) {
    std::memset(m.dst, 0x5a, bytes);
    PTS_RETURN_IF_ERROR(m.run(m.dst).WithContext(m.name));
    if (auto bad = VerifyKv(tokens, 0, layout.BytesPerToken(), m.dst)) {
      return Corruption(m.name + ": wrong bytes at " + bad->ToString());
    }
  }
  copyto_seconds.clear();

  for (int rep = 0; rep < o.reps; ++rep) {
    for (Method& m : methods) {
      std::memset(m.dst, 0x5a, bytes);  // poison: a load that writes nothing fails the check
      const auto s = Clock::now();
      PTS_RETURN_IF_ERROR(m.run(m.dst).WithContext(m.name));
      m.seconds.push_back(SecondsSince(s));
      if (o.inject && !m.is_baseline && rep == o.reps - 1) m.dst[bytes - 1] ^= 0x01;  // test hook
      PTS_RETURN_IF_ERROR(CheckCopy(m, src.data(), m.dst, bytes));
    }
  }

  const double base = Summarize(methods[0].seconds).p50;
  Table t({"method", "median GB/s", "min GB/s", "max GB/s", "median ms", "vs memcpy"});
  nlohmann::json jm = nlohmann::json::array();
  auto add = [&](const std::string& name, const std::vector<double>& secs) {
    Summary s = Summarize(secs);
    const double ratio = base / s.p50;
    t.Row({name, Format("%.2f", GBps(bytes, s.p50)), Format("%.2f", GBps(bytes, s.max)),
           Format("%.2f", GBps(bytes, s.min)), Format("%.1f", 1e3 * s.p50), Format("%.2f", ratio)});
    const size_t first = name.find_first_not_of(' ');
    jm.push_back({{"method", name.substr(first == std::string::npos ? 0 : first)},
                  {"median_gb_per_s", GBps(bytes, s.p50)},
                  {"min_gb_per_s", GBps(bytes, s.max)},
                  {"max_gb_per_s", GBps(bytes, s.min)},
                  {"median_seconds", s.p50},
                  {"ratio_vs_memcpy", ratio},
                  {"samples", secs}});
    return ratio;
  };
  double load_ratio = 0, load_s = 0, best_s = 0;
  for (const Method& m : methods) {
    const double r = add(m.name, m.seconds);
    if (m.name.rfind("Client::Load (mapped", 0) == 0) {
      load_ratio = r;
      load_s = Summarize(m.seconds).p50;
    }
    if (m.name == best_name || m.name == stream_name) {
      const double p50 = Summarize(m.seconds).p50;
      best_s = best_s == 0 ? p50 : std::min(best_s, p50);
    }
    if (m.name.rfind("Pin + CopyTo", 0) == 0) add("  of which CopyTo alone", copyto_seconds);
  }

  PTS_ASSIGN_OR_RETURN(StoreStats stats, mapped->Stats());
  if (o.json) {
    nlohmann::json j{{"bench", "bench_load"},
                     {"machine", MachineDescription()},
                     {"bytes", bytes},
                     {"tokens", tokens_n},
                     {"layout", layout.ToString()},
                     {"reps", o.reps},
                     {"mapped", have_map},
                     {"huge_host_pages", o.huge},
                     {"save_seconds", save_s},
                     {"methods", jm},
                     {"load_ratio", load_ratio},
                     {"target_ratio", 0.8},
                     {"copy_threads", threads},
                     {"load_vs_best_copy", load_s > 0 ? best_s / load_s : 0.0},
                     {"target_vs_best", 0.9}};
    std::cout << j.dump(2) << std::endl;
    return Status::OK();
  }
  std::printf("setup (buffers, save, warm-up excluded from timing): %.1f s; save of the prefix through a "
              "registered buffer: %.2f GB/s\n",
              setup_s, GBps(bytes, save_s));
  std::printf("%d repetitions per method, interleaved; destination %s buffers%s\n\n", o.reps,
              o.huge ? "THP" : "4 KiB-page", have_map ? "" : " (NO arena mapping granted: mapped rows skipped)");
  std::printf("%s\n", t.ToString().c_str());
  if (have_map) {
    std::printf("Client::Load / memcpy = %.2f (target >= 0.80): %s\n", load_ratio,
                load_ratio >= 0.8 ? "met" : "MISSED");
    const double vs_best = load_s > 0 ? best_s / load_s : 0;
    std::printf("Client::Load / the best copy with %d threads (memcpy or streaming) = %.2f (target >= 0.90): %s\n",
                threads, vs_best,
                vs_best >= 0.9 ? "met" : "MISSED");
  }
  std::printf("server: %llu pins (hits), %llu active leases, %s pinned after the run\n",
              static_cast<unsigned long long>(stats.hits), static_cast<unsigned long long>(stats.active_leases),
              HumanBytes(stats.pinned_bytes).c_str());
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_load: load of a DRAM-resident prefix vs memcpy"};
  Options o;
  app.add_option("--socket", o.socket, "socket of a running ptstored (default: start one)");
  app.add_option("--arena-size", o.arena_size, "arena of the ptstored started for this run")->capture_default_str();
  app.add_option("--ptstored", o.ptstored, "ptstored binary to start");
  app.add_option("--tokens", o.tokens, "prefix length in tokens (Mistral-7B: 128 KiB each)")->capture_default_str();
  app.add_option("--reps", o.reps, "timed repetitions per method")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_flag("--huge", o.huge, "transparent huge pages for the host buffers");
  app.add_flag("--quick", o.quick, "512 tokens (64 MiB), 3 repetitions, 160MiB arena");
  app.add_flag("--json", o.json, "print the results as JSON");
  app.add_flag("--inject-corruption", o.inject, "test hook: flip a loaded byte (the run must fail)")->group("");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    if (!app.count("--tokens")) o.tokens = 512;
    if (!app.count("--reps")) o.reps = 3;
    if (!app.count("--arena-size")) o.arena_size = "160MiB";
  }
  Status st = Run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "bench_load: FAILED: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
