// How PTStore's daemons (ptstored, ptstore-sched) stop: SIGTERM or SIGINT,
// taken synchronously by the main thread; SIGHUP runs the daemon's reload
// (ptstored: the cluster file) or, without one, is logged and ignored;
// SIGPIPE is ignored (a peer that goes away is an error on its socket).
//
//   sigset_t sigs = BlockStopSignals();   // before any thread starts
//   ... start serving ...
//   int sig = WaitForStopSignal(sigs, [&] { Reload(); });   // logs it; then shut down
//
// Thread safety: call both from the main thread; the reload runs on it,
// between signals (a SIGHUP that arrives during a reload runs it again after).
#pragma once

#include <signal.h>

#include <functional>

namespace ptstore::core {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (threads started
// afterwards inherit the mask) and ignores SIGPIPE. Returns the blocked set.
sigset_t BlockStopSignals();
// Waits for SIGTERM or SIGINT in `sigs`, running `on_hangup` at each SIGHUP
// on the way (without one, logging "nothing to reload"); logs the stop
// signal and returns it.
int WaitForStopSignal(const sigset_t& sigs, const std::function<void()>& on_hangup = nullptr);

}  // namespace ptstore::core
