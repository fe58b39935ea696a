#include "fs/request.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

namespace ptstore::fs {

int Resolve(Filesystem* fs, fuse_ino_t ino, NodeRef* ref) {
  auto r = fs->inodes().Get(ino);
  if (!r) return ESTALE;
  *ref = std::move(*r);
  return 0;
}

int NameTooLong(const char* name) { return std::strlen(name) <= kMaxNamespaceNameBytes ? 0 : ENAMETOOLONG; }

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name, const Found& found, uint64_t gen) {
  Filesystem* fs = Fs(req);
  fuse_entry_param e{};
  e.ino = fs->inodes().Ref(found.ref, parent, name);
  // A new size in this reply makes the kernel drop the pages it cached.
  if (IsIncrementFile(found.ref)) fs->inodes().NoteSize(e.ino, static_cast<uint64_t>(found.st.st_size));
  e.attr = found.st;
  e.attr.st_ino = e.ino;
  core::ReaderLock lock(fs->reply_mu());
  const Filesystem::CacheTimes t = fs->TimesFor(gen);
  e.attr_timeout = t.attr;
  e.entry_timeout = t.entry;
  if (fuse_reply_entry(req, &e) != 0) fs->inodes().Forget(e.ino, 1);  // the kernel did not take it
}

void ReplyAttr(fuse_req_t req, const struct stat& st, uint64_t gen) {
  Filesystem* fs = Fs(req);
  core::ReaderLock lock(fs->reply_mu());
  fuse_reply_attr(req, &st, fs->TimesFor(gen).attr);
}

void ReplyOpen(fuse_req_t req, std::unique_ptr<OpenHandle> handle, fuse_file_info* fi) {
  Filesystem* fs = Fs(req);
  fi->fh = fs->Keep(std::move(handle));
  if (fuse_reply_open(req, fi) != 0) fs->Close(fi->fh);  // the kernel did not take it
}

}  // namespace ptstore::fs
