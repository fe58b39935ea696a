// The GPU copy path of libptstore (library ptstore_gpu, built when CMake finds
// a CUDA toolkit; docs/gpu.md). A pinned prefix goes from the client's
// read-only mapping of the server's arena straight into GPU memory:
//
//   auto pin = client->Pin("mistral-7b", tokens).value();
//   ptstore::gpu::LoadToDevice(pin, d_buf, pin.bytes(), stream);           // token-major bytes
//   ptstore::gpu::LoadToPagedKV(pin, layout, cache, block_ids, stream);    // vLLM's paged layout
//   cudaStreamSynchronize(stream);   // only now may the pin be released
//   pin.Release();
//
// The arena mapping is registered with CUDA (cudaHostRegister, read-only
// where the driver supports it) once per client, lazily, or ahead with
// PrepareArena. Where registration is refused, copies go through pinned
// staging buffers instead (chunked, double-buffered) and ArenaInfo says so.
//
// Asynchrony: every copy is issued on `stream` and completes there; the
// calls return once it is issued. The pin must stay pinned (and the Client
// alive) until the stream has finished the copy: the GPU reads the arena.
//
// Devices: a call runs on the device that holds its destination (found from
// the pointer); `stream` must belong to that device (or be 0, its default
// stream). This header does not need CUDA's headers: Stream is cudaStream_t.
//
// Errors: a Status whose message names the CUDA call and cudaGetErrorString.
// InvalidArgument for bad pointers and sizes, Unavailable when no CUDA device
// or driver is usable, ResourceExhausted when GPU or pinned memory runs out.
//
// Thread safety: the functions may be called from many threads; calls on
// one client's arena that fall back to staging take turns.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/client.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"

struct CUstream_st;

namespace ptstore::gpu {

// cudaStream_t (the same type: `typedef struct CUstream_st* cudaStream_t`).
using Stream = CUstream_st*;

// Number of usable CUDA devices (>= 1), or Unavailable with CUDA's reason
// ("no CUDA-capable device is detected", "CUDA driver version is
// insufficient for CUDA runtime version", ...).
Result<int> DeviceCount();

// cudaStreamSynchronize(stream), as a Status (for callers without CUDA's headers).
Status SynchronizeStream(Stream stream);

// How a client's arena reaches the GPU.
enum class ArenaPath : uint8_t {
  kNone = 0,            // not set up yet: no GPU call on this client so far
  kRegisteredReadOnly,  // cudaHostRegister(Portable | Mapped | ReadOnly): DMA and zero-copy kernel reads
  kRegistered,          // cudaHostRegister(Portable | Mapped)
  kStaging,             // not registered: host memcpy into pinned staging buffers, then DMA
};
// "registered-read-only", "registered", "staging", "none".
std::string_view ArenaPathName(ArenaPath path);

struct ArenaInfo {
  ArenaPath path = ArenaPath::kNone;
  // Why this path: the flags used, or the CUDA errors that refused
  // registration ("cudaHostRegister(read-only): operation not supported").
  std::string detail;
  uint64_t arena_bytes = 0;
  double register_seconds = 0;  // time cudaHostRegister took
};

struct GpuOptions {
  // Try cudaHostRegister of the arena mapping; false goes straight to staging.
  bool register_arena = true;
  // Size of each of the two pinned staging buffers of the staging path.
  uint64_t staging_chunk_bytes = 8ull << 20;
};

// Sets up the client's arena for the GPU now (registration can take a while
// for a large arena: about a second per tens of GiB) instead of on its first
// GPU copy. The first call (or copy) fixes the path and its options; later
// calls return what was set up. PermissionDenied for a client without the
// arena mapping (Client::mapped() false): such clients load by copy into host
// memory (Client::Load) and copy from there.
Result<ArenaInfo> PrepareArena(const Client& client, const GpuOptions& options = {});
// What the arena of `pin`'s client uses (sets it up with default options if
// nothing has yet).
Result<ArenaInfo> PrepareArena(const PinnedPrefix& pin);

// Copies the first `bytes` bytes of the pinned prefix (token-major, as
// PinnedPrefix::CopyTo) to device memory at `device_dst`: one
// cudaMemcpyAsync per run of adjacent extents, on `stream`. bytes may be 0.
// InvalidArgument: bytes > pin.bytes(), a released pin, a null or non-device
// destination (ordinary or registered host memory is refused: use CopyTo).
Status LoadToDevice(const PinnedPrefix& pin, void* device_dst, uint64_t bytes, Stream stream);

// vLLM's paged KV cache: one tensor per attention layer, addressed as
// pages[kv][block][slot][head][0..head_dim) with byte strides (head_dim
// contiguous). The factories fill the strides of vLLM's dense layouts (a
// grouped layout has no such shape: its strides come out 0 and every copy
// refuses it).
struct PagedKVCache {
  // Device pointers of layers first_layer .. first_layer + layers.size() - 1
  // of the model (of the namespace's layout), in layer order.
  std::vector<void*> layers;
  uint32_t first_layer = 0;
  uint64_t num_blocks = 0;   // blocks in each layer's tensor (block ids are checked against it)
  uint32_t block_size = 0;   // tokens per block (vLLM's block_size)
  int64_t kv_stride = 0;     // bytes between K and V
  int64_t block_stride = 0;  // bytes between blocks
  int64_t slot_stride = 0;   // bytes between the tokens of a block
  int64_t head_stride = 0;   // bytes between KV heads

  // FlashAttention: [2, num_blocks, block_size, kv_heads, head_dim], contiguous.
  static PagedKVCache FlashAttention(std::vector<void*> layers, const Layout& layout, uint64_t num_blocks,
                                     uint32_t block_size, uint32_t first_layer = 0);
  // FlashInfer: [num_blocks, 2, block_size, kv_heads, head_dim], contiguous.
  static PagedKVCache FlashInfer(std::vector<void*> layers, const Layout& layout, uint64_t num_blocks,
                                 uint32_t block_size, uint32_t first_layer = 0);
};

enum class GatherMode : uint8_t {
  kAuto = 0,  // kDirect when the arena is registered, else kStaged
  kDirect,    // the kernel reads the registered arena over the bus (zero-copy), one launch
  kStaged,    // cudaMemcpyAsync into a device buffer, then the kernel (one launch per chunk)
};
std::string_view GatherModeName(GatherMode mode);  // "auto", "direct", "staged"

struct PagedLoadOptions {
  static constexpr uint64_t kToEnd = std::numeric_limits<uint64_t>::max();
  // Load prefix tokens [start_token, start_token + tokens) (kToEnd: to the
  // end of the pin). Token start_token + i goes to block block_ids[i /
  // block_size], slot i % block_size; a partial last block leaves its other
  // slots untouched.
  uint64_t start_token = 0;
  uint64_t tokens = kToEnd;
  GatherMode mode = GatherMode::kAuto;
  // kStaged: device memory used at once (the load is cut into chunks of at
  // most this many bytes of whole tokens).
  uint64_t staging_bytes = 256ull << 20;
};

// Writes the pinned prefix's token-major KV (layout: the namespace's) into
// the paged cache `dst`, every layer of dst in one kernel launch (kDirect).
// block_ids: host array, at least ceil(tokens / block_size) ids, each in
// [0, num_blocks). InvalidArgument for sizes that do not fit, bad ids, null
// or non-device layer pointers, a layout that does not match the pin, and a
// grouped layout (the paged copy knows dense layouts only: a hybrid
// model's groups are copied by their readers, e.g. with LoadToDevice).
Status LoadToPagedKV(const PinnedPrefix& pin, const Layout& layout, const PagedKVCache& dst,
                     std::span<const int32_t> block_ids, Stream stream, const PagedLoadOptions& options = {});

// The gather kernel on its own, for token-major bytes the GPU can already
// read: device memory, or host memory registered with cudaHostRegister /
// allocated with cudaHostAlloc (mapped). The source is the concatenation of
// `segments` (whole tokens each); `tokens` of them are written as above.
struct TokenMajorSegment {
  const void* data = nullptr;
  uint64_t tokens = 0;
};
// InvalidArgument for a grouped layout, as LoadToPagedKV.
Status GatherToPagedKV(std::span<const TokenMajorSegment> segments, const Layout& layout, const PagedKVCache& dst,
                       std::span<const int32_t> block_ids, uint64_t tokens, Stream stream);

}  // namespace ptstore::gpu
