// The GPU copy path for Python (include/ptstore/gpu.h): the gpu_* functions
// of _ptstore, compiled only in builds with CUDA. python/ptstore/gpu.py is
// their public face: it takes torch CUDA tensors (or any object with
// __cuda_array_interface__) and passes device addresses, sizes, strides and
// stream handles (ints) here. Every call releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ptstore/gpu.h"
#include "python/src/bindings.h"

namespace ptstore::python {

namespace {

gpu::Stream StreamOf(uint64_t handle) { return reinterpret_cast<gpu::Stream>(static_cast<uintptr_t>(handle)); }
void* Addr(uint64_t address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }

py::dict InfoDict(const gpu::ArenaInfo& info) {
  py::dict d;
  d["path"] = std::string(gpu::ArenaPathName(info.path));
  d["detail"] = info.detail;
  d["arena_bytes"] = info.arena_bytes;
  d["register_seconds"] = info.register_seconds;
  return d;
}

gpu::GatherMode ModeOf(const std::string& mode) {
  if (mode == "auto") return gpu::GatherMode::kAuto;
  if (mode == "direct") return gpu::GatherMode::kDirect;
  if (mode == "staged") return gpu::GatherMode::kStaged;
  throw StatusError(InvalidArgument("mode must be 'auto', 'direct' or 'staged', got '" + mode + "'"));
}

using BlockIds = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

}  // namespace

void BindGpu(py::module_& m) {
  using namespace pybind11::literals;

  m.def(
      "gpu_device_count",
      [] { return Unwrap(NoGil([] { return gpu::DeviceCount(); })); },
      "Usable CUDA devices; raises Unavailable with CUDA's reason when there is none.");

  m.def(
      "gpu_prepare_arena",
      [](const py::object& client, bool register_arena, uint64_t staging_chunk_bytes) {
        std::shared_ptr<Client> c = ClientOf(client);
        gpu::GpuOptions o;
        o.register_arena = register_arena;
        o.staging_chunk_bytes = staging_chunk_bytes;
        return InfoDict(Unwrap(NoGil([&] { return gpu::PrepareArena(*c, o); })));
      },
      "client"_a, "register_arena"_a = true, "staging_chunk_bytes"_a = 8ull << 20,
      "Registers the client's arena mapping with CUDA (else the first GPU load does). Returns {path, detail, "
      "arena_bytes, register_seconds}; path is 'registered-read-only', 'registered' or 'staging'.");

  m.def(
      "gpu_arena_info",
      [](const py::object& pin) {
        gpu::ArenaInfo info;
        ThrowIfError(WithPin(pin, [&](const PinnedPrefix& p) {
          PTS_ASSIGN_OR_RETURN(info, gpu::PrepareArena(p));
          return Status::OK();
        }));
        return InfoDict(info);
      },
      "pin"_a, "How the arena of the pin's client reaches the GPU (sets it up if nothing has yet).");

  m.def(
      "gpu_load_to_device",
      [](const py::object& pin, uint64_t address, uint64_t bytes, uint64_t stream) {
        ThrowIfError(
            WithPin(pin, [&](const PinnedPrefix& p) { return gpu::LoadToDevice(p, Addr(address), bytes, StreamOf(stream)); }));
      },
      "pin"_a, "address"_a, "bytes"_a, "stream"_a = 0,
      "Copies the first `bytes` bytes of the pinned prefix to device memory at `address`, on CUDA stream `stream` "
      "(a cudaStream_t as an int; 0: the default stream). Returns once issued.");

  m.def(
      "gpu_load_to_paged",
      [](const py::object& pin, const Layout& layout, const std::vector<uint64_t>& layers, uint32_t first_layer,
         uint64_t num_blocks, uint32_t block_size, int64_t kv_stride, int64_t block_stride, int64_t slot_stride,
         int64_t head_stride, const BlockIds& block_ids, uint64_t stream, uint64_t start_token, int64_t tokens,
         const std::string& mode, uint64_t staging_bytes) {
        if (block_ids.ndim() != 1) throw StatusError(InvalidArgument("block_ids must be 1-D"));
        gpu::PagedKVCache c;
        for (uint64_t a : layers) c.layers.push_back(Addr(a));
        c.first_layer = first_layer;
        c.num_blocks = num_blocks;
        c.block_size = block_size;
        c.kv_stride = kv_stride;
        c.block_stride = block_stride;
        c.slot_stride = slot_stride;
        c.head_stride = head_stride;
        gpu::PagedLoadOptions o;
        o.start_token = start_token;
        o.tokens = tokens < 0 ? gpu::PagedLoadOptions::kToEnd : static_cast<uint64_t>(tokens);
        o.mode = ModeOf(mode);
        o.staging_bytes = staging_bytes;
        std::span<const int32_t> ids(block_ids.data(), static_cast<size_t>(block_ids.size()));
        ThrowIfError(WithPin(pin, [&](const PinnedPrefix& p) {
          return gpu::LoadToPagedKV(p, layout, c, ids, StreamOf(stream), o);
        }));
      },
      "pin"_a, "layout"_a, "layers"_a, "first_layer"_a, "num_blocks"_a, "block_size"_a, "kv_stride"_a,
      "block_stride"_a, "slot_stride"_a, "head_stride"_a, "block_ids"_a, "stream"_a = 0, "start_token"_a = 0,
      "tokens"_a = -1, "mode"_a = "auto", "staging_bytes"_a = 256ull << 20,
      "Writes the pinned prefix into vLLM's paged KV cache (per-layer device addresses, byte strides of the kv, "
      "block, slot and head dimensions): token start_token + i to block block_ids[i // block_size], slot "
      "i % block_size. One kernel launch for every layer (mode 'direct'). Returns once issued.");

  m.def(
      "gpu_stream_synchronize",
      [](uint64_t stream) {
        ThrowIfError(NoGil([&] { return gpu::SynchronizeStream(StreamOf(stream)); }));
      },
      "stream"_a = 0, "Waits for CUDA stream `stream` (an int; 0: the default stream).");
}

}  // namespace ptstore::python
