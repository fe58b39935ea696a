// Waiting awake for the next message of a stream, before sleeping for it:
// the rule the mount's request loop (fs/session_loop.h) and local sockets
// (local/framed_socket.h SetSpin) share. On the machines this runs on a
// sleeping thread is woken by an interrupt between processors, a hypercall
// on a VM (5-7 us); a thread that looks again for a few tens of us finds the
// next message of a stream without one.
//
// A wait spins only while messages come in a stream: the last one came
// within spin_us of its wait's start. So an idle peer, or a slow answer (a
// 256 MiB save), costs no spinning; and a wait never spins past `limit`.
//
//   core::SpinWait::Window w = spin.Begin();
//   while (!ready()) {
//     if (spin.Again(w)) continue;  // yielded the CPU (sched_yield)
//     sleep_until_ready();
//   }
//   spin.Came(w);
//
// (Spins(w) says up front whether the wait looks again at all.)
//
// Thread safety: none; one waiting thread at a time (or the role passed on
// under a lock).
#pragma once

#include <cstdint>

namespace ptstore::core {

class SpinWait {
 public:
  struct Window {
    int64_t start = 0;  // steady clock, ns
    int64_t until = 0;  // look again before this (<= start: never)
  };

  // `first_spins`: whether the first wait spins (before any message came).
  explicit SpinWait(uint32_t spin_us = 0, bool first_spins = true);
  void set_spin_us(uint32_t us) { spin_ns_ = int64_t{us} * 1000; }
  bool enabled() const { return spin_ns_ != 0; }

  // A wait begins now; it spins for at most `limit_ns` (< 0: no limit but
  // the spin's).
  Window Begin(int64_t limit_ns = -1) const;
  // Whether this wait spins at all (false: sleep at once).
  bool Spins(const Window& w) const { return w.until > w.start; }
  // True while the window is open: the CPU was yielded, look again.
  bool Again(const Window& w) const;
  // The message came (or the wait ended): how long it took decides whether
  // the next wait spins.
  void Came(const Window& w);

  static int64_t NowNs();  // steady clock

 private:
  int64_t spin_ns_;
  int64_t last_ns_;  // how long the last message took to come
};

}  // namespace ptstore::core
