// Metadata at speed (ptstore(7) "Caching"), on real mounts of a real
// ptstored: a walk is answered by listings (readdirplus, the daemon's cache,
// subtrees in one round trip) and then by the kernel's cache alone; and
// what other clients change (a removal, an eviction, a split by a later
// save, a use) reaches that cache within the documented bound, although it
// keeps names and attributes for an hour.
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

bool Gone(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) != 0 && errno == ENOENT;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

class FsCacheTest : public FsTest {
 protected:
  // The mount-relative path of the increment that ends at token `end` and
  // starts at `start`.
  std::string PathOf(uint64_t start, uint64_t end) {
    for (const auto& [p, n] : Paths("ns")) {
      if (n.start_token == start && n.start_token + n.tokens == end) return p;
    }
    ADD_FAILURE() << "no increment [" << start << ", " << end << ")";
    return "";
  }
  size_t Dirs() { return Paths("ns").size() + 1; }  // the increments and the namespace
  uint64_t Requests() { return RootCounter(mount_.path(), "fuse_requests"); }
  // The daemon requests `cmd` (run in the namespace's directory) makes.
  uint64_t RequestsOf(const std::string& cmd) {
    const uint64_t before = Requests();
    auto r = Sh("cd " + M("ns") + " && " + cmd + " > /dev/null");
    EXPECT_EQ(r.rc, 0) << cmd << ": " << r.out;
    return Requests() - before - 1;  // less the getxattr that read the count
  }
};

TEST_F(FsCacheTest, AWalkIsAnsweredByListingsThenByTheKernelAlone) {
  // 20 documents of 4 levels: 80 increments, 81 directories with kv and tokens.
  for (int d = 0; d < 20; ++d) {
    auto t = RandomTokens(500 + d, 64);
    for (size_t n = 16; n <= t.size(); n += 16) Save("ns", std::vector<uint32_t>(t.begin(), t.begin() + n));
  }
  const uint64_t dirs = Dirs();
  ASSERT_EQ(dirs, 81u);
  // The saves' changes reach the mount first (else, applied during the
  // walk, they would rightly make it ask again).
  std::this_thread::sleep_for(kChangeBound);
  // Cold: per directory two readdirplus (the entries, then the end), and
  // nothing per entry: no lookup, no getattr; and no opendir or releasedir
  // (the mount answers the first opendir ENOSYS, the kernel sends no more).
  const uint64_t cold = RequestsOf("ls -R");
  EXPECT_LE(cold, 2 * dirs + 8) << cold << " requests for " << dirs << " directories";
  EXPECT_GT(RootCounter(mount_.path(), "cached_increments"), 0u);
  // Warm: the kernel keeps the listings and the attributes; a getattr per
  // directory (the kernel re-asks a directory's attributes after listing
  // it, for its atime, and ls fstat()s what it opens; answered from the
  // daemon's cache) is all that reaches the daemon.
  const uint64_t warm = RequestsOf("ls -R");
  EXPECT_LE(warm, dirs + 4) << warm << " requests for " << dirs << " directories";
  const uint64_t du = RequestsOf("du -s"), found = RequestsOf("find . -name kv");
  EXPECT_LE(du, dirs + 4);
  EXPECT_LE(found, dirs + 4);
  std::fprintf(stderr, "%llu directories: ls -R %llu requests cold, %llu warm; du -s %llu, find %llu warm\n",
               static_cast<unsigned long long>(dirs), static_cast<unsigned long long>(cold),
               static_cast<unsigned long long>(warm), static_cast<unsigned long long>(du),
               static_cast<unsigned long long>(found));
  // And what it shows is the store's.
  auto find = Sh("cd " + M("") + " && find ns -name kv | LC_ALL=C sort");
  std::set<std::string> lines;
  for (auto& [p, n] : Paths("ns")) lines.insert(p + "/kv\n");
  std::string expected;
  for (const auto& l : lines) expected += l;
  EXPECT_EQ(find.out, expected);
  for (auto& [p, n] : Paths("ns")) {
    struct stat st {};
    ASSERT_EQ(stat(M(p + "/kv").c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), n.bytes) << p;
    EXPECT_EQ(Ns(st.st_mtim), n.times.mtime_ns) << p;
  }
}

TEST_F(FsCacheTest, ARemovalByAnotherClientReachesTheKernelWithinThePollBound) {
  SaveTree();
  const std::string c = PathOf(0, 32);
  ASSERT_EQ(Sh("ls -lR " + M("ns")).rc, 0);  // names, attributes and listings cached for an hour
  ASSERT_TRUE(Exists(M(c + "/kv")));
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  ASSERT_OK(other->Remove("ns", c_));
  // Both within the bound; not at the same instant: the daemon's cache
  // forgets c first, and a stat of c whose attributes the kernel must ask
  // for again (a listing invalidated its atime) can read ENOENT just before
  // the kernel has dropped the names below it.
  EXPECT_TRUE(SeenWithin([&] { return Gone(M(c)) && Gone(M(c + "/kv")); }))
      << c << " or its kv still there after " << kChangeBound.count() << " ms";
  auto ls = Sh("ls " + M("ns"));
  EXPECT_EQ(ls.out.find(c.substr(3)), std::string::npos) << ls.out;  // the cached listing went too
  EXPECT_NE(ls.out.find(PathOf(0, 20).substr(3)), std::string::npos) << ls.out;
}

TEST_F(FsCacheTest, AnEvictionReachesTheKernelWithinThePollBound) {
  const auto first = RandomTokens(1, 64);
  Save("ns", first);
  const std::string path = PathOf(0, 64);
  ASSERT_EQ(Sh("ls -lR " + M("ns")).rc, 0);
  ASSERT_TRUE(Exists(M(path + "/kv")));
  const ChainKey key = Paths("ns").at(path).key;
  // 1 MiB prompts into a 64 MiB arena until the first one is evicted.
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  bool evicted = false;
  for (int i = 0; i < 200 && !evicted; ++i) {
    auto t = RandomTokens(10000 + i, 4096);
    auto kv = KvOf(t, 0, layout_);
    ASSERT_OK(other->Save("ns", t, kv.data(), kv.size()));
    evicted = other->GetIncrement("ns", key).status().code() == Code::kNotFound;
  }
  ASSERT_TRUE(evicted) << "the first prompt was never evicted";
  EXPECT_GT(client_->Stats()->evictions, 0u);
  EXPECT_TRUE(SeenWithin([&] { return Gone(M(path)) && Gone(M(path + "/kv")); })) << path;
}

TEST_F(FsCacheTest, ASplitByALaterSaveReachesTheKernelWithinThePollBound) {
  const auto a = RandomTokens(3, 64);
  Save("ns", a);
  const std::string whole = PathOf(0, 64);
  struct stat st {};
  ASSERT_EQ(stat(M(whole + "/kv").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 64 * layout_.BytesPerToken());
  ASSERT_EQ(ReadAll(M(whole + "/kv")).size(), 64 * layout_.BytesPerToken());  // its pages cached too
  // Another client saves a prompt that branches inside it at token 32: the
  // increment keeps its key but moves below its new upper half, with only
  // its tail.
  auto b = a;
  for (size_t i = 32; i < b.size(); ++i) b[i] = 31999 - b[i];
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  auto kv = KvOf(b, 0, layout_);
  ASSERT_OK(other->Save("ns", b, kv.data(), kv.size()));
  // Two increments are [32, 64) now, a's tail and b's (which comes first in
  // a listing depends on their keys): a's is the one with whole's key.
  std::string tail;
  for (const auto& [p, n] : Paths("ns")) {
    if (n.start_token == 32 && n.tokens == 32 && whole.ends_with("/" + n.key.ToHex())) tail = p;
  }
  ASSERT_FALSE(tail.empty()) << "no increment [32, 64) with the key of " << whole;
  ASSERT_NE(tail, whole);
  EXPECT_TRUE(SeenWithin([&] { return Gone(M(whole)); })) << whole << " is still at the top";
  ASSERT_EQ(stat(M(tail + "/kv").c_str(), &st), 0) << tail;
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 32 * layout_.BytesPerToken());
  auto want = KvOf(std::span(a).subspan(32), 32, layout_);
  EXPECT_EQ(ReadAll(M(tail + "/kv")), std::string(reinterpret_cast<const char*>(want.data()), want.size()));
  auto ls = Sh("ls " + M("ns"));
  EXPECT_NE(ls.out.find(PathOf(0, 32).substr(3)), std::string::npos) << ls.out;
}

TEST_F(FsCacheTest, AUseByAnotherClientReachesTheKernelWithinThePollBound) {
  SaveTree();
  const std::string c = PathOf(0, 32);
  const uint64_t hour_ago = WallClockNs() - 3600ull * 1000000000;
  ASSERT_OK(client_->SetTimes("ns", Paths("ns").at(c).key, hour_ago, 0));
  EXPECT_TRUE(SeenWithin([&] {
    struct stat st {};
    return stat(M(c).c_str(), &st) == 0 && Ns(st.st_atim) == hour_ago;
  }));
  ASSERT_EQ(Sh("ls -lR " + M("ns")).rc, 0);
  const uint64_t before = WallClockNs();
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  std::vector<uint8_t> dst(c_.size() * layout_.BytesPerToken());
  ASSERT_EQ(*other->Load("ns", c_, dst.data(), dst.size()), c_.size());
  for (const std::string& p : {c, c + "/kv", c + "/tokens", std::string("ns")}) {
    EXPECT_TRUE(SeenWithin([&] {
      struct stat st {};
      return stat(M(p).c_str(), &st) == 0 && Ns(st.st_atim) >= before;
    })) << p << ": the load's atime did not reach the kernel";
  }
}

// ptstored restarted under the mount (here without an SSD tier, so it comes
// back empty): everything the kernel kept for an hour goes at the first poll
// that finds a new change log (ptstore(7) "Caching"), and the mount serves
// what the new store holds, bytes too.
TEST_F(FsCacheTest, ARestartOfPtstoredReachesTheKernelWithinThePollBound) {
  SaveTree();
  const std::string a = PathOf(20, 64);  // a's branch, below the common part
  const std::string c = PathOf(0, 32);
  ASSERT_EQ(Sh("ls -lR " + M("ns")).rc, 0);  // names, attributes and listings cached for an hour
  ASSERT_TRUE(Exists(M(a + "/kv")));
  ASSERT_TRUE(Exists(M(c + "/kv")));
  const uint64_t resets = RootCounter(mount_.path(), "change_resets");
  client_.reset();
  auto st = daemon_.Restart({});
  ASSERT_OK(st);
  client_ = Connect();
  ASSERT_NE(client_, nullptr);
  ASSERT_OK(client_->CreateNamespace("ns", layout_));
  const auto d = RandomTokens(9, 48);
  Save("ns", d);
  const std::string dpath = PathOf(0, 48);
  EXPECT_TRUE(SeenWithin([&] { return Gone(M(c)) && Gone(M(a)) && Gone(M(c + "/kv")) && Gone(M(a + "/kv")); }))
      << "the old store's increments still there " << kChangeBound.count() << " ms after the restart";
  EXPECT_GT(RootCounter(mount_.path(), "change_resets"), resets);
  EXPECT_TRUE(SeenWithin([&] { return Exists(M(dpath + "/kv")); })) << dpath;
  auto ls = Sh("ls " + M("ns"));
  EXPECT_EQ(ls.out, dpath.substr(3) + "\n");  // the cached listing went too
  const auto kv = KvOf(d, 0, layout_);
  EXPECT_EQ(ReadAll(M(dpath + "/kv")), std::string(kv.begin(), kv.end()));
}

TEST_F(FsCacheTest, WithoutPollsTheMountStillServesTheTree) {
  Mount plain;
  Mount::Options o;
  o.options = "allow_other,change_poll_ms=0";
  ASSERT_OK(plain.Start(daemon_.socket_path(), o)) << plain.ReadLog();
  SaveTree();
  auto find = Sh("cd " + plain.Join("") + " && find ns -name kv | LC_ALL=C sort");
  std::set<std::string> lines;
  for (auto& [p, n] : Paths("ns")) lines.insert(p + "/kv\n");
  std::string expected;
  for (const auto& l : lines) expected += l;
  EXPECT_EQ(find.out, expected);
  EXPECT_EQ(RootCounter(plain.path(), "cached_increments"), 0u);  // no watcher, no daemon cache
  EXPECT_EQ(plain.Unmount(), 0) << plain.ReadLog();
}

}  // namespace
}  // namespace ptstore
