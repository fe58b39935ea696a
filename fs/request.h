// What every FUSE request handler of the mount (fs/ops.h) works with: the
// Filesystem of a request, an inode's NodeRef, the checks every name
// goes through, and the replies that carry more than an errno.
//
// The handlers follow libfuse's example/passthrough_hp.cc: a handler
// computes its result first (a helper returning 0 or an errno, and the
// data through out-parameters) and replies once, at its end:
//
//   Found found;
//   const int err = LookupNode(fs, parent, name, &found, &gen);
//   if (err != 0) fuse_reply_err(req, err);
//   else ReplyEntry(req, parent, name, found, gen);
//
// so that no path replies twice or never. The Reply* functions below are
// such last calls: each makes exactly one fuse_reply_* call.
//
// After its reply a handler touches nothing of the open file or directory
// of fi->fh, and holds no lock inside it across the reply: the reply lets
// the caller close it, and the release (on another worker) frees it. Nor
// does a handler make an RPC or a kernel notification under a lock a reply
// waits for (docs/architecture.md, "Filesystem view").
//
// Thread safety: everything here may run on many libfuse workers at once.
#pragma once

#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <cstdint>
#include <memory>

#include "fs/filesystem.h"
#include "fs/node.h"
#include "fs/tree.h"

namespace ptstore::fs {

// The Filesystem a request came to (fuse_req_userdata).
inline Filesystem* Fs(fuse_req_t req) { return static_cast<Filesystem*>(fuse_req_userdata(req)); }

// Resolves `ino` into *ref: 0, or ESTALE for an inode the mount forgot.
int Resolve(Filesystem* fs, fuse_ino_t ino, NodeRef* ref);

// 0, or POSIX's ENAMETOOLONG for a name component longer than any name on
// the mount (its NAME_MAX, statfs' f_namemax); the kernel checks only its
// own 255.
int NameTooLong(const char* name);

// A kv or tokens file: their sizes are noted (InodeTable::NoteSize), so
// that a size that changed drops the kernel's cached pages.
inline bool IsIncrementFile(const NodeRef& ref) {
  return ref.kind == NodeKind::kKvFile || ref.kind == NodeKind::kTokensFile;
}

// steady_clock, in nanoseconds.
int64_t SteadyNowNs();

// Replies with the entry of `found` (child `name` of `parent`), taking a
// lookup of its inode (given back when the kernel does not take it).
// `gen`: the cache generation read before the answer was asked for.
void ReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name, const Found& found, uint64_t gen);

// Replies with the attributes `st` (its st_ino filled in), built from what
// the store said at cache generation `gen`.
void ReplyAttr(fuse_req_t req, const struct stat& st, uint64_t gen);

// Keeps `handle` as fi->fh and replies to the open; closes it again when
// the kernel does not take it.
void ReplyOpen(fuse_req_t req, std::unique_ptr<OpenHandle> handle, fuse_file_info* fi);

// A request handler, counted (user.ptstore.fuse_requests on the root):
// ops->lookup = Counted<Lookup>::Call.
template <auto F>
struct Counted;
template <typename... A, void (*F)(fuse_req_t, A...)>
struct Counted<F> {
  static void Call(fuse_req_t req, A... a) {
    Fs(req)->CountRequest();
    F(req, a...);
  }
};

}  // namespace ptstore::fs
