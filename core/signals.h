// How PTStore's daemons (ptstored, ptstore-sched) stop: SIGTERM or SIGINT,
// taken synchronously by the main thread; SIGHUP is logged and ignored;
// SIGPIPE is ignored (a peer that goes away is an error on its socket).
//
//   sigset_t sigs = BlockStopSignals();   // before any thread starts
//   ... start serving ...
//   int sig = WaitForStopSignal(sigs);    // logs it; then shut down
#pragma once

#include <signal.h>

namespace ptstore::core {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (threads started
// afterwards inherit the mask) and ignores SIGPIPE. Returns the blocked set.
sigset_t BlockStopSignals();
// Waits for SIGTERM or SIGINT in `sigs`, logging SIGHUPs ("nothing to
// reload") on the way; logs the signal and returns it.
int WaitForStopSignal(const sigset_t& sigs);

}  // namespace ptstore::core
