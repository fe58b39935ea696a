#include "fs/inode_table.h"

#include <algorithm>
#include <utility>

namespace ptstore::fs {

InodeTable::InodeTable() {
  Entry root;
  root.ref = NodeRef{};
  root.nlookup = 1;  // never forgotten
  inodes_.emplace(FUSE_ROOT_ID, root);
  by_ref_.emplace(NodeRef{}, FUSE_ROOT_ID);
}

fuse_ino_t InodeTable::HashIno(const NodeRef& ref) {
  fuse_ino_t ino = NodeRefHash()(ref);
  if (ino <= FUSE_ROOT_ID) ino += 2;  // 0 is invalid, 1 is the root
  return ino;
}

fuse_ino_t InodeTable::Ref(const NodeRef& ref, fuse_ino_t parent, const std::string& name) {
  core::MutexLock lock(mu_);
  auto it = by_ref_.find(ref);
  if (it != by_ref_.end()) {
    Entry& e = inodes_[it->second];
    ++e.nlookup;
    if (parent != 0) {
      e.parent = parent;
      if (e.name != name) e.name = name;
    }
    return it->second;
  }
  fuse_ino_t ino = HashIno(ref);
  while (inodes_.count(ino) != 0 || ino <= FUSE_ROOT_ID) ++ino;  // collision: next free number
  Entry e;
  e.ref = ref;
  e.nlookup = 1;
  e.parent = parent;
  e.name = name;
  inodes_.emplace(ino, std::move(e));
  by_ref_.emplace(ref, ino);
  return ino;
}

fuse_ino_t InodeTable::Peek(const NodeRef& ref) const {
  core::MutexLock lock(mu_);
  auto it = by_ref_.find(ref);
  return it != by_ref_.end() ? it->second : HashIno(ref);
}

std::optional<fuse_ino_t> InodeTable::Find(const NodeRef& ref) const {
  core::MutexLock lock(mu_);
  auto it = by_ref_.find(ref);
  if (it == by_ref_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeRef> InodeTable::Get(fuse_ino_t ino) const {
  core::MutexLock lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return std::nullopt;
  return it->second.ref;
}

void InodeTable::Forget(fuse_ino_t ino, uint64_t nlookup) {
  if (ino == FUSE_ROOT_ID) return;
  core::MutexLock lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  if (it->second.nlookup > nlookup) {
    it->second.nlookup -= nlookup;
    return;
  }
  by_ref_.erase(it->second.ref);
  inodes_.erase(it);
}

std::vector<std::string> InodeTable::UpdateChildren(fuse_ino_t dir, const std::vector<std::string>& names) {
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  core::MutexLock lock(mu_);
  auto it = inodes_.find(dir);
  if (it == inodes_.end()) return {};
  std::vector<std::string> gone;
  std::set_difference(it->second.children.begin(), it->second.children.end(), sorted.begin(), sorted.end(),
                      std::back_inserter(gone));
  it->second.children = std::move(sorted);
  return gone;
}

bool InodeTable::NoteSize(fuse_ino_t ino, uint64_t size) {
  core::MutexLock lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return false;
  const bool changed = it->second.size.has_value() && *it->second.size != size;
  it->second.size = size;
  if (changed) it->second.size_changed = true;
  return changed;
}

bool InodeTable::TakeSizeChanged(fuse_ino_t ino) {
  core::MutexLock lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return false;
  return std::exchange(it->second.size_changed, false);
}

std::vector<InodeTable::Known> InodeTable::All() const {
  core::MutexLock lock(mu_);
  std::vector<Known> out;
  out.reserve(inodes_.size());
  for (const auto& [ino, e] : inodes_) {
    if (ino != FUSE_ROOT_ID) out.push_back(Known{ino, e.parent, e.name});
  }
  return out;
}

size_t InodeTable::size() const {
  core::MutexLock lock(mu_);
  return inodes_.size();
}

}  // namespace ptstore::fs
