// The structure edits a mount makes (mkdir of a namespace, rmdir, unlink
// as a whiteout: fs/tree.h) and the refusals of everything else: data is
// never written (EROFS), and structure the store has no operation for is
// EPERM (fs/filesystem.h).
#include <cerrno>

#include "fs/errors.h"
#include "fs/ops.h"
#include "fs/request.h"

namespace ptstore::fs {

namespace {

void MkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  fuse_reply_err(req, EROFS);
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  fuse_reply_err(req, EROFS);
}

// Makes the namespace `name` (at the root only: increments are made by
// saves) into *found; an errno.
int MakeDir(Filesystem* fs, fuse_ino_t parent, const char* name, mode_t mode, Found* found) {
  if (int err = NameTooLong(name)) return err;
  NodeRef dir;
  if (int err = Resolve(fs, parent, &dir)) return err;
  if (dir.kind != NodeKind::kRoot) return EPERM;
  auto made = fs->tree().MakeNamespace(name, mode);
  if (!made.ok()) return ErrnoOf(made.status());
  *found = std::move(*made);
  return 0;
}

void MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Filesystem* fs = Fs(req);
  Found found;
  const int err = MakeDir(fs, parent, name, mode, &found);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    ReplyEntry(req, parent, name, found, fs->cache().generation());
  }
}

// Hides the file `name` of `parent` from this mount; an errno.
int UnlinkOf(Filesystem* fs, fuse_ino_t parent, const char* name) {
  if (int err = NameTooLong(name)) return err;
  NodeRef dir;
  if (int err = Resolve(fs, parent, &dir)) return err;
  return fs->tree().HideFile(dir, name);
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_reply_err(req, UnlinkOf(Fs(req), parent, name));
}

// Removes the directory `name` of `parent` (an increment, or a namespace);
// an errno.
int RmDirOf(Filesystem* fs, fuse_ino_t parent, const char* name) {
  if (int err = NameTooLong(name)) return err;
  NodeRef dir;
  if (int err = Resolve(fs, parent, &dir)) return err;
  return fs->tree().RemoveDir(dir, name);
}

void RmDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_reply_err(req, RmDirOf(Fs(req), parent, name));
}

void SymLink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) { fuse_reply_err(req, EPERM); }

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
            unsigned int flags) {
  fuse_reply_err(req, EPERM);  // a key is a name derived from the tokens: it cannot change
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) { fuse_reply_err(req, EPERM); }

}  // namespace

void AddChangeOps(fuse_lowlevel_ops* ops) {
  ops->mknod = Counted<MkNod>::Call;
  ops->create = Counted<Create>::Call;
  ops->mkdir = Counted<MkDir>::Call;
  ops->unlink = Counted<Unlink>::Call;
  ops->rmdir = Counted<RmDir>::Call;
  ops->symlink = Counted<SymLink>::Call;
  ops->rename = Counted<Rename>::Call;
  ops->link = Counted<Link>::Call;
}

}  // namespace ptstore::fs
