// Arena registration and staging buffers of the GPU copy path
// (client/gpu_arena.h).
#include "client/gpu_arena.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "client/gpu_cuda.h"

namespace ptstore::gpu::detail {

GpuArena::GpuArena(const GpuOptions& options) : options_(options) {
  options_.staging_chunk_bytes = std::max<uint64_t>(options_.staging_chunk_bytes, 64 << 10);
}

GpuArena::~GpuArena() {
  // Errors ignored: at exit the CUDA runtime may already be gone, and
  // then so are its registrations.
  int current = -1;
  cudaGetDevice(&current);
  for (auto& [device, s] : staging_) {
    cudaSetDevice(device);
    for (int i = 0; i < 2; ++i) {
      if (s.event[i] != nullptr) {
        cudaEventSynchronize(s.event[i]);
        cudaEventDestroy(s.event[i]);
      }
      if (s.buffer[i] != nullptr) cudaFreeHost(s.buffer[i]);
    }
  }
  for (Reg& r : regs_) Unregister(r);
  if (current >= 0 && !staging_.empty()) cudaSetDevice(current);
  cudaGetLastError();
}

ArenaInfo GpuArena::Ensure(const std::shared_ptr<core::SharedMemory>& shm) {
  core::MutexLock lk(mu_);
  // Mappings that only we still hold are gone for the client: release them.
  std::erase_if(regs_, [&](Reg& r) {
    if (r.shm != shm && r.shm.use_count() == 1) {
      Unregister(r);
      return true;
    }
    return false;
  });
  for (const Reg& r : regs_) {
    if (r.shm == shm) return r.info;
  }
  Reg r{shm, Register(*shm)};
  regs_.push_back(r);
  return r.info;
}

Result<GpuArena::Staging*> GpuArena::StagingFor(int device) {
  Staging& s = staging_[device];
  if (s.bytes == 0) {
    for (int i = 0; i < 2; ++i) {
      PTS_CUDA(cudaHostAlloc(&s.buffer[i], options_.staging_chunk_bytes, cudaHostAllocPortable),
               "cudaHostAlloc(staging buffer of " + std::to_string(options_.staging_chunk_bytes) + " bytes)");
      PTS_CUDA(cudaEventCreateWithFlags(&s.event[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    s.bytes = options_.staging_chunk_bytes;
  }
  return &s;
}

ArenaInfo GpuArena::Register(core::SharedMemory& shm) {
  ArenaInfo info;
  info.arena_bytes = shm.size();
  if (!options_.register_arena) {
    info.path = ArenaPath::kStaging;
    info.detail = "registration not asked for (GpuOptions::register_arena = false): copies go through pinned "
                  "staging buffers";
    return info;
  }
  int device = 0;
  int read_only_ok = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&read_only_ok, cudaDevAttrHostRegisterReadOnlySupported, device);
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const std::string what = "the arena mapping (" + std::to_string(shm.size()) + " bytes at " + Hex(shm.data()) + ")";
  if (read_only_ok) {
    cudaError_t err = cudaHostRegister(shm.data(), shm.size(),
                                       cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterReadOnly);
    if (err == cudaSuccess) {
      info.path = ArenaPath::kRegisteredReadOnly;
      info.register_seconds = seconds();
      info.detail = "cudaHostRegister(Portable | Mapped | ReadOnly) of " + what;
      return info;
    }
    why = "cudaHostRegister(ReadOnly): " + std::string(cudaGetErrorString(err));
    cudaGetLastError();
  } else {
    why = "the driver cannot register read-only memory (cudaDevAttrHostRegisterReadOnlySupported = 0)";
  }
  cudaError_t err = cudaHostRegister(shm.data(), shm.size(), cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err == cudaSuccess) {
    info.path = ArenaPath::kRegistered;
    info.register_seconds = seconds();
    info.detail = "cudaHostRegister(Portable | Mapped) of " + what + " (" + why + ")";
    return info;
  }
  cudaGetLastError();
  info.path = ArenaPath::kStaging;
  info.register_seconds = seconds();
  info.detail = "cudaHostRegister of " + what + " failed (" + why +
                "; cudaHostRegister(Portable | Mapped): " + cudaGetErrorString(err) +
                "): copies go through pinned staging buffers";
  return info;
}

void GpuArena::Unregister(Reg& r) {
  if (r.info.path == ArenaPath::kRegisteredReadOnly || r.info.path == ArenaPath::kRegistered) {
    cudaHostUnregister(r.shm->data());
    cudaGetLastError();
  }
}

}  // namespace ptstore::gpu::detail
