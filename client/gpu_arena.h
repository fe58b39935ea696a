// One client's arena as CUDA sees it (include/ptstore/gpu.h, docs/gpu.md):
// the cudaHostRegister registrations of its mappings (one, or more after
// the server restarted with a new arena while old pins lived) and the
// pinned staging buffers of the fallback path, one pair per device. One
// GpuArena per client, kept in its ClientCore; destroying it unregisters
// and frees everything (errors ignored: at exit CUDA may be gone).
//
// Thread safety: Ensure from any thread; a Staging only under staging_mu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/shm.h"
#include "ptstore/gpu.h"
#include "ptstore/status.h"

namespace ptstore::gpu::detail {

class GpuArena {
 public:
  explicit GpuArena(const GpuOptions& options);
  GpuArena(const GpuArena&) = delete;
  GpuArena& operator=(const GpuArena&) = delete;
  ~GpuArena();

  const GpuOptions& options() const { return options_; }

  // The registration of `shm`, made now if it is new (how it went, and why,
  // is in the ArenaInfo: a failed registration means the staging path).
  // Mappings only this holds any more are released.
  ArenaInfo Ensure(const std::shared_ptr<core::SharedMemory>& shm) EXCLUDES(mu_);

  // A pinned staging buffer pair for `device`, locked for the caller.
  struct Staging {
    void* buffer[2] = {nullptr, nullptr};
    cudaEvent_t event[2] = {nullptr, nullptr};
    bool in_flight[2] = {false, false};
    uint64_t bytes = 0;
  };
  core::Mutex staging_mu;  // held while a copy uses a Staging
  // Allocates the pair on first use. REQUIRES: `device` current.
  Result<Staging*> StagingFor(int device) REQUIRES(staging_mu);

 private:
  struct Reg {
    std::shared_ptr<core::SharedMemory> shm;
    ArenaInfo info;
  };

  ArenaInfo Register(core::SharedMemory& shm);
  static void Unregister(Reg& r);

  core::Mutex mu_;
  GpuOptions options_;
  std::vector<Reg> regs_ GUARDED_BY(mu_);
  std::map<int, Staging> staging_ GUARDED_BY(staging_mu);
};

}  // namespace ptstore::gpu::detail
