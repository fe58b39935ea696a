// Times on a real mount (ptstore(7) "Times"): every inode shows its
// increment's times as ptstored keeps them, walking the tree is no use,
// reading a kv file is, touch(1) sets them, and the man page's find -amin
// recipe evicts exactly the prefixes unused for an hour.
#include <sys/stat.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "tests/fs/fs_fixture.h"
#include "tests/testing/generators.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using namespace fstest;  // NOLINT: the shared mount fixture
using testing::RandomTokens;

uint64_t Ns(const timespec& t) { return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + t.tv_nsec; }

// The kernel keeps attributes for the mount's attr_timeout (an hour by
// default); every use and touch reaches it as a pushed invalidation within
// the change bound (ptstore(7) "Caching", fs_fixture.h): a time read through
// the mount after this is the store's.
void PastChangeBound() { std::this_thread::sleep_for(kChangeBound); }

class FsTimesTest : public FsTest {
 protected:
  Times StoreTimes(const std::string& path) { return Paths("ns").at(path).times; }
  // The mount-relative path of the increment that holds the last block of `toks`.
  std::string PathOf(const std::vector<uint32_t>& toks) {
    for (const auto& [p, n] : Paths("ns")) {
      if (n.start_token + n.tokens != toks.size()) continue;
      auto inc = client_->GetIncrement("ns", n.key);
      if (inc.ok() && std::equal(inc->tokens.begin(), inc->tokens.end(), toks.begin() + n.start_token)) return p;
    }
    ADD_FAILURE() << "no increment ends with these " << toks.size() << " tokens";
    return "";
  }
  uint64_t Load(const std::vector<uint32_t>& toks) {
    std::vector<uint8_t> dst(toks.size() * layout_.BytesPerToken());
    auto r = client_->Load("ns", toks, dst.data(), dst.size());
    EXPECT_OK(r);
    if (r.ok() && *r > 0) {
      auto want = KvOf(std::span(toks).first(*r), 0, layout_);
      EXPECT_EQ(0, std::memcmp(dst.data(), want.data(), want.size()));
    }
    return r.ok() ? *r : 0;
  }
};

TEST_F(FsTimesTest, InodesShowTheStoresTimesAndWalkingTheTreeIsNoUse) {
  SaveTree();
  PastChangeBound();  // the saves (another client's) changed the namespace's times
  for (const auto& [path, n] : Paths("ns")) {
    SCOPED_TRACE(path);
    EXPECT_GT(n.times.mtime_ns, 0u);
    for (const std::string& p : {path, path + "/kv", path + "/tokens"}) {
      struct stat st {};
      ASSERT_EQ(stat(M(p).c_str(), &st), 0) << p;
      EXPECT_EQ(Ns(st.st_mtim), n.times.mtime_ns) << p;
      EXPECT_EQ(Ns(st.st_atim), n.times.atime_ns) << p;
      EXPECT_EQ(Ns(st.st_ctim), n.times.ctime_ns) << p;
    }
  }
  // The namespace directory: the newest of its increments'.
  const NamespaceInfo ns = *client_->GetNamespace("ns");
  struct stat st {};
  ASSERT_EQ(stat(M("ns").c_str(), &st), 0);
  EXPECT_EQ(Ns(st.st_mtim), ns.times.mtime_ns);
  EXPECT_EQ(Ns(st.st_atim), ns.times.atime_ns);
  uint64_t newest = 0;
  for (const auto& [p, n] : Paths("ns")) newest = std::max(newest, n.times.mtime_ns);
  EXPECT_EQ(ns.times.mtime_ns, newest);

  // ls, find, du, stat, getfattr and reading tokens use no prefix.
  const auto before = Paths("ns");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (const std::string cmd : {"ls -lRu ", "find ", "du -s ", "getfattr -R -d ", "stat "}) {
    ASSERT_EQ(Sh(cmd + M("ns") + " > /dev/null").rc, 0) << cmd;
  }
  ASSERT_EQ(Sh("find " + M("ns") + " -name tokens -exec cat {} + > /dev/null").rc, 0);
  for (const auto& [p, n] : Paths("ns")) EXPECT_EQ(n.times, before.at(p).times) << p;
  // ls -t puts the newest first: c, saved last, before the common part.
  std::string newest_top;
  uint64_t newest_top_ns = 0;
  for (const auto& [p, n] : Paths("ns")) {
    if (n.parent == ChainKey{} && n.times.mtime_ns > newest_top_ns) {
      newest_top_ns = n.times.mtime_ns;
      newest_top = n.key.ToHex();
    }
  }
  auto lst = Sh("ls -t " + M("ns"));
  ASSERT_EQ(lst.rc, 0) << lst.out;
  EXPECT_EQ(lst.out.substr(0, 33), newest_top + "\n") << lst.out;
}

TEST_F(FsTimesTest, ReadingAKvFileIsAUseOfItsPrefix) {
  SaveTree();
  const std::string leaf = PathOf(a_);  // a's branch, below the common part
  const std::string common = leaf.substr(0, leaf.rfind('/'));
  const Times leaf0 = StoreTimes(leaf), common0 = StoreTimes(common);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(Sh("cat " + M(leaf + "/kv") + " > /dev/null").rc, 0);
  const Times leaf1 = StoreTimes(leaf), common1 = StoreTimes(common);
  EXPECT_GT(leaf1.atime_ns, leaf0.atime_ns);
  EXPECT_GT(common1.atime_ns, common0.atime_ns) << "its prefix was used with it";
  EXPECT_EQ(leaf1.mtime_ns, leaf0.mtime_ns);
  PastChangeBound();
  struct stat st {};
  ASSERT_EQ(stat(M(leaf).c_str(), &st), 0);
  EXPECT_EQ(Ns(st.st_atim), leaf1.atime_ns);
  // A load by a client is a use too, seen through the mount.
  ASSERT_EQ(Load(c_), c_.size());
  PastChangeBound();
  const std::string cpath = PathOf(c_);
  ASSERT_EQ(stat(M(cpath).c_str(), &st), 0);
  EXPECT_EQ(Ns(st.st_atim), StoreTimes(cpath).atime_ns);
  EXPECT_GT(Ns(st.st_atim), leaf1.atime_ns);
}

TEST_F(FsTimesTest, TouchSetsAnIncrementsTimes) {
  SaveTree();
  const std::string leaf = PathOf(a_);
  const std::string common = leaf.substr(0, leaf.rfind('/'));
  ASSERT_EQ(Sh("touch -a -d @1700000000.25 " + M(leaf)).rc, 0);
  Times t = StoreTimes(leaf);
  EXPECT_EQ(t.atime_ns, 1700000000250000000ull);
  const uint64_t mtime = t.mtime_ns;
  ASSERT_EQ(Sh("touch -m -d @1700000100 " + M(leaf + "/kv")).rc, 0);  // a file of it: the increment
  t = StoreTimes(leaf);
  EXPECT_EQ(t.mtime_ns, 1700000100000000000ull);
  EXPECT_NE(t.mtime_ns, mtime);
  struct stat st {};
  ASSERT_EQ(stat(M(leaf + "/tokens").c_str(), &st), 0);
  EXPECT_EQ(Ns(st.st_mtim), 1700000100000000000ull);
  EXPECT_EQ(Ns(st.st_atim), 1700000000250000000ull);
  EXPECT_GE(Ns(st.st_ctim), Ns(st.st_mtim));
  // touch with no time: now, and a use of the prefix (the common part too).
  const uint64_t before = WallClockNs();
  ASSERT_EQ(Sh("touch " + M(leaf)).rc, 0);
  t = StoreTimes(leaf);
  EXPECT_GE(t.atime_ns, before);
  EXPECT_GE(t.mtime_ns, before);
  EXPECT_GE(StoreTimes(common).atime_ns, before);
  // Only increments have times to set; a reader may not set them.
  EXPECT_NE(Sh("touch " + M("ns")).rc, 0);
  EXPECT_NE(Sh("touch " + M("ns/.layout")).rc, 0);
  EXPECT_EQ(Sh("touch -d @1 " + M(leaf) + "/nope").rc, 1);
  const std::string p = M(leaf);
  const int rc = RunAs(65534, 65534, [&] {
    timespec ts[2] = {{1, 0}, {1, 0}};
    return utimensat(AT_FDCWD, p.c_str(), ts, 0) == 0 ? 0 : errno;
  });
  EXPECT_TRUE(rc == EPERM || rc == EACCES) << rc;
  EXPECT_GE(StoreTimes(leaf).atime_ns, before);
}

// The recipe of ptstore(7): evict what no one used for an hour.
TEST_F(FsTimesTest, TheFindAminRecipeEvictsExactlyThePrefixesUnusedForAnHour) {
  SaveTree();  // a and b share a common part; c alone
  std::vector<uint32_t> d = RandomTokens(11, 48);
  Save("ns", d);
  // Everything was last used two hours ago (deepest first, so that no
  // ancestor is younger than what hangs below it)...
  ASSERT_EQ(Sh("find " + M("ns") + " -mindepth 1 -depth -type d -exec touch -a -d '2 hours ago' {} +").rc, 0);
  // ... except b, loaded now, and d, looked up now: uses since.
  ASSERT_EQ(Load(b_), b_.size());
  auto look = client_->Lookup("ns", d);
  ASSERT_OK(look);
  ASSERT_EQ(look->matched_tokens, d.size());
  const std::string a_leaf = PathOf(a_), b_leaf = PathOf(b_);
  ASSERT_NE(a_leaf, b_leaf);
  PastChangeBound();

  auto rm = Sh("find " + M("ns") + " -mindepth 1 -type d -amin +60 -prune -exec rm -r {} +");
  ASSERT_EQ(rm.rc, 0) << rm.out;

  // Gone: a's branch and c. Kept: the common part with b's branch, and d.
  std::set<std::string> left;
  for (const auto& [p, n] : Paths("ns")) left.insert(p);
  const std::string common = b_leaf.substr(0, b_leaf.rfind('/'));
  EXPECT_EQ(left, (std::set<std::string>{common, b_leaf, PathOf(d)}));
  EXPECT_EQ(Load(b_), b_.size());
  EXPECT_EQ(Load(d), d.size());
  EXPECT_EQ(Load(a_), Paths("ns").at(common).tokens) << "a's branch went; its part in common with b stays";
  EXPECT_EQ(Load(c_), 0u);
  // Run again: nothing more is cold.
  rm = Sh("find " + M("ns") + " -mindepth 1 -type d -amin +60 -prune -exec rm -r {} +");
  EXPECT_EQ(rm.rc, 0) << rm.out;
  EXPECT_EQ(Paths("ns").size(), 3u);
}

}  // namespace
}  // namespace ptstore
