// CUDA runtime plumbing of the GPU copy path (client/gpu_cuda.h).
#include "client/gpu_cuda.h"

#include <cstdio>

namespace ptstore::gpu::detail {

std::string Hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

Status CudaStatus(cudaError_t err, std::string_view what) {
  cudaGetLastError();
  Code code = Code::kInternal;
  switch (err) {
    case cudaErrorMemoryAllocation:
      code = Code::kResourceExhausted;
      break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
      code = Code::kInvalidArgument;
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorCudartUnloading:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
      code = Code::kUnavailable;
      break;
    case cudaErrorNotSupported:
      code = Code::kUnimplemented;
      break;
    default:
      break;
  }
  return Status(code, std::string(what) + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")");
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);
}

Status DeviceGuard::Set(int device) {
  PTS_CUDA(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    PTS_CUDA(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
    changed_ = true;
  }
  return Status::OK();
}

Result<Pointer> Classify(const void* p, std::string_view what) {
  cudaPointerAttributes a{};
  PTS_CUDA(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes(" + std::string(what) + ")");
  return Pointer{a.type, a.device, a.devicePointer};
}

Result<int> DestinationDevice(const void* p, std::string_view what) {
  PTS_ASSIGN_OR_RETURN(Pointer ptr, Classify(p, what));
  switch (ptr.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      return ptr.device;
    case cudaMemoryTypeHost:
      return InvalidArgument(std::string(what) + " (" + Hex(p) +
                             ") is registered host memory, not device memory: copy into host memory with "
                             "PinnedPrefix::CopyTo");
    default:
      return InvalidArgument(std::string(what) + " (" + Hex(p) +
                             ") is not device memory (an ordinary host address CUDA does not know)");
  }
}

Status RequireDevice() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    Status s = CudaStatus(err, "cudaGetDeviceCount");
    return Status(Code::kUnavailable, "no usable CUDA device: " + s.message());
  }
  if (n == 0) return Unavailable("no usable CUDA device: cudaGetDeviceCount found none");
  return Status::OK();
}

}  // namespace ptstore::gpu::detail
