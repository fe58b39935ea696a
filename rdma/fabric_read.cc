// The read path of rdma/fabric.h: posting fi_reads within the read window,
// the deadline, and the progress thread that dispatches their completions
// (the bookkeeping is rdma/fabric_ops.h).
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "core/logging.h"
#include "rdma/fabric.h"
#include "rdma/fabric_ops.h"

namespace ptstore::rdma {

using fabric_detail::Clock;
using fabric_detail::FiError;
using fabric_detail::IsUnreachable;
using fabric_detail::kCompletionBatch;
using fabric_detail::kLog;

namespace {

constexpr int kIdleWaitMs = 100;  // fi_cq_sread timeout when idle
constexpr auto kSpinAfterWork = std::chrono::microseconds(50);

}  // namespace

namespace fabric_detail {

bool IsUnreachable(int err) {
  switch (err) {
    case FI_ECANCELED: case FI_ECONNREFUSED: case FI_ECONNRESET: case FI_ECONNABORTED:
    case FI_ENOTCONN: case FI_EHOSTUNREACH: case FI_ENETUNREACH: case FI_ENETDOWN:
    case FI_ESHUTDOWN: case EPIPE: case FI_ETIMEDOUT: case FI_EADDRNOTAVAIL:
      return true;
    default:
      return false;
  }
}

}  // namespace fabric_detail

Status Fabric::CheckReadOps(const Peer& p, std::span<const ReadOp> ops, uint64_t* total) const {
  if (choice_.virtual_addresses && !p.has_region) {
    return InvalidArgument("fabric: peer " + p.name + " published no region, and " + choice_.provider +
                           " reads by virtual address (take address() after RegisterRegion)");
  }
  *total = 0;
  for (const ReadOp& op : ops) {
    if (op.length > region_length_ || op.local_offset > region_length_ - op.length) {
      return InvalidArgument("fabric: read of " + std::to_string(op.length) + " bytes to local offset " +
                             std::to_string(op.local_offset) + " is past the end of the local region (" +
                             std::to_string(region_length_) + " bytes)");
    }
    if (p.has_region && (op.length > p.region_length || op.remote_offset > p.region_length - op.length)) {
      return InvalidArgument("fabric: read of " + std::to_string(op.length) + " bytes at offset " +
                             std::to_string(op.remote_offset) + " is past the end of peer " + p.name +
                             "'s region (" + std::to_string(p.region_length) + " bytes)");
    }
    *total += op.length;
  }
  return Status::OK();
}

Status Fabric::Read(uint64_t peer, uint64_t remote_key, std::span<const ReadOp> ops, int timeout_ms) {
  const auto start = Clock::now();
  const bool has_deadline = timeout_ms >= 0;
  const Clock::time_point deadline = start + std::chrono::milliseconds(std::max(timeout_ms, 0));
  if (!registered_.load(std::memory_order_acquire)) {
    return InvalidArgument("fabric: Read before RegisterRegion (the destination must be registered)");
  }
  std::shared_ptr<const Peer> entry;
  {
    core::ReaderLock l(peers_mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return InvalidArgument("fabric: unknown peer handle " + std::to_string(peer));
    entry = it->second;
  }
  const Peer& p = *entry;
  uint64_t total = 0;
  PTS_RETURN_IF_ERROR(CheckReadOps(p, ops, &total));
  if (total == 0) return Status::OK();

  auto call = std::make_shared<ReadCall>();
  call->peer_name = p.name;
  const uint64_t remote_base = choice_.virtual_addresses ? p.region_base : 0;
  const uint64_t window = options_.read_window;
  size_t op_index = 0;
  uint64_t op_done = 0;  // bytes of ops[op_index] already posted
  bool timed_out = false;
  uint64_t refusals = 0;      // posts the provider refused with FI_EAGAIN
  uint32_t backoff_us = 20;  // between posts when none of ours is in flight
  auto wait_until = [&](core::UniqueLock& l, auto pred) {
    if (!has_deadline) {
      call->cv.Wait(l, pred);
      return true;
    }
    return call->cv.WaitUntil(l, deadline, pred);
  };

  while (op_index < ops.size()) {
    const ReadOp& op = ops[op_index];
    if (op_done == op.length) {
      ++op_index;
      op_done = 0;
      continue;
    }
    {
      core::UniqueLock l(call->mu);
      if (!wait_until(l, [&]() REQUIRES(call->mu) { return call->outstanding < window || !call->error.ok(); })) {
        timed_out = true;
        break;
      }
      if (!call->error.ok()) break;
      ++call->outstanding;
    }
    const uint64_t len = std::min(op.length - op_done, max_read_);
    auto* ctx = new OpContext();
    ctx->call = call;
    ctx->remote_offset = op.remote_offset + op_done;
    ctx->length = len;
    {
      core::MutexLock l(inflight_mu_);
      inflight_.insert(ctx);
    }
    ssize_t ret = fi_read(ep_, region_base_ + op.local_offset + op_done, len, mr_desc_, p.fi_addr,
                          remote_base + op.remote_offset + op_done, remote_key, &ctx->fi_ctx);
    if (ret == 0) {
      op_done += len;
      backoff_us = 20;
      continue;
    }
    {
      core::MutexLock l(inflight_mu_);
      inflight_.erase(ctx);
    }
    delete ctx;
    core::UniqueLock l(call->mu);
    --call->outstanding;
    if (ret != -FI_EAGAIN) {
      if (call->error.ok()) {
        call->error = Status(IsUnreachable(static_cast<int>(-ret)) ? Code::kUnavailable : Code::kIOError,
                             "fabric: fi_read from " + p.name + ": " + FiError(static_cast<int>(ret)));
      }
      break;
    }
    // Not now: the provider's queue is full, or (rxm) the connection is
    // being made, which a peer that is gone never finishes: each post
    // retries the connect. Wait for one of ours to complete (the progress
    // thread drives the provider), else back off.
    ++refusals;
    if (has_deadline && Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    if (call->outstanding > 0) {
      uint64_t before = call->outstanding;
      call->cv.WaitFor(l, std::chrono::milliseconds(1),
                       [&]() REQUIRES(call->mu) { return call->outstanding < before; });
    } else {
      l.Unlock();
      auto pause = std::chrono::microseconds(backoff_us);
      if (has_deadline) pause = std::min(pause, std::chrono::ceil<std::chrono::microseconds>(deadline - Clock::now()));
      std::this_thread::sleep_for(pause);
      backoff_us = std::min<uint32_t>(backoff_us * 2, 10000);
    }
  }

  core::UniqueLock l(call->mu);
  if (!timed_out && !wait_until(l, [&]() REQUIRES(call->mu) { return call->outstanding == 0; })) timed_out = true;
  if (!timed_out || (call->outstanding == 0 && !call->error.ok())) {
    if (!call->error.ok()) PTS_WARN(kLog, call->error.message());
    return call->error;
  }
  // Deadline: what is left goes on without the caller.
  const uint64_t left = call->outstanding;
  Status error = call->error;
  l.Unlock();
  return ReadTimedOut(call, p, ops.size(), total, timeout_ms, left, refusals, std::move(error));
}

Status Fabric::ReadTimedOut(const std::shared_ptr<ReadCall>& call, const Peer& p, size_t op_count, uint64_t total,
                            int timeout_ms, uint64_t left, uint64_t refusals, Status error) {
  // Cancel what the provider can cancel; the rest stays in flight, owned by
  // inflight_ (rdma/fabric.h).
  {
    core::MutexLock il(inflight_mu_);
    for (OpContext* op : inflight_) {
      if (op->call == call) (void)fi_cancel(&ep_->fid, &op->fi_ctx);
    }
  }
  std::string m = "fabric: read of " + std::to_string(total) + " bytes in " + std::to_string(op_count) +
                  " ops from " + p.name + " not done after " + std::to_string(timeout_ms) + " ms (" +
                  std::to_string(left) + " reads still in flight";
  if (left == 0 && refusals > 0) {
    m += "; " + choice_.provider + " would not take them: no connection to the peer";
  }
  m += ")";
  if (!error.ok()) m += "; first error: " + error.message();
  PTS_WARN(kLog, m);
  return DeadlineExceeded(std::move(m));
}

uint64_t Fabric::reads_in_flight() const {
  core::MutexLock l(inflight_mu_);
  return inflight_.size();
}

void Fabric::Complete(OpContext* op, Status status) {
  {
    core::MutexLock l(inflight_mu_);
    if (inflight_.erase(op) == 0) return;  // not ours (cannot happen)
  }
  std::shared_ptr<ReadCall> call = std::move(op->call);
  delete op;
  {
    core::MutexLock l(call->mu);
    if (!status.ok() && call->error.ok()) call->error = std::move(status);
    --call->outstanding;
  }
  call->cv.NotifyAll();
}

void Fabric::HandleCompletionError() {
  fi_cq_err_entry err{};
  ssize_t ret = fi_cq_readerr(cq_, &err, 0);
  if (ret < 0) {
    if (ret != -FI_EAGAIN) PTS_WARN(kLog, "fi_cq_readerr: " << FiError(static_cast<int>(ret)));
    return;
  }
  auto* op = static_cast<OpContext*>(err.op_context);
  if (op == nullptr) {
    PTS_WARN(kLog, "completion error without an op: " << FiError(err.err));
    return;
  }
  std::string detail = FiError(err.err);
  char buf[256];
  const char* prov = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof(buf));
  if (err.prov_errno != 0 && prov != nullptr && *prov != '\0' && detail != prov) {
    detail += std::string(" (provider: ") + prov + ")";
  }
  std::string peer;
  {
    // The call outlives this (the op holds it); its peer name is immutable.
    core::MutexLock l(inflight_mu_);
    if (inflight_.count(op) == 0) return;
    peer = op->call->peer_name;
  }
  Complete(op, Status(IsUnreachable(err.err) ? Code::kUnavailable : Code::kIOError,
                      "fabric: read of " + std::to_string(op->length) + " bytes at offset " +
                          std::to_string(op->remote_offset) + " from " + peer + " failed: " + detail));
}

void Fabric::ProgressLoop() {
  fi_cq_entry entries[kCompletionBatch];
  auto last_work = Clock::now();
  uint32_t sleep_us = 1;
  auto dispatch = [&](ssize_t n) {
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) Complete(static_cast<OpContext*>(entries[i].op_context), Status::OK());
      last_work = Clock::now();
      sleep_us = 1;
    } else if (n == -FI_EAVAIL) {
      HandleCompletionError();
      last_work = Clock::now();
    } else if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT && n != -FI_EINTR && n != -FI_ECANCELED) {
      PTS_WARN(kLog, "polling the completion queue: " << FiError(static_cast<int>(n)));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  while (!stop_.load(std::memory_order_relaxed)) {
    ssize_t n = fi_cq_read(cq_, entries, kCompletionBatch);
    if (n != -FI_EAGAIN) {
      dispatch(n);
      continue;
    }
    // Nothing now. Right after work more is likely: poll on. Then block.
    if (Clock::now() - last_work < kSpinAfterWork) continue;
    if (cq_waitable_) {
      dispatch(fi_cq_sread(cq_, entries, kCompletionBatch, nullptr, kIdleWaitMs));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<uint32_t>(sleep_us * 2, 1000);
    }
  }
}

}  // namespace ptstore::rdma
