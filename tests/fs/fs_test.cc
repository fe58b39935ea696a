// The filesystem view (ptstore(7)) on a real mount: ptstore-fuse of this
// build in front of a real ptstored, driven with the shell tools users run
// (ls, find, du, cat, cmp, getfattr, rm) and with system calls. The ioctls
// (PTSTORE_IOC_*, Client::LoadPath) are in fs_ioctl_test.cc; the fixture in
// fs_fixture.h.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "ptstore/client.h"
#include "ptstore/ioctl.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/generators.h"
#include "tests/testing/mount.h"
#include "tests/testing/temp_dir.h"
#include "tests/fs/fs_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using namespace fstest;  // NOLINT: the shared mount fixture
using storage::testkv::SmallLayout;
using testing::Daemon;
using testing::Mount;
using testing::RandomTokens;

TEST_F(FsTest, LsAndFindShowTheTree) {
  SaveTree();
  auto paths = Paths("ns");
  ASSERT_EQ(paths.size(), 4u);  // common part, two branches, c
  auto ls = Sh("ls -R " + M(""));
  ASSERT_EQ(ls.rc, 0) << ls.out;
  for (auto& [p, n] : paths) EXPECT_NE(ls.out.find(n.key.ToHex()), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("tokens"), std::string::npos);

  auto find = Sh("cd " + M("") + " && find . -name kv | LC_ALL=C sort");
  ASSERT_EQ(find.rc, 0) << find.out;
  std::set<std::string> lines;
  for (auto& [p, n] : paths) lines.insert("./" + p + "/kv\n");
  std::string expected;
  for (auto& l : lines) expected += l;
  EXPECT_EQ(find.out, expected);

  auto layout = Sh("cat " + M("ns/.layout"));
  EXPECT_EQ(layout.out, layout_.ToString() + "\n");
  // Directories: namespace owner and mode; files read-only.
  struct stat st {};
  ASSERT_EQ(stat(M("ns").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(M(paths.begin()->first + "/kv").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), paths.begin()->second.bytes);
  EXPECT_EQ(static_cast<uint64_t>(st.st_blocks), (paths.begin()->second.bytes + 511) / 512);
  // A name that is not a child of this directory is not there.
  EXPECT_NE(stat(M("ns/" + paths.rbegin()->second.key.ToHex() + "/" + paths.begin()->second.key.ToHex()).c_str(), &st),
            0);
}

TEST_F(FsTest, DuAndDfShowRealSizes) {
  SaveTree();
  uint64_t expected = layout_.ToString().size() + 1;  // .layout
  for (auto& [p, n] : Paths("ns")) expected += n.bytes + 4 * n.tokens;
  auto du = Sh("du -sb " + M("ns"));
  ASSERT_EQ(du.rc, 0) << du.out;
  EXPECT_EQ(std::stoull(du.out), expected) << du.out;
  auto ns = client_->GetNamespace("ns");
  ASSERT_OK(ns);
  auto kv_only = Sh("find " + M("ns") + " -name kv -exec cat {} + | wc -c");
  EXPECT_EQ(std::stoull(kv_only.out), ns->bytes);

  struct statvfs vfs {};
  ASSERT_EQ(statvfs(M("").c_str(), &vfs), 0);
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(vfs.f_bsize, 4096u);
  EXPECT_EQ(vfs.f_blocks * 4096, stats->arena_bytes + stats->ssd_capacity);
  EXPECT_EQ((vfs.f_blocks - vfs.f_bfree) * 4096, (stats->used_bytes + stats->ssd_file_bytes + 4095) / 4096 * 4096);
}

TEST_F(FsTest, KvAndTokensAreByteExact) {
  SaveTree();
  testing::TempDir tmp;
  for (auto& [path, n] : Paths("ns")) {
    auto pin = client_->PinIncrement("ns", n.key);
    ASSERT_OK(pin);
    std::string want;
    for (const Extent& e : pin->extents()) want.append(reinterpret_cast<const char*>(pin->data(e)), e.length);
    ASSERT_EQ(want.size(), n.bytes);
    std::string ref = tmp.Join("want");
    std::ofstream(ref, std::ios::binary).write(want.data(), want.size());
    auto cmp = Sh("cat " + M(path + "/kv") + " | cmp - " + ref);
    EXPECT_EQ(cmp.rc, 0) << cmp.out;
    EXPECT_EQ(Sh("cmp " + M(path + "/kv") + " " + ref).rc, 0);

    auto inc = client_->GetIncrement("ns", n.key);
    ASSERT_OK(inc);
    std::string toks = ReadAll(M(path + "/tokens"));
    ASSERT_EQ(toks.size(), 4 * inc->tokens.size());
    for (size_t i = 0; i < inc->tokens.size(); ++i) {
      const auto* p = reinterpret_cast<const uint8_t*>(toks.data() + 4 * i);
      EXPECT_EQ(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24, inc->tokens[i]);
    }
    // And the bytes are the KV of those tokens at those positions.
    EXPECT_EQ(want, std::string(reinterpret_cast<const char*>(KvOf(inc->tokens, n.start_token, layout_).data()),
                                n.bytes));
  }
}

// Whether `got` holds exactly `want`; on a difference, sizes and the first
// differing offset instead of two dumps of binary.
::testing::AssertionResult SameBytes(const std::string& got, const std::vector<uint8_t>& want) {
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t i = 0;
  while (i < got.size() && i < want.size() && static_cast<uint8_t>(got[i]) == want[i]) ++i;
  return ::testing::AssertionFailure() << got.size() << " bytes, want " << want.size() << "; first difference at "
                                       << i;
}

// A save that branches inside an increment splits it: the increment keeps
// its key (so its directory's name) but now holds only its tail, under a new
// parent. Files read (and cached by the kernel) before the split must show
// the new contents after it, not the pages cached from the old ones.
TEST_F(FsTest, AnIncrementSplitByALaterSaveShowsItsNewBytesNotCachedOnes) {
  const auto a = RandomTokens(21, 64);
  Save("ns", a);
  auto before = Paths("ns");
  ASSERT_EQ(before.size(), 1u);
  const std::string whole = before.begin()->first;
  const std::string key = before.begin()->second.key.ToHex();
  ASSERT_TRUE(SameBytes(ReadAll(M(whole + "/kv")), KvOf(a, 0, layout_)));
  ASSERT_EQ(ReadAll(M(whole + "/tokens")).size(), 64u * 4);

  auto b = a;
  for (size_t i = 20; i < b.size(); ++i) b[i] = 31999 - b[i];
  Save("ns", b);  // splits a's increment at token 20
  std::string moved;
  for (const auto& [path, n] : Paths("ns")) {
    if (n.key.ToHex() == key) moved = path;
  }
  ASSERT_NE(moved, "");
  ASSERT_NE(moved, whole);
  const std::span<const uint32_t> tail = std::span(a).subspan(20);
  const auto want = KvOf(tail, 20, layout_);
  EXPECT_TRUE(SameBytes(ReadAll(M(moved + "/kv")), want));
  const std::string toks = ReadAll(M(moved + "/tokens"));
  ASSERT_EQ(toks.size(), tail.size() * 4);
  EXPECT_EQ(0, std::memcmp(toks.data(), tail.data(), toks.size()));
  // The old path is gone (or, while the kernel still trusts its cached name,
  // shows the new contents too: never the old bytes).
  const std::string old_kv = ReadAll(M(whole + "/kv"));
  EXPECT_TRUE(old_kv.empty() || SameBytes(old_kv, want));
}

TEST_F(FsTest, GetfattrShowsEveryAttribute) {
  SaveTree();
  for (auto& [path, n] : Paths("ns")) {
    auto r = Sh("getfattr --absolute-names -d -m user.ptstore " + M(path));
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::map<std::string, std::string> want = {
        {"tokens", std::to_string(n.tokens)},       {"bytes", std::to_string(n.bytes)},
        {"start_token", std::to_string(n.start_token)}, {"owner", std::to_string(n.tensor.owner().value)},
        {"tier", "dram"},                           {"hits", std::to_string(n.hits)},
        {"replicas", "0"},                          {"chain_key", n.key.ToHex()},
        {"cache_class", "owned"},
    };
    for (auto& [k, v] : want) {
      EXPECT_NE(r.out.find("user.ptstore." + k + "=\"" + v + "\""), std::string::npos) << k << " in " << r.out;
    }
    auto one = Sh("getfattr --absolute-names --only-values -n user.ptstore.bytes " + M(path + "/kv"));
    EXPECT_EQ(one.out, std::to_string(n.bytes));
  }
  auto ns = Sh("getfattr --absolute-names --only-values -n user.ptstore.layout " + M("ns"));
  EXPECT_EQ(ns.out, layout_.ToString());
  std::vector<char> list(4096);
  ssize_t len = listxattr(M("ns").c_str(), list.data(), list.size());
  ASSERT_GT(len, 0);
  EXPECT_NE(std::string(list.data(), len).find("user.ptstore.layout"), std::string::npos);
  char v[8];
  EXPECT_EQ(ErrnoOf([&] { return getxattr(M("ns").c_str(), "user.nope", v, sizeof(v)); }), ENODATA);
}

TEST_F(FsTest, RmRecursiveRemovesASubtreeAndANamespace) {
  SaveTree();
  auto paths = Paths("ns");
  // The common part of a and b: the only top-level node with children.
  std::string common;
  for (auto& [p, n] : paths) {
    if (n.children == 2) common = p;
  }
  ASSERT_FALSE(common.empty());
  auto rm = Sh("rm -r " + M(common));
  ASSERT_EQ(rm.rc, 0) << rm.out;
  auto la = client_->Lookup("ns", a_);
  ASSERT_OK(la);
  EXPECT_EQ(la->matched_tokens, 0u);
  EXPECT_EQ(client_->Lookup("ns", b_)->matched_tokens, 0u);
  EXPECT_EQ(client_->Lookup("ns", c_)->matched_tokens, 32u);
  struct stat st {};
  EXPECT_NE(stat(M(common).c_str(), &st), 0);

  // rm -r of a whole namespace ends with it dropped.
  rm = Sh("rm -r " + M("ns"));
  ASSERT_EQ(rm.rc, 0) << rm.out;
  EXPECT_ERROR(client_->GetNamespace("ns"), Code::kNotFound);
  EXPECT_EQ(Sh("ls " + M("")).out, "");
}

TEST_F(FsTest, RmdirOfIncrementsAndUnlinkWhiteouts) {
  SaveTree();
  auto paths = Paths("ns");
  std::string common, leaf;
  for (auto& [p, n] : paths) {
    if (n.children == 2) common = p;
    if (n.children == 0 && n.parent != ChainKey{}) leaf = p;
  }
  EXPECT_EQ(ErrnoOf([&] { return rmdir(M(common).c_str()); }), ENOTEMPTY);
  EXPECT_EQ(ErrnoOf([&] { return rmdir(M(common + "/kv").c_str()); }), ENOTDIR);
  EXPECT_EQ(ErrnoOf([&] { return unlink(M(common).c_str()); }), EISDIR);
  // unlink of kv hides it in this mount; the bytes stay in the store.
  EXPECT_EQ(unlink(M(leaf + "/kv").c_str()), 0);
  struct stat st {};
  EXPECT_EQ(ErrnoOf([&] { return stat(M(leaf + "/kv").c_str(), &st); }), ENOENT);
  EXPECT_EQ(Sh("ls " + M(leaf)).out, "tokens\n");
  EXPECT_EQ(client_->Lookup("ns", a_)->matched_tokens + client_->Lookup("ns", b_)->matched_tokens, 128u);
  // A leaf's rmdir removes it (kv and tokens are its contents).
  EXPECT_EQ(rmdir(M(leaf).c_str()), 0);
  EXPECT_EQ(client_->Lookup("ns", a_)->matched_tokens + client_->Lookup("ns", b_)->matched_tokens, 84u);
  EXPECT_EQ(ErrnoOf([&] { return rmdir(M("ns").c_str()); }), ENOTEMPTY);
}

TEST_F(FsTest, MkdirCreatesANamespaceAndRmdirDropsIt) {
  ASSERT_EQ(mkdir(M("fresh").c_str(), 0750), 0);
  auto ns = client_->GetNamespace("fresh");
  ASSERT_OK(ns);
  EXPECT_EQ(ns->layout, MistralLayout());
  EXPECT_EQ(ns->mode, 0750u);
  EXPECT_EQ(ReadAll(M("fresh/.layout")), MistralLayout().ToString() + "\n");
  // Another layout, before anything is saved.
  auto set = Sh("setfattr -n user.ptstore.layout -v 'layers=2 kv_heads=2 head_dim=16 dtype=bf16 block_tokens=8' " +
                M("fresh"));
  ASSERT_EQ(set.rc, 0) << set.out;
  ns = client_->GetNamespace("fresh");
  EXPECT_EQ(ns->layout, SmallLayout(8));
  EXPECT_EQ(ns->mode, 0750u);
  EXPECT_EQ(ReadAll(M("fresh/.layout")), SmallLayout(8).ToString() + "\n");
  EXPECT_EQ(ErrnoOf([&] { return setxattr(M("fresh").c_str(), "user.ptstore.layout", "bogus", 5, 0); }), EINVAL);
  // Once something is stored the layout is fixed.
  Save("ns", RandomTokens(3, 8));
  EXPECT_EQ(ErrnoOf([&] {
              std::string l = MistralLayout().ToString();
              return setxattr(M("ns").c_str(), "user.ptstore.layout", l.data(), l.size(), 0);
            }),
            EBUSY);
  EXPECT_EQ(ErrnoOf([&] { return mkdir(M("fresh").c_str(), 0755); }), EEXIST);
  EXPECT_EQ(ErrnoOf([&] { return mkdir(M("bad name").c_str(), 0755); }), EINVAL);
  EXPECT_EQ(rmdir(M("fresh").c_str()), 0);
  EXPECT_ERROR(client_->GetNamespace("fresh"), Code::kNotFound);
  EXPECT_EQ(ErrnoOf([&] { return rmdir(M("ns").c_str()); }), ENOTEMPTY);
}

// NAME_MAX of the mount is the longest namespace name; a longer name is POSIX's ENAMETOOLONG wherever a name
// is looked up or made (pjdfstest mkdir/02.t, rmdir/02.t), not EINVAL.
TEST_F(FsTest, NamesLongerThanNameMaxAreENameTooLong) {
  struct statvfs sv {};
  ASSERT_EQ(statvfs(M("").c_str(), &sv), 0);
  EXPECT_EQ(sv.f_namemax, kMaxNamespaceNameBytes);
  EXPECT_EQ(pathconf(M("").c_str(), _PC_NAME_MAX), static_cast<long>(kMaxNamespaceNameBytes));
  const std::string longest(kMaxNamespaceNameBytes, 'n');
  ASSERT_EQ(mkdir(M(longest).c_str(), 0755), 0);
  EXPECT_EQ(rmdir(M(longest).c_str()), 0);
  const std::string too_long = longest + "x";
  EXPECT_EQ(ErrnoOf([&] { return mkdir(M(too_long).c_str(), 0755); }), ENAMETOOLONG);
  EXPECT_EQ(ErrnoOf([&] { return rmdir(M(too_long).c_str()); }), ENAMETOOLONG);
  struct stat st {};
  EXPECT_EQ(ErrnoOf([&] { return stat(M(too_long).c_str(), &st); }), ENAMETOOLONG);
  Save("ns", RandomTokens(3, 8));
  EXPECT_EQ(ErrnoOf([&] { return open(M("ns/" + too_long).c_str(), O_RDONLY); }), ENAMETOOLONG);
  EXPECT_EQ(ErrnoOf([&] { return unlink(M("ns/" + too_long).c_str()); }), ENAMETOOLONG);
}

// Writes `text` into `path` with one write(2) after open(O_WRONLY|O_TRUNC);
// 0 or the errno of the first call that failed.
int WriteFile(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = n < 0 ? errno : n == static_cast<ssize_t>(text.size()) ? 0 : EIO;
  close(fd);
  return err;
}

TEST_F(FsTest, GroupedLayoutsInDotLayoutAndTheLayoutXattr) {
  const Layout grouped = GroupedFsLayout();
  ASSERT_OK(grouped.Validate());
  ASSERT_OK(client_->CreateNamespace("hybrid", grouped));
  // .layout shows the text form, the xattr the same.
  EXPECT_EQ(ReadAll(M("hybrid/.layout")), grouped.ToString() + "\n");
  EXPECT_EQ(Layout::Parse(ReadAll(M("hybrid/.layout"))).value(), grouped);
  auto attr = Sh("getfattr --absolute-names --only-values -n user.ptstore.layout " + M("hybrid"));
  EXPECT_EQ(attr.out, grouped.ToString());
  struct stat st {};
  ASSERT_EQ(stat(M("hybrid/.layout").c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), grouped.ToString().size() + 1);
  EXPECT_EQ(st.st_mode & 07777, 0644u);  // the owner of a 0755 namespace may write its layout

  // Writing a grouped layout into .layout of an empty namespace gives it
  // that layout, as the xattr does.
  ASSERT_EQ(mkdir(M("fresh").c_str(), 0750), 0);
  EXPECT_EQ(WriteFile(M("fresh/.layout"), grouped.ToString() + "\n"), 0);
  EXPECT_EQ(client_->GetNamespace("fresh")->layout, grouped);
  EXPECT_EQ(client_->GetNamespace("fresh")->mode, 0750u);
  EXPECT_EQ(ReadAll(M("fresh/.layout")), grouped.ToString() + "\n");
  // And back to a dense one, with the shell.
  auto echo = Sh("echo '" + SmallLayout(8).ToString() + "' > " + M("fresh/.layout"));
  ASSERT_EQ(echo.rc, 0) << echo.out;
  EXPECT_EQ(client_->GetNamespace("fresh")->layout, SmallLayout(8));
  EXPECT_EQ(ReadAll(M("fresh/.layout")), SmallLayout(8).ToString() + "\n");

  // A bad group text: EINVAL, and nothing changes.
  for (const std::string bad :
       {"block_tokens=4 group=full:layers=2:kv_heads=2:head_dim=16:dtype=bf16 group=mamba:layers=2",
        "block_tokens=4 group=window:layers=2:kv_heads=2:head_dim=16:dtype=bf16",
        "block_tokens=4 group=state:layers=2:bytes=0 group=full:layers=2:kv_heads=2:head_dim=16:dtype=bf16",
        "block_tokens=4 layers=2 group=state:layers=2:bytes=10"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(WriteFile(M("fresh/.layout"), bad + "\n"), EINVAL);
    EXPECT_EQ(ErrnoOf([&] { return setxattr(M("fresh").c_str(), "user.ptstore.layout", bad.data(), bad.size(), 0); }),
              EINVAL);
    EXPECT_EQ(client_->GetNamespace("fresh")->layout, SmallLayout(8));
    EXPECT_EQ(ReadAll(M("fresh/.layout")), SmallLayout(8).ToString() + "\n");
  }

  // The xattr takes the grouped text with spaces, or with colons for them.
  std::string colons = grouped.ToString();
  for (char& c : colons) c = c == ' ' ? ':' : c;
  ASSERT_EQ(setxattr(M("fresh").c_str(), "user.ptstore.layout", colons.data(), colons.size(), 0), 0);
  EXPECT_EQ(client_->GetNamespace("fresh")->layout, grouped);

  // Once something is stored the layout is fixed, written or set.
  const std::vector<uint32_t> t = RandomTokens(5, 8);
  std::vector<uint8_t> kv(2 * grouped.BytesPerBlock(), 7);
  ASSERT_OK(client_->Save("fresh", t, kv.data(), kv.size()));
  EXPECT_EQ(WriteFile(M("fresh/.layout"), SmallLayout().ToString()), EBUSY);
  EXPECT_EQ(client_->GetNamespace("fresh")->layout, grouped);
  // The increment's kv file holds the grouped bytes, block for block.
  auto paths = Paths("fresh");
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_EQ(ReadAll(M(paths.begin()->first + "/kv")), std::string(kv.begin(), kv.end()));
  // The other files stay read-only.
  EXPECT_EQ(ErrnoOf([&] { return open(M(paths.begin()->first + "/kv").c_str(), O_WRONLY); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return open(M(paths.begin()->first + "/tokens").c_str(), O_RDWR); }), EROFS);
}

TEST_F(FsTest, UnsupportedOperationsFailWithTheDocumentedErrno) {
  SaveTree();
  auto paths = Paths("ns");
  const std::string inc = M(paths.begin()->first);
  const std::string kv = inc + "/kv";
  EXPECT_EQ(ErrnoOf([&] { return open(kv.c_str(), O_WRONLY); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return open(kv.c_str(), O_RDWR); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return open(kv.c_str(), O_RDONLY | O_TRUNC); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return truncate(kv.c_str(), 0); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return open((inc + "/new").c_str(), O_WRONLY | O_CREAT, 0644); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return mknod((inc + "/node").c_str(), S_IFREG | 0644, 0); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return open(M("file").c_str(), O_WRONLY | O_CREAT, 0644); }), EROFS);
  EXPECT_EQ(ErrnoOf([&] { return mkdir((inc + "/sub").c_str(), 0755); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return mkdir(M("ns/sub").c_str(), 0755); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return rename(inc.c_str(), M("ns/renamed").c_str()); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return rename(kv.c_str(), (inc + "/kv2").c_str()); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return link(kv.c_str(), (inc + "/kv2").c_str()); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return symlink("kv", (inc + "/ln").c_str()); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return chmod(kv.c_str(), 0644); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return chmod(inc.c_str(), 0700); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return chown(kv.c_str(), 1, 1); }), EPERM);
  // Times: an increment's may be set (touch, fs_times_test.cc); the others' come from their increments.
  EXPECT_EQ(ErrnoOf([&] { return utimes(M("ns").c_str(), nullptr); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return utimes(M("ns/.layout").c_str(), nullptr); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return utimes(M("").c_str(), nullptr); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return setxattr(inc.c_str(), "user.ptstore.tokens", "1", 1, 0); }), EPERM);
  EXPECT_EQ(ErrnoOf([&] { return setxattr(inc.c_str(), "user.other", "1", 1, 0); }), ENOTSUP);
  EXPECT_EQ(ErrnoOf([&] { return removexattr(inc.c_str(), "user.ptstore.tokens"); }), EPERM);
  // Nothing changed.
  auto after = Paths("ns");
  EXPECT_EQ(after.size(), paths.size());
  struct stat st {};
  ASSERT_EQ(stat(kv.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), paths.begin()->second.bytes);
  // Write through an fd that is open for reading: EBADF from the kernel.
  int fd = open(kv.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ErrnoOf([&] { return write(fd, "x", 1); }), EBADF);
  close(fd);
}

TEST_F(FsTest, TwoUsersSeeWhatTheirModesAllow) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to another uid";
  SaveTree();
  ASSERT_OK(client_->CreateNamespace("private", layout_, "", 0700));
  Save("private", a_);
  const std::string pub = M(Paths("ns").begin()->first);
  const std::string priv = M(Paths("private").begin()->first);
  const std::string want = ReadAll(pub + "/kv");
  ASSERT_FALSE(want.empty());
  ASSERT_FALSE(ReadAll(priv + "/kv").empty());  // root reads everything
  int rc = RunAs(65534, 65534, [&] {
    if (ReadAll(pub + "/kv") != want) return 2;
    if (Sh("ls " + M("ns")).rc != 0) return 3;
    if (ErrnoOf([&] { return open(M("private").c_str(), O_RDONLY | O_DIRECTORY); }) != EACCES) return 4;
    if (ErrnoOf([&] { return open((priv + "/kv").c_str(), O_RDONLY); }) != EACCES) return 5;
    // Through the ioctl neither: the directory cannot even be opened.
    if (ErrnoOf([&] { return open(priv.c_str(), O_RDONLY | O_DIRECTORY); }) != EACCES) return 6;
    // The public one answers the ioctl.
    int fd = open(pub.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return 7;
    ptstore_ioc_info info{};
    info.version = PTSTORE_IOCTL_VERSION;
    if (ioctl(fd, PTSTORE_IOC_INFO, &info) != 0 || info.kind != PTSTORE_KIND_INCREMENT) return 8;
    close(fd);
    // No write permission: no removal, no namespace creation.
    if (ErrnoOf([&] { return rmdir(pub.c_str()); }) != EACCES) return 9;
    if (ErrnoOf([&] { return mkdir(M("mine").c_str(), 0755); }) != EACCES) return 10;
    if (Sh("rm -r " + pub + " 2>/dev/null").rc == 0) return 11;
    return 0;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(client_->Lookup("ns", a_)->matched_tokens, 64u);
}

TEST_F(FsTest, ConcurrentReadersWhileAnotherClientSavesAndRemoves) {
  SaveTree();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> verified{0}, mismatches{0};
  auto reader = [&] {
    while (!stop) {
      std::error_code ec;
      for (auto it = std::filesystem::recursive_directory_iterator(M("ns"), ec);
           !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (it->path().filename() != "kv") continue;
        const std::string dir = it->path().parent_path();
        std::string kv = ReadAll(dir + "/kv"), toks = ReadAll(dir + "/tokens");
        char start[32] = {};
        ssize_t n = getxattr(dir.c_str(), "user.ptstore.start_token", start, sizeof(start) - 1);
        if (kv.empty() || toks.empty() || n <= 0) continue;  // removed meanwhile
        std::vector<uint32_t> t(toks.size() / 4);
        std::memcpy(t.data(), toks.data(), t.size() * 4);
        auto want = KvOf(t, std::stoull(start), layout_);
        if (std::string(reinterpret_cast<const char*>(want.data()), want.size()) == kv) ++verified;
        else ++mismatches;
      }
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader);
  auto writer = Connect();
  ASSERT_NE(writer, nullptr);
  for (int round = 0; round < 30; ++round) {
    auto t = RandomTokens(1000 + round, 16 + 4 * (round % 5));
    auto kv = KvOf(t, 0, layout_);
    ASSERT_OK(writer->Save("ns", t, kv.data(), kv.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (round % 2 == 0) {
      ASSERT_OK(writer->Remove("ns", t));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_GT(verified.load(), 0u);
  EXPECT_EQ(mismatches.load(), 0u);
  // After the churn the mount shows exactly what the store holds, once the
  // last changes reached the kernel (ptstore(7) "Caching").
  std::set<std::string> lines;
  for (auto& [p, n] : Paths("ns")) lines.insert(p + "/kv\n");
  std::string expected;
  for (auto& l : lines) expected += l;
  std::string found;
  EXPECT_TRUE(SeenWithin([&] {
    found = Sh("cd " + M("") + " && find ns -name kv | LC_ALL=C sort").out;
    return found == expected;
  }));
  EXPECT_EQ(found, expected);
}

TEST_F(FsTest, LazyUnmountWithOpenFilesReleasesPins) {
  SaveTree();
  auto base = client_->Stats();
  ASSERT_OK(base);
  const std::string kv = M(Paths("ns").begin()->first + "/kv");
  int fd = open(kv.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(client_->Stats()->active_leases, base->active_leases + 1);  // the open kv is pinned
  mount_.UnmountLazy();
  EXPECT_FALSE(testing::IsMountPoint(mount_.path()));
  char buf[512];
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), static_cast<ssize_t>(sizeof(buf)));  // still readable
  close(fd);
  EXPECT_EQ(mount_.Wait(10000), 0) << mount_.ReadLog();
  EXPECT_EQ(client_->Stats()->active_leases, base->active_leases);
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.ReadLog();
}

TEST_F(FsTest, WithoutChangePollsAListingPushesTheRemovalsItNotices) {
  // Long cache times and no change watcher (fs_cache_test has it): only the
  // invalidation a listing pushes makes the removal visible.
  Mount slow;
  Mount::Options o;
  o.options = "allow_other,entry_timeout=60,attr_timeout=60,change_poll_ms=0";
  ASSERT_OK(slow.Start(daemon_.socket_path(), o));
  SaveTree();
  const std::string c_path = [&] {
    for (auto& [p, n] : Paths("ns")) {
      if (n.start_token == 0 && n.tokens == 32) return p;
    }
    return std::string();
  }();
  ASSERT_FALSE(c_path.empty());
  struct stat st {};
  ASSERT_EQ(Sh("ls " + slow.Join("ns")).rc, 0);  // the listing the mount remembers
  ASSERT_EQ(stat(slow.Join(c_path + "/kv").c_str(), &st), 0);  // cached dentries
  ASSERT_OK(client_->Remove("ns", c_));
  // Still cached: the kernel asks nobody for 60 s...
  EXPECT_EQ(stat(slow.Join(c_path).c_str(), &st), 0);
  // ...but the next listing notices the vanished increment and invalidates it.
  auto ls = Sh("ls " + slow.Join("ns"));
  EXPECT_EQ(ls.out.find(c_path.substr(3)), std::string::npos);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = stat(slow.Join(c_path).c_str(), &st) != 0 && errno == ENOENT;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
  EXPECT_EQ(slow.Unmount(), 0);
}

// Opens, reads and closes racing each other on many threads. A read's
// reply lets its caller close the file, and the kernel's release of it
// (on another worker) frees the open file while the read's handler may
// still be returning. A read that held the file's lock across its reply
// unlocked it in freed memory, a later open's mutex, and that open never
// returned (the soak's hung fs_read, docs/soak.md).
TEST_F(FsTest, ReadsRacingTheCloseOfTheirFileNeverHangTheMount) {
  SaveTree();
  std::vector<std::string> files;
  for (auto& [path, n] : Paths("ns")) {
    files.push_back(M(path + "/kv"));
    files.push_back(M(path + "/tokens"));
  }
  ASSERT_FALSE(files.empty());
  constexpr int kThreads = 8;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::atomic<int> done{0};
  std::atomic<uint64_t> reads{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; std::chrono::steady_clock::now() < until; ++i) {
        const int fd = open(files[i % files.size()].c_str(), O_RDONLY);
        if (fd < 0) {
          ++errors;
          continue;
        }
        char buf[4096];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0) {
        }
        if (n < 0) ++errors;
        // Without its pages the next open reads from the mount again.
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
        ++reads;
      }
      ++done;
    });
  }
  const bool finished = SeenWithin([&] { return done.load() == kThreads; }, std::chrono::seconds(30));
  if (!finished) mount_.Abort();  // frees the threads waiting on it
  for (auto& th : threads) th.join();
  EXPECT_TRUE(finished) << "an open or a read on the mount never returned";
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_GT(reads.load(), 100u);
}

// A test that gives up on a hung mount (the soak, past its deadline) ends
// it with Mount::Abort: the calls blocked on it return, and neither
// ptstore-fuse nor the mount is left behind. The store is frozen (SIGSTOP),
// so a statfs (always an RPC: Client::Stats) waits on it.
TEST_F(FsTest, AbortEndsAHungMountAndTheCallsWaitingOnIt) {
  const pid_t fuse = mount_.pid();
  ASSERT_GT(fuse, 0);
  ASSERT_OK(daemon_.Freeze());
  std::atomic<bool> returned{false};
  int err = 0;
  std::thread caller([&] {
    struct statvfs st {};
    if (statvfs(mount_.path().c_str(), &st) != 0) err = errno;
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(returned.load()) << "the statfs did not wait for the frozen store";
  EXPECT_TRUE(mount_.Abort());
  const bool freed = SeenWithin([&] { return returned.load(); }, std::chrono::milliseconds(5000));
  EXPECT_TRUE(freed) << "the call still waits on the aborted mount";
  ASSERT_OK(daemon_.Thaw());  // (lets the call end in any case)
  caller.join();
  EXPECT_NE(err, 0);
  EXPECT_FALSE(testing::IsMountPoint(mount_.path()));
  EXPECT_EQ(mount_.pid(), -1);   // reaped
  EXPECT_NE(kill(fuse, 0), 0);  // and gone
}

// The mount answers most requests on the thread that read them
// (fs/session_loop.h). One that waits for ptstored must hand reading on
// first: with the store frozen, statfs calls (each an RPC: Client::Stats)
// wait, and a request the daemon answers alone (the root's fuse_requests
// attribute) is still answered at once. More waiting calls than that one
// reader: each hand-off starts or wakes another thread.
TEST_F(FsTest, RequestsWaitingForTheStoreDoNotHoldUpTheOthers) {
  ASSERT_OK(daemon_.Freeze());
  constexpr int kWaiting = 3;
  std::atomic<int> returned{0}, failed{0};
  std::vector<std::thread> waiting;
  for (int i = 0; i < kWaiting; ++i) {
    waiting.emplace_back([&] {
      struct statvfs st {};
      if (statvfs(mount_.path().c_str(), &st) != 0) failed++;
      returned++;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(returned.load(), 0) << "a statfs did not wait for the frozen store";
  std::atomic<bool> answered{false};
  std::string requests;
  std::thread other([&] {
    char buf[64] = {};
    const ssize_t n = getxattr(mount_.path().c_str(), "user.ptstore.fuse_requests", buf, sizeof buf - 1);
    if (n > 0) requests.assign(buf, static_cast<size_t>(n));
    answered = true;
  });
  const bool in_time = SeenWithin([&] { return answered.load(); }, std::chrono::milliseconds(5000));
  EXPECT_TRUE(in_time) << "a request the daemon answers alone waited behind requests waiting for the store";
  EXPECT_EQ(returned.load(), 0);
  ASSERT_OK(daemon_.Thaw());
  if (!in_time && !SeenWithin([&] { return answered.load(); }, std::chrono::milliseconds(10000))) mount_.Abort();
  other.join();
  for (auto& t : waiting) t.join();
  EXPECT_FALSE(requests.empty());
  EXPECT_EQ(returned.load(), kWaiting);
  EXPECT_EQ(failed.load(), 0) << "a statfs failed once the store answered";
}

TEST_F(FsTest, MountHelperTakesMountStyleArguments) {
  testing::TempDir dir;
  const std::string mnt = dir.Join("mnt");
  ASSERT_EQ(mkdir(mnt.c_str(), 0755), 0);
  const std::string bin_dir = std::filesystem::path(testing::PtstoreFusePath()).parent_path();
  // As mount(8) runs it: SOURCE MOUNTPOINT -o OPTIONS (with fstab-only options).
  auto r = Sh("PATH=" + bin_dir + ":$PATH " + PTSTORE_MOUNT_HELPER + " " + daemon_.socket_path() + " " + mnt +
              " -o rw,allow_other,_netdev,nofail,entry_timeout=2,layout=layers=2:kv_heads=2:head_dim=16:dtype=bf16:"
              "block_tokens=4");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(testing::IsMountPoint(mnt));
  EXPECT_EQ(mkdir((mnt + "/viahelper").c_str(), 0755), 0);
  EXPECT_EQ(client_->GetNamespace("viahelper")->layout, SmallLayout());
  auto m = Sh("grep ' " + mnt + " ' /proc/mounts");
  EXPECT_NE(m.out.find("fuse.ptstore"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find(daemon_.socket_path()), std::string::npos) << m.out;
  EXPECT_EQ(Sh("fusermount3 -u " + mnt).rc, 0);
  for (int i = 0; i < 100 && testing::IsMountPoint(mnt); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(testing::IsMountPoint(mnt));
  // A bad socket fails on the terminal, before mounting.
  r = Sh("PATH=" + bin_dir + ":$PATH " + PTSTORE_MOUNT_HELPER + " /nonexistent.sock " + mnt);
  EXPECT_NE(r.rc, 0);
  EXPECT_FALSE(testing::IsMountPoint(mnt));
}

}  // namespace
}  // namespace ptstore
