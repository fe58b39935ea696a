// The mount's FUSE loop, in place of libfuse's fuse_session_loop_mt.
//
// Why: on the machines this runs on, a FUSE round trip costs two thread
// wake-ups (the caller wakes a daemon thread asleep on /dev/fuse, the daemon
// wakes the caller with the reply), and each is an inter-processor
// interrupt, a hypercall in a VM: 5-7 us apiece here, a third of a cold
// `ls -R` (docs/benchmarks.md, "Metadata"). libfuse's loop sleeps in read(2)
// between requests; a walk's next request comes 10-40 us after a reply.
//
// How: one thread at a time is the reader. It reads /dev/fuse without
// blocking and, while requests come in a stream (the last two at most
// spin_us apart), looks again for spin_us before it sleeps in poll(2), so
// a walk's requests find it awake and cost the caller no wake-up. It answers
// each request on its own thread, where it was read, unless the request may
// take long: a READ or WRITE, or anything that makes a round trip to
// ptstored (the client library's core::WillBlock hint, core/blocking_hint.h).
// Then it first hands reading to an idle thread (or starts one, up to
// max_threads), so slow requests run side by side as under libfuse's loop.
// While it looks it calls sched_yield, so it takes only a CPU nobody else
// wants.
//
// Exit: the session ends when the kernel ends the connection (unmount), or
// when fuse_session_exit is called (libfuse's signal handlers): the loop
// wakes its reader and its idle threads, waits for requests in progress,
// and returns.
//
// Thread safety: RunSessionLoop is called once per session, by the thread
// that owns it (it blocks until the session ends). Its worker threads block
// every signal, and the calling thread takes the exit signals (ExitSignals:
// those libfuse's handlers catch, and SIGQUIT) only while it waits. Block
// them in every other thread of the process (before starting it), or one of
// them may take the signal and the loop not see it.
#pragma once

#include <fuse_lowlevel.h>
#include <signal.h>

#include <cstdint>

namespace ptstore::fs {

struct SessionLoopOptions {
  unsigned max_threads = 10;  // threads answering requests at most (libfuse's -o max_threads)
  uint32_t spin_us = 50;      // how long the reader looks again before it sleeps (0: never)
};

// SIGHUP, SIGINT, SIGTERM and SIGQUIT.
sigset_t ExitSignals();

// Serves `se` until it ends. Returns 0, or a negative errno from reading
// /dev/fuse.
int RunSessionLoop(fuse_session* se, const SessionLoopOptions& options);

}  // namespace ptstore::fs
