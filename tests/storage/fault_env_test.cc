#include "storage/ssd/fault_env.h"

#include <linux/magic.h>
#include <sys/vfs.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/storage/env_files.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using testing::TempDir;
using namespace testenv;  // NOLINT: the shared Env test helpers

bool Contains(const Status& st, const std::string& part) { return st.message().find(part) != std::string::npos; }

class FaultEnvTest : public ::testing::Test {
 protected:
  TempDir dir_{"ptstore-fault-env-test"};
  FaultEnv env_{Env::Default()};
  const std::string path_ = dir_.Join("file");

  std::unique_ptr<File> OpenFile(const std::string& path) {
    auto f = env_.Open(path, Create());
    EXPECT_OK(f);
    return f.ok() ? std::move(f).value() : nullptr;
  }
};

TEST_F(FaultEnvTest, PassesThroughWithoutFaults) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("hello")));
  ASSERT_OK(f->WriteAt(5, Bytes(" world")));
  ASSERT_OK(f->Sync());
  EXPECT_EQ(ReadAll(f.get()), "hello world");
  EXPECT_EQ(OnDisk(path_), "hello world");
  EXPECT_EQ(f->path(), path_);
  EXPECT_EQ(env_.writes(), 2u);
  EXPECT_EQ(env_.bytes_written(), 11u);
  EXPECT_EQ(env_.syncs(), 1u);
  EXPECT_TRUE(env_.FileExists(path_));
  auto names = env_.ListDir(dir_.path());
  ASSERT_OK(names);
  EXPECT_EQ(*names, std::vector<std::string>{"file"});
}

TEST_F(FaultEnvTest, FailWritesAfterLetsNWritesThroughThenFailsEveryWrite) {
  auto f = OpenFile(path_);
  env_.FailWritesAfter(2, EIO);
  ASSERT_OK(f->WriteAt(0, Bytes("ab")));
  ASSERT_OK(f->WriteAt(2, Bytes("cd")));
  for (int i = 0; i < 3; i++) {
    Status st = f->WriteAt(4, Bytes("ef"));
    EXPECT_ERROR(st, Code::kIOError);
    EXPECT_TRUE(Contains(st, "pwrite of 2 bytes at offset 4 to " + path_ + ": Input/output error")) << st.ToString();
  }
  EXPECT_EQ(OnDisk(path_), "abcd");
  EXPECT_EQ(env_.writes(), 2u);
  EXPECT_EQ(env_.bytes_written(), 4u);

  env_.ClearFaults();
  ASSERT_OK(f->WriteAt(4, Bytes("ef")));
  EXPECT_EQ(OnDisk(path_), "abcdef");
}

TEST_F(FaultEnvTest, FailedWritesUseThePosixStatusCodes) {
  auto f = OpenFile(path_);
  env_.FailWritesAfter(0, ENOSPC);
  EXPECT_ERROR(f->WriteAt(0, Bytes("x")), Code::kResourceExhausted);
  env_.FailWritesAfter(0, EDQUOT);
  EXPECT_ERROR(f->WriteAt(0, Bytes("x")), Code::kResourceExhausted);
  env_.FailWritesAfter(0, ENOENT);
  EXPECT_ERROR(f->WriteAt(0, Bytes("x")), Code::kNotFound);
  env_.FailWritesAfter(0, EROFS);
  EXPECT_ERROR(f->WriteAt(0, Bytes("x")), Code::kIOError);
  EXPECT_EQ(OnDisk(path_), "");
}

TEST_F(FaultEnvTest, DiskCapacityFailsWritesThatWouldPassIt) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("0123")));  // counts, though written before the limit
  env_.SetDiskCapacity(10);
  ASSERT_OK(f->WriteAt(4, Bytes("45")));
  Status st = f->WriteAt(6, Bytes("6789X"));
  EXPECT_ERROR(st, Code::kResourceExhausted);
  EXPECT_TRUE(Contains(st, "pwrite of 5 bytes at offset 6 to " + path_ + ": No space left on device"))
      << st.ToString();
  EXPECT_EQ(OnDisk(path_), "012345");  // nothing of the refused write
  ASSERT_OK(f->WriteAt(6, Bytes("6789")));  // exactly full
  EXPECT_ERROR(f->WriteAt(10, Bytes("X")), Code::kResourceExhausted);
  EXPECT_EQ(OnDisk(path_), "0123456789");

  // ClearFaults starts the count afresh.
  env_.ClearFaults();
  env_.SetDiskCapacity(3);
  ASSERT_OK(f->WriteAt(0, Bytes("abc")));
  EXPECT_ERROR(f->WriteAt(3, Bytes("d")), Code::kResourceExhausted);
  EXPECT_EQ(OnDisk(path_), "abc3456789");
}

TEST_F(FaultEnvTest, TornWriteStoresExactlyThePrefix) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("01234567")));
  env_.TearNextWrite(3);
  Status st = f->WriteAt(2, Bytes("abcdef"));
  EXPECT_ERROR(st, Code::kIOError);
  EXPECT_TRUE(Contains(st, "pwrite of 6 bytes at offset 2 to " + path_)) << st.ToString();
  EXPECT_TRUE(Contains(st, "Input/output error")) << st.ToString();
  EXPECT_EQ(OnDisk(path_), "01abc567");

  // Only the next write tears.
  ASSERT_OK(f->WriteAt(8, Bytes("89")));
  EXPECT_EQ(OnDisk(path_), "01abc56789");

  // A torn append leaves the file ending inside the record.
  env_.TearNextWrite(2);
  EXPECT_FALSE(f->WriteAt(10, Bytes("XYZW")).ok());
  EXPECT_EQ(OnDisk(path_), "01abc56789XY");

  // Keeping nothing changes nothing.
  env_.TearNextWrite(0);
  EXPECT_FALSE(f->WriteAt(0, Bytes("!!")).ok());
  EXPECT_EQ(OnDisk(path_), "01abc56789XY");
}

TEST_F(FaultEnvTest, FlipBitOnReadChangesOnlyWhatIsRead) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("ABCD")));
  env_.FlipBitOnRead(path_, 2, 0);  // 'C' 0x43 -> 'B' 0x42
  env_.FlipBitOnRead(path_, 3, 7);  // 'D' 0x44 -> 0xc4
  EXPECT_EQ(ReadAll(f.get()), "ABB\xc4");

  std::string two(2, '\0');
  ASSERT_OK(ReadFully(f.get(), 1, {reinterpret_cast<uint8_t*>(two.data()), 2}));
  EXPECT_EQ(two, "BB");
  ASSERT_OK(ReadFully(f.get(), 0, {reinterpret_cast<uint8_t*>(two.data()), 2}));
  EXPECT_EQ(two, "AB");

  // A handle opened later sees it too; the file itself is untouched.
  auto reader = env_.Open(path_, OpenOptions{});
  ASSERT_OK(reader);
  EXPECT_EQ(ReadAll(reader->get()), "ABB\xc4");
  EXPECT_EQ(OnDisk(path_), "ABCD");

  // Other files are unaffected.
  auto other = OpenFile(dir_.Join("other"));
  ASSERT_OK(other->WriteAt(0, Bytes("ABCD")));
  EXPECT_EQ(ReadAll(other.get()), "ABCD");

  env_.ClearFaults();
  EXPECT_EQ(ReadAll(f.get()), "ABCD");
}

TEST_F(FaultEnvTest, HeldReadsWaitUntilReleased) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("ABCD")));
  env_.HoldReads();
  EXPECT_OK(f->WriteAt(4, Bytes("E")));  // writes go on
  std::atomic<bool> done{false};
  std::string got;
  std::thread reader([&] {
    got = ReadAll(f.get());
    done = true;
  });
  while (env_.reads_held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done);
  EXPECT_EQ(env_.reads_held(), 1u);
  env_.ReleaseReads();
  reader.join();
  EXPECT_EQ(got, "ABCDE");
  EXPECT_EQ(env_.reads_held(), 0u);
  EXPECT_EQ(ReadAll(f.get()), "ABCDE");  // released for good

  // ClearFaults releases them too.
  env_.HoldReads();
  std::thread again([&] { got = ReadAll(f.get()); });
  while (env_.reads_held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  env_.ClearFaults();
  again.join();
  EXPECT_EQ(got, "ABCDE");
}

// A held write waits before any fault is applied: a failure set while it
// waits is what it meets, and nothing of it reaches the file.
TEST_F(FaultEnvTest, HeldWritesWaitAndMeetTheFaultsSetMeanwhile) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("ABCD")));
  env_.HoldWrites();
  EXPECT_EQ(ReadAll(f.get()), "ABCD");  // reads go on
  std::atomic<bool> done{false};
  Status st;
  std::thread writer([&] {
    st = f->WriteAt(4, Bytes("E"));
    done = true;
  });
  while (env_.writes_held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done);
  EXPECT_EQ(env_.writes_held(), 1u);
  EXPECT_EQ(env_.writes(), 1u);
  env_.FailWritesAfter(0, EIO);
  env_.ReleaseWrites();
  writer.join();
  EXPECT_ERROR(st, Code::kIOError);
  EXPECT_EQ(env_.writes_held(), 0u);
  EXPECT_EQ(OnDisk(path_), "ABCD");

  // ClearFaults releases them too (and the failure with them).
  env_.HoldWrites();
  std::thread again([&] { st = f->WriteAt(4, Bytes("F")); });
  while (env_.writes_held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  env_.ClearFaults();
  again.join();
  EXPECT_OK(st);
  EXPECT_EQ(OnDisk(path_), "ABCDF");
}

TEST_F(FaultEnvTest, CrashDropsUnsyncedAppends) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("synced")));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(6, Bytes("+unsynced")));
  EXPECT_EQ(OnDisk(path_), "synced+unsynced");
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "synced");
}

TEST_F(FaultEnvTest, CrashRestoresOverwrittenSyncedBytes) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("0123456789")));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(3, Bytes("abc")));
  ASSERT_OK(f->WriteAt(4, Bytes("XY")));      // over the previous unsynced write
  ASSERT_OK(f->WriteAt(8, Bytes("zzzz")));    // half over synced bytes, half appended
  ASSERT_OK(f->WriteAt(0, Bytes("#")));
  EXPECT_EQ(OnDisk(path_), "#12aXY67zzzz");
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "0123456789");
}

TEST_F(FaultEnvTest, CrashKeepsWhatTheLastSyncCovered) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("aaaa")));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(0, Bytes("bb")));
  ASSERT_OK(f->WriteAt(4, Bytes("cc")));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(1, Bytes("dddddd")));
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "bbaacc");
  EXPECT_EQ(env_.syncs(), 2u);
}

TEST_F(FaultEnvTest, SyncThroughAnyHandleMakesTheFileDurable) {
  auto writer = OpenFile(path_);
  auto reader = env_.Open(path_, OpenOptions{});
  ASSERT_OK(reader);
  ASSERT_OK(writer->WriteAt(0, Bytes("durable")));
  ASSERT_OK((*reader)->Sync());  // fdatasync covers the whole file
  ASSERT_OK(writer->WriteAt(7, Bytes("?")));
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "durable");
}

TEST_F(FaultEnvTest, CrashEmptiesAFileNeverSynced) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("lost")));
  ASSERT_OK(env_.Crash());
  EXPECT_TRUE(Env::Default()->FileExists(path_));
  EXPECT_EQ(OnDisk(path_), "");
}

TEST_F(FaultEnvTest, CrashKeepsWhatWasOnDiskBeforeTheFirstOpen) {
  ASSERT_OK((*Env::Default()->Open(path_, Create()))->WriteAt(0, Bytes("before")));
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("AFTER!!!")));
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "before");
}

TEST_F(FaultEnvTest, CrashRestoresBytesCutByTruncate) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("0123456789")));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->Truncate(4));
  ASSERT_OK(f->WriteAt(6, Bytes("ab")));
  ASSERT_OK(f->Truncate(12));
  EXPECT_EQ(OnDisk(path_), std::string("0123\0\0ab\0\0\0\0", 12));
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "0123456789");
}

TEST_F(FaultEnvTest, CrashRestoresATornWrite) {
  auto f = OpenFile(path_);
  ASSERT_OK(f->WriteAt(0, Bytes("01234567")));
  ASSERT_OK(f->Sync());
  env_.TearNextWrite(5);
  EXPECT_FALSE(f->WriteAt(6, Bytes("abcdefgh")).ok());
  EXPECT_EQ(OnDisk(path_), "012345abcde");
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "01234567");
}

TEST_F(FaultEnvTest, HandlesOpenedBeforeACrashFailAfterIt) {
  auto f = OpenFile(path_);
  auto reader = env_.Open(path_, OpenOptions{});
  ASSERT_OK(reader);
  ASSERT_OK(f->WriteAt(0, Bytes("abc")));
  ASSERT_OK(f->Sync());
  ASSERT_OK(env_.Crash());

  std::string buf(3, '\0');
  std::span<uint8_t> out(reinterpret_cast<uint8_t*>(buf.data()), buf.size());
  const std::vector<Status> failures = {
      f->ReadAt(0, out).status(), f->WriteAt(3, Bytes("d")), f->Sync(), f->Size().status(), f->Truncate(0),
      (*reader)->ReadAt(0, out).status(), (*reader)->Size().status(),
  };
  for (const Status& st : failures) {
    EXPECT_ERROR(st, Code::kIOError);
    EXPECT_TRUE(Contains(st, path_)) << st.ToString();
    EXPECT_TRUE(Contains(st, "after a simulated crash")) << st.ToString();
  }
  EXPECT_EQ(OnDisk(path_), "abc");  // the poisoned write and truncate did nothing

  // A handle opened after the crash works, and the next crash treats it
  // like any other.
  auto g = OpenFile(path_);
  EXPECT_EQ(ReadAll(g.get()), "abc");
  ASSERT_OK(g->WriteAt(3, Bytes("def")));
  ASSERT_OK(g->Sync());
  ASSERT_OK(g->WriteAt(0, Bytes("XYZ")));
  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), "abcdef");
  EXPECT_FALSE(g->Size().ok());
}

TEST_F(FaultEnvTest, FreshPosixEnvSeesTheCrashedStateOfEveryFile) {
  auto a = OpenFile(dir_.Join("a"));
  auto b = OpenFile(dir_.Join("b"));
  ASSERT_OK(a->WriteAt(0, Bytes("A-synced")));
  ASSERT_OK(a->Sync());
  ASSERT_OK(b->WriteAt(0, Bytes("B-synced")));
  ASSERT_OK(b->Sync());
  ASSERT_OK(a->WriteAt(0, Bytes("a-unsynced-and-longer")));
  ASSERT_OK(b->WriteAt(2, Bytes("UNSYNCED")));
  a.reset();  // closing a file does not make it durable
  ASSERT_OK(env_.Crash());

  for (const auto& [name, want] : {std::pair{"a", "A-synced"}, std::pair{"b", "B-synced"}}) {
    auto f = Env::Default()->Open(dir_.Join(name), OpenOptions{});
    ASSERT_OK(f);
    std::string got(8, '\0');
    ASSERT_OK(ReadFully(f->get(), 0, {reinterpret_cast<uint8_t*>(got.data()), got.size()}));
    EXPECT_EQ(got, want);
    EXPECT_EQ(*(*f)->Size(), 8u);
  }
}

TEST_F(FaultEnvTest, RenameCarriesTheUnsyncedStateAlong) {
  const std::string tmp = dir_.Join("tmp");
  auto f = OpenFile(tmp);
  ASSERT_OK(f->WriteAt(0, Bytes("kept")));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->WriteAt(4, Bytes("+lost")));
  ASSERT_OK(env_.RenameFile(tmp, path_));
  ASSERT_OK(env_.SyncDir(dir_.path()));
  ASSERT_OK(env_.Crash());
  EXPECT_FALSE(env_.FileExists(tmp));
  EXPECT_EQ(OnDisk(path_), "kept");

  ASSERT_OK(env_.DeleteFile(path_));
  EXPECT_FALSE(env_.FileExists(path_));
  ASSERT_OK(env_.Crash());  // nothing to restore for a deleted file
  EXPECT_FALSE(env_.FileExists(path_));
}

TEST_F(FaultEnvTest, DirectFilesCrashAndTearLikeBufferedOnes) {
  struct statfs fs;
  if (::statfs(dir_.path().c_str(), &fs) != 0 || fs.f_type != EXT4_SUPER_MAGIC) GTEST_SKIP() << "/tmp is not ext4";
  OpenOptions o = Create();
  o.direct = true;
  auto f = env_.Open(path_, o);
  ASSERT_OK(f);
  ASSERT_TRUE((*f)->direct());

  constexpr size_t kBlock = kDirectIoAlignment;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(kBlock, 2 * kBlock));
  std::memset(buf, 'a', 2 * kBlock);
  ASSERT_OK((*f)->WriteAt(0, {buf, 2 * kBlock}));
  ASSERT_OK((*f)->Sync());
  std::memset(buf, 'b', 2 * kBlock);
  ASSERT_OK((*f)->WriteAt(kBlock, {buf, 2 * kBlock}));
  env_.TearNextWrite(100);
  std::memset(buf, 'c', 2 * kBlock);
  EXPECT_ERROR((*f)->WriteAt(0, {buf, kBlock}), Code::kIOError);
  std::string want = std::string(100, 'c') + std::string(kBlock - 100, 'a') + std::string(2 * kBlock, 'b');
  EXPECT_EQ(OnDisk(path_), want);

  ASSERT_OK(env_.Crash());
  EXPECT_EQ(OnDisk(path_), std::string(2 * kBlock, 'a'));
  std::free(buf);
}

TEST_F(FaultEnvTest, ConcurrentWritersAtDifferentOffsetsThenCrash) {
  auto f = OpenFile(path_);
  constexpr int kThreads = 8;
  constexpr int kBlocks = 16;
  constexpr size_t kBlock = 256;
  auto offset = [](int t, int b) { return uint64_t(b * kThreads + t) * kBlock; };
  auto write_all = [&](uint8_t salt, bool own_handle) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
      threads.emplace_back([&, t] {
        std::unique_ptr<File> own;
        File* target = f.get();
        if (own_handle && t % 2 == 1) {  // half of them through a handle of their own
          auto opened = env_.Open(path_, Create());
          ASSERT_OK(opened);
          own = std::move(opened).value();
          target = own.get();
        }
        std::vector<uint8_t> block(kBlock);
        for (int b = 0; b < kBlocks; b++) {
          std::fill(block.begin(), block.end(), static_cast<uint8_t>(salt + t * kBlocks + b));
          EXPECT_OK(target->WriteAt(offset(t, b), block));
        }
      });
    }
    for (auto& th : threads) th.join();
  };
  auto check_all = [&](uint8_t salt) {
    std::vector<uint8_t> all(kThreads * kBlocks * kBlock);
    ASSERT_OK(ReadFully(f.get(), 0, all));
    for (int t = 0; t < kThreads; t++) {
      for (int b = 0; b < kBlocks; b++) {
        const uint8_t want = static_cast<uint8_t>(salt + t * kBlocks + b);
        for (size_t i = 0; i < kBlock; i++) {
          ASSERT_EQ(all[offset(t, b) + i], want) << "thread " << t << " block " << b << " byte " << i;
        }
      }
    }
  };

  write_all(0, /*own_handle=*/false);
  ASSERT_OK(f->Sync());
  check_all(0);
  EXPECT_EQ(env_.writes(), uint64_t{kThreads * kBlocks});
  EXPECT_EQ(env_.bytes_written(), uint64_t{kThreads * kBlocks * kBlock});

  write_all(100, /*own_handle=*/true);
  check_all(100);
  ASSERT_OK(env_.Crash());
  f = OpenFile(path_);
  check_all(0);
}

TEST_F(FaultEnvTest, FailWritesAfterCountsExactlyUnderConcurrency) {
  auto f = OpenFile(path_);
  env_.FailWritesAfter(50, EIO);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; i++) {
        if (f->WriteAt(uint64_t(t * 40 + i), Bytes("x")).ok()) ok++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 50);
  EXPECT_EQ(env_.writes(), 50u);
}

}  // namespace
}  // namespace ptstore::storage
