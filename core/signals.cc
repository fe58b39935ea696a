#include "core/signals.h"

#include <pthread.h>

#include <cstring>

#include "core/logging.h"

namespace ptstore::core {

sigset_t BlockStopSignals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sigs;
}

int WaitForStopSignal(const sigset_t& sigs, const std::function<void()>& on_hangup) {
  int sig = 0;
  while (sigwait(&sigs, &sig) == 0) {
    if (sig == SIGHUP) {
      if (on_hangup) {
        on_hangup();
      } else {
        PTS_INFO("main", "SIGHUP: nothing to reload; send SIGTERM to stop");
      }
      continue;
    }
    break;
  }
  PTS_INFO("main", "signal " << sig << " (" << strsignal(sig) << "): shutting down");
  return sig;
}

}  // namespace ptstore::core
