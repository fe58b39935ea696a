#include "fs/tree.h"

#include <cerrno>

#include "fs/errors.h"

namespace ptstore::fs {

namespace {

constexpr blksize_t kBlockSize = 1 << 20;  // st_blksize of files: big reads for cat/cp
// st_blksize of directories: glibc's opendir sizes its getdents buffer from it
// (up to 1 MiB), and the kernel then allocates (vmalloc) a readdir buffer of
// that size for every request, and the daemon fills one: a walk of many small
// directories spent most of its time there. 32 KiB is glibc's default.
constexpr blksize_t kDirBlockSize = 32 << 10;

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

timespec ToTimespec(uint64_t ns) {
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

void StampTimes(struct stat* st, const Times& t) {
  st->st_atim = ToTimespec(t.atime_ns);
  st->st_mtim = ToTimespec(t.mtime_ns);
  st->st_ctim = ToTimespec(t.ctime_ns);
}

}  // namespace

bool ParseKeyName(const std::string& name, ChainKey* key) {
  if (name.size() != 32) return false;
  for (char c : name) {
    if (!IsHex(c)) return false;  // lowercase only: one name per key
  }
  auto k = ChainKey::FromHex(name);
  if (!k.ok()) return false;
  *key = *k;
  return true;
}

TreeView::TreeView(Client* client, MetaCache* cache, TreeOptions options)
    : client_(client), cache_(cache), options_(std::move(options)), mounted_at_(WallClockNs()) {}

// Times (ptstore(7) "Times"): an increment's own, on its directory and its
// files; a namespace's (the newest of its increments'), on its directory and
// .layout; the root's are the newest of every namespace's, or the mount's.
struct stat TreeView::DirStat(const NamespaceInfo& ns, uint64_t nlink, const Times& times) const {
  struct stat st {};
  uint32_t perm = ns.mode & 07777;
  perm |= (perm & 0444) >> 2;  // read means "may look up": search with it
  st.st_mode = S_IFDIR | perm;
  st.st_nlink = nlink;
  st.st_uid = ns.uid;
  st.st_gid = ns.gid;
  st.st_blksize = kDirBlockSize;
  StampTimes(&st, times);
  return st;
}

struct stat TreeView::FileStat(const NamespaceInfo& ns, uint64_t size, const Times& times) const {
  struct stat st {};
  st.st_mode = S_IFREG | (ns.mode & 0444);
  st.st_nlink = 1;
  st.st_uid = ns.uid;
  st.st_gid = ns.gid;
  st.st_size = static_cast<off_t>(size);
  st.st_blocks = static_cast<blkcnt_t>((size + 511) / 512);  // du: the real bytes
  st.st_blksize = kBlockSize;
  StampTimes(&st, times);
  return st;
}

Result<NamespaceInfo> TreeView::Namespace(const std::string& ns) {
  if (auto c = cache_->Namespace(ns)) return *c;
  const uint64_t gen = cache_->generation();
  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, client_->GetNamespace(ns));
  cache_->PutNamespace(gen, info);
  return info;
}

Result<std::vector<NamespaceInfo>> TreeView::Namespaces() {
  if (auto c = cache_->Namespaces()) return *c;
  const uint64_t gen = cache_->generation();
  PTS_ASSIGN_OR_RETURN(auto all, client_->ListNamespaces());
  cache_->PutNamespaces(gen, all);
  return all;
}

Result<PrefixNodeInfo> TreeView::Node(const std::string& ns, const ChainKey& key) {
  if (auto c = cache_->Increment(ns, key)) return *c;
  const uint64_t gen = cache_->generation();
  PTS_ASSIGN_OR_RETURN(IncrementInfo inc, client_->GetIncrement(ns, key));
  cache_->PutIncrement(gen, ns, inc.node);
  return inc.node;
}

Result<std::vector<PrefixNodeInfo>> TreeView::Children(const NamespaceInfo& ns, const ChainKey& parent) {
  if (auto c = cache_->Children(ns.name, parent)) return *c;
  const uint64_t gen = cache_->generation();
  // A walk lists every directory below this one next: one round trip for
  // all of them, as long as the answer stays small (ptstore(7) "Caching").
  const bool subtree = cache_->enabled() && options_.prefetch_limit > 0 && ns.prefixes <= options_.prefetch_limit;
  PTS_ASSIGN_OR_RETURN(auto nodes, client_->ListTree(ns.name, parent, subtree));
  cache_->PutListing(gen, ns.name, parent, nodes, subtree);
  if (subtree) std::erase_if(nodes, [&](const PrefixNodeInfo& n) { return n.parent != parent; });
  return nodes;
}

struct stat TreeView::RootStat(const std::vector<NamespaceInfo>& all) const {
  NamespaceInfo root;
  root.uid = options_.root_uid;
  root.gid = options_.root_gid;
  root.mode = 0755;
  Times times{mounted_at_, mounted_at_, mounted_at_};
  if (!all.empty()) {
    times = {};
    for (const NamespaceInfo& ns : all) times.Merge(ns.times);
  }
  return DirStat(root, 2 + all.size(), times);
}

Result<IncrementInfo> TreeView::Increment(const std::string& ns, const ChainKey& key) {
  return client_->GetIncrement(ns, key);
}

bool TreeView::Hidden(const NodeRef& file) {
  core::MutexLock lock(mu_);
  auto it = whiteouts_.find(file);
  if (it == whiteouts_.end()) return false;
  if (std::chrono::steady_clock::now() < it->second) return true;
  whiteouts_.erase(it);
  return false;
}

void TreeView::Unhide(const std::string& ns, const ChainKey* key) {
  core::MutexLock lock(mu_);
  for (auto it = whiteouts_.begin(); it != whiteouts_.end();) {
    bool match = it->first.ns == ns && (key == nullptr || it->first.key == *key);
    it = match ? whiteouts_.erase(it) : std::next(it);
  }
}

Result<struct stat> TreeView::Stat(const NodeRef& ref) {
  if (ref.kind == NodeKind::kRoot) {
    PTS_ASSIGN_OR_RETURN(auto all, Namespaces());
    return RootStat(all);
  }
  if (!ref.IsDir() && Hidden(ref)) return NotFound(ref.ToString() + " was unlinked in this mount");
  PTS_ASSIGN_OR_RETURN(NamespaceInfo ns, Namespace(ref.ns));
  switch (ref.kind) {
    case NodeKind::kNamespace:
      return DirStat(ns, 1, ns.times);  // 1: subdirectories not counted (as btrfs does)
    case NodeKind::kLayoutFile: {
      // Writable by the namespace's owner when its directory is: writing a
      // layout into it is what setting user.ptstore.layout does.
      struct stat st = FileStat(ns, LayoutText(ns.layout).size(), ns.times);
      st.st_mode |= ns.mode & 0200;
      return st;
    }
    default:
      break;
  }
  PTS_ASSIGN_OR_RETURN(PrefixNodeInfo node, Node(ref.ns, ref.key));
  switch (ref.kind) {
    case NodeKind::kIncrement: return DirStat(ns, 2 + node.children, node.times);
    case NodeKind::kKvFile: return FileStat(ns, node.bytes, node.times);
    case NodeKind::kTokensFile: return FileStat(ns, 4 * node.tokens, node.times);
    default: return Internal("unhandled node kind");
  }
}

Result<Found> TreeView::Lookup(const NodeRef& dir, const std::string& name) {
  Found f;
  switch (dir.kind) {
    case NodeKind::kRoot: {
      if (!ValidateNamespaceName(name).ok()) return NotFound("no namespace '" + name + "'");
      f.ref = NodeRef{NodeKind::kNamespace, name, {}};
      break;
    }
    case NodeKind::kNamespace:
    case NodeKind::kIncrement: {
      ChainKey key;
      if (dir.kind == NodeKind::kNamespace && name == kLayoutName) {
        f.ref = NodeRef{NodeKind::kLayoutFile, dir.ns, {}};
      } else if (dir.kind == NodeKind::kIncrement && name == kKvName) {
        f.ref = NodeRef{NodeKind::kKvFile, dir.ns, dir.key};
      } else if (dir.kind == NodeKind::kIncrement && name == kTokensName) {
        f.ref = NodeRef{NodeKind::kTokensFile, dir.ns, dir.key};
      } else if (ParseKeyName(name, &key)) {
        // The increment must hang right below `dir`, not anywhere in the tree.
        PTS_ASSIGN_OR_RETURN(PrefixNodeInfo node, Node(dir.ns, key));
        const ChainKey parent = dir.kind == NodeKind::kIncrement ? dir.key : ChainKey{};
        if (node.parent != parent) {
          // The cache may not know yet of a split that moved it here: ask.
          const uint64_t gen = cache_->generation();
          PTS_ASSIGN_OR_RETURN(IncrementInfo inc, client_->GetIncrement(dir.ns, key));
          cache_->PutIncrement(gen, dir.ns, inc.node);
          node = inc.node;
        }
        if (node.parent != parent) return NotFound(name + " is not a child of " + dir.ToString());
        PTS_ASSIGN_OR_RETURN(NamespaceInfo ns, Namespace(dir.ns));
        f.ref = NodeRef{NodeKind::kIncrement, dir.ns, key};
        f.st = DirStat(ns, 2 + node.children, node.times);
        return f;
      } else {
        return NotFound("no '" + name + "' in " + dir.ToString());
      }
      break;
    }
    default:
      return InvalidArgument(dir.ToString() + " is not a directory");
  }
  PTS_ASSIGN_OR_RETURN(f.st, Stat(f.ref));
  return f;
}

Result<std::vector<DirEntry>> TreeView::List(const NodeRef& dir) {
  std::vector<DirEntry> out;
  if (dir.kind == NodeKind::kRoot) {
    PTS_ASSIGN_OR_RETURN(auto all, Namespaces());
    for (const NamespaceInfo& ns : all) {
      out.push_back(DirEntry{ns.name, NodeRef{NodeKind::kNamespace, ns.name, {}}, true, DirStat(ns, 1, ns.times)});
    }
    return out;
  }
  if (dir.kind != NodeKind::kNamespace && dir.kind != NodeKind::kIncrement) {
    return InvalidArgument(dir.ToString() + " is not a directory");
  }
  PTS_ASSIGN_OR_RETURN(NamespaceInfo ns, Namespace(dir.ns));
  auto add_file = [&](NodeKind kind, const char* name, const struct stat& st) {
    NodeRef r{kind, dir.ns, dir.key};
    if (!Hidden(r)) out.push_back(DirEntry{name, r, false, st});
  };
  if (dir.kind == NodeKind::kNamespace) {
    struct stat st = FileStat(ns, LayoutText(ns.layout).size(), ns.times);
    st.st_mode |= ns.mode & 0200;
    add_file(NodeKind::kLayoutFile, kLayoutName, st);
  } else {
    // NotFound when the increment is gone.
    PTS_ASSIGN_OR_RETURN(PrefixNodeInfo self, Node(dir.ns, dir.key));
    add_file(NodeKind::kKvFile, kKvName, FileStat(ns, self.bytes, self.times));
    add_file(NodeKind::kTokensFile, kTokensName, FileStat(ns, 4 * self.tokens, self.times));
  }
  PTS_ASSIGN_OR_RETURN(auto children, Children(ns, dir.kind == NodeKind::kIncrement ? dir.key : ChainKey{}));
  for (const PrefixNodeInfo& n : children) {
    out.push_back(DirEntry{n.key.ToHex(), NodeRef{NodeKind::kIncrement, dir.ns, n.key}, true,
                           DirStat(ns, 2 + n.children, n.times)});
  }
  return out;
}

Result<Found> TreeView::MakeNamespace(const std::string& name, uint32_t mode) {
  PTS_RETURN_IF_ERROR(ValidateNamespaceName(name));
  if (client_->GetNamespace(name).ok()) return AlreadyExists("namespace '" + name + "' exists");
  PTS_ASSIGN_OR_RETURN(NamespaceInfo ns,
                       client_->CreateNamespace(name, options_.default_layout, "", mode & 07777, /*exist_ok=*/false));
  Unhide(name, nullptr);
  cache_->Apply(TreeChange{ChangeKind::kNamespace, name, {}, {}});
  Found f;
  f.ref = NodeRef{NodeKind::kNamespace, name, {}};
  f.st = DirStat(ns, 1, ns.times);
  return f;
}

int TreeView::RemoveDir(const NodeRef& dir, const std::string& name) {
  if (dir.kind == NodeKind::kRoot) {
    if (!ValidateNamespaceName(name).ok()) return ENOENT;
    auto top = client_->ListTree(name, {}, false);
    if (!top.ok()) return ErrnoOf(top.status());
    if (!top->empty()) return ENOTEMPTY;
    auto dropped = client_->DropNamespace(name);
    cache_->Apply(TreeChange{ChangeKind::kNamespace, name, {}, {}});
    if (!dropped.ok()) return ErrnoOf(dropped.status());
    Unhide(name, nullptr);
    return 0;
  }
  if (!dir.IsDir()) return ENOTDIR;
  ChainKey key;
  if (!ParseKeyName(name, &key)) {
    if (name == kKvName || name == kTokensName || name == kLayoutName) return ENOTDIR;
    return ENOENT;
  }
  auto inc = client_->GetIncrement(dir.ns, key);
  if (!inc.ok()) return ErrnoOf(inc.status());
  const ChainKey parent = dir.kind == NodeKind::kIncrement ? dir.key : ChainKey{};
  if (inc->node.parent != parent) return ENOENT;
  // kv and tokens do not make an increment "non-empty": they are its
  // contents, not entries of their own (ptstore(7)). Continuations do.
  if (inc->node.children != 0) return ENOTEMPTY;
  auto removed = client_->RemoveByKey(dir.ns, key);
  cache_->Apply(TreeChange{ChangeKind::kRemoved, dir.ns, key, parent});
  if (!removed.ok()) return ErrnoOf(removed.status());
  Unhide(dir.ns, &key);
  return 0;
}

int TreeView::HideFile(const NodeRef& dir, const std::string& name) {
  auto found = Lookup(dir, name);
  if (!found.ok()) return ErrnoOf(found.status());
  if (found->ref.IsDir()) return EISDIR;
  core::MutexLock lock(mu_);
  whiteouts_[found->ref] = std::chrono::steady_clock::now() + options_.whiteout_ttl;
  return 0;
}

Result<struct stat> TreeView::SetTimes(const NodeRef& ref, uint64_t atime_ns, uint64_t mtime_ns) {
  if (ref.kind != NodeKind::kIncrement && ref.kind != NodeKind::kKvFile && ref.kind != NodeKind::kTokensFile) {
    return PermissionDenied(ref.ToString() + ": only an increment's times can be set");
  }
  if (ref.kind != NodeKind::kIncrement && Hidden(ref)) return NotFound(ref.ToString() + " was unlinked in this mount");
  auto set = client_->SetTimes(ref.ns, ref.key, atime_ns, mtime_ns);
  cache_->Apply(TreeChange{ChangeKind::kTimes, ref.ns, ref.key, {}});
  PTS_RETURN_IF_ERROR(set.status());
  return Stat(ref);
}

int TreeView::SetLayout(const std::string& name, const Layout& layout) {
  if (!layout.Validate().ok()) return EINVAL;
  auto ns = client_->GetNamespace(name);
  if (!ns.ok()) return ErrnoOf(ns.status());
  if (ns->layout == layout) return 0;
  if (ns->prefixes != 0 || ns->bytes != 0) return EBUSY;
  if (ns->salted || ns->uid != options_.root_uid) return EPERM;
  auto dropped = client_->DropNamespace(name);
  cache_->Apply(TreeChange{ChangeKind::kNamespace, name, {}, {}});
  if (!dropped.ok()) return ErrnoOf(dropped.status());
  auto created = client_->CreateNamespace(name, layout, "", ns->mode, /*exist_ok=*/false);
  cache_->Apply(TreeChange{ChangeKind::kNamespace, name, {}, {}});
  if (!created.ok()) return ErrnoOf(created.status());
  return 0;
}

}  // namespace ptstore::fs
