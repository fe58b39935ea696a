#include "tests/soak/fs_worker.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/testing/client.h"

namespace ptstore::soak {

namespace {

using storage::testkv::kBpt;

// A file's whole contents; errno on failure.
int ReadAll(const std::string& path, std::vector<uint8_t>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  out->clear();
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return err;
    }
    if (n == 0) break;
    out->insert(out->end(), buf, buf + n);
  }
  ::close(fd);
  return 0;
}

// A text extended attribute of `path` as a number; errno on failure.
int XattrNumber(const std::string& path, const char* name, uint64_t* out) {
  char buf[64];
  const ssize_t n = ::getxattr(path.c_str(), name, buf, sizeof(buf) - 1);
  if (n < 0) return errno;
  buf[n] = '\0';
  *out = std::strtoull(buf, nullptr, 10);
  return 0;
}

// The increment directories below `dir` (not kv, tokens or .layout); errno on failure.
int Subdirs(const std::string& dir, std::vector<std::string>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno;
  out->clear();
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == "kv" || name == "tokens" || name[0] == '.') continue;
    out->push_back(name);
  }
  const int err = errno;
  ::closedir(d);
  return err;
}

}  // namespace

FsWorker::FsWorker(uint32_t node, uint64_t seed, const NodeView& nodes, const MountPoint& mount,
                   Violations& violations, const std::atomic<bool>& stop)
    : node_(node),
      nodes_(nodes),
      mount_(mount),
      violations_(violations),
      stop_(stop),
      rng_(storage::testkv::Mix(seed * 104729 + 77)) {}

void FsWorker::Errno(const std::string& op, const std::string& path, int err) {
  // The tree changes between two calls (other clients remove, the store
  // evicts, saves split increments): a name that is gone, a directory that
  // grew, or one that moved while the kernel resolved its old place
  // (ESTALE, ptstore(7)) is no error.
  if (err == ENOENT || err == ENOTEMPTY || err == ESTALE) {
    ++tally_.ops[op + " " + std::strerror(err)];
    return;
  }
  if (nodes_.ChangedSince(node_, epoch_)) {
    ++tally_.allowed_errors["fs " + op + " " + std::strerror(err)];
    return;
  }
  if (err == ENOMEM) {  // a pin that does not fit in the arena at once
    ++tally_.refused;
    return;
  }
  violations_.Add("fs " + op + " " + path + ": " + std::strerror(err) + " while node " + std::to_string(node_) +
                  " stayed up");
}

Client* FsWorker::ClientFor() {
  if (client_ && client_epoch_ == epoch_) return client_.get();
  client_.reset();
  const NodeView::Node n = nodes_.Get(node_);
  auto c = testing::ConnectTo(n.socket);
  if (!c.ok()) {
    if (!nodes_.ChangedSince(node_, epoch_)) {
      violations_.Add("fs worker: cannot connect to node " + std::to_string(node_) + ": " + c.status().ToString());
    }
    return nullptr;
  }
  client_ = std::move(*c);
  client_epoch_ = epoch_;
  return client_.get();
}

bool FsWorker::Walk(const std::string& root, int max_depth, Reached* out) {
  out->ns = &kSoakNamespaces[rng_() % 2];
  out->dir = root + "/" + out->ns->name;
  out->tokens.clear();
  out->depth = 0;
  std::vector<std::string> children;
  std::vector<uint8_t> tokens_file, kv;
  while (out->depth < max_depth) {
    clock_.Begin("fs_readdir", out->dir, tally_);
    int err = Subdirs(out->dir, &children);
    clock_.End(tally_);
    if (err != 0) {
      Errno("readdir", out->dir, err);
      return false;
    }
    if (children.empty()) return true;
    const std::string dir = out->dir + "/" + children[rng_() % children.size()];
    // The tokens, the kv, then where the increment is: a save that splits
    // it between these reads, or a path the kernel still resolves at the
    // increment's place before such a split (names are cached for a
    // second), shows as a disagreement; it is read again once, then left.
    const size_t start = out->tokens.size();
    bool placed = false;
    for (int attempt = 0; attempt < 2 && !placed; ++attempt) {
      uint64_t at = 0, count = 0;
      clock_.Begin("fs_read", dir, tally_);
      err = ReadAll(dir + "/tokens", &tokens_file);
      if (err == 0) err = ReadAll(dir + "/kv", &kv);
      if (err == 0) err = XattrNumber(dir, "user.ptstore.start_token", &at);
      if (err == 0) err = XattrNumber(dir, "user.ptstore.tokens", &count);
      clock_.End(tally_);
      if (err != 0) {
        Errno("read", dir, err);
        return false;
      }
      placed = at == start && count * 4 == tokens_file.size() && count * kBpt == kv.size();
    }
    if (!placed) {
      ++tally_.ops["fs_read moved"];
      return false;
    }
    const size_t n = tokens_file.size() / 4;
    if (n == 0 || n % out->ns->block_tokens != 0) {
      violations_.Add("fs: " + dir + " holds " + std::to_string(n) + " tokens, not whole blocks of " +
                      std::to_string(out->ns->block_tokens));
      return false;
    }
    out->tokens.resize(start + n);
    std::memcpy(out->tokens.data() + start, tokens_file.data(), tokens_file.size());
    const std::vector<uint8_t> want = storage::testkv::Kv(out->tokens, start, start + n);
    if (std::memcmp(want.data(), kv.data(), kv.size()) != 0) {
      violations_.Add("fs: WRONG BYTES in " + dir + "/kv (tokens " + std::to_string(start) + " to " +
                      std::to_string(start + n) + " of the prefix its path names)");
      return false;
    }
    tally_.Verified(n, kBpt);
    out->dir = dir;
    ++out->depth;
    if (rng_() % 4 == 0) return true;  // stop somewhere on the way down, too
  }
  return true;
}

void FsWorker::LoadByPath(const std::string& root) {
  Reached r;
  if (!Walk(root, 6, &r) || r.depth == 0) return;
  Client* c = ClientFor();
  if (c == nullptr) return;
  std::vector<uint8_t> out(r.tokens.size() * kBpt);
  clock_.Begin("fs_load_path", r.dir, tally_);
  auto n = c->LoadPath(r.dir, out.data(), out.size());
  clock_.End(tally_);
  if (!n.ok()) {
    if (n.status().code() == Code::kNotFound) {
      ++tally_.ops["fs_load_path gone"];  // removed or evicted since the walk
    } else if (nodes_.ChangedSince(node_, epoch_)) {
      ++tally_.allowed_errors["fs_load_path " + std::string(CodeName(n.status().code()))];
      client_.reset();
    } else if (n.status().code() == Code::kResourceExhausted) {
      ++tally_.refused;
    } else {
      violations_.Add("load by path " + r.dir + ": " + n.status().ToString() + " while node " +
                      std::to_string(node_) + " stayed up");
    }
    return;
  }
  // The prefix ending at the increment, wherever it is now: the walk's
  // tokens only if it still ends where the walk found it.
  uint64_t at = 0, count = 0;
  if (XattrNumber(r.dir, "user.ptstore.start_token", &at) != 0 ||
      XattrNumber(r.dir, "user.ptstore.tokens", &count) != 0 || at + count != r.tokens.size()) {
    ++tally_.ops["fs_load_path moved"];
    return;
  }
  const std::string wrong = CheckKv(r.tokens, r.ns->block_tokens, *n, out.data());
  if (!wrong.empty() || *n != r.tokens.size()) {
    violations_.Add("load by path " + r.dir + " gave " + std::to_string(*n) + " of the " +
                    std::to_string(r.tokens.size()) + " tokens its path names" + (wrong.empty() ? "" : ": " + wrong));
    return;
  }
  tally_.Verified(*n, kBpt);
}

void FsWorker::RemoveTree(const std::string& root) {
  Reached r;
  if (!Walk(root, 1 + static_cast<int>(rng_() % 4), &r) || r.depth == 0) return;
  std::error_code ec;
  clock_.Begin("fs_rm_r", r.dir, tally_);
  std::filesystem::remove_all(r.dir, ec);
  clock_.End(tally_);
  if (ec) Errno("rm -r", r.dir, ec.value());
}

void FsWorker::Du(const std::string& root) {
  const std::string ns = root + "/" + kSoakNamespaces[rng_() % 2].name;
  std::error_code ec;
  clock_.Begin("fs_du", ns, tally_);
  auto it = std::filesystem::recursive_directory_iterator(ns, ec);
  size_t seen = 0;
  for (; !ec && it != std::filesystem::recursive_directory_iterator() && seen < 2000; it.increment(ec), ++seen) {
    struct stat st{};
    if (::lstat(it->path().c_str(), &st) != 0 && errno != ENOENT) {
      const int err = errno;
      clock_.End(tally_);
      return Errno("stat", it->path(), err);
    }
  }
  clock_.End(tally_);
  if (ec) Errno("du", ns, ec.value());
}

void FsWorker::Run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    const NodeView::Node n = nodes_.Get(node_);
    const std::string root = mount_.Get();
    if (!n.up || root.empty()) {
      ++tally_.skipped_down;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    epoch_ = n.epoch;
    const uint32_t r = static_cast<uint32_t>(rng_() % 100);
    Reached reached;
    if (r < 55) {
      Walk(root, 8, &reached);
    } else if (r < 80) {
      LoadByPath(root);
    } else if (r < 90) {
      RemoveTree(root);
    } else {
      Du(root);
    }
  }
  client_.reset();
}

}  // namespace ptstore::soak
