// The fixture of the mount tests (fs_test.cc, fs_ioctl_test.cc, fs_times_test.cc): a real
// ptstored of this build, a namespace "ns" in a small layout, and a real
// mount of it (ptstore-fuse), with the shell and system-call helpers the
// tests drive it with.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <sys/xattr.h>
#include <thread>
#include <vector>

#include "ptstore/client.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/generators.h"
#include "tests/testing/mount.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::fstest {

using storage::testkv::SmallLayout;
using testing::Daemon;
using testing::Mount;

using testing::KvOf;
using testing::RandomTokens;

// The mounts of these tests poll the store's changes every kChangePoll (the
// default change_poll_ms) and keep names and attributes in the kernel for an
// hour (the default timeouts). ptstore(7) "Caching" promises that a change
// reaches the kernel's cache within one interval plus one poll; the tests
// allow kChangeBound, four intervals, for a loaded machine. Without the
// pushed invalidations nothing would change there for an hour.
inline constexpr std::chrono::milliseconds kChangePoll{100};
inline constexpr std::chrono::milliseconds kChangeBound = 4 * kChangePoll;

// Polls `seen` until it is true or `bound` has passed; true if it became so.
template <typename F>
inline bool SeenWithin(F&& seen, std::chrono::milliseconds bound = kChangeBound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    if (seen()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// A numeric attribute of the mount's root (user.ptstore.fuse_requests, ...).
inline uint64_t RootCounter(const std::string& mountpoint, const std::string& name) {
  char buf[64] = {};
  ssize_t n = getxattr(mountpoint.c_str(), ("user.ptstore." + name).c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::strtoull(buf, nullptr, 10) : 0;
}

struct ShellResult {
  int rc = -1;
  std::string out;
};

// Runs `cmd` with sh -c, stdout and stderr together.
inline ShellResult Sh(const std::string& cmd) {
  ShellResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline bool HaveTool(const std::string& tool) { return Sh("command -v " + tool).rc == 0; }

inline int RunAs(uid_t uid, gid_t gid, const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(100);
    _exit(fn());
  }
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

// errno of a call that must fail (0 when it succeeded).
template <typename F>
inline int ErrnoOf(F&& f) {
  errno = 0;
  return f() < 0 ? errno : 0;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class FsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
    for (const char* tool : {"ls", "find", "du", "cat", "cmp", "getfattr", "setfattr", "rm", "fusermount3"}) {
      ASSERT_TRUE(HaveTool(tool)) << tool << " is missing (scripts/setup installs it)";
    }
    ASSERT_OK(daemon_.Start());
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    ASSERT_OK(client_->CreateNamespace("ns", layout_));
    auto st = mount_.Start(daemon_.socket_path());
    ASSERT_OK(st);
  }
  void TearDown() override {
    int rc = mount_.Unmount();
    EXPECT_EQ(rc, 0) << mount_.ReadLog();
    EXPECT_FALSE(testing::IsMountPoint(mount_.path()));
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.socket_path = daemon_.socket_path();
    o.rpc_timeout_ms = 10000;
    auto c = Client::Connect(o);
    if (!c.ok()) return nullptr;
    return std::move(*c);
  }

  void Save(const std::string& ns, const std::vector<uint32_t>& toks) {
    auto kv = KvOf(toks, 0, layout_);
    auto s = client_->Save(ns, toks, kv.data(), kv.size());
    ASSERT_OK(s);
  }

  // Three prompts: a and b share 20 tokens (a split common increment and
  // two branches); c is unrelated.
  void SaveTree() {
    a_ = RandomTokens(1, 64);
    b_ = a_;
    for (size_t i = 20; i < b_.size(); ++i) b_[i] = 31999 - b_[i];
    c_ = RandomTokens(7, 32);
    Save("ns", a_);
    Save("ns", b_);
    Save("ns", c_);
  }

  // Mount-relative path of every increment of `ns`.
  std::map<std::string, PrefixNodeInfo> Paths(const std::string& ns) {
    std::map<std::string, PrefixNodeInfo> out;
    auto all = client_->ListTree(ns, {}, true);
    EXPECT_OK(all);
    std::map<ChainKey, PrefixNodeInfo> by_key;
    for (auto& n : *all) by_key[n.key] = n;
    for (auto& n : *all) {
      std::string path = n.key.ToHex();
      for (ChainKey p = n.parent; p != ChainKey{}; p = by_key[p].parent) path = p.ToHex() + "/" + path;
      out[ns + "/" + path] = n;
    }
    return out;
  }

  std::string M(const std::string& rel) const { return mount_.Join(rel); }

  Layout layout_ = SmallLayout();
  Daemon daemon_;
  std::unique_ptr<Client> client_;
  Mount mount_;
  std::vector<uint32_t> a_, b_, c_;
};

// A hybrid model's layout (full + window + state groups) in 4-token blocks.
inline Layout GroupedFsLayout() {
  return Layout::FromGroups({LayoutGroup::Full(2, 2, 16, DType::kBF16), LayoutGroup::Window(2, 2, 16, DType::kBF16, 8),
                             LayoutGroup::State(2, 100)},
                            4);
}

}  // namespace ptstore::fstest
