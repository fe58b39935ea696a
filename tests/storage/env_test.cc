#include "storage/ssd_format/env.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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

// A 4 KiB-aligned buffer for O_DIRECT.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t size)
      : data(static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlignment, size))), size(size) {}
  ~AlignedBuffer() { std::free(data); }
  std::span<uint8_t> span() { return {data, size}; }
  uint8_t* data;
  size_t size;
};

long FileSystemType(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return -1;
  return static_cast<long>(fs.f_type);
}

OpenOptions Writable() {
  OpenOptions o;
  o.writable = true;
  return o;
}

class EnvTest : public ::testing::Test {
 protected:
  Env* env_ = Env::Default();
  TempDir dir_{"ptstore-env-test"};
};

TEST_F(EnvTest, DefaultIsOneProcessWideEnv) { EXPECT_EQ(Env::Default(), Env::Default()); }

TEST_F(EnvTest, WritesReadsAndSizes) {
  const std::string path = dir_.Join("a");
  auto f = env_->Open(path, Create());
  ASSERT_OK(f);
  EXPECT_EQ((*f)->path(), path);
  EXPECT_FALSE((*f)->direct());
  ASSERT_OK((*f)->WriteAt(0, Bytes("hello world")));
  ASSERT_OK((*f)->WriteAt(6, Bytes("WORLD")));
  ASSERT_OK((*f)->Sync());
  EXPECT_EQ(*(*f)->Size(), 11u);
  EXPECT_EQ(ReadAll(f->get()), "hello WORLD");

  // A write past the end leaves a hole that reads as zeros.
  ASSERT_OK((*f)->WriteAt(14, Bytes("!")));
  EXPECT_EQ(*(*f)->Size(), 15u);
  EXPECT_EQ(ReadAll(f->get()), std::string("hello WORLD\0\0\0!", 15));
  EXPECT_EQ(OnDisk(path), std::string("hello WORLD\0\0\0!", 15));
}

TEST_F(EnvTest, CreateNeverTruncates) {
  const std::string path = dir_.Join("a");
  ASSERT_OK((*env_->Open(path, Create()))->WriteAt(0, Bytes("keep me")));
  auto again = env_->Open(path, Create());
  ASSERT_OK(again);
  EXPECT_EQ(ReadAll(again->get()), "keep me");
}

TEST_F(EnvTest, ExclusiveCreateOfExistingFileIsAlreadyExists) {
  const std::string path = dir_.Join("a");
  OpenOptions excl = Create();
  excl.exclusive = true;
  ASSERT_OK(env_->Open(path, excl));
  auto again = env_->Open(path, excl);
  ASSERT_FALSE(again.ok());
  EXPECT_ERROR(again, Code::kAlreadyExists);
  EXPECT_NE(again.status().message().find("open " + path), std::string::npos) << again.status().ToString();
}

TEST_F(EnvTest, NewFilesAreOwnerOnly) {
  const std::string path = dir_.Join("a");
  ASSERT_OK(env_->Open(path, Create()));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(EnvTest, OpenOfMissingFileIsNotFoundNamingThePath) {
  const std::string path = dir_.Join("missing");
  auto f = env_->Open(path, OpenOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_ERROR(f, Code::kNotFound);
  EXPECT_EQ(f.status().message(), "open " + path + " for reading: No such file or directory");
}

TEST_F(EnvTest, WriteToReadOnlyFileFailsNamingCallAndPath) {
  const std::string path = dir_.Join("a");
  ASSERT_OK(env_->Open(path, Create()));
  auto f = env_->Open(path, OpenOptions{});
  ASSERT_OK(f);
  Status st = (*f)->WriteAt(0, Bytes("x"));
  EXPECT_ERROR(st, Code::kIOError);
  EXPECT_EQ(st.message(), "pwrite of 1 bytes at offset 0 to " + path + ": Bad file descriptor");
}

TEST_F(EnvTest, FullDiskIsResourceExhausted) {
  // /dev/full fails every write with ENOSPC: a full disk on demand.
  auto f = env_->Open("/dev/full", Writable());
  if (!f.ok()) GTEST_SKIP() << f.status().ToString();
  Status st = (*f)->WriteAt(0, Bytes("abc"));
  EXPECT_ERROR(st, Code::kResourceExhausted);
  EXPECT_EQ(st.message(), "pwrite of 3 bytes at offset 0 to /dev/full: No space left on device");
}

TEST_F(EnvTest, ReadIsShortOnlyAtEndOfFile) {
  auto f = env_->Open(dir_.Join("a"), Create());
  ASSERT_OK((*f)->WriteAt(0, Bytes("0123456789")));
  std::string buf(100, 'x');
  std::span<uint8_t> out(reinterpret_cast<uint8_t*>(buf.data()), buf.size());
  Result<size_t> n = (*f)->ReadAt(4, out);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 6u);
  EXPECT_EQ(buf.substr(0, 7), "456789x");  // nothing written past the count
  n = (*f)->ReadAt(10, out);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  n = (*f)->ReadAt(1000, out);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  n = (*f)->ReadAt(2, out.first(3));
  ASSERT_OK(n);
  EXPECT_EQ(*n, 3u);
  EXPECT_EQ(buf.substr(0, 3), "234");
}

TEST_F(EnvTest, TruncateShrinksAndGrowsWithZeros) {
  auto f = env_->Open(dir_.Join("a"), Create());
  ASSERT_OK((*f)->WriteAt(0, Bytes("0123456789")));
  ASSERT_OK((*f)->Truncate(4));
  EXPECT_EQ(ReadAll(f->get()), "0123");
  ASSERT_OK((*f)->Truncate(6));
  EXPECT_EQ(ReadAll(f->get()), std::string("0123\0\0", 6));
}

TEST_F(EnvTest, TruncateOfReadOnlyFileNamesThePath) {
  const std::string path = dir_.Join("a");
  ASSERT_OK(env_->Open(path, Create()));
  auto f = env_->Open(path, OpenOptions{});
  Status st = (*f)->Truncate(0);
  EXPECT_ERROR(st, Code::kIOError);
  EXPECT_NE(st.message().find("ftruncate " + path), std::string::npos) << st.ToString();
}

TEST_F(EnvTest, ReadFullyReadsExactly) {
  auto f = env_->Open(dir_.Join("a"), Create());
  ASSERT_OK((*f)->WriteAt(0, Bytes("0123456789")));
  std::string buf(4, '\0');
  ASSERT_OK(ReadFully(f->get(), 6, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()}));
  EXPECT_EQ(buf, "6789");
}

TEST_F(EnvTest, ReadFullyOfTruncatedFileIsCorruptionNamingThePath) {
  const std::string path = dir_.Join("a");
  auto f = env_->Open(path, Create());
  ASSERT_OK((*f)->WriteAt(0, Bytes("0123456789")));
  std::string buf(8, '\0');
  Status st = ReadFully(f->get(), 6, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()});
  EXPECT_ERROR(st, Code::kCorruption);
  EXPECT_EQ(st.message(), path + ": expected 8 bytes at offset 6, the file ends after 4");
  st = ReadFully(f->get(), 20, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()});
  EXPECT_ERROR(st, Code::kCorruption);
  EXPECT_EQ(st.message(), path + ": expected 8 bytes at offset 20, the file ends after 0");
}

TEST_F(EnvTest, DirectIoOnExt4) {
  if (FileSystemType(dir_.path()) != EXT4_SUPER_MAGIC) GTEST_SKIP() << "/tmp is not ext4";
  const std::string path = dir_.Join("direct");
  OpenOptions o = Create();
  o.direct = true;
  auto f = env_->Open(path, o);
  ASSERT_OK(f);
  EXPECT_TRUE((*f)->direct());

  AlignedBuffer out(2 * kDirectIoAlignment);
  for (size_t i = 0; i < out.size; i++) out.data[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_OK((*f)->WriteAt(kDirectIoAlignment, out.span()));
  ASSERT_OK((*f)->Sync());
  EXPECT_EQ(*(*f)->Size(), 3 * kDirectIoAlignment);

  AlignedBuffer in(2 * kDirectIoAlignment);
  std::memset(in.data, 0, in.size);
  ASSERT_OK(ReadFully(f->get(), kDirectIoAlignment, in.span()));
  EXPECT_EQ(std::memcmp(in.data, out.data, in.size), 0);

  // O_DIRECT is really on: the kernel refuses a misaligned buffer. (Over
  // data, that is: ext4 fills a hole with zeros without checking.)
  Result<size_t> misaligned = (*f)->ReadAt(kDirectIoAlignment, in.span().subspan(1, kDirectIoAlignment));
  ASSERT_FALSE(misaligned.ok());
  EXPECT_ERROR(misaligned, Code::kIOError);
  EXPECT_EQ(misaligned.status().message(),
            "pread of 4096 bytes at offset 4096 from " + path + ": Invalid argument");

  // A file whose size is not a multiple of the block reads short at its end.
  ASSERT_OK((*f)->Truncate(2 * kDirectIoAlignment + 100));
  Result<size_t> n = (*f)->ReadAt(kDirectIoAlignment, in.span());
  ASSERT_OK(n);
  EXPECT_EQ(*n, kDirectIoAlignment + 100);
  EXPECT_EQ(std::memcmp(in.data, out.data, *n), 0);
  n = (*f)->ReadAt(4 * kDirectIoAlignment, in.span());
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
}

TEST_F(EnvTest, DirectIoOnTmpfs) {
  if (FileSystemType("/dev/shm") != TMPFS_MAGIC) GTEST_SKIP() << "/dev/shm is not tmpfs";
  TempDir shm("ptstore-env-test", "/dev/shm");
  ASSERT_FALSE(shm.path().empty());
  const std::string path = shm.Join("direct");
  // tmpfs has O_DIRECT since Linux 6.6; before, Open falls back to buffered
  // I/O. Either way direct() must tell the truth, which the kernel decides.
  int probe = ::open(shm.Join("probe").c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  const bool kernel_has_direct = probe >= 0;
  if (probe >= 0) ::close(probe);

  OpenOptions o = Create();
  o.direct = true;
  o.exclusive = true;  // the fallback must not trip over the file its first try made
  auto f = env_->Open(path, o);
  ASSERT_OK(f);
  EXPECT_EQ((*f)->direct(), kernel_has_direct);

  AlignedBuffer out(kDirectIoAlignment);
  for (size_t i = 0; i < out.size; i++) out.data[i] = static_cast<uint8_t>(i ^ 0x5a);
  ASSERT_OK((*f)->WriteAt(0, out.span()));
  AlignedBuffer in(kDirectIoAlignment);
  ASSERT_OK(ReadFully(f->get(), 0, in.span()));
  EXPECT_EQ(std::memcmp(in.data, out.data, in.size), 0);
}

TEST_F(EnvTest, DirectFallsBackWhereTheFileSystemHasNoDirectIo) {
  // procfs rejects O_DIRECT with EINVAL on every kernel.
  OpenOptions o;
  o.direct = true;
  auto f = env_->Open("/proc/self/status", o);
  ASSERT_OK(f);
  EXPECT_FALSE((*f)->direct());
  std::string buf(5, '\0');
  ASSERT_OK(ReadFully(f->get(), 0, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()}));
  EXPECT_EQ(buf, "Name:");
}

TEST_F(EnvTest, ListDirNamesEntriesWithoutDots) {
  ASSERT_OK(env_->Open(dir_.Join("b"), Create()));
  ASSERT_OK(env_->Open(dir_.Join("a"), Create()));
  ASSERT_OK(env_->CreateDirs(dir_.Join("sub")));
  auto names = env_->ListDir(dir_.path());
  ASSERT_OK(names);
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "sub"}));

  auto empty = env_->ListDir(dir_.Join("sub"));
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->empty());

  auto missing = env_->ListDir(dir_.Join("nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_ERROR(missing, Code::kNotFound);
  EXPECT_EQ(missing.status().message(), "opendir " + dir_.Join("nope") + ": No such file or directory");
}

TEST_F(EnvTest, DeleteFile) {
  const std::string path = dir_.Join("a");
  ASSERT_OK(env_->Open(path, Create()));
  EXPECT_TRUE(env_->FileExists(path));
  ASSERT_OK(env_->DeleteFile(path));
  EXPECT_FALSE(env_->FileExists(path));
  Status st = env_->DeleteFile(path);
  EXPECT_ERROR(st, Code::kNotFound);
  EXPECT_EQ(st.message(), "unlink " + path + ": No such file or directory");
}

TEST_F(EnvTest, RenameFileMovesContentsAndReplacesTarget) {
  const std::string from = dir_.Join("from");
  const std::string to = dir_.Join("to");
  ASSERT_OK((*env_->Open(from, Create()))->WriteAt(0, Bytes("new")));
  ASSERT_OK((*env_->Open(to, Create()))->WriteAt(0, Bytes("old contents")));
  ASSERT_OK(env_->RenameFile(from, to));
  EXPECT_FALSE(env_->FileExists(from));
  EXPECT_EQ(OnDisk(to), "new");
  ASSERT_OK(env_->SyncDir(dir_.path()));

  Status st = env_->RenameFile(from, to);
  EXPECT_ERROR(st, Code::kNotFound);
  EXPECT_EQ(st.message(), "rename " + from + " to " + to + ": No such file or directory");
}

TEST_F(EnvTest, CreateDirsMakesMissingParents) {
  const std::string deep = dir_.Join("x/y/z");
  ASSERT_OK(env_->CreateDirs(deep));
  struct stat st;
  ASSERT_EQ(::stat(deep.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(dir_.Join("x").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Existing directories, repeated and trailing slashes are fine.
  EXPECT_OK(env_->CreateDirs(deep));
  EXPECT_OK(env_->CreateDirs(dir_.Join("x//y/w/")));
  EXPECT_TRUE(env_->FileExists(dir_.Join("x/y/w")));
  EXPECT_ERROR(env_->CreateDirs(""), Code::kInvalidArgument);
}

TEST_F(EnvTest, CreateDirsThroughAFileFailsNamingThePath) {
  const std::string file = dir_.Join("file");
  ASSERT_OK(env_->Open(file, Create()));
  Status st = env_->CreateDirs(file + "/sub");
  EXPECT_ERROR(st, Code::kIOError);
  EXPECT_EQ(st.message(), "mkdir " + file + "/sub: Not a directory");
  st = env_->CreateDirs(file);
  EXPECT_ERROR(st, Code::kIOError);
  EXPECT_EQ(st.message(), "mkdir " + file + ": Not a directory");
}

TEST_F(EnvTest, SyncDirOfMissingDirectoryNamesIt) {
  EXPECT_OK(env_->SyncDir(dir_.path()));
  Status st = env_->SyncDir(dir_.Join("nope"));
  EXPECT_ERROR(st, Code::kNotFound);
  EXPECT_EQ(st.message(), "open directory " + dir_.Join("nope") + ": No such file or directory");
}

TEST_F(EnvTest, NowNanosIsWallClock) {
  const uint64_t system = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  const uint64_t now = env_->NowNanos();
  const uint64_t diff = now > system ? now - system : system - now;
  EXPECT_LT(diff, uint64_t{5'000'000'000});
}

TEST_F(EnvTest, ConcurrentWritesAtDifferentOffsets) {
  auto f = env_->Open(dir_.Join("a"), Create());
  ASSERT_OK(f);
  constexpr int kThreads = 8;
  constexpr int kBlocks = 32;
  constexpr size_t kBlock = 512;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> block(kBlock);
      for (int b = 0; b < kBlocks; b++) {
        std::fill(block.begin(), block.end(), static_cast<uint8_t>(t * kBlocks + b));
        EXPECT_OK((*f)->WriteAt(uint64_t(b * kThreads + t) * kBlock, block));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint8_t> all(kThreads * kBlocks * kBlock);
  ASSERT_OK(ReadFully(f->get(), 0, all));
  for (int b = 0; b < kBlocks; b++) {
    for (int t = 0; t < kThreads; t++) {
      const size_t at = size_t(b * kThreads + t) * kBlock;
      ASSERT_EQ(std::count(all.begin() + at, all.begin() + at + kBlock, static_cast<uint8_t>(t * kBlocks + b)),
                static_cast<long>(kBlock))
          << "block " << b << " of thread " << t;
    }
  }
}

}  // namespace
}  // namespace ptstore::storage
