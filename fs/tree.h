// The tree a PTStore mount shows (ptstore(7)), resolved against the store.
//
//   /                         one directory per namespace
//   /<ns>/.layout             the namespace's layout, Layout::ToString() + "\n";
//                             a layout written into it is SetLayout
//   /<ns>/<key>/              a top-level increment (key: 32 hex digits)
//   /<ns>/<key>/kv            its own bytes (node.bytes), read-only
//   /<ns>/<key>/tokens        its token ids, uint32 little-endian
//   /<ns>/<key>/<key>/        a continuation, and so on
//
// Directory modes come from the namespace: its mode bits, with the search
// (x) bit set wherever the read bit is (a namespace's read bit means "may
// look up and load"); files get the read bits only (.layout also the
// owner's write bit, from the namespace's mode). Owner and group are the
// namespace's. The root is owned by the mount daemon's user, mode 0755.
//
// Structure edits: mkdir at the root creates a namespace; rmdir removes an
// increment with no continuations (or drops a namespace with no
// increments); unlink of kv, tokens or .layout hides the file from this
// mount (a "whiteout", so that `rm -r` works) without touching the store.
// touch(1) of an increment sets its times (SetTimes). Everything else that
// would change the tree is refused (fs/change_ops.cc).
//
// Answers come from the mount's MetaCache (fs/meta_cache.h) when it has
// them, else from the store (one RPC, whose answer is put there): a listing
// of a directory puts every child's entry, and in a namespace of at most
// `prefetch_limit` increments the directory's whole subtree, so the lookups
// and getattrs of a walk that follow cost no round trip. The change watcher
// (fs/watcher.h) keeps the cache exact; this mount's own changes (rmdir,
// mkdir, layout, touch) drop what they change at once.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "fs/meta_cache.h"
#include "fs/node.h"
#include "ptstore/client.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"

namespace ptstore::fs {

struct TreeOptions {
  Layout default_layout = MistralLayout();  // namespaces made by mkdir
  uint32_t root_uid = 0;
  uint32_t root_gid = 0;
  // How long an unlinked kv/tokens/.layout stays hidden when its directory
  // is not removed after it (an `rm kv` on its own).
  std::chrono::seconds whiteout_ttl{600};
  // Listings in namespaces of at most this many increments fetch the
  // directory's whole subtree (ListTree recursive); 0: never.
  uint64_t prefetch_limit = 262144;
};

// A node found in the store, with its attributes (st_ino left 0).
struct Found {
  NodeRef ref;
  struct stat st {};
};

struct DirEntry {
  std::string name;
  NodeRef ref;
  bool dir = false;
  struct stat st {};  // its attributes (st_ino left 0), for readdirplus
};

class TreeView {
 public:
  // `cache` must outlive the view.
  TreeView(Client* client, MetaCache* cache, TreeOptions options);

  // Attributes of `ref`. NotFound when it is gone (or hidden).
  Result<struct stat> Stat(const NodeRef& ref);
  // The child `name` of directory `dir`. NotFound when there is none;
  // InvalidArgument ("not a directory") when `dir` is a file.
  Result<Found> Lookup(const NodeRef& dir, const std::string& name);
  // The entries of directory `dir` (without "." and ".."), with their
  // attributes.
  Result<std::vector<DirEntry>> List(const NodeRef& dir);

  // mkdir NAME at the root: creates namespace NAME with the default layout
  // and `mode` (already masked by the caller's umask). AlreadyExists when
  // it exists; InvalidArgument for a bad name.
  Result<Found> MakeNamespace(const std::string& name, uint32_t mode);
  // rmdir: `name` in `dir` must be a namespace (dropped only when it has no
  // increments) or an increment (removed, with anything saved under it
  // meanwhile, only when it has no continuations). Returns 0 or an errno:
  // ENOTEMPTY, ENOTDIR (a file), ENOENT, or the store's error.
  int RemoveDir(const NodeRef& dir, const std::string& name);
  // unlink: hides kv/tokens/.layout in this mount (see the header comment).
  // Returns 0 or an errno: EISDIR (a directory), ENOENT.
  int HideFile(const NodeRef& dir, const std::string& name) EXCLUDES(mu_);

  // touch(1) on an increment's directory, kv or tokens: sets the
  // increment's atime and/or mtime (0: leave it; Client::SetTimes) and
  // returns its attributes afterwards. PermissionDenied for anything else.
  Result<struct stat> SetTimes(const NodeRef& ref, uint64_t atime_ns, uint64_t mtime_ns);

  // The store's view of a namespace / an increment (from the cache when it
  // has it; Increment, with the token ids, always asks the store).
  Result<NamespaceInfo> Namespace(const std::string& ns);
  Result<PrefixNodeInfo> Node(const std::string& ns, const ChainKey& key);
  Result<IncrementInfo> Increment(const std::string& ns, const ChainKey& key);
  // Replaces the layout of an empty, unsalted namespace (drop + create with
  // the same mode). Returns 0 or an errno: EBUSY once anything is stored in
  // it, EPERM for a salted one or one owned by another user than the mount
  // daemon's (re-creating it would change its owner), or the store's error.
  int SetLayout(const std::string& ns, const Layout& layout);

  // The contents of a .layout file.
  static std::string LayoutText(const Layout& layout) { return layout.ToString() + "\n"; }
  Client* client() const { return client_; }

 private:
  Result<std::vector<NamespaceInfo>> Namespaces();
  // The children of `parent` (zero: the top level) in namespace `ns`.
  Result<std::vector<PrefixNodeInfo>> Children(const NamespaceInfo& ns, const ChainKey& parent);
  struct stat RootStat(const std::vector<NamespaceInfo>& all) const;
  struct stat DirStat(const NamespaceInfo& ns, uint64_t nlink, const Times& times) const;
  struct stat FileStat(const NamespaceInfo& ns, uint64_t size, const Times& times) const;
  bool Hidden(const NodeRef& file) EXCLUDES(mu_);
  void Unhide(const std::string& ns, const ChainKey* key) EXCLUDES(mu_);

  Client* const client_;
  MetaCache* const cache_;
  const TreeOptions options_;
  core::Mutex mu_;
  std::unordered_map<NodeRef, std::chrono::steady_clock::time_point, NodeRefHash> whiteouts_ GUARDED_BY(mu_);
  const uint64_t mounted_at_;  // WallClockNs()
};

// "ab12..." (32 hex digits) -> key; nullopt for anything else.
bool ParseKeyName(const std::string& name, ChainKey* key);

}  // namespace ptstore::fs
