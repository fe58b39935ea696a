#include "core/spin_wait.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

namespace ptstore::core {

SpinWait::SpinWait(uint32_t spin_us, bool first_spins)
    : spin_ns_(int64_t{spin_us} * 1000), last_ns_(first_spins ? 0 : INT64_MAX) {}

int64_t SpinWait::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SpinWait::Window SpinWait::Begin(int64_t limit_ns) const {
  Window w;
  if (spin_ns_ == 0) return w;
  w.start = NowNs();
  if (last_ns_ <= spin_ns_) w.until = w.start + (limit_ns >= 0 ? std::min(spin_ns_, limit_ns) : spin_ns_);
  else w.until = w.start;
  return w;
}

bool SpinWait::Again(const Window& w) const {
  if (!Spins(w) || NowNs() >= w.until) return false;
  sched_yield();
  return true;
}

void SpinWait::Came(const Window& w) {
  if (spin_ns_ != 0) last_ns_ = NowNs() - w.start;
}

}  // namespace ptstore::core
