// The CUDA runtime as the GPU copy path (include/ptstore/gpu.h) uses it:
// CUDA errors as Status, a scoped current device, and what kind of memory a
// pointer is. Only built with CUDA (client/CMakeLists.txt: ptstore_gpu).
//
// Thread safety: functions, any thread; a DeviceGuard belongs to its scope
// (the current device is per thread).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "ptstore/status.h"

namespace ptstore::gpu::detail {

// "0x7f..." for messages.
std::string Hex(const void* p);

// A CUDA error as a Status: "what: message (cudaErrorName)". Clears the
// runtime's sticky last-error slot for non-sticky errors.
Status CudaStatus(cudaError_t err, std::string_view what);

// Returns CudaStatus(err, what) from the enclosing function when `call`
// fails.
#define PTS_CUDA(call, what)                                                 \
  do {                                                                       \
    cudaError_t pts_err_ = (call);                                           \
    if (pts_err_ != cudaSuccess) {                                           \
      return ::ptstore::gpu::detail::CudaStatus(pts_err_, what);             \
    }                                                                        \
  } while (0)

// Makes `device` current for the scope (restores the previous one).
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();
  Status Set(int device);

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// What CUDA knows of an address.
struct Pointer {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = -1;
  const void* device_pointer = nullptr;  // the address a kernel on `device` uses
};

// `what` names the pointer in the error.
Result<Pointer> Classify(const void* p, std::string_view what);

// The device of a destination: device (or managed) memory only;
// InvalidArgument for host memory.
Result<int> DestinationDevice(const void* p, std::string_view what);

// OK when the process sees a CUDA device; Unavailable, saying why, if not.
Status RequireDevice();

}  // namespace ptstore::gpu::detail
