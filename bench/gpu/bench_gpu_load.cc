// bench_gpu_load: how fast a DRAM-resident prefix reaches GPU memory through
// the GPU copy path (include/ptstore/gpu.h), against cudaMemcpyAsync of the
// same bytes from a pinned (cudaMallocHost) buffer measured in the same run.
//
// One prefix of --tokens tokens (default 8192: 1 GiB in the Mistral-7B
// geometry, saved as --increments increments, so its pin has several
// extents) is pinned once; then each repetition times, in turn:
//   pinned memcpy     cudaMemcpyAsync from cudaMallocHost memory (the baseline)
//   pageable memcpy   cudaMemcpyAsync from an ordinary host buffer
//   LoadToDevice      from the registered arena mapping (one cudaMemcpyAsync per run of extents)
//   LoadToDevice      through pinned staging buffers (a client that does not register)
//   paged, direct     LoadToPagedKV into vLLM's FlashAttention layout, the
//                     kernel reading the registered arena over the bus (one launch)
//   paged, staged     LoadToPagedKV: cudaMemcpyAsync into a device buffer, then the kernel
//   gather kernel     GatherToPagedKV from device memory (the kernel alone, HBM to HBM)
// Each time is wall-clock from issuing to the end of cudaStreamSynchronize.
// Every destination is poisoned before the timed runs and checked byte for
// byte against the prefix (or a CPU gather of it) after them: a wrong byte
// fails the benchmark; speed never does.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "ptstore/client.h"
#include "ptstore/gpu.h"

using namespace ptstore;
using namespace ptstore::bench;

namespace {

struct Options {
  std::string socket, arena_size, ptstored, json_file;
  uint64_t tokens = 8192;
  int increments = 4;
  int reps = 10;
  bool quick = false, json = false;
};

#define CUDA_TRY(call)                                                                                  \
  do {                                                                                                  \
    cudaError_t e_ = (call);                                                                            \
    if (e_ != cudaSuccess) return Internal(std::string(#call) + ": " + cudaGetErrorString(e_));          \
  } while (0)

class DeviceMemory {
 public:
  ~DeviceMemory() {
    if (p_) cudaFree(p_);
  }
  Status Alloc(uint64_t bytes) {
    bytes_ = bytes;
    CUDA_TRY(cudaMalloc(&p_, bytes));
    return Status::OK();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  uint64_t size() const { return bytes_; }

 private:
  void* p_ = nullptr;
  uint64_t bytes_ = 0;
};

struct Method {
  std::string name;
  std::function<Status()> run;
  std::function<Status()> check;  // after the timed runs
  uint64_t bytes = 0;
  std::vector<double> seconds;
  bool baseline = false;
};

Status CompareDevice(const std::string& what, const uint8_t* dev, const uint8_t* want, uint64_t bytes,
                     uint8_t* scratch) {
  CUDA_TRY(cudaMemcpy(scratch, dev, bytes, cudaMemcpyDeviceToHost));
  if (std::memcmp(scratch, want, bytes) == 0) return Status::OK();
  uint64_t i = 0;
  while (scratch[i] == want[i]) ++i;
  return Corruption(Format("%s: byte %llu of %llu is 0x%02x, expected 0x%02x", what.c_str(),
                           static_cast<unsigned long long>(i), static_cast<unsigned long long>(bytes), scratch[i],
                           want[i]));
}

Status Run(const Options& o) {
  const Layout layout = MistralLayout();
  const uint64_t bpt = layout.BytesPerToken();
  const uint64_t n = o.tokens / layout.block_tokens * layout.block_tokens;
  if (n == 0) return InvalidArgument("--tokens must be at least one block (16)");
  const uint64_t bytes = n * bpt;
  const std::vector<uint32_t> tokens = RandomTokens(8192, n);

  PTS_ASSIGN_OR_RETURN(int devices, gpu::DeviceCount());
  cudaDeviceProp prop{};
  CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const std::string gpu_desc = Format("%s (%d devices; compute %d.%d; %d SMs; PCI %04x:%02x:%02x; driver API %d, runtime %d)",
                                      prop.name, devices, prop.major, prop.minor, prop.multiProcessorCount,
                                      prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, driver, runtime);
  std::printf("bench_gpu_load: a %s DRAM-resident prefix (%llu tokens, %s, %d increments) into GPU memory\n",
              HumanBytes(bytes).c_str(), static_cast<unsigned long long>(n), layout.ToString().c_str(),
              o.increments);
  std::printf("machine: %s\ngpu: %s\n", MachineDescription().c_str(), gpu_desc.c_str());
  std::fflush(stdout);

  const std::string arena = o.arena_size.empty() ? Format("%lluMiB", static_cast<unsigned long long>(
                                                                          bytes / (1 << 20) + 512))
                                                 : o.arena_size;
  PTS_ASSIGN_OR_RETURN(testing::ServerHandle server,
                       testing::ConnectOrStart(o.socket, ServerOptions(arena, o.ptstored), false));

  // The prefix, saved as `increments` increments (prefixes of each other).
  PTS_ASSIGN_OR_RETURN(HostBuffer want, HostBuffer::Allocate(bytes));
  PTS_ASSIGN_OR_RETURN(HostBuffer scratch, HostBuffer::Allocate(bytes));
  FillKv(tokens, 0, bpt, want.data());
  ClientOptions co;
  co.socket_path = server.socket_path;
  co.client_name = "bench_gpu_load";
  PTS_ASSIGN_OR_RETURN(auto client, Client::Connect(co));
  if (!client->mapped()) return PermissionDenied("the server did not grant this client the arena mapping");
  PTS_RETURN_IF_ERROR(client->CreateNamespace("bench-gpu", layout).status());
  auto t_save = Clock::now();
  const uint64_t blocks = n / layout.block_tokens;
  for (int i = 1; i <= o.increments; ++i) {
    const uint64_t upto = std::max<uint64_t>(1, blocks * i / o.increments) * layout.block_tokens;
    std::span<const uint32_t> t(tokens.data(), upto);
    PTS_RETURN_IF_ERROR(client->Save("bench-gpu", t, want.data(), upto * bpt).status());
  }
  const double save_s = SecondsSince(t_save);

  auto t_reg = Clock::now();
  PTS_ASSIGN_OR_RETURN(gpu::ArenaInfo info, gpu::PrepareArena(*client));
  const double reg_s = SecondsSince(t_reg);
  std::printf("arena: %s, path %s: %s (%.3f s)\n", HumanBytes(info.arena_bytes).c_str(),
              std::string(gpu::ArenaPathName(info.path)).c_str(), info.detail.c_str(), reg_s);
  gpu::GpuOptions staging_opts;
  staging_opts.register_arena = false;
  PTS_ASSIGN_OR_RETURN(auto staging_client, Client::Connect(co));
  PTS_ASSIGN_OR_RETURN(gpu::ArenaInfo staging_info, gpu::PrepareArena(*staging_client, staging_opts));
  (void)staging_info;

  PTS_ASSIGN_OR_RETURN(PinnedPrefix pin, client->Pin("bench-gpu", tokens));
  PTS_ASSIGN_OR_RETURN(PinnedPrefix staging_pin, staging_client->Pin("bench-gpu", tokens));
  if (pin.tokens() != n || pin.bytes() != bytes) {
    return Internal(Format("pinned %llu tokens of %llu", static_cast<unsigned long long>(pin.tokens()),
                           static_cast<unsigned long long>(n)));
  }
  std::printf("pinned: %zu extents; saved in %.2f s\n", pin.extents().size(), save_s);

  // Device and pinned host memory.
  cudaStream_t stream;
  CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceMemory dev;
  PTS_RETURN_IF_ERROR(dev.Alloc(bytes));
  void* pinned_host = nullptr;
  CUDA_TRY(cudaMallocHost(&pinned_host, bytes));
  std::memcpy(pinned_host, want.data(), bytes);
  PTS_ASSIGN_OR_RETURN(HostBuffer pageable, HostBuffer::Allocate(bytes));
  std::memcpy(pageable.data(), want.data(), bytes);

  // The paged cache: vLLM FlashAttention layout, twice the blocks needed,
  // the prefix's blocks at random ids.
  const uint32_t bs = layout.block_tokens;
  const uint64_t num_blocks = 2 * blocks;
  std::vector<DeviceMemory> layer_mem(layout.layers);
  std::vector<void*> layer_ptrs;
  for (auto& m : layer_mem) {
    PTS_RETURN_IF_ERROR(m.Alloc(2 * num_blocks * bs * layout.kv_heads * layout.head_dim * DTypeSize(layout.dtype)));
    layer_ptrs.push_back(m.data());
  }
  gpu::PagedKVCache cache = gpu::PagedKVCache::FlashAttention(layer_ptrs, layout, num_blocks, bs);
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  ids.resize(blocks);
  // The CPU reference of the paged cache, for the checks (only the blocks
  // written are compared).
  const uint64_t slot_bytes = uint64_t{layout.kv_heads} * layout.head_dim * DTypeSize(layout.dtype);
  auto check_paged = [&](const std::string& what) -> Status {
    CUDA_TRY(cudaStreamSynchronize(stream));
    for (uint32_t l = 0; l < layout.layers; ++l) {
      CUDA_TRY(cudaMemcpy(scratch.data(), layer_ptrs[l], 2 * num_blocks * bs * slot_bytes, cudaMemcpyDeviceToHost));
      for (uint64_t t = 0; t < n; ++t) {
        for (int kv = 0; kv < 2; ++kv) {
          const uint8_t* w = want.data() + t * bpt + (uint64_t{l} * 2 + kv) * slot_bytes;
          const uint8_t* g = scratch.data() + ((kv * num_blocks + ids[t / bs]) * bs + t % bs) * slot_bytes;
          if (std::memcmp(w, g, slot_bytes) != 0) {
            return Corruption(Format("%s: layer %u, token %llu, %s differs", what.c_str(), l,
                                     static_cast<unsigned long long>(t), kv ? "V" : "K"));
          }
        }
      }
    }
    return Status::OK();
  };
  auto poison_paged = [&]() -> Status {
    for (auto& m : layer_mem) CUDA_TRY(cudaMemset(m.data(), 0xEE, m.size()));
    return Status::OK();
  };
  auto check_dev = [&](const std::string& what) -> Status {
    CUDA_TRY(cudaStreamSynchronize(stream));
    return CompareDevice(what, dev.data(), want.data(), bytes, scratch.data());
  };

  std::vector<Method> methods;
  methods.push_back({"cudaMemcpyAsync, pinned host (baseline)",
                     [&]() -> Status {
                       CUDA_TRY(cudaMemcpyAsync(dev.data(), pinned_host, bytes, cudaMemcpyHostToDevice, stream));
                       return Status::OK();
                     },
                     [&] { return check_dev("pinned memcpy"); }, bytes, {}, true});
  methods.push_back({"cudaMemcpyAsync, pageable host",
                     [&]() -> Status {
                       CUDA_TRY(cudaMemcpyAsync(dev.data(), pageable.data(), bytes, cudaMemcpyHostToDevice, stream));
                       return Status::OK();
                     },
                     [&] { return check_dev("pageable memcpy"); }, bytes, {}, false});
  methods.push_back({"LoadToDevice, " + std::string(gpu::ArenaPathName(info.path)) + " arena",
                     [&] { return gpu::LoadToDevice(pin, dev.data(), bytes, stream); },
                     [&] { return check_dev("LoadToDevice"); }, bytes, {}, false});
  methods.push_back({"LoadToDevice, staging buffers",
                     [&] { return gpu::LoadToDevice(staging_pin, dev.data(), bytes, stream); },
                     [&] { return check_dev("LoadToDevice (staging)"); }, bytes, {}, false});
  const bool registered =
      info.path == gpu::ArenaPath::kRegistered || info.path == gpu::ArenaPath::kRegisteredReadOnly;
  if (registered) {
    methods.push_back({"LoadToPagedKV, direct (zero-copy kernel)",
                       [&] {
                         gpu::PagedLoadOptions po;
                         po.mode = gpu::GatherMode::kDirect;
                         return gpu::LoadToPagedKV(pin, layout, cache, ids, stream, po);
                       },
                       [&] { return check_paged("LoadToPagedKV direct"); }, bytes, {}, false});
  }
  methods.push_back({"LoadToPagedKV, staged (copy + kernel)",
                     [&] {
                       gpu::PagedLoadOptions po;
                       po.mode = gpu::GatherMode::kStaged;
                       return gpu::LoadToPagedKV(pin, layout, cache, ids, stream, po);
                     },
                     [&] { return check_paged("LoadToPagedKV staged"); }, bytes, {}, false});
  methods.push_back({"GatherToPagedKV, device source (kernel alone)",
                     [&] {
                       gpu::TokenMajorSegment seg{dev.data(), n};
                       return gpu::GatherToPagedKV({&seg, 1}, layout, cache, ids, n, stream);
                     },
                     [&] { return check_paged("GatherToPagedKV"); }, bytes, {}, false});

  // Warm-up, then repetitions round-robin over the methods.
  for (Method& m : methods) {
    PTS_RETURN_IF_ERROR(m.run().WithContext(m.name));
    CUDA_TRY(cudaStreamSynchronize(stream));
  }
  // Poison: the last copy must have written everything it is checked on.
  CUDA_TRY(cudaMemset(dev.data(), 0xEE, bytes));
  for (int rep = 0; rep < o.reps; ++rep) {
    for (Method& m : methods) {
      if (m.name.rfind("GatherToPagedKV", 0) == 0) continue;  // needs the prefix in dev: run last
      auto t0 = Clock::now();
      PTS_RETURN_IF_ERROR(m.run().WithContext(m.name));
      CUDA_TRY(cudaStreamSynchronize(stream));
      m.seconds.push_back(SecondsSince(t0));
    }
  }
  // Checks: the device buffer holds what the last method before the gathers wrote.
  PTS_RETURN_IF_ERROR(check_dev("the last LoadToDevice"));
  for (Method& m : methods) {
    if (m.name.rfind("LoadToPagedKV", 0) == 0) {
      PTS_RETURN_IF_ERROR(poison_paged());
      PTS_RETURN_IF_ERROR(m.run());
      PTS_RETURN_IF_ERROR(m.check());
    }
  }
  for (Method& m : methods) {
    if (m.name.rfind("GatherToPagedKV", 0) != 0) continue;
    PTS_RETURN_IF_ERROR(poison_paged());
    for (int rep = 0; rep < o.reps; ++rep) {
      auto t0 = Clock::now();
      PTS_RETURN_IF_ERROR(m.run().WithContext(m.name));
      CUDA_TRY(cudaStreamSynchronize(stream));
      m.seconds.push_back(SecondsSince(t0));
    }
    PTS_RETURN_IF_ERROR(m.check());
  }
  for (Method& m : methods) {
    if (m.name.rfind("LoadToDevice", 0) == 0 || m.baseline) {
      PTS_RETURN_IF_ERROR(cudaMemset(dev.data(), 0xEE, bytes) == cudaSuccess ? Status::OK() : Internal("memset"));
      PTS_RETURN_IF_ERROR(m.run());
      PTS_RETURN_IF_ERROR(m.check());
    }
  }

  const double base = Summarize(methods[0].seconds).p50;
  Table t({"method", "median GB/s", "min GB/s", "max GB/s", "median ms", "vs pinned memcpy"});
  nlohmann::json jm = nlohmann::json::array();
  double load_ratio = 0, direct_gbps = 0, staged_gbps = 0, kernel_gbps = 0;
  for (const Method& m : methods) {
    Summary s = Summarize(m.seconds);
    const double ratio = base / s.p50;
    t.Row({m.name, Format("%.2f", GBps(m.bytes, s.p50)), Format("%.2f", GBps(m.bytes, s.max)),
           Format("%.2f", GBps(m.bytes, s.min)), Format("%.2f", 1e3 * s.p50), Format("%.2f", ratio)});
    jm.push_back({{"method", m.name},
                  {"median_gb_per_s", GBps(m.bytes, s.p50)},
                  {"min_gb_per_s", GBps(m.bytes, s.max)},
                  {"max_gb_per_s", GBps(m.bytes, s.min)},
                  {"median_seconds", s.p50},
                  {"ratio_vs_pinned_memcpy", ratio},
                  {"samples", m.seconds}});
    if (m.name.rfind("LoadToDevice, registered", 0) == 0) load_ratio = ratio;
    if (m.name.rfind("LoadToPagedKV, direct", 0) == 0) direct_gbps = GBps(m.bytes, s.p50);
    if (m.name.rfind("LoadToPagedKV, staged", 0) == 0) staged_gbps = GBps(m.bytes, s.p50);
    if (m.name.rfind("GatherToPagedKV", 0) == 0) kernel_gbps = GBps(m.bytes, s.p50);
  }
  std::printf("\n%s\n", t.ToString().c_str());
  std::printf("LoadToDevice (registered arena) / cudaMemcpy from pinned memory: %.3f (target >= 0.9)%s\n", load_ratio,
              registered ? "" : "  [arena NOT registered: no registered figure]");
  std::printf("gather into the paged layout: direct %.2f GB/s, staged %.2f GB/s, kernel alone (HBM) %.2f GB/s "
              "(bytes of KV moved per second)\n",
              direct_gbps, staged_gbps, kernel_gbps);
  std::printf("every destination checked byte for byte: OK\n");

  if (!o.json_file.empty() || o.json) {
    nlohmann::json j{{"bench", "bench_gpu_load"},
                     {"machine", MachineDescription()},
                     {"gpu", gpu_desc},
                     {"bytes", bytes},
                     {"tokens", n},
                     {"layout", layout.ToString()},
                     {"increments", o.increments},
                     {"extents", pin.extents().size()},
                     {"reps", o.reps},
                     {"arena_path", std::string(gpu::ArenaPathName(info.path))},
                     {"arena_detail", info.detail},
                     {"register_seconds", info.register_seconds},
                     {"methods", jm},
                     {"load_ratio", load_ratio},
                     {"target_ratio", 0.9},
                     {"gather_direct_gb_per_s", direct_gbps},
                     {"gather_staged_gb_per_s", staged_gbps},
                     {"gather_kernel_gb_per_s", kernel_gbps}};
    if (o.json) std::cout << j.dump(2) << std::endl;
    if (!o.json_file.empty()) {
      std::ofstream f(o.json_file);
      f << j.dump(2) << "\n";
      if (!f) return IOError("cannot write " + o.json_file);
    }
  }
  PTS_RETURN_IF_ERROR(pin.Release());
  PTS_RETURN_IF_ERROR(staging_pin.Release());
  cudaFreeHost(pinned_host);
  cudaStreamDestroy(stream);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_gpu_load: load of a DRAM-resident prefix into GPU memory vs cudaMemcpy from pinned memory"};
  app.add_option("--socket", o.socket, "socket of a running ptstored (default: start one)");
  app.add_option("--arena-size", o.arena_size, "arena of the ptstored started for this run (default: prefix + 512 MiB)");
  app.add_option("--ptstored", o.ptstored, "ptstored binary to start");
  app.add_option("--tokens", o.tokens, "prefix length in tokens (Mistral-7B: 128 KiB each)")->capture_default_str();
  app.add_option("--increments", o.increments, "increments the prefix is saved as")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--reps", o.reps, "timed repetitions per method")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--json-file", o.json_file, "also write the results as JSON to this file");
  app.add_flag("--json", o.json, "also print the results as JSON");
  app.add_flag("--quick", o.quick, "a small run (512 tokens = 64 MiB, 3 repetitions)");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.tokens = 512;
    o.reps = 3;
  }
  Status s = Run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "bench_gpu_load: %s\n", s.ToString().c_str());
    return s.code() == Code::kUnavailable ? 77 : 1;
  }
  return 0;
}
