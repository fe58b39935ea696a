// A hint a thread can leave for itself: "before you block for an unbounded
// time, call this". The mount's FUSE reader (fs/session_loop.h) answers
// requests on the thread that read them, and must hand reading to another
// thread before it waits for ptstored; the client library calls WillBlock
// before every round trip (ClientCore::Acquire), so any RPC a request
// handler makes hands the role on first.
//
// Costs one thread-local load where no hint is set. The hint is called at
// most once: WillBlock clears it before calling it.
//
// Thread safety: per thread (thread-local); nothing is shared.
#pragma once

namespace ptstore::core {

using BlockingHint = void (*)(void* arg);

// Sets this thread's hint (nullptr: none).
void SetBlockingHint(BlockingHint hint, void* arg);

// Calls and clears this thread's hint, if one is set.
void WillBlock();

}  // namespace ptstore::core
