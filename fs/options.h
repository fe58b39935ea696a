// Options of a mount (mount.ptstore(8)): what `-o` carries besides the
// generic FUSE options.
//
//   socket=PATH          ptstored's socket ($PTSTORE_SOCKET, else
//                        /run/ptstore/ptstored.sock)
//   layout=TEXT          layout of namespaces created by mkdir (Layout::Parse
//                        form; ':' may stand for ' ' so that fstab needs no
//                        escapes). Default: Mistral-7B.
//   entry_timeout=SECS   kernel cache time of names (default 3600; 1 with
//                        change_poll_ms=0)
//   attr_timeout=SECS    kernel cache time of attributes (default 3600; 1
//                        with change_poll_ms=0)
//   change_poll_ms=MS    how often the mount polls the store's change log
//                        (fs/watcher.h) and pushes invalidations: a change
//                        by anyone reaches the kernel's cache within this
//                        plus one poll (default 100; 0: no polling, no
//                        daemon cache, the timeouts alone bound staleness)
//   prefetch_limit=N     a listing of a directory in a namespace of at most
//                        N increments fetches the directory's whole subtree
//                        in one round trip (default 262144; 0: never)
//   readahead_kb=KIB     readahead of the mount's backing device (default
//                        4096; 0 leaves the kernel's 128). A FUSE mount
//                        cannot ask for more than 128 KiB at init; a larger
//                        window makes cold reads of kv files go in 1 MiB
//                        requests instead of 128 KiB ones (docs/benchmarks.md).
//   spin_us=US           while requests come in a stream (the last came
//                        within US of the reader starting to look for it,
//                        core/spin_wait.h), the reader looks for the next one
//                        this long before it sleeps (default 50; 0: sleep at
//                        once): a walk's requests then wake no daemon thread
//                        (fs/session_loop.h).
#pragma once

#include <fuse_lowlevel.h>

#include <string>

#include "ptstore/layout.h"
#include "ptstore/status.h"

namespace ptstore::fs {

struct MountOptions {
  std::string socket_path;
  Layout layout = MistralLayout();
  double entry_timeout = 3600.0;
  double attr_timeout = 3600.0;
  uint32_t change_poll_ms = 100;
  uint64_t prefetch_limit = 262144;
  uint32_t readahead_kb = 4096;
  uint32_t spin_us = 50;
};

// Sets the readahead of the mount at `mountpoint` (its backing device in
// /sys/class/bdi). Needs root; an error names the file.
Status SetMountReadahead(const std::string& mountpoint, uint32_t kib);

// Takes our options out of `args` (the rest stay for libfuse) and checks
// them. InvalidArgument names a bad value.
Result<MountOptions> ParseMountOptions(fuse_args* args);
// The option help text (for --help).
const char* MountOptionsHelp();

}  // namespace ptstore::fs
