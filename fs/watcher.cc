#include "fs/watcher.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "fs/node.h"

namespace ptstore::fs {

ChangeWatcher::ChangeWatcher(Client* client, std::chrono::milliseconds interval, MetaCache* cache, InodeTable* inodes,
                             Invalidator* invalidator, core::SharedMutex* reply_mu)
    : client_(client),
      interval_(interval),
      cache_(cache),
      inodes_(inodes),
      invalidator_(invalidator),
      reply_mu_(reply_mu) {}

ChangeWatcher::~ChangeWatcher() { Stop(); }

void ChangeWatcher::Start() {
  Poll();
  thread_ = std::thread([this] { Run(); });
}

void ChangeWatcher::Stop() {
  {
    core::MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void ChangeWatcher::Run() {
  core::UniqueLock lock(mu_);
  for (;;) {
    if (cv_.WaitFor(lock, interval_, [&]() REQUIRES(mu_) { return stop_; })) return;
    lock.Unlock();
    Poll();
    lock.Lock();
  }
}

void ChangeWatcher::Poll() {
  for (;;) {
    polls_.fetch_add(1, std::memory_order_relaxed);
    auto r = client_->Changes(epoch_, next_);
    if (!r.ok()) {
      if (healthy()) {
        // Nothing can be vouched for now: no cache, short kernel timeouts,
        // and a full invalidation once the store answers again.
        core::WriterLock lock(*reply_mu_);
        healthy_.store(false, std::memory_order_release);
        cache_->SetEnabled(false);
      }
      epoch_ = 0;
      return;
    }
    if (r->lost) {
      {
        core::WriterLock lock(*reply_mu_);
        cache_->SetEnabled(true);  // empty, a new generation
        healthy_.store(true, std::memory_order_release);
      }
      // The first poll of a mount finds nothing cached; any later one may.
      if (synced_before_) InvalidateAll();
      synced_before_ = true;
      epoch_ = r->epoch;
      next_ = r->next;
      if (!r->more) return;
      continue;
    }
    Apply(*r);
    epoch_ = r->epoch;
    next_ = r->next;
    if (!r->more) return;
  }
}

void ChangeWatcher::Apply(const TreeChanges& batch) {
  if (batch.changes.empty()) return;
  changes_.fetch_add(batch.changes.size(), std::memory_order_relaxed);
  std::set<std::pair<fuse_ino_t, std::string>> entries;
  std::map<fuse_ino_t, bool> inodes;  // ino -> pages too (not only attributes)
  auto inode = [&](const NodeRef& ref, bool pages) {
    if (auto ino = inodes_->Find(ref)) inodes[*ino] |= pages;
  };
  auto dir_of = [&](const std::string& ns, const ChainKey& key) {
    return key == ChainKey{} ? NodeRef{NodeKind::kNamespace, ns, {}} : NodeRef{NodeKind::kIncrement, ns, key};
  };
  auto increment = [&](const std::string& ns, const ChainKey& key, bool pages) {
    for (NodeKind k : {NodeKind::kIncrement, NodeKind::kKvFile, NodeKind::kTokensFile}) inode(NodeRef{k, ns, key}, pages);
  };
  // What to invalidate is worked out before the cache forgets the parents.
  for (const TreeChange& c : batch.changes) {
    const NodeRef ns_dir{NodeKind::kNamespace, c.ns, {}};
    inode(NodeRef{}, c.kind == ChangeKind::kNamespace);  // the root: times; its listing for a namespace
    switch (c.kind) {
      case ChangeKind::kNamespace:
        entries.insert({FUSE_ROOT_ID, c.ns});
        inode(ns_dir, true);
        inode(NodeRef{NodeKind::kLayoutFile, c.ns, {}}, true);
        continue;
      case ChangeKind::kAdded:
        inode(dir_of(c.ns, c.parent), true);
        break;
      case ChangeKind::kRemoved:
        if (auto dir = inodes_->Find(dir_of(c.ns, c.parent))) entries.insert({*dir, c.key.ToHex()});
        inode(dir_of(c.ns, c.parent), true);
        increment(c.ns, c.key, true);
        break;
      case ChangeKind::kTimes: {
        ChainKey k = c.key;
        for (size_t guard = 0; k != ChainKey{} && guard < (1u << 20); ++guard) {
          increment(c.ns, k, false);
          auto p = cache_->ParentOf(c.ns, k);
          if (!p) break;
          k = *p;
        }
        break;
      }
    }
    inode(ns_dir, false);
    inode(NodeRef{NodeKind::kLayoutFile, c.ns, {}}, false);
  }
  {
    core::WriterLock lock(*reply_mu_);
    for (const TreeChange& c : batch.changes) cache_->Apply(c);
  }
  for (const auto& [dir, name] : entries) invalidator_->Entry(dir, name);
  for (const auto& [ino, pages] : inodes) {
    if (pages) {
      invalidator_->Inode(ino);
    } else {
      invalidator_->Attributes(ino);
    }
  }
}

void ChangeWatcher::InvalidateAll() {
  resets_.fetch_add(1, std::memory_order_relaxed);
  for (const InodeTable::Known& k : inodes_->All()) {
    if (k.parent != 0 && !k.name.empty()) invalidator_->Entry(k.parent, k.name);
    invalidator_->Inode(k.ino);
  }
}

}  // namespace ptstore::fs
