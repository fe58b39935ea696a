// The operation table of a mount (Filesystem::Ops()), filled by concept:
// each Add*Ops sets its handlers (counted, fs/request.h) in *ops and
// leaves the others alone. The handlers themselves are private to their
// files; each computes first and replies once at its end (fs/request.h).
//
// Errnos: ptstore(7) "ERRORS" and fs/filesystem.h.
//
// Thread safety: the handlers run on libfuse's worker threads, many at once.
#pragma once

#include <fuse_lowlevel.h>

namespace ptstore::fs {

// lookup, forget, forget_multi, getattr, setattr (touch(1)), statfs (df(1)).
// node_ops.cc.
void AddNodeOps(fuse_lowlevel_ops* ops);

// mkdir (a namespace at the root), unlink (a whiteout), rmdir, and the
// refusals: mknod, create (EROFS), symlink, rename, link (EPERM).
// change_ops.cc.
void AddChangeOps(fuse_lowlevel_ops* ops);

// open, read, write (a .layout only), release, ioctl (fs/ioctl_handler.h).
// file_ops.cc.
void AddFileOps(fuse_lowlevel_ops* ops);

// opendir, readdir, readdirplus, releasedir. dir_ops.cc.
void AddDirOps(fuse_lowlevel_ops* ops);

// getxattr, listxattr, setxattr (layout, quotas), removexattr (quotas).
// xattr_ops.cc.
void AddXattrOps(fuse_lowlevel_ops* ops);

}  // namespace ptstore::fs
