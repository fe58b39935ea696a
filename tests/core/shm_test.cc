#include "core/shm.h"
#include "tests/testing/status_matchers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace ptstore::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::unique_ptr<SharedMemory> CreateOrDie(uint64_t bytes, SharedMemory::CreateOptions opts = {}) {
  auto shm = SharedMemory::Create(bytes, opts);
  EXPECT_OK(shm);
  return shm.ok() ? std::move(shm).value() : nullptr;
}

bool FdIsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

TEST(SharedMemoryTest, CreateGivesZeroedAlignedWritableRegion) {
  const uint64_t bytes = kMiB + 123;
  auto shm = CreateOrDie(bytes);
  ASSERT_NE(shm, nullptr);
  ASSERT_NE(shm->data(), nullptr);
  EXPECT_GE(shm->size(), bytes);
  EXPECT_GE(shm->fd(), 0);
  EXPECT_FALSE(shm->read_only());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(shm->data()) % 4096, 0u);
  for (uint64_t i = 0; i < bytes; ++i) ASSERT_EQ(shm->data()[i], 0) << "byte " << i;
  std::memset(shm->data(), 0xAB, bytes);
  EXPECT_EQ(shm->data()[bytes - 1], 0xAB);
}

TEST(SharedMemoryTest, PrefaultMakesEveryPageResident) {
  auto shm = CreateOrDie(8 * kMiB);
  ASSERT_NE(shm, nullptr);
  std::vector<unsigned char> resident(shm->size() / 4096);
  ASSERT_EQ(::mincore(shm->data(), shm->size(), resident.data()), 0) << std::strerror(errno);
  for (size_t i = 0; i < resident.size(); ++i) ASSERT_TRUE(resident[i] & 1) << "page " << i;
}

TEST(SharedMemoryTest, CreateWithoutPrefaultLeavesPagesAbsent) {
  SharedMemory::CreateOptions opts;
  opts.prefault = false;
  auto shm = CreateOrDie(8 * kMiB, opts);
  ASSERT_NE(shm, nullptr);
  std::vector<unsigned char> resident(shm->size() / 4096);
  ASSERT_EQ(::mincore(shm->data(), shm->size(), resident.data()), 0) << std::strerror(errno);
  EXPECT_FALSE(resident[0] & 1);
  shm->data()[0] = 7;  // still writable
  EXPECT_EQ(shm->data()[0], 7);
}

TEST(SharedMemoryTest, ReadOnlyMapOfSameFdSeesTheBytes) {
  const uint64_t bytes = 4 * kMiB;
  auto shm = CreateOrDie(bytes);
  ASSERT_NE(shm, nullptr);
  for (uint64_t i = 0; i < bytes; ++i) shm->data()[i] = static_cast<uint8_t>(i * 7 + 3);

  auto ro = SharedMemory::Map(::dup(shm->fd()), bytes, /*read_only=*/true, /*populate=*/true);
  ASSERT_OK(ro);
  EXPECT_TRUE((*ro)->read_only());
  EXPECT_EQ((*ro)->size(), bytes);
  EXPECT_NE((*ro)->data(), shm->data());
  EXPECT_EQ(std::memcmp((*ro)->data(), shm->data(), bytes), 0);

  // Shared, not a copy: later writes by the creator show through.
  shm->data()[bytes / 2] = 0x5A;
  EXPECT_EQ((*ro)->data()[bytes / 2], 0x5A);
}

TEST(SharedMemoryTest, WriteThroughReadOnlyMappingDiesOfSigsegv) {
  auto shm = CreateOrDie(kMiB);
  ASSERT_NE(shm, nullptr);
  auto ro = SharedMemory::Map(::dup(shm->fd()), kMiB, /*read_only=*/true, /*populate=*/false);
  ASSERT_OK(ro);

  std::fflush(nullptr);
  pid_t child = ::fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    // The default action, also under a sanitizer that handles SIGSEGV itself.
    ::signal(SIGSEGV, SIG_DFL);
    volatile uint8_t* p = (*ro)->data();
    p[100] = 1;
    ::_exit(0);  // reached only if the write did not fault
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited normally: the write went through";
  EXPECT_EQ(WTERMSIG(wstatus), SIGSEGV);
  EXPECT_EQ(shm->data()[100], 0);
}

TEST(SharedMemoryTest, MapOfTooSmallFdFailsNamingBothSizesAndClosesFd) {
  auto shm = CreateOrDie(kMiB);
  ASSERT_NE(shm, nullptr);
  int fd = ::dup(shm->fd());
  auto ro = SharedMemory::Map(fd, 2 * kMiB, /*read_only=*/true, /*populate=*/false);
  ASSERT_FALSE(ro.ok());
  EXPECT_ERROR(ro, Code::kInvalidArgument);
  EXPECT_NE(ro.status().message().find("1048576"), std::string::npos) << ro.status().message();
  EXPECT_NE(ro.status().message().find("2097152"), std::string::npos) << ro.status().message();
  EXPECT_FALSE(FdIsOpen(fd)) << "Map must close the fd it was given, also on failure";
}

TEST(SharedMemoryTest, BadArgumentsFail) {
  EXPECT_ERROR(SharedMemory::Create(0, {}), Code::kInvalidArgument);
  EXPECT_ERROR(SharedMemory::Map(-1, kMiB, true, false), Code::kInvalidArgument);
  auto shm = CreateOrDie(kMiB);
  ASSERT_NE(shm, nullptr);
  int fd = ::dup(shm->fd());
  EXPECT_ERROR(SharedMemory::Map(fd, 0, true, false), Code::kInvalidArgument);
  EXPECT_FALSE(FdIsOpen(fd));
}

TEST(SharedMemoryTest, SizeIsSealed) {
  auto shm = CreateOrDie(kMiB);
  ASSERT_NE(shm, nullptr);
  EXPECT_NE(::ftruncate(shm->fd(), 2 * kMiB), 0);
  EXPECT_NE(::ftruncate(shm->fd(), kMiB / 2), 0);
  int seals = ::fcntl(shm->fd(), F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_GROW);
  EXPECT_TRUE(seals & F_SEAL_SEAL);
}

TEST(SharedMemoryTest, NoWritableMappingAfterCreateByDefault) {
  auto shm = CreateOrDie(kMiB);
  ASSERT_NE(shm, nullptr);
  auto rw = SharedMemory::Map(::dup(shm->fd()), kMiB, /*read_only=*/false, /*populate=*/false);
  ASSERT_FALSE(rw.ok());
  EXPECT_ERROR(rw, Code::kPermissionDenied);
  // The creator's own mapping stays writable.
  shm->data()[0] = 9;
  EXPECT_EQ(shm->data()[0], 9);

  // Neither can a read-only mapping be made writable later.
  auto ro = SharedMemory::Map(::dup(shm->fd()), kMiB, /*read_only=*/true, /*populate=*/false);
  ASSERT_OK(ro);
  EXPECT_NE(::mprotect((*ro)->data(), kMiB, PROT_READ | PROT_WRITE), 0);
}

TEST(SharedMemoryTest, WritableMapWhenNotSealed) {
  SharedMemory::CreateOptions opts;
  opts.seal_future_writes = false;
  auto shm = CreateOrDie(kMiB, opts);
  ASSERT_NE(shm, nullptr);
  auto rw = SharedMemory::Map(::dup(shm->fd()), kMiB, /*read_only=*/false, /*populate=*/true);
  ASSERT_OK(rw);
  EXPECT_FALSE((*rw)->read_only());
  (*rw)->data()[10] = 42;
  EXPECT_EQ(shm->data()[10], 42);
}

// Manual measurement (about 1-3 s on the build VM):
//   shm_test --gtest_also_run_disabled_tests --gtest_filter='*PrefaultSpeed*'
TEST(SharedMemoryTest, DISABLED_PrefaultSpeed1GiB) {
  const uint64_t bytes = uint64_t{1} << 30;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto shm = CreateOrDie(bytes);
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_NE(shm, nullptr);
    double s = std::chrono::duration<double>(t1 - t0).count();
    std::printf("prefault 1 GiB (huge pages: %d): %.3f s = %.2f GB/s\n", shm->huge_pages(), s,
                bytes / s / 1e9);
  }
}

}  // namespace
}  // namespace ptstore::core
