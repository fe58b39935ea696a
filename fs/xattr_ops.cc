// The extended attributes of a mount (fs/xattrs.h: names and values):
// facts of the store under user.ptstore.*, read-only but for a
// namespace's layout and quotas, which setfattr sets.
#include <sys/types.h>

#include <cerrno>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fs/errors.h"
#include "fs/ops.h"
#include "fs/request.h"
#include "fs/xattrs.h"

namespace ptstore::fs {

namespace {

using Xattrs = std::vector<std::pair<std::string, std::string>>;

// The attributes of `ref`, or an errno. `locate`: ask the cluster where the
// increment is (for user.ptstore.replicas; one request to every node).
int XattrsOf(Filesystem* fs, const NodeRef& ref, Xattrs* attrs, bool locate = false) {
  attrs->clear();
  if (ref.kind == NodeKind::kNamespace) {
    auto ns = fs->tree().Namespace(ref.ns);
    if (!ns.ok()) return ErrnoOf(ns.status());
    auto quota = fs->client()->Quotas(ref.ns);
    if (!quota.ok()) return ErrnoOf(quota.status());
    *attrs = NamespaceXattrs(*ns, &quota->front());
  } else if (ref.kind == NodeKind::kIncrement || ref.kind == NodeKind::kKvFile) {
    auto inc = fs->tree().Increment(ref.ns, ref.key);
    if (!inc.ok()) return ErrnoOf(inc.status());
    std::optional<IncrementLocation> where;
    if (locate) {
      auto w = fs->client()->Locate(ref.ns, {ref.key});
      if (!w.ok()) return ErrnoOf(w.status());
      if (w->size() == 1) where = std::move(w->front());
    }
    *attrs = IncrementXattrs(inc->node, where ? &*where : nullptr);
  } else if (ref.kind == NodeKind::kRoot) {
    // The mount itself: how busy the daemon is (tools and bench_fs).
    attrs->push_back({"user.ptstore.fuse_requests", std::to_string(fs->requests())});
    attrs->push_back({"user.ptstore.socket", fs->options().socket_path});
    // The change watcher (fs/watcher.h): polls made, changes applied, full
    // invalidations; and what the daemon's cache holds.
    if (const ChangeWatcher* w = fs->watcher()) {
      attrs->push_back({"user.ptstore.change_polls", std::to_string(w->polls())});
      attrs->push_back({"user.ptstore.changes", std::to_string(w->changes())});
      attrs->push_back({"user.ptstore.change_resets", std::to_string(w->resets())});
    }
    attrs->push_back({"user.ptstore.cached_increments", std::to_string(fs->cache().increments())});
  }
  return 0;
}

// The value of attribute `name` of `ino` into *value; an errno (ENODATA
// for a name it does not have).
int XattrValue(Filesystem* fs, fuse_ino_t ino, const char* name, std::string* value) {
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  Xattrs attrs;
  const bool replicas = std::string(name) == std::string(kXattrPrefix) + "replicas";
  if (int err = XattrsOf(fs, ref, &attrs, replicas)) return err;
  auto v = FindXattr(attrs, name);
  if (!v) return ENODATA;
  *value = std::move(*v);
  return 0;
}

// getxattr and listxattr: `size` 0 asks for the size; ERANGE when it is
// smaller than the value.
void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  std::string value;
  int err = XattrValue(Fs(req), ino, name, &value);
  if (err == 0 && size != 0 && size < value.size()) err = ERANGE;
  if (err != 0) {
    fuse_reply_err(req, err);
  } else if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

// The names of the attributes of `ino` (XattrList) into *list; an errno.
int XattrNames(Filesystem* fs, fuse_ino_t ino, std::string* list) {
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  Xattrs attrs;
  if (int err = XattrsOf(fs, ref, &attrs)) return err;
  *list = XattrList(attrs);
  return 0;
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  std::string list;
  int err = XattrNames(Fs(req), ino, &list);
  if (err == 0 && size != 0 && size < list.size()) err = ERANGE;
  if (err != 0) {
    fuse_reply_err(req, err);
  } else if (size == 0) {
    fuse_reply_xattr(req, list.size());
  } else {
    fuse_reply_buf(req, list.data(), list.size());
  }
}

// Sets a namespace's quota for `caller`: the mount's own connection may do
// anything, so the rule of the server (the namespace's owner or root) is
// applied here to the credentials of the process that asked. An errno.
int SetQuotaAs(uid_t caller, Filesystem* fs, const std::string& ns_name, QuotaTier tier, uint64_t bytes) {
  auto ns = fs->client()->GetNamespace(ns_name);
  if (!ns.ok()) return ErrnoOf(ns.status());
  if (caller != 0 && caller != ns->uid) return EPERM;
  QuotaChange change;
  (tier == QuotaTier::kDram ? change.dram : change.ssd) = bytes;
  auto q = fs->client()->SetQuota(ns_name, change);
  return q.ok() ? 0 : ErrnoOf(q.status());
}

// A value as setfattr writes it, without its trailing newlines and NULs.
std::string ValueText(const char* value, size_t size) {
  std::string text(value, size);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

// Sets attribute `name` of `ino` for `caller`; an errno. A namespace takes
// its layout and quotas; our other attributes are facts of the store
// (EPERM), and other names have nowhere to go (ENOTSUP).
int SetXattrOf(Filesystem* fs, uid_t caller, fuse_ino_t ino, const char* name, const char* value, size_t size) {
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  const std::string n = name;
  if (ref.kind == NodeKind::kNamespace && n == kLayoutXattr) {
    auto layout = Layout::Parse(ValueText(value, size));
    if (!layout.ok()) return EINVAL;
    int err = fs->tree().SetLayout(ref.ns, *layout);
    if (err == 0) {
      if (auto lino = fs->inodes().Find(NodeRef{NodeKind::kLayoutFile, ref.ns, {}})) fs->invalidator().Inode(*lino);
    }
    return err;
  }
  if (ref.kind == NodeKind::kNamespace) {
    if (std::optional<QuotaTier> tier = QuotaXattrTier(n)) {
      auto bytes = ParseQuotaBytes(ValueText(value, size));
      if (!bytes.ok()) return EINVAL;
      return SetQuotaAs(caller, fs, ref.ns, *tier, *bytes);
    }
  }
  return n.rfind(kXattrPrefix, 0) == 0 ? EPERM : ENOTSUP;
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  fuse_reply_err(req, SetXattrOf(Fs(req), fuse_req_ctx(req)->uid, ino, name, value, size));
}

// Removes attribute `name` of `ino` for `caller`: a namespace's quota (no
// quota is a quota of 0); an errno as for SetXattrOf.
int RemoveXattrOf(Filesystem* fs, uid_t caller, fuse_ino_t ino, const char* name) {
  const std::string n = name;
  if (std::optional<QuotaTier> tier = QuotaXattrTier(n)) {
    NodeRef ref;
    if (int err = Resolve(fs, ino, &ref)) return err;
    if (ref.kind == NodeKind::kNamespace) return SetQuotaAs(caller, fs, ref.ns, *tier, 0);
  }
  return n.rfind(kXattrPrefix, 0) == 0 ? EPERM : ENOTSUP;
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  fuse_reply_err(req, RemoveXattrOf(Fs(req), fuse_req_ctx(req)->uid, ino, name));
}

}  // namespace

void AddXattrOps(fuse_lowlevel_ops* ops) {
  ops->setxattr = Counted<SetXattr>::Call;
  ops->getxattr = Counted<GetXattr>::Call;
  ops->listxattr = Counted<ListXattr>::Call;
  ops->removexattr = Counted<RemoveXattr>::Call;
}

}  // namespace ptstore::fs
