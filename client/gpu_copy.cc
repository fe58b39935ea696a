// The GPU copy path (include/ptstore/gpu.h): batched cudaMemcpyAsync of
// pinned extents out of the client's arena (registered with CUDA once,
// client/gpu_arena.h), the staging fallback, and the host side of the
// gather kernel (gpu_kernels.cu). CUDA plumbing: client/gpu_cuda.h.
#include "ptstore/gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "client/connection.h"
#include "client/gpu_arena.h"
#include "client/gpu_cuda.h"
#include "client/gpu_kernels.h"
#include "client/gpu_plan.h"
#include "core/mutex.h"
#include "core/shm.h"

namespace ptstore {

namespace client {

// libptstore's access to what the GPU path needs of a pin and a client.
class Internals {
 public:
  static std::shared_ptr<ClientCore> Core(const PinnedPrefix& p) { return p.core_; }
  static std::shared_ptr<core::SharedMemory> Arena(const PinnedPrefix& p) {
    return p.conn_ ? p.conn_->arena() : nullptr;
  }
  static std::shared_ptr<ClientCore> Core(const Client& c) { return c.core_; }
};

}  // namespace client

namespace gpu {

using client::Internals;
using detail::Classify;
using detail::CudaStatus;
using detail::DestinationDevice;
using detail::DeviceGuard;
using detail::GpuArena;
using detail::Hex;
using detail::Pointer;
using detail::RequireDevice;

namespace {

std::shared_ptr<GpuArena> StateOf(client::ClientCore& core, const GpuOptions& options) {
  return std::static_pointer_cast<GpuArena>(
      core.GpuState([&] { return std::static_pointer_cast<void>(std::make_shared<GpuArena>(options)); }));
}

// What a copy out of one pin's arena needs.
struct ArenaCtx {
  std::shared_ptr<GpuArena> state;
  std::shared_ptr<core::SharedMemory> shm;
  ArenaInfo info;
  bool registered() const {
    return info.path == ArenaPath::kRegisteredReadOnly || info.path == ArenaPath::kRegistered;
  }
};

// REQUIRES: a CUDA device is current.
Result<ArenaCtx> ContextOf(const PinnedPrefix& pin) {
  std::shared_ptr<client::ClientCore> core = Internals::Core(pin);
  std::shared_ptr<core::SharedMemory> shm = Internals::Arena(pin);
  if (!core || !shm) return InvalidArgument("the PinnedPrefix holds no arena mapping (empty or moved from)");
  ArenaCtx ctx;
  ctx.state = StateOf(*core, GpuOptions{});
  ctx.shm = std::move(shm);
  ctx.info = ctx.state->Ensure(ctx.shm);
  return ctx;
}

// ------------------------------------------------------------- copies

using detail::ArenaRuns;
using Run = detail::ArenaRun;

// Copies prefix bytes [begin, begin + bytes) to device memory `dst` on
// `stream`. REQUIRES: the stream's device is current.
Status CopyRange(const ArenaCtx& ctx, const std::vector<Extent>& extents, uint64_t begin, uint64_t bytes,
                 uint8_t* dst, Stream stream, int device) {
  const std::vector<Run> runs = ArenaRuns(extents, begin, begin + bytes);
  const uint8_t* arena = ctx.shm->data();
  if (ctx.registered()) {
    for (const Run& r : runs) {
      PTS_CUDA(cudaMemcpyAsync(dst, arena + r.arena_offset, r.length, cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync(" + std::to_string(r.length) + " bytes from the registered arena)");
      dst += r.length;
    }
    return Status::OK();
  }
  // Staging: fill one pinned buffer while the other one's DMA runs.
  core::MutexLock lk(ctx.state->staging_mu);
  PTS_ASSIGN_OR_RETURN(GpuArena::Staging * s, ctx.state->StagingFor(device));
  int which = 0;
  size_t ri = 0;
  uint64_t r_done = 0;
  while (ri < runs.size()) {
    if (s->in_flight[which]) {
      PTS_CUDA(cudaEventSynchronize(s->event[which]), "cudaEventSynchronize(staging buffer)");
      s->in_flight[which] = false;
    }
    auto* buf = static_cast<uint8_t*>(s->buffer[which]);
    uint64_t filled = 0;
    while (filled < s->bytes && ri < runs.size()) {
      const uint64_t n = std::min(s->bytes - filled, runs[ri].length - r_done);
      std::memcpy(buf + filled, arena + runs[ri].arena_offset + r_done, n);
      filled += n;
      r_done += n;
      if (r_done == runs[ri].length) {
        ++ri;
        r_done = 0;
      }
    }
    PTS_CUDA(cudaMemcpyAsync(dst, buf, filled, cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync(" + std::to_string(filled) + " bytes from a pinned staging buffer)");
    PTS_CUDA(cudaEventRecord(s->event[which], stream), "cudaEventRecord");
    s->in_flight[which] = true;
    dst += filled;
    which ^= 1;
  }
  return Status::OK();
}

// Device memory for the length of a stream's work: stream-ordered
// (cudaMallocAsync / cudaFreeAsync) where the device has memory pools, else
// cudaMalloc, and a synchronisation of the stream before cudaFree.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() { Free().IgnoreError(); }

  Status Alloc(uint64_t bytes, Stream stream, int device) {
    stream_ = stream;
    int pools = 0;
    cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
    async_ = pools != 0;
    if (async_) {
      PTS_CUDA(cudaMallocAsync(&p_, bytes, stream), "cudaMallocAsync(" + std::to_string(bytes) + " bytes)");
    } else {
      PTS_CUDA(cudaMalloc(&p_, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
    }
    return Status::OK();
  }
  Status Free() {
    if (p_ == nullptr) return Status::OK();
    void* p = std::exchange(p_, nullptr);
    if (async_) {
      PTS_CUDA(cudaFreeAsync(p, stream_), "cudaFreeAsync");
    } else {
      cudaError_t err = cudaStreamSynchronize(stream_);
      cudaFree(p);
      if (err != cudaSuccess) return CudaStatus(err, "cudaStreamSynchronize");
    }
    return Status::OK();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
  Stream stream_ = nullptr;
  bool async_ = false;
};

// ------------------------------------------------------------- gather

// Checks the destination and the block ids for `dst_tokens` tokens; returns
// the destination's device.
Result<int> CheckPaged(const Layout& layout, const PagedKVCache& dst, std::span<const int32_t> block_ids,
                       uint64_t dst_tokens) {
  PTS_RETURN_IF_ERROR(detail::CheckPagedShape(layout, dst, block_ids, dst_tokens));
  int device = -1;
  for (size_t l = 0; l < dst.layers.size(); ++l) {
    const std::string what = "layer " + std::to_string(dst.first_layer + l) + " of the paged KV cache";
    PTS_ASSIGN_OR_RETURN(int d, DestinationDevice(dst.layers[l], what));
    if (device >= 0 && d != device) {
      return InvalidArgument(what + " is on device " + std::to_string(d) + ", layer " +
                             std::to_string(dst.first_layer) + " on device " + std::to_string(device));
    }
    device = d;
  }
  return device;
}

uint32_t MaxBlocks(int device) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) sms = 108;
  return static_cast<uint32_t>(sms) * 8;  // 2048 threads per multiprocessor
}

// One launch of the kernel over `tokens` tokens of `segments` (device
// addresses on the current device), written from destination token
// `dst_token_base` on. REQUIRES: CheckPaged passed for the whole load.
Status Gather(const std::vector<TokenMajorSegment>& segments, const Layout& layout, const PagedKVCache& dst,
              std::span<const int32_t> block_ids, uint64_t tokens, uint64_t dst_token_base, Stream stream,
              int device) {
  if (tokens == 0) return Status::OK();
  detail::GatherPlan plan = detail::PlanGather(segments, layout, dst, block_ids, tokens, dst_token_base);
  const uint64_t table_bytes = plan.table.size() * sizeof(uint64_t);
  StreamBuffer dev;
  PTS_RETURN_IF_ERROR(dev.Alloc(table_bytes, stream, device));
  // From pageable memory: CUDA has taken the bytes when the call returns.
  PTS_CUDA(cudaMemcpyAsync(dev.data(), plan.table.data(), table_bytes, cudaMemcpyHostToDevice, stream),
           "cudaMemcpyAsync(gather table)");
  plan.Bind(reinterpret_cast<const uint64_t*>(dev.data()));
  PTS_CUDA(static_cast<cudaError_t>(detail::LaunchGather(plan.params, MaxBlocks(device), stream)),
           "gather kernel launch");
  return dev.Free();
}

// Device addresses of the arena's prefix tokens [start, start + n), one
// segment per run of adjacent extents.
Result<std::vector<TokenMajorSegment>> ArenaSegments(const ArenaCtx& ctx, const std::vector<Extent>& extents,
                                                     uint64_t token_bytes, uint64_t start, uint64_t n) {
  void* base = nullptr;
  PTS_CUDA(cudaHostGetDevicePointer(&base, ctx.shm->data(), 0), "cudaHostGetDevicePointer(arena)");
  std::vector<TokenMajorSegment> out;
  for (const Run& r : ArenaRuns(extents, start * token_bytes, (start + n) * token_bytes)) {
    if (r.length % token_bytes != 0) {
      return Internal("an extent run of " + std::to_string(r.length) + " bytes is not whole tokens of " +
                      std::to_string(token_bytes) + " bytes");
    }
    out.push_back(TokenMajorSegment{static_cast<const uint8_t*>(base) + r.arena_offset, r.length / token_bytes});
  }
  return out;
}

}  // namespace

// ------------------------------------------------------------ public API

Result<int> DeviceCount() {
  PTS_RETURN_IF_ERROR(RequireDevice());
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}

Status SynchronizeStream(Stream stream) {
  PTS_RETURN_IF_ERROR(RequireDevice());
  PTS_CUDA(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return Status::OK();
}

Result<ArenaInfo> PrepareArena(const Client& client, const GpuOptions& options) {
  if (!client.mapped()) {
    return PermissionDenied("this client has no arena mapping (not trusted with every namespace): GPU loads need "
                            "pins; load into host memory with Client::Load instead");
  }
  PTS_RETURN_IF_ERROR(RequireDevice());
  std::shared_ptr<client::ClientCore> core = Internals::Core(client);
  std::shared_ptr<core::SharedMemory> shm = core->arena();
  if (!shm) return Internal("a mapped client without an arena mapping");
  return StateOf(*core, options)->Ensure(shm);
}

Result<ArenaInfo> PrepareArena(const PinnedPrefix& pin) {
  PTS_RETURN_IF_ERROR(RequireDevice());
  PTS_ASSIGN_OR_RETURN(ArenaCtx ctx, ContextOf(pin));
  return ctx.info;
}

Status LoadToDevice(const PinnedPrefix& pin, void* device_dst, uint64_t bytes, Stream stream) {
  if (bytes > pin.bytes()) {
    return InvalidArgument("LoadToDevice: cannot copy " + std::to_string(bytes) + " bytes out of a pinned prefix of " +
                           std::to_string(pin.bytes()));
  }
  if (bytes == 0) return Status::OK();
  if (!pin.pinned()) return InvalidArgument("LoadToDevice: the prefix is no longer pinned");
  if (device_dst == nullptr) return InvalidArgument("LoadToDevice: device_dst is null");
  PTS_RETURN_IF_ERROR(RequireDevice());
  PTS_ASSIGN_OR_RETURN(int device, DestinationDevice(device_dst, "LoadToDevice: device_dst"));
  DeviceGuard guard;
  PTS_RETURN_IF_ERROR(guard.Set(device));
  PTS_ASSIGN_OR_RETURN(ArenaCtx ctx, ContextOf(pin));
  return CopyRange(ctx, pin.extents(), 0, bytes, static_cast<uint8_t*>(device_dst), stream, device);
}

Status LoadToPagedKV(const PinnedPrefix& pin, const Layout& layout, const PagedKVCache& dst,
                     std::span<const int32_t> block_ids, Stream stream, const PagedLoadOptions& options) {
  PTS_RETURN_IF_ERROR(layout.Validate());
  PTS_RETURN_IF_ERROR(detail::RequireDenseLayout(layout, "LoadToPagedKV"));
  const uint64_t bpt = layout.BytesPerToken();
  if (pin.bytes() != pin.tokens() * bpt) {
    return InvalidArgument("LoadToPagedKV: the pinned prefix holds " + std::to_string(pin.bytes()) + " bytes for " +
                           std::to_string(pin.tokens()) + " tokens, the layout (" + layout.ToString() + ") " +
                           std::to_string(bpt) + " bytes per token: not this namespace's layout?");
  }
  if (options.start_token > pin.tokens()) {
    return InvalidArgument("LoadToPagedKV: start_token " + std::to_string(options.start_token) +
                           " is past the pinned prefix's " + std::to_string(pin.tokens()) + " tokens");
  }
  const uint64_t left = pin.tokens() - options.start_token;
  const uint64_t n = options.tokens == PagedLoadOptions::kToEnd ? left : options.tokens;
  if (n > left) {
    return InvalidArgument("LoadToPagedKV: " + std::to_string(n) + " tokens from token " +
                           std::to_string(options.start_token) + " run past the pinned prefix's " +
                           std::to_string(pin.tokens()) + " tokens");
  }
  if (n == 0) return Status::OK();
  if (!pin.pinned()) return InvalidArgument("LoadToPagedKV: the prefix is no longer pinned");
  PTS_RETURN_IF_ERROR(RequireDevice());
  PTS_ASSIGN_OR_RETURN(int device, CheckPaged(layout, dst, block_ids, n));
  DeviceGuard guard;
  PTS_RETURN_IF_ERROR(guard.Set(device));
  PTS_ASSIGN_OR_RETURN(ArenaCtx ctx, ContextOf(pin));

  GatherMode mode = options.mode;
  if (mode == GatherMode::kAuto) mode = ctx.registered() ? GatherMode::kDirect : GatherMode::kStaged;
  if (mode == GatherMode::kDirect) {
    if (!ctx.registered()) {
      return Unavailable("LoadToPagedKV: a direct gather reads the arena registered with CUDA, and this client's "
                         "is not (" + ctx.info.detail + "): use GatherMode::kStaged or kAuto");
    }
    PTS_ASSIGN_OR_RETURN(std::vector<TokenMajorSegment> segs,
                         ArenaSegments(ctx, pin.extents(), bpt, options.start_token, n));
    return Gather(segs, layout, dst, block_ids, n, 0, stream, device);
  }
  // Staged: whole tokens through one device buffer, a copy and a launch per chunk.
  const uint64_t chunk = std::clamp<uint64_t>(options.staging_bytes / bpt, 1, n);
  StreamBuffer scratch;
  PTS_RETURN_IF_ERROR(scratch.Alloc(chunk * bpt, stream, device));
  for (uint64_t a = 0; a < n; a += chunk) {
    const uint64_t m = std::min(chunk, n - a);
    PTS_RETURN_IF_ERROR(CopyRange(ctx, pin.extents(), (options.start_token + a) * bpt, m * bpt, scratch.data(),
                                  stream, device));
    PTS_RETURN_IF_ERROR(Gather({TokenMajorSegment{scratch.data(), m}}, layout, dst, block_ids, m, a, stream, device));
  }
  return scratch.Free();
}

Status GatherToPagedKV(std::span<const TokenMajorSegment> segments, const Layout& layout, const PagedKVCache& dst,
                       std::span<const int32_t> block_ids, uint64_t tokens, Stream stream) {
  PTS_RETURN_IF_ERROR(layout.Validate());
  PTS_RETURN_IF_ERROR(detail::RequireDenseLayout(layout, "GatherToPagedKV"));
  if (tokens == 0) return Status::OK();
  uint64_t have = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].tokens > 0 && segments[i].data == nullptr) {
      return InvalidArgument("GatherToPagedKV: segment " + std::to_string(i) + " is a null pointer");
    }
    have += segments[i].tokens;
  }
  if (have < tokens) {
    return InvalidArgument("GatherToPagedKV: the segments hold " + std::to_string(have) + " tokens, " +
                           std::to_string(tokens) + " asked for");
  }
  PTS_RETURN_IF_ERROR(RequireDevice());
  PTS_ASSIGN_OR_RETURN(int device, CheckPaged(layout, dst, block_ids, tokens));
  DeviceGuard guard;
  PTS_RETURN_IF_ERROR(guard.Set(device));
  std::vector<TokenMajorSegment> segs;
  uint64_t covered = 0;
  for (size_t i = 0; i < segments.size() && covered < tokens; ++i) {
    if (segments[i].tokens == 0) continue;
    const std::string what = "GatherToPagedKV: segment " + std::to_string(i);
    PTS_ASSIGN_OR_RETURN(Pointer ptr, Classify(segments[i].data, what));
    switch (ptr.type) {
      case cudaMemoryTypeDevice:
      case cudaMemoryTypeManaged:
        if (ptr.type == cudaMemoryTypeDevice && ptr.device != device) {
          return InvalidArgument(what + " is on device " + std::to_string(ptr.device) + ", the cache on device " +
                                 std::to_string(device));
        }
        segs.push_back(segments[i]);
        break;
      case cudaMemoryTypeHost: {
        // Registered or cudaHostAlloc'd host memory: read it through its
        // device address (the same one on most systems).
        void* d = nullptr;
        PTS_CUDA(cudaHostGetDevicePointer(&d, const_cast<void*>(segments[i].data), 0),
                 "cudaHostGetDevicePointer(" + what + ")");
        segs.push_back(TokenMajorSegment{d, segments[i].tokens});
        break;
      }
      default:
        return InvalidArgument(what + " (" + Hex(segments[i].data) +
                               ") is host memory CUDA cannot read: register it (cudaHostRegister) or copy it to the "
                               "device");
    }
    covered += segments[i].tokens;
  }
  return Gather(segs, layout, dst, block_ids, tokens, 0, stream, device);
}

}  // namespace gpu
}  // namespace ptstore
