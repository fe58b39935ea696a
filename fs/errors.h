// The one place where the filesystem turns a Status into an errno.
#pragma once

#include "ptstore/status.h"

namespace ptstore::fs {

// ToErrno(code) (include/ptstore/status.h), except where a filesystem
// caller expects another number: kResourceExhausted is ENOMEM (a pin that
// does not fit in the arena at once; the mount never writes, so ENOSPC
// would mislead). A lost ptstored stays ENOTCONN, as for a dead FUSE daemon.
// Never 0 for an error.
int ErrnoOf(const Status& status);

}  // namespace ptstore::fs
