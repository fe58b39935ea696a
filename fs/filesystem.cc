// The Filesystem: its state and life (connect, start and stop the
// invalidation thread and the change watcher, open handles) and the
// operation table, whose handlers live by concept in the *_ops.cc files
// (fs/ops.h).
#include "fs/filesystem.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "fs/ops.h"

namespace ptstore::fs {

namespace {

void Init(void* userdata, fuse_conn_info* conn) {
  // Listings carry every entry's attributes (readdirplus), always: a walk
  // then looks up nothing (with READDIRPLUS_AUTO the kernel would ask for
  // them only at offset 0 and after lookups).
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  // With auto_inval_data the kernel asks again for the attributes of what a
  // walk opens (to compare mtime and size before trusting its cache): about
  // one request per directory of every walk. The mount drops stale pages
  // itself: a kv or tokens file whose size changed (a split) is read past
  // the page cache at its next open, and its pages go (KeepOrDropCache,
  // file_ops.cc).
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;

  if (conn->capable & FUSE_CAP_IOCTL_DIR) conn->want |= FUSE_CAP_IOCTL_DIR;
  // O_TRUNC arrives in open()'s flags (refused there) rather than as a
  // separate truncate.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = Init;
  AddNodeOps(&ops);
  AddChangeOps(&ops);
  AddFileOps(&ops);
  AddDirOps(&ops);
  AddXattrOps(&ops);
  return ops;
}

TreeOptions TreeOptionsFor(const MountOptions& o) {
  TreeOptions t;
  t.default_layout = o.layout;
  t.root_uid = geteuid();
  t.root_gid = getegid();
  t.prefetch_limit = o.prefetch_limit;
  return t;
}

}  // namespace

Filesystem::Filesystem(const MountOptions& options) : options_(options) {}

Filesystem::~Filesystem() { Stop(); }

const fuse_lowlevel_ops& Filesystem::Ops() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

Result<std::unique_ptr<Client>> Filesystem::Connect(const MountOptions& options) {
  ClientOptions o;
  o.socket_path = options.socket_path;
  o.client_name = "ptstore-fuse";
  o.max_connections = 8;  // one per busy FUSE worker
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<Client> c, Client::Connect(o));
  if (!c->mapped()) {
    return PermissionDenied("ptstored at " + options.socket_path +
                            " does not share its arena with this process: run ptstore-fuse as root or as a member "
                            "of the store's group");
  }
  return c;
}

Status Filesystem::Start(fuse_session* se) {
  PTS_ASSIGN_OR_RETURN(client_, Connect(options_));
  tree_ = std::make_unique<TreeView>(client_.get(), &cache_, TreeOptionsFor(options_));
  invalidator_.Start(se);
  if (options_.change_poll_ms > 0) {
    watcher_ = std::make_unique<ChangeWatcher>(client_.get(), std::chrono::milliseconds(options_.change_poll_ms),
                                               &cache_, &inodes_, &invalidator_, &reply_mu_);
    watcher_->Start();
  }
  return Status::OK();
}

Filesystem::CacheTimes Filesystem::TimesFor(uint64_t gen) const {
  CacheTimes t;
  if (watcher_ == nullptr) {
    // No watcher: the timeouts alone bound staleness (the user's choice).
    t.entry = options_.entry_timeout;
    t.attr = options_.attr_timeout;
    return t;
  }
  if (!watcher_->healthy()) {
    // Polls fail: nobody would invalidate. Short times until they work.
    t.entry = std::min(options_.entry_timeout, 1.0);
    t.attr = std::min(options_.attr_timeout, 1.0);
    return t;
  }
  if (cache_.generation() != gen) return t;  // a change may postdate the answer: keep nothing
  t.entry = options_.entry_timeout;
  t.attr = options_.attr_timeout;
  t.fresh = true;
  return t;
}

void Filesystem::Stop() {
  if (watcher_) watcher_->Stop();
  invalidator_.Stop();
  std::unordered_map<uint64_t, std::unique_ptr<OpenHandle>> left;
  {
    core::MutexLock lock(open_mu_);
    left.swap(open_);
  }
  left.clear();  // outside the lock: unpinning talks to ptstored
}

uint64_t Filesystem::Keep(std::unique_ptr<OpenHandle> handle) {
  const uint64_t fh = reinterpret_cast<uint64_t>(handle.get());
  core::MutexLock lock(open_mu_);
  open_.emplace(fh, std::move(handle));
  return fh;
}

void Filesystem::Close(uint64_t fh) {
  std::unique_ptr<OpenHandle> handle;
  {
    core::MutexLock lock(open_mu_);
    auto it = open_.find(fh);
    if (it == open_.end()) return;
    handle = std::move(it->second);
    open_.erase(it);
  }
}  // deleted here, outside the lock: unpinning talks to ptstored

}  // namespace ptstore::fs
