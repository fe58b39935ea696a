// Options of a mount (mount.ptstore(8)): what `-o` carries besides the
// generic FUSE options.
//
//   socket=PATH          ptstored's socket ($PTSTORE_SOCKET, else
//                        /run/ptstore/ptstored.sock)
//   layout=TEXT          layout of namespaces created by mkdir (Layout::Parse
//                        form; ':' may stand for ' ' so that fstab needs no
//                        escapes). Default: Mistral-7B.
//   entry_timeout=SECS   kernel cache time of names (default 1)
//   attr_timeout=SECS    kernel cache time of attributes (default 1)
#pragma once

#include <fuse_lowlevel.h>

#include <string>

#include "ptstore/layout.h"
#include "ptstore/status.h"

namespace ptstore::fs {

struct MountOptions {
  std::string socket_path;
  Layout layout = MistralLayout();
  double entry_timeout = 1.0;
  double attr_timeout = 1.0;
};

// Takes our options out of `args` (the rest stay for libfuse) and checks
// them. InvalidArgument names a bad value.
Result<MountOptions> ParseMountOptions(fuse_args* args);
// The option help text (for --help).
const char* MountOptionsHelp();

}  // namespace ptstore::fs
