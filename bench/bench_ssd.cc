// bench_ssd: how fast a prefix that only the SSD tier holds reaches a host
// buffer, against a sequential O_DIRECT read of the same number of bytes
// from a file in the same directory (same disk), measured in the same run.
//
// One prefix of --tokens tokens (default 8192: 1 GiB in the Mistral-7B
// geometry) of KV-like data (bf16 values ~ N(0,1)) is saved into a ptstored
// with an SSD tier in --dir; SIGTERM makes the server persist it. Each
// repetition then
//   - restarts the server (it recovers the prefix from its segments, so the
//     prefix is on SSD only and nothing of it is in the page cache: the tier
//     writes and reads with O_DIRECT),
//   - times Client::Load of the prefix (the server reads the record into its
//     arena and checks its checksum, the client copies it out of the mapped
//     arena): "SSD tier load",
//   - times a second Load (now DRAM-resident), for reference,
//   - times the baseline: pread of the same number of bytes from a file
//     written with O_DIRECT, 1 MiB at a time, into an aligned buffer,
// alternating which of the two goes first. Every load is compared byte for
// byte with the source. Target (issue 3): SSD tier load >= 0.8 x baseline.
//
// Then (unless --no-interference) whether SSD traffic holds up loads of
// DRAM-resident data: a small arena, a hot 16 MiB prefix loaded over and
// over, first alone, then while another client saves new 64 MiB prompts
// (every save spills older ones to SSD) and loads old ones back (fills).
// It prints the hot loads' latency in both phases.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "ptstore/client.h"

using namespace ptstore;
using namespace ptstore::bench;

namespace {

struct Options {
  std::string dir = "/var/tmp/ptstore-bench-ssd", ptstored;
  uint64_t tokens = 8192;
  uint64_t chunk = 1 << 20;
  int reps = 3;
  bool quick = false, json = false, compress = false, keep = false, verbose = false, interference = true;
};

// bf16 values of a standard normal distribution (round to nearest even).
void FillNormalBf16(uint8_t* out, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto* p = reinterpret_cast<uint16_t*>(out);
  for (uint64_t i = 0; i < bytes / 2; ++i) {
    float f = n(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    p[i] = static_cast<uint16_t>(u >> 16);
  }
}

Status Check(const char* what, const uint8_t* want, const uint8_t* got, uint64_t bytes) {
  if (std::memcmp(want, got, bytes) == 0) return Status::OK();
  uint64_t i = 0;
  while (want[i] == got[i]) ++i;
  return Corruption(Format("%s: byte %llu of %llu differs", what, static_cast<unsigned long long>(i),
                           static_cast<unsigned long long>(bytes)));
}

// The baseline: a file of `bytes` written with O_DIRECT, read back with
// O_DIRECT `chunk` bytes at a time.
Status WriteBaselineFile(const std::string& path, const uint8_t* src, uint64_t bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) return IOError("open " + path + " with O_DIRECT: " + std::strerror(errno));
  for (uint64_t off = 0; off < bytes;) {
    ssize_t n = pwrite(fd, src + off, std::min<uint64_t>(bytes - off, 64 << 20), static_cast<off_t>(off));
    if (n <= 0) {
      close(fd);
      return IOError("pwrite " + path + ": " + std::strerror(errno));
    }
    off += static_cast<uint64_t>(n);
  }
  fdatasync(fd);
  close(fd);
  return Status::OK();
}

Result<double> ReadBaseline(const std::string& path, uint8_t* dst, uint64_t bytes, uint64_t chunk) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) return IOError("open " + path + " with O_DIRECT: " + std::strerror(errno));
  auto t0 = Clock::now();
  for (uint64_t off = 0; off < bytes;) {
    ssize_t n = pread(fd, dst + off, std::min(chunk, bytes - off), static_cast<off_t>(off));
    if (n <= 0) {
      close(fd);
      return IOError("pread " + path + ": " + (n < 0 ? std::strerror(errno) : "end of file"));
    }
    off += static_cast<uint64_t>(n);
  }
  const double s = SecondsSince(t0);
  close(fd);
  return s;
}

Result<std::unique_ptr<testing::Daemon>> StartServer(const Options& o, uint64_t bytes, const std::string& ssd_dir) {
  // Room for the prefix plus slack; the SSD tier for it twice over.
  testing::Daemon::Options so = ServerOptions(
      std::to_string((bytes + (256ull << 20)) >> 20) + "MiB", o.ptstored,
      {"--ssd-dir", ssd_dir, "--ssd-capacity", std::to_string((2 * bytes + (256ull << 20)) >> 20) + "MiB"});
  if (o.verbose) so.log_level = "debug";
  if (o.compress) so.extra_args.push_back("--ssd-compress");
  return testing::StartDaemon(so);
}

// Latency of loads of a DRAM-resident prefix, alone and under SSD traffic.
Status RunInterference(const Options& o, const std::string& run_dir) {
  const Layout layout = MistralLayout();
  const uint64_t hot_tokens = o.quick ? 32 : 128;      // 4 / 16 MiB
  const uint64_t cold_tokens = o.quick ? 128 : 512;    // 16 / 64 MiB per prompt
  const int loads = o.quick ? 30 : 300;
  const uint64_t hot_bytes = hot_tokens * layout.BytesPerToken();
  const uint64_t cold_bytes = cold_tokens * layout.BytesPerToken();
  PTS_ASSIGN_OR_RETURN(auto server, testing::StartDaemon(ServerOptions(
                                         o.quick ? "128MiB" : "512MiB", o.ptstored,
                                         {"--ssd-dir", run_dir + "/ssd-interference", "--ssd-capacity",
                                          o.quick ? "1GiB" : "4GiB"})));
  ClientOptions co;
  co.socket_path = server->socket_path();
  PTS_ASSIGN_OR_RETURN(auto client, Client::Connect(co));
  PTS_RETURN_IF_ERROR(client->CreateNamespace("bench", layout).status());
  const std::vector<uint32_t> hot = RandomTokens(777, hot_tokens);
  PTS_ASSIGN_OR_RETURN(HostBuffer hot_src, HostBuffer::Allocate(hot_bytes));
  PTS_ASSIGN_OR_RETURN(HostBuffer hot_dst, HostBuffer::Allocate(hot_bytes));
  FillNormalBf16(hot_src.data(), hot_bytes, 1);
  PTS_RETURN_IF_ERROR(client->Save("bench", hot, hot_src.data(), hot_bytes).status());

  auto measure = [&](std::vector<double>* out) -> Status {
    for (int i = 0; i < loads; ++i) {
      auto t0 = Clock::now();
      PTS_ASSIGN_OR_RETURN(uint64_t got, client->Load("bench", hot, hot_dst.data(), hot_bytes));
      out->push_back(SecondsSince(t0));
      if (got != hot_tokens) return Internal("the hot prefix was not loaded whole");
      PTS_RETURN_IF_ERROR(Check("hot load", hot_src.data(), hot_dst.data(), hot_bytes));
    }
    return Status::OK();
  };
  std::vector<double> idle, busy;
  PTS_RETURN_IF_ERROR(measure(&idle));

  // The traffic: new prompts saved (spilling older ones), old ones loaded
  // back (filling), until the measurement ends.
  std::atomic<bool> stop{false};
  std::atomic<bool> traffic_ended{false};
  Status traffic_status;  // written by the traffic thread, read after join
  PTS_ASSIGN_OR_RETURN(StoreStats before, client->Stats());
  std::thread traffic([&] {
    struct Ended {
      std::atomic<bool>* flag;
      ~Ended() { *flag = true; }
    } ended{&traffic_ended};
    ClientOptions to = co;
    auto c = Client::Connect(to);
    if (!c.ok()) {
      traffic_status = c.status();
      return;
    }
    auto buf = HostBuffer::Allocate(cold_bytes);
    if (!buf.ok()) {
      traffic_status = buf.status();
      return;
    }
    FillNormalBf16(buf->data(), cold_bytes, 2);
    for (uint64_t i = 0; !stop; ++i) {
      std::vector<uint32_t> t = RandomTokens(10000 + i, cold_tokens);
      Status s = (*c)->Save("bench", t, buf->data(), cold_bytes).status();
      if (s.ok() && i >= 8) {
        std::vector<uint32_t> old = RandomTokens(10000 + i - 8, cold_tokens);
        s = (*c)->Load("bench", old, buf->data(), cold_bytes).status();
      }
      if (!s.ok()) {
        traffic_status = s;
        return;
      }
    }
  });
  // Measure once the traffic spills (the arena must fill first).
  for (int i = 0; i < 1000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Result<StoreStats> now = client->Stats();
    if (traffic_ended || (now.ok() && now->ssd_spills > before.ssd_spills)) break;
  }
  Status ms = measure(&busy);
  stop = true;
  traffic.join();
  PTS_RETURN_IF_ERROR(ms);
  PTS_RETURN_IF_ERROR(traffic_status);
  PTS_ASSIGN_OR_RETURN(StoreStats after, client->Stats());
  const Summary a = Summarize(idle), b = Summarize(busy);
  if (!o.json) {
    Table t({Format("loads of a DRAM-resident %s prefix", HumanBytes(hot_bytes).c_str()), "p50 ms", "p99 ms",
             "max ms"});
    t.Row({"alone", Format("%.2f", a.p50 * 1e3), Format("%.2f", a.p99 * 1e3), Format("%.2f", a.max * 1e3)});
    t.Row({"while another client spills and fills", Format("%.2f", b.p50 * 1e3), Format("%.2f", b.p99 * 1e3),
           Format("%.2f", b.max * 1e3)});
    std::printf("\n%s", t.ToString().c_str());
    std::printf("during it: %llu spills (%s), %llu fills (%s); p50 under traffic / alone: %.2f\n",
                static_cast<unsigned long long>(after.ssd_spills - before.ssd_spills),
                HumanBytes(after.ssd_spill_bytes - before.ssd_spill_bytes).c_str(),
                static_cast<unsigned long long>(after.ssd_fills - before.ssd_fills),
                HumanBytes(after.ssd_fill_bytes - before.ssd_fill_bytes).c_str(), b.p50 / a.p50);
  }
  if (after.ssd_spills == before.ssd_spills) return Internal("the traffic did not spill anything to SSD");
  return Status::OK();
}

Status Run(const Options& o) {
  const Layout layout = MistralLayout();
  const uint64_t tokens_n = o.tokens / layout.block_tokens * layout.block_tokens;
  if (tokens_n == 0) return InvalidArgument("--tokens must be at least one block (16)");
  const uint64_t bytes = tokens_n * layout.BytesPerToken();
  const std::vector<uint32_t> tokens = RandomTokens(4242, tokens_n);
  const std::string run_dir = o.dir + Format("/run-%d", static_cast<int>(getpid()));
  const std::string ssd_dir = run_dir + "/ssd";
  const std::string base_file = run_dir + "/baseline.bin";
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return IOError("cannot create " + run_dir + ": " + ec.message());
  struct Cleanup {
    std::string dir;
    bool keep;
    ~Cleanup() {
      if (!keep) std::filesystem::remove_all(dir);
    }
  } cleanup{run_dir, o.keep};

  if (!o.json) {
    std::printf("bench_ssd: load of a %s prefix held only by the SSD tier (%llu tokens, %s, bf16 ~ N(0,1)%s)\n",
                HumanBytes(bytes).c_str(), static_cast<unsigned long long>(tokens_n), layout.ToString().c_str(),
                o.compress ? ", compressed" : "");
    std::printf("machine: %s\ndirectory: %s\n", MachineDescription().c_str(), run_dir.c_str());
  }
  PTS_ASSIGN_OR_RETURN(HostBuffer src, HostBuffer::Allocate(bytes));
  PTS_ASSIGN_OR_RETURN(HostBuffer dst, HostBuffer::Allocate(bytes));
  FillNormalBf16(src.data(), bytes, 7);
  PTS_RETURN_IF_ERROR(WriteBaselineFile(base_file, src.data(), bytes));

  // Save once, then stop: the server writes it to SSD (persist_on_shutdown).
  {
    PTS_ASSIGN_OR_RETURN(auto server, StartServer(o, bytes, ssd_dir));
    ClientOptions co;
    co.socket_path = server->socket_path();
    PTS_ASSIGN_OR_RETURN(auto client, Client::Connect(co));
    PTS_RETURN_IF_ERROR(client->CreateNamespace("bench", layout).status());
    PTS_ASSIGN_OR_RETURN(SaveResult saved, client->Save("bench", tokens, src.data(), bytes));
    if (saved.new_bytes != bytes) return Internal("the save did not store the whole prefix");
    client.reset();
    if (int rc = server->Stop(); rc != 0) return Internal(Format("ptstored exited with %d", rc));
  }

  std::vector<double> ssd_s, dram_s, base_s, start_s;
  uint64_t stored_bytes = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    PTS_ASSIGN_OR_RETURN(auto server, StartServer(o, bytes, ssd_dir));
    start_s.push_back(server->startup_seconds());
    ClientOptions co;
    co.socket_path = server->socket_path();
    PTS_ASSIGN_OR_RETURN(auto client, Client::Connect(co));
    PTS_ASSIGN_OR_RETURN(StoreStats before, client->Stats());
    if (before.recovered_tensors == 0) return Internal("the restarted server recovered nothing from its SSD tier");
    stored_bytes = before.ssd_live_bytes;
    auto baseline = [&]() -> Status {
      std::memset(dst.data(), 0xa5, bytes);
      PTS_ASSIGN_OR_RETURN(double s, ReadBaseline(base_file, dst.data(), bytes, o.chunk));
      PTS_RETURN_IF_ERROR(Check("O_DIRECT baseline", src.data(), dst.data(), bytes));
      base_s.push_back(s);
      return Status::OK();
    };
    if (rep % 2 == 1) PTS_RETURN_IF_ERROR(baseline());
    std::memset(dst.data(), 0x5a, bytes);
    auto t0 = Clock::now();
    PTS_ASSIGN_OR_RETURN(uint64_t got, client->Load("bench", tokens, dst.data(), bytes));
    ssd_s.push_back(SecondsSince(t0));
    if (got != tokens_n) return Internal(Format("the SSD load returned %llu of %llu tokens",
                                                static_cast<unsigned long long>(got),
                                                static_cast<unsigned long long>(tokens_n)));
    PTS_RETURN_IF_ERROR(Check("SSD tier load", src.data(), dst.data(), bytes));
    PTS_ASSIGN_OR_RETURN(StoreStats after, client->Stats());
    if (after.ssd_fills == before.ssd_fills) return Internal("the load did not read from the SSD tier");
    std::memset(dst.data(), 0x3c, bytes);
    t0 = Clock::now();
    PTS_ASSIGN_OR_RETURN(got, client->Load("bench", tokens, dst.data(), bytes));
    dram_s.push_back(SecondsSince(t0));
    PTS_RETURN_IF_ERROR(Check("DRAM load", src.data(), dst.data(), bytes));
    if (rep % 2 == 0) PTS_RETURN_IF_ERROR(baseline());
    client.reset();
    server->Stop();
    if (o.verbose) std::printf("--- server log, repetition %d ---\n%s\n", rep + 1, server->LogTail(2000).c_str());
  }

  const Summary ssd = Summarize(ssd_s), dram = Summarize(dram_s), base = Summarize(base_s);
  const double ratio = base.p50 / ssd.p50;
  const double compression = stored_bytes ? static_cast<double>(bytes) / static_cast<double>(stored_bytes) : 0;
  if (o.json) {
    nlohmann::json j = {{"bytes", bytes},
                        {"tokens", tokens_n},
                        {"compress", o.compress},
                        {"reps", o.reps},
                        {"ssd_load_s", ssd_s},
                        {"dram_load_s", dram_s},
                        {"odirect_read_s", base_s},
                        {"restart_s", start_s},
                        {"ssd_load_gbps_p50", GBps(bytes, ssd.p50)},
                        {"odirect_gbps_p50", GBps(bytes, base.p50)},
                        {"ratio_vs_odirect", ratio},
                        {"compression_ratio", compression}};
    std::printf("%s\n", j.dump(2).c_str());
    return Status::OK();
  }
  Table t({"method", "p50 s", "min s", "max s", "GB/s (p50)", "x O_DIRECT"});
  auto row = [&](const std::string& name, const Summary& s) {
    t.Row({name, Format("%.3f", s.p50), Format("%.3f", s.min), Format("%.3f", s.max), Format("%.2f", GBps(bytes, s.p50)),
           Format("%.2f", base.p50 / s.p50)});
  };
  row(Format("O_DIRECT read, %s chunks (baseline)", HumanBytes(o.chunk).c_str()), base);
  row("SSD tier load (Client::Load)", ssd);
  row("DRAM load after it (Client::Load)", dram);
  std::printf("%s", t.ToString().c_str());
  std::printf("SSD tier load / O_DIRECT read: %.2f (target >= 0.8) -> %s\n", ratio, ratio >= 0.8 ? "met" : "MISSED");
  std::printf("bytes on SSD: %s (%.2fx compression); restart with recovery scan: %.2f s p50\n",
              HumanBytes(stored_bytes).c_str(), compression, Summarize(start_s).p50);
  if (o.interference) PTS_RETURN_IF_ERROR(RunInterference(o, run_dir));
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_ssd: load from the SSD tier vs an O_DIRECT read of the same bytes"};
  Options o;
  app.add_option("--dir", o.dir, "a directory on the disk to measure (not tmpfs)");
  app.add_option("--tokens", o.tokens, "prefix length in tokens (Mistral geometry: 128 KiB each)");
  app.add_option("--reps", o.reps, "repetitions")->check(CLI::Range(1, 100));
  app.add_option("--chunk", o.chunk, "baseline read size in bytes (multiple of 4096)");
  app.add_option("--ptstored", o.ptstored, "ptstored binary (default: this build's)");
  app.add_flag("--compress", o.compress, "SSD tier with byte-shuffle + zstd");
  app.add_flag("--quick", o.quick, "a 64 MiB prefix, 1 repetition (for the test suite)");
  app.add_flag("--json", o.json, "print JSON");
  app.add_flag("--keep", o.keep, "keep the run directory");
  app.add_flag("--verbose", o.verbose, "print the server's debug log of each repetition");
  app.add_flag("!--no-interference", o.interference, "skip the DRAM-loads-under-SSD-traffic phase");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (o.quick) {
    o.tokens = 512;
    o.reps = 1;
  }
  if (o.chunk == 0 || o.chunk % 4096 != 0) {
    std::fprintf(stderr, "bench_ssd: --chunk must be a positive multiple of 4096\n");
    return 2;
  }
  Status s = Run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "bench_ssd: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
