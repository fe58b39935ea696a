// Framed messages (core/wire.h) over a connected stream socket, with
// optional file-descriptor passing (SCM_RIGHTS) on unix sockets.
//
// Every receive has a deadline: a peer that stops talking yields
// DeadlineExceeded, one that goes away Unavailable, one that sends garbage
// Protocol. Nothing blocks forever.
//
// Between nodes, once authentication agreed on peer protocol 2 or later,
// EnableIntegrity puts a MAC on every record (the interface:
// local/frame_integrity.h; the node-to-node MAC: rdma/frame_mac.h). Send
// appends a 16-byte tag after each frame, SendRaw's bytes up to
// FinishSendRaw are one record whose tag FinishSendRaw sends, and the
// receiving calls check them. A record whose tag does not match (altered,
// replayed, reordered, injected) fails with Corruption "frame integrity
// check failed ...", logged (PTS_WARN, naming the peer) and counted; the
// caller must then close the connection (nothing after it can be trusted).
//
// Thread safety: Send and Receive may each be called by one thread at a
// time (SendRaw/FinishSendRaw with Send, ReceiveRaw/FinishReceiveRaw with
// Receive); Shutdown may be called from any thread to wake a blocked
// Receive. EnableIntegrity before any other thread uses the socket.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/spin_wait.h"
#include "core/wire.h"
#include "local/frame_integrity.h"
#include "ptstore/status.h"

namespace ptstore::local {

struct Frame {
  uint16_t type = 0;
  uint64_t request_id = 0;
  std::vector<uint8_t> body;
  int fd = -1;  // a descriptor that came with the frame; the receiver owns it

  Frame() = default;
  Frame(Frame&& o) noexcept;
  Frame& operator=(Frame&& o) noexcept;
  Frame(const Frame&) = delete;
  ~Frame();
  // Hands the descriptor over to the caller.
  int TakeFd() {
    int f = fd;
    fd = -1;
    return f;
  }
};

class FramedSocket {
 public:
  explicit FramedSocket(int fd);  // takes ownership
  ~FramedSocket();
  FramedSocket(const FramedSocket&) = delete;
  FramedSocket& operator=(const FramedSocket&) = delete;

  Status Send(uint16_t type, uint64_t request_id, std::span<const uint8_t> body, int pass_fd = -1);
  // timeout_ms < 0 waits forever (servers waiting for the next request).
  Result<Frame> Receive(int timeout_ms);
  // Waits as long as it takes for a frame to begin, then gives the whole
  // frame `frame_ms` from its first byte: DeadlineExceeded for a peer that
  // sends part of a frame and stalls (servers: such a peer holds a thread).
  Result<Frame> ReceiveWithin(int frame_ms);
  // Raw bytes outside frames: the bulk data that follows a frame that
  // announced it (node-to-node loads over TCP). ReceiveRaw fails with
  // DeadlineExceeded if all n bytes have not arrived within timeout_ms.
  Status SendRaw(const uint8_t* p, size_t n);
  Status ReceiveRaw(uint8_t* p, size_t n, int timeout_ms);
  // With integrity on: end the run of raw bytes sent (received) since the
  // last frame as one record: send (receive and check) its tag. No-ops when
  // integrity is off or no raw bytes were sent (received).
  Status FinishSendRaw();
  Status FinishReceiveRaw(int timeout_ms);

  // From now on every record carries a MAC under `mac`. `peer` names the
  // other end in logs; `counters` (may be null) counts tag failures.
  void EnableIntegrity(std::unique_ptr<FrameIntegrity> mac, std::string peer, WireCounters* counters);
  bool integrity() const { return mac_ != nullptr; }
  // Before waiting for a frame to begin (Receive, ReceiveWithin), look for it
  // again for up to `us` microseconds, yielding the CPU between looks
  // (sched_yield), before sleeping in poll, as long as frames come in a
  // stream: the last one began within `us` of the wait's start. 0 (the
  // default): sleep at once. A sleeping receiver is woken by an interrupt
  // between processors, a hypercall on a VM (5-7 us here): in a run of short
  // requests and replies that is most of a round trip (docs/benchmarks.md,
  // bench_save_lookup). Before any other thread uses the socket.
  void SetSpin(uint32_t us) { spin_.set_spin_us(us); }
  void Shutdown();
  int fd() const { return fd_; }

  template <typename M>
  Status SendMessage(uint64_t request_id, const M& m, int pass_fd = -1) {
    core::Encoder e;
    m.Encode(e);
    return Send(static_cast<uint16_t>(M::kType), request_id, e.buffer(), pass_fd);
  }

 private:
  Status ReadFull(uint8_t* p, size_t n, int timeout_ms, int* got_fd);
  Result<Frame> ReceiveFrame(int timeout_ms);
  // The spin of SetSpin over window `w`: until the socket is readable or
  // the window closes.
  void Spin(const core::SpinWait::Window& w);
  Status SendBytes(const uint8_t* p, size_t n);
  // Logs and counts an integrity failure; returns it with the peer named.
  Status IntegrityFailure(Status st);

  int fd_;
  std::unique_ptr<FrameIntegrity> mac_;
  std::string peer_;
  WireCounters* counters_ = nullptr;
  core::SpinWait spin_;  // the receiving thread's
};

// Decodes a frame body as M, naming M when it fails.
template <typename M>
Status DecodeBody(const Frame& f, M* m) {
  core::Decoder d(f.body);
  Status st = m->Decode(d);
  if (!st.ok()) return st.WithContext(std::string("decoding ") + core::MsgTypeName(f.type));
  return st;
}

Result<int> ConnectUnix(const std::string& path);
// Binds and listens; replaces a stale socket file; chmods it to `mode`.
Result<int> ListenUnix(const std::string& path, uint32_t mode);

}  // namespace ptstore::local
