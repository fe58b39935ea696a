// The files of a mount, open: kv (the increment's bytes, pinned in the
// mapped arena while open), tokens and .layout (their whole contents, taken
// at open; a .layout also takes a new layout by write), and the ioctl fast
// path (fs/ioctl_handler.h).
#include <fcntl.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "fs/errors.h"
#include "fs/ioctl_handler.h"
#include "fs/ops.h"
#include "fs/request.h"

namespace ptstore::fs {

namespace {

// The store drops a pin after its lease time (30 s by default); an open kv
// file takes a fresh one well before that.
constexpr int64_t kRepinAfterNs = 10'000'000'000;

// An open kv, tokens or .layout file (fi->fh).
//
// mu guards only what is swapped or appended in memory: no RPC is made
// and no reply is sent while it is held (docs/architecture.md, "Filesystem
// view"). Above all not the reply: it lets the caller close the file, and
// the release, on another worker, frees this handle and mu with it, so a
// lock still held then is unlocked in freed memory (a later open's mutex,
// which then waits for ever). A kv read takes its own reference to the pin
// under mu and replies from that.
struct OpenFile : OpenHandle {
  NodeRef ref;
  core::SharedMutex mu;
  // kv: the increment's bytes, pinned while the file is open. Shared with
  // the reads replying from it: a re-pin swaps in a new one, and the old one
  // is released (an unpin RPC) by whoever drops it last, outside mu.
  std::shared_ptr<const PinnedPrefix> pin GUARDED_BY(mu);
  std::atomic<int64_t> pinned_at{0};  // steady_clock nanoseconds
  core::Mutex repin_mu;  // held by the read taking a fresh pin, over its RPC (RepinIfDue)
  // tokens and .layout: the whole contents, set at open and never changed.
  std::string content;
  // .layout opened for writing: the text written so far.
  std::string written GUARDED_BY(mu);
  // kv: the ioctl leases of this open file (include/ptstore/ioctl.h).
  LeaseSet leases;
};

OpenFile* File(fuse_file_info* fi) { return static_cast<OpenFile*>(reinterpret_cast<OpenHandle*>(fi->fh)); }

// An increment's kv and tokens never change while its key names the same
// tokens, so the kernel may keep their pages. They do change when a later
// save splits the increment (same key, only its tail): then this open reads
// past the page cache and the kernel's size (direct I/O), and the inode's
// stale pages and attributes are dropped for the opens after it.
void KeepOrDropCache(Filesystem* fs, fuse_ino_t ino, uint64_t size, fuse_file_info* fi) {
  // Changed now, or in an entry or attribute reply since the last open.
  const bool changed = fs->inodes().NoteSize(ino, size);
  if (fs->inodes().TakeSizeChanged(ino) || changed) {
    fi->direct_io = 1;
    fs->invalidator().Inode(ino);
  } else {
    fi->keep_cache = 1;
  }
}

// Opens `ino` (flags and caching in *fi) into *out; an errno.
int OpenNode(Filesystem* fs, fuse_ino_t ino, fuse_file_info* fi, std::unique_ptr<OpenFile>* out) {
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  // Only a namespace's .layout takes writes (a new layout, see WriteLayout).
  const bool writes = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
  if (writes && ref.kind != NodeKind::kLayoutFile) return EROFS;
  auto f = std::make_unique<OpenFile>();
  f->ref = ref;
  switch (ref.kind) {
    case NodeKind::kKvFile: {
      auto pin = fs->client()->PinIncrement(ref.ns, ref.key, false);
      if (!pin.ok()) return ErrnoOf(pin.status());
      const uint64_t bytes = pin->bytes();
      {
        core::WriterLock lock(f->mu);  // not shared yet: for the analysis
        f->pin = std::make_shared<const PinnedPrefix>(std::move(*pin));
      }
      f->pinned_at = SteadyNowNs();
      KeepOrDropCache(fs, ino, bytes, fi);
      break;
    }
    case NodeKind::kTokensFile: {
      auto inc = fs->client()->GetIncrement(ref.ns, ref.key);
      if (!inc.ok()) return ErrnoOf(inc.status());
      f->content.resize(inc->tokens.size() * 4);
      for (size_t i = 0; i < inc->tokens.size(); ++i) {
        uint32_t t = inc->tokens[i];
        for (int b = 0; b < 4; ++b) f->content[4 * i + b] = static_cast<char>(t >> (8 * b));  // little-endian
      }
      KeepOrDropCache(fs, ino, f->content.size(), fi);
      break;
    }
    case NodeKind::kLayoutFile: {
      auto ns = fs->tree().Namespace(ref.ns);
      if (!ns.ok()) return ErrnoOf(ns.status());
      f->content = TreeView::LayoutText(ns->layout);
      fi->direct_io = 1;  // changes with setfattr user.ptstore.layout
      break;
    }
    default:
      return EISDIR;
  }
  *out = std::move(f);
  return 0;
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::unique_ptr<OpenFile> f;
  const int err = OpenNode(Fs(req), ino, fi, &f);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    ReplyOpen(req, std::move(f), fi);
  }
}

// Takes a fresh pin for an open kv whose pin is due (kRepinAfterNs); an
// errno: ESTALE when the increment was split since the open (same key,
// only its tail now: this open's file is gone). The reads that find it due
// wait for the one PinIncrement RPC on repin_mu, as they must (their pin
// is old); mu is taken only to swap the pin in, so a read that is not due
// never waits for the RPC, and nobody waits for a reply.
int RepinIfDue(Filesystem* fs, OpenFile* f) {
  if (SteadyNowNs() - f->pinned_at <= kRepinAfterNs) return 0;
  core::MutexLock repin(f->repin_mu);
  if (SteadyNowNs() - f->pinned_at <= kRepinAfterNs) return 0;  // taken while this read waited
  auto pin = fs->client()->PinIncrement(f->ref.ns, f->ref.key, false);
  if (!pin.ok()) return ErrnoOf(pin.status());
  std::shared_ptr<const PinnedPrefix> old;  // released (unpinned) after mu, by its last reader
  {
    core::WriterLock lock(f->mu);
    if (pin->bytes() != f->pin->bytes()) return ESTALE;
    old = std::exchange(f->pin, std::make_shared<const PinnedPrefix>(std::move(*pin)));
  }
  f->pinned_at = SteadyNowNs();
  return 0;
}

// [off, off + size) of an open file's bytes, as iovecs: a kv's straight
// from the mapped arena of `pin` (no copy here: the kernel copies from the
// iovecs), one into the contents of the others. Empty at and past the end.
std::vector<iovec> SlicesOf(const OpenFile& f, const PinnedPrefix* pin, size_t size, off_t off) {
  std::vector<iovec> iov;
  if (pin == nullptr) {
    if (static_cast<uint64_t>(off) >= f.content.size()) return iov;
    size_t n = std::min(size, f.content.size() - static_cast<size_t>(off));
    iov.push_back(iovec{const_cast<char*>(f.content.data()) + off, n});
    return iov;
  }
  uint64_t pos = 0;
  uint64_t want_begin = static_cast<uint64_t>(off);
  uint64_t want_end = want_begin + size;
  for (const Extent& e : pin->extents()) {
    uint64_t b = std::max(pos, want_begin), end = std::min(pos + e.length, want_end);
    if (b < end) {
      iov.push_back(iovec{const_cast<uint8_t*>(pin->data(e)) + (b - pos), end - b});
    }
    pos += e.length;
    if (pos >= want_end) break;
  }
  return iov;
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  OpenFile* f = File(fi);
  const bool kv = f->ref.kind == NodeKind::kKvFile;
  const int err = kv ? RepinIfDue(Fs(req), f) : 0;
  // A kv's bytes are held by this reference until the reply has copied
  // them, whatever a re-pin does meanwhile. Nothing of *f is touched after
  // the reply (a release may free it by then), and mu is not held over it.
  std::shared_ptr<const PinnedPrefix> pin;
  if (kv) {
    core::ReaderLock lock(f->mu);
    pin = f->pin;
  }
  std::vector<iovec> iov;
  if (err == 0) iov = SlicesOf(*f, pin.get(), size, off);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else if (iov.empty()) {
    fuse_reply_buf(req, nullptr, 0);
  } else if (kv) {
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  } else {
    fuse_reply_buf(req, static_cast<const char*>(iov[0].iov_base), iov[0].iov_len);
  }
}

// A write to a namespace's .layout gives it the layout written, as setting
// user.ptstore.layout does: the text written so far is parsed and applied at
// each write (a layout is written whole by one write(2), as echo and
// printf do). An errno: EINVAL for a text that is not a valid layout
// (nothing changes), EBUSY once something is stored, EPERM as for the xattr.
int WriteLayout(Filesystem* fs, fuse_ino_t ino, OpenFile* f, const char* buf, size_t size, off_t off) {
  constexpr size_t kMaxLayoutText = 64 * 1024;  // 16 groups take well under 1 KiB
  if (off < 0 || static_cast<uint64_t>(off) + size > kMaxLayoutText) return EFBIG;
  std::string text;
  {
    core::WriterLock lock(f->mu);
    if (f->written.size() < static_cast<size_t>(off) + size) f->written.resize(static_cast<size_t>(off) + size, ' ');
    std::memcpy(f->written.data() + off, buf, size);
    text = f->written;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0' || text.back() == ' ')) text.pop_back();
  auto layout = Layout::Parse(text);
  if (!layout.ok()) return EINVAL;
  if (int err = fs->tree().SetLayout(f->ref.ns, *layout)) return err;
  fs->invalidator().Inode(ino);
  return 0;
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  OpenFile* f = File(fi);
  const int err = f->ref.kind == NodeKind::kLayoutFile ? WriteLayout(Fs(req), ino, f, buf, size, off) : EROFS;
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_write(req, size);
  }
}

void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Fs(req)->Close(fi->fh);  // unpins a kv
  fuse_reply_err(req, 0);
}

// The credentials of the process that sent `req`, its groups with them.
local::Credentials CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  local::Credentials who;
  who.pid = ctx->pid;
  who.uid = ctx->uid;
  who.gid = ctx->gid;
  std::vector<gid_t> groups(64);
  int ng = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
  if (ng > static_cast<int>(groups.size())) {
    groups.resize(ng);
    ng = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
  }
  if (ng > 0) who.groups.assign(groups.begin(), groups.begin() + std::min<int>(ng, static_cast<int>(groups.size())));
  return who;
}

// Handles ioctl `cmd` (argument: in_buf, in_bufsz bytes) for `req`; the
// reply's argument into *out. An errno.
int IoctlOf(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, fuse_file_info* fi, unsigned flags,
            const void* in_buf, size_t in_bufsz, std::vector<uint8_t>* out) {
  if (flags & FUSE_IOCTL_COMPAT) return ENOSYS;  // 32-bit callers: not supported
  // A directory (with or without a handle: see dir_ops.cc) answers INFO;
  // an open kv file holds the leases of PIN and UNPIN.
  NodeRef node;
  LeaseSet* leases = nullptr;
  if (flags & FUSE_IOCTL_DIR) {
    if (int err = Resolve(Fs(req), ino, &node)) return err;
  } else {
    OpenFile* f = File(fi);
    if (f->ref.kind != NodeKind::kKvFile) return ENOTTY;
    node = f->ref;
    leases = &f->leases;
  }
  return HandleIoctl(Fs(req)->tree(), node, leases, CallerOf(req), cmd, in_buf, in_bufsz, out);
}

void Ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* arg, fuse_file_info* fi, unsigned flags,
           const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  std::vector<uint8_t> out;
  const int err = IoctlOf(req, ino, cmd, fi, flags, in_buf, in_bufsz, &out);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    if (out.size() > out_bufsz) out.resize(out_bufsz);
    fuse_reply_ioctl(req, 0, out.empty() ? nullptr : out.data(), out.size());
  }
}

}  // namespace

void AddFileOps(fuse_lowlevel_ops* ops) {
  ops->open = Counted<Open>::Call;
  ops->read = Counted<Read>::Call;
  ops->write = Counted<Write>::Call;
  ops->release = Counted<Release>::Call;
  ops->ioctl = Counted<Ioctl>::Call;
}

}  // namespace ptstore::fs
