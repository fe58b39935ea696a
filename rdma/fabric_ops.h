// The bookkeeping of posted reads that the two halves of rdma/fabric.h
// share: fabric.cc (opening, registration, peers, teardown) and
// fabric_read.cc (posting reads, dispatching completions, the progress
// thread). Internal to rdma/.
//
// Invariants:
//   - every posted fi_read has one heap OpContext (its fi_context2 first, so
//     the op context libfabric hands back is the OpContext), listed in
//     Fabric::inflight_ from just before fi_read until its completion is
//     dispatched (or the Fabric is destroyed); it holds a shared_ptr to its
//     ReadCall, so a caller that gave up (deadline) never leaves a
//     completion pointing at freed state;
//   - ReadCall::outstanding counts the call's ops posted and not completed;
//     the caller posts only while it is below options_.read_window.
//
// Thread safety: a ReadCall's counters under its mu; an OpContext belongs to
// whoever holds it in or takes it out of inflight_ (under inflight_mu_).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/mutex.h"
#include "ptstore/status.h"
#include "rdma/fabric.h"

namespace ptstore::rdma {

struct Fabric::ReadCall {
  core::Mutex mu;
  core::CondVar cv;
  uint64_t outstanding GUARDED_BY(mu) = 0;
  Status error GUARDED_BY(mu);  // the first failure
  std::string peer_name;        // set before the first op is posted, then constant
};

struct Fabric::OpContext {
  fi_context2 fi_ctx;  // first: libfabric's op context is this object
  std::shared_ptr<ReadCall> call;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

namespace fabric_detail {

using Clock = std::chrono::steady_clock;

inline constexpr const char* kLog = "fabric";
inline constexpr size_t kCompletionBatch = 64;  // completions read from the CQ at once

// libfabric's text for a return code (negative or not).
inline std::string FiError(int ret) { return fi_strerror(ret < 0 ? -ret : ret); }

// Completion errors that mean the peer is gone or cannot be reached.
bool IsUnreachable(int err);

}  // namespace fabric_detail
}  // namespace ptstore::rdma
