// Namespace quotas on a real mount: setfattr/getfattr of
// user.ptstore.quota.{dram,ssd} on a namespace directory (its owner and
// root may; another user may not; a bad size is EINVAL), and statfs / df of
// the namespace directory reporting the quota as the size and the
// namespace's use as used.
#include <sys/statvfs.h>

#include "tests/fs/fs_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::fstest {
namespace {

constexpr uid_t kAlice = 4201;
constexpr uid_t kMallory = 4202;

std::string Xattr(const std::string& path, const std::string& name) {
  char buf[256] = {};
  ssize_t n = getxattr(path.c_str(), name.c_str(), buf, sizeof(buf) - 1);
  return n < 0 ? "<errno " + std::to_string(errno) + ">" : std::string(buf, static_cast<size_t>(n));
}

class FsQuotaTest : public FsTest {
 protected:
  uint64_t DramQuota(const std::string& ns) {
    auto q = client_->Quotas(ns);
    EXPECT_OK(q);
    return q.ok() ? q->front().dram_quota : ~0ull;
  }
};

TEST_F(FsQuotaTest, SetfattrByOwnerAndRootGetfattrShowsItOthersAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  // alice's namespace, writable by all so that only our rule refuses others.
  ASSERT_EQ(RunAs(kAlice, kAlice, [&] {
              auto c = testing::ConnectTo(daemon_.socket_path());
              return c.ok() && (*c)->CreateNamespace("alice", layout_, "", 0777).ok() ? 0 : 1;
            }),
            0);
  const std::string dir = M("alice");
  ASSERT_TRUE(SeenWithin([&] { return access(dir.c_str(), F_OK) == 0; }));
  EXPECT_EQ(Xattr(dir, "user.ptstore.quota.dram"), "0");
  ASSERT_EQ(RunAs(kAlice, kAlice, [&] { return Sh("setfattr -n user.ptstore.quota.dram -v 4GiB " + dir).rc; }), 0);
  EXPECT_EQ(DramQuota("alice"), 4ull << 30);
  EXPECT_EQ(Xattr(dir, "user.ptstore.quota.dram"), std::to_string(4ull << 30));
  // getfattr lists them with the rest.
  ShellResult all = Sh("getfattr -d -m user.ptstore " + dir);
  ASSERT_EQ(all.rc, 0) << all.out;
  EXPECT_NE(all.out.find("user.ptstore.quota.dram=\"4294967296\""), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("user.ptstore.quota.ssd=\"0\""), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("user.ptstore.used.dram=\"0\""), std::string::npos) << all.out;
  // Someone else may not, whatever the mode: EPERM, and nothing changes.
  EXPECT_EQ(RunAs(kMallory, kMallory,
                  [&] { return ErrnoOf([&] { return setxattr(dir.c_str(), "user.ptstore.quota.dram", "1M", 2, 0); }); }),
            EPERM);
  EXPECT_EQ(DramQuota("alice"), 4ull << 30);
  // Root may; bad sizes are EINVAL and change nothing.
  EXPECT_EQ(Sh("setfattr -n user.ptstore.quota.dram -v 512MiB " + dir).rc, 0);
  EXPECT_EQ(DramQuota("alice"), 512ull << 20);
  for (const char* bad : {"-1G", "4 parsecs", "2EiB", "lots"}) {
    EXPECT_EQ(ErrnoOf([&] { return setxattr(dir.c_str(), "user.ptstore.quota.dram", bad, std::strlen(bad), 0); }),
              EINVAL)
        << bad;
  }
  EXPECT_EQ(DramQuota("alice"), 512ull << 20);
  // No SSD tier here: an SSD quota is refused (EINVAL), as the API does.
  EXPECT_EQ(ErrnoOf([&] { return setxattr(dir.c_str(), "user.ptstore.quota.ssd", "1G", 2, 0); }), EINVAL);
  // Removing the attribute lifts the quota.
  EXPECT_EQ(Sh("setfattr -x user.ptstore.quota.dram " + dir).rc, 0);
  EXPECT_EQ(DramQuota("alice"), 0u);
  // Increments have no quota attributes.
  SaveTree();
  for (const auto& [path, node] : Paths("ns")) {
    EXPECT_EQ(ErrnoOf([&] { return setxattr(M(path).c_str(), "user.ptstore.quota.dram", "1M", 2, 0); }), EPERM);
    break;
  }
}

TEST_F(FsQuotaTest, StatfsOfANamespaceDirectoryIsItsQuotaAndUse) {
  SaveTree();
  ASSERT_OK(client_->SetQuota("ns", QuotaChange{8ull << 20, {}}));
  auto q = client_->Quotas("ns");
  ASSERT_OK(q);
  const uint64_t used = q->front().dram_bytes;
  ASSERT_GT(used, 0u);
  struct statvfs st {};
  ASSERT_EQ(statvfs(M("ns").c_str(), &st), 0);
  EXPECT_EQ(uint64_t{st.f_blocks} * st.f_frsize, 8ull << 20);
  EXPECT_EQ(uint64_t{st.f_blocks - st.f_bfree} * st.f_frsize, used);
  EXPECT_EQ(uint64_t{st.f_bavail} * st.f_frsize, (8ull << 20) - used);
  // Below the namespace directory too (df of a path inside it).
  const std::string inner = M(Paths("ns").begin()->first);
  struct statvfs st2 {};
  ASSERT_EQ(statvfs(inner.c_str(), &st2), 0);
  EXPECT_EQ(st2.f_blocks, st.f_blocks);
  // df prints the same.
  ShellResult df = Sh("df -B1 --output=size,used " + M("ns") + " | tail -1");
  ASSERT_EQ(df.rc, 0) << df.out;
  EXPECT_NE(df.out.find(std::to_string(8ull << 20)), std::string::npos) << df.out;
  EXPECT_NE(df.out.find(std::to_string(used)), std::string::npos) << df.out;
  // The root still reports the node.
  struct statvfs root {};
  ASSERT_EQ(statvfs(mount_.path().c_str(), &root), 0);
  EXPECT_EQ(uint64_t{root.f_blocks} * root.f_frsize, 64ull << 20);
}

}  // namespace
}  // namespace ptstore::fstest
