// A man in the middle for the wire-integrity tests: a real TCP forwarder on
// loopback between a node that dials (listed at the proxy's port in its
// cluster file) and the node it dials. It parses the peer-protocol stream of
// version 2 (docs/wire-format.md "Frame integrity": the four handshake
// frames bare, then every frame followed by its 16-byte tag, the bytes of a
// TCP fetch after their PeerFetchReply followed by theirs) and, once armed,
// tampers with exactly one unit of it the way an attacker on the path would:
//
//   kFlipRequest   the next dialler->listener frame of `type`: one body byte
//                  flipped, the header's checksum made right again
//   kReplayRequest the next dialler->listener frame of `type`, sent twice
//   kInjectReply   before the next listener->dialler frame of `type`: a
//                  forged ErrorReply{not_found} for the same request id (a
//                  well-formed frame with a good checksum and a made-up tag)
//   kFlipBulk      one byte in the middle of the bytes after the next
//                  PeerFetchReply
//
// Everything else passes through unchanged.
//
// Thread safety: Arm and fired may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::testing {

class TamperProxy {
 public:
  enum class Mode { kNone, kFlipRequest, kReplayRequest, kInjectReply, kFlipBulk };

  explicit TamperProxy(uint16_t target_port) : target_port_(target_port) {}
  ~TamperProxy();
  TamperProxy(const TamperProxy&) = delete;
  TamperProxy& operator=(const TamperProxy&) = delete;

  // Listens on 127.0.0.1, a free port.
  Status Start();
  uint16_t port() const { return port_; }
  // The next unit that matches is tampered with (then the proxy is
  // disarmed). `type`: a core::MsgType value (unused for kFlipBulk).
  void Arm(Mode mode, uint16_t type = 0);
  // Units tampered with since the start.
  int fired() const { return fired_.load(); }

 private:
  void AcceptLoop();
  void Pump(int from, int to, bool to_listener);
  // Claims the armed tamper when it matches; true once.
  bool Take(Mode mode, uint16_t type);

  const uint16_t target_port_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> fired_{0};
  std::mutex mu_;
  Mode mode_ = Mode::kNone;  // GUARDED_BY(mu_)
  uint16_t type_ = 0;        // GUARDED_BY(mu_)
  std::vector<int> fds_;     // GUARDED_BY(mu_), shut down when stopping
  std::vector<std::thread> threads_;  // GUARDED_BY(mu_)
  std::thread acceptor_;
};

}  // namespace ptstore::testing
