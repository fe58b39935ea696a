// The filesystem's ioctls (ptstore/ioctl.h, ptstore(7)) on a real mount:
// the info of a namespace, a root and an increment, pinning a long prefix's
// pages and copying them byte-exact, pins of a killed process released, and
// Client::LoadPath's paged load by path. Fixture: fs_fixture.h.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ptstore/client.h"
#include "ptstore/ioctl.h"
#include "tests/fs/fs_fixture.h"
#include "tests/testing/generators.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using namespace fstest;  // NOLINT: the shared mount fixture
using testing::RandomTokens;

// ------------------------------------------------------------------ ioctl

class FsIoctlTest : public FsTest {
 protected:
  // Opens the increment at the end of `keys` by walking down with openat
  // (a long chain is deeper than PATH_MAX).
  int OpenChain(const std::string& ns, const std::vector<ChainKey>& keys) {
    int fd = open(M(ns).c_str(), O_RDONLY | O_DIRECTORY);
    for (const ChainKey& k : keys) {
      if (fd < 0) return fd;
      int next = openat(fd, k.ToHex().c_str(), O_RDONLY | O_DIRECTORY);
      close(fd);
      fd = next;
    }
    return fd;
  }
};

TEST_F(FsIoctlTest, InfoOfAGroupedNamespaceHasZeroDenseFieldsAndItsBytesPerToken) {
  const Layout grouped = GroupedFsLayout();
  ASSERT_OK(client_->CreateNamespace("hybrid", grouped));
  int fd = open(M("hybrid").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ptstore_ioc_info info{};
  info.version = PTSTORE_IOCTL_VERSION;
  ASSERT_EQ(ioctl(fd, PTSTORE_IOC_INFO, &info), 0) << strerror(errno);
  close(fd);
  EXPECT_EQ(info.kind, PTSTORE_KIND_NAMESPACE);
  EXPECT_EQ(info.layers, 0u);
  EXPECT_EQ(info.kv_heads, 0u);
  EXPECT_EQ(info.head_dim, 0u);
  EXPECT_EQ(info.dtype, 0u);
  EXPECT_EQ(info.block_tokens, 4u);
  EXPECT_EQ(info.bytes_per_token, grouped.BytesPerToken());
  // The groups are in .layout.
  EXPECT_EQ(Layout::Parse(ReadAll(M("hybrid/.layout"))).value(), grouped);
  // LoadPath copies the grouped bytes like any others.
  const std::vector<uint32_t> t = RandomTokens(9, 8);
  std::vector<uint8_t> kv(2 * grouped.BytesPerBlock());
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<uint8_t>(i * 13 + 1);
  ASSERT_OK(client_->Save("hybrid", t, kv.data(), kv.size()));
  auto paths = Paths("hybrid");
  ASSERT_EQ(paths.size(), 1u);
  std::vector<uint8_t> out(kv.size());
  auto n = client_->LoadPath(M(paths.begin()->first), out.data(), out.size());
  ASSERT_OK(n);
  EXPECT_EQ(*n, 8u);
  EXPECT_EQ(out, kv);
}

TEST_F(FsIoctlTest, InfoDescribesRootNamespaceAndIncrement) {
  SaveTree();
  auto stats = client_->Stats();
  auto paths = Paths("ns");
  auto& [path, node] = *paths.rbegin();
  int fd = open(M(path).c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ptstore_ioc_info info{};
  info.version = PTSTORE_IOCTL_VERSION;
  ASSERT_EQ(ioctl(fd, PTSTORE_IOC_INFO, &info), 0) << strerror(errno);
  EXPECT_EQ(info.kind, PTSTORE_KIND_INCREMENT);
  EXPECT_STREQ(info.ns, "ns");
  EXPECT_EQ(info.layers, layout_.layers);
  EXPECT_EQ(info.block_tokens, layout_.block_tokens);
  EXPECT_EQ(info.bytes_per_token, layout_.BytesPerToken());
  EXPECT_EQ(info.ns_mode, 0755u);
  char hex[33];
  for (int i = 0; i < 16; ++i) snprintf(hex + 2 * i, 3, "%02x", info.key[i]);
  EXPECT_EQ(std::string(hex), node.key.ToHex());
  EXPECT_EQ(info.tokens, node.tokens);
  EXPECT_EQ(info.bytes, node.bytes);
  EXPECT_EQ(info.start_token, node.start_token);
  EXPECT_EQ(info.tier, PTSTORE_TIER_DRAM);
  EXPECT_EQ(info.arena_bytes, stats->arena_bytes);
  EXPECT_EQ(info.node_id, client_->node_id());
  info.version = 99;
  EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_INFO, &info); }), EPROTO);
  EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, _IOR(PTSTORE_IOC_MAGIC, 77, uint64_t), &info); }), ENOTTY);
  close(fd);

  for (auto [rel, kind] : {std::pair{std::string(""), PTSTORE_KIND_ROOT}, {"ns", PTSTORE_KIND_NAMESPACE}}) {
    fd = open(M(rel).c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    info = {};
    info.version = PTSTORE_IOCTL_VERSION;
    ASSERT_EQ(ioctl(fd, PTSTORE_IOC_INFO, &info), 0);
    EXPECT_EQ(info.kind, kind);
    auto pin = std::make_unique<ptstore_ioc_pin>();
    pin->version = PTSTORE_IOCTL_VERSION;
    EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_PIN, pin.get()); }), EISDIR);  // pins need a kv file
    close(fd);
  }
  // Nor does an increment's directory pin: its kv file does.
  fd = open(M(path).c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  {
    auto pin = std::make_unique<ptstore_ioc_pin>();
    pin->version = PTSTORE_IOCTL_VERSION;
    EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_PIN, pin.get()); }), EISDIR);
    ptstore_ioc_unpin un{PTSTORE_IOCTL_VERSION, 0, 1};
    EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_UNPIN, &un); }), EISDIR);
    pin->version = 1;  // the ABI that pinned on directories
    EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_PIN, pin.get()); }), EPROTO);
  }
  close(fd);
  // The kv file speaks for its increment.
  fd = open(M(path + "/kv").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  info = {};
  info.version = PTSTORE_IOCTL_VERSION;
  ASSERT_EQ(ioctl(fd, PTSTORE_IOC_INFO, &info), 0) << strerror(errno);
  EXPECT_EQ(info.kind, PTSTORE_KIND_INCREMENT);
  EXPECT_EQ(info.tokens, node.tokens);
  close(fd);
  // The tokens file is not a PTStore ioctl target.
  fd = open(M(path + "/tokens").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  info.version = PTSTORE_IOCTL_VERSION;
  EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_INFO, &info); }), ENOTTY);
  close(fd);
}

TEST_F(FsIoctlTest, PinPagesALongPrefixUnpinsAndCopiesByteExact) {
  // 600 one-block increments in a chain: the whole prefix has 600 extents.
  constexpr size_t kBlocks = 600;
  auto toks = RandomTokens(42, kBlocks * layout_.block_tokens);
  auto kv = KvOf(toks, 0, layout_);
  const uint64_t bb = layout_.BytesPerBlock();
  for (size_t b = 1; b <= kBlocks; ++b) {
    ASSERT_OK(client_->Save("ns", std::span(toks).first(b * layout_.block_tokens), kv.data(), b * bb));
  }
  std::vector<ChainKey> keys;
  for (ChainKey k{};;) {
    auto kids = client_->ListTree("ns", k, false);
    ASSERT_OK(kids);
    if (kids->empty()) break;
    ASSERT_EQ(kids->size(), 1u);
    k = kids->front().key;
    keys.push_back(k);
  }
  ASSERT_EQ(keys.size(), kBlocks);
  int dir = OpenChain("ns", keys);
  ASSERT_GE(dir, 0) << strerror(errno);
  const uint64_t before_open = client_->Stats()->active_leases;
  // Pins are held by the open kv file (which itself pins its increment for reads).
  int fd = openat(dir, "kv", O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  close(dir);
  const uint64_t base_leases = client_->Stats()->active_leases;
  EXPECT_EQ(base_leases, before_open + 1);

  auto pin = std::make_unique<ptstore_ioc_pin>();
  pin->version = PTSTORE_IOCTL_VERSION;
  pin->flags = PTSTORE_PIN_WHOLE_PREFIX;
  ASSERT_EQ(ioctl(fd, PTSTORE_IOC_PIN, pin.get()), 0) << strerror(errno);
  EXPECT_NE(pin->lease, 0u);
  EXPECT_EQ(pin->total, kBlocks);
  EXPECT_EQ(pin->count, PTSTORE_IOC_MAX_EXTENTS);
  EXPECT_EQ(pin->tokens, toks.size());
  EXPECT_EQ(pin->bytes, kv.size());
  EXPECT_EQ(client_->Stats()->active_leases, base_leases + 1);
  std::vector<ptstore_ioc_extent> extents(pin->extents, pin->extents + pin->count);
  const uint64_t lease = pin->lease;
  while (extents.size() < pin->total) {
    auto page = std::make_unique<ptstore_ioc_pin>();
    page->version = PTSTORE_IOCTL_VERSION;
    page->lease = lease;
    page->first = static_cast<uint32_t>(extents.size());
    ASSERT_EQ(ioctl(fd, PTSTORE_IOC_PIN, page.get()), 0) << strerror(errno);
    ASSERT_GT(page->count, 0u);
    extents.insert(extents.end(), page->extents, page->extents + page->count);
  }
  ASSERT_EQ(extents.size(), kBlocks);
  // Copy out of this client's own mapping of the arena, at the offsets given.
  auto any = client_->PinIncrement("ns", keys.front());
  ASSERT_OK(any);
  std::vector<uint8_t> got;
  for (const auto& e : extents) {
    const uint8_t* p = any->data(Extent{{}, 0, e.length, e.arena_offset});
    got.insert(got.end(), p, p + e.length);
  }
  EXPECT_EQ(got, kv);
  ASSERT_OK(any->Release());

  // Paging errors, then UNPIN.
  auto bad = std::make_unique<ptstore_ioc_pin>();
  bad->version = PTSTORE_IOCTL_VERSION;
  bad->lease = lease;
  bad->first = kBlocks + 1;
  EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_PIN, bad.get()); }), EINVAL);
  bad->lease = 0;
  bad->first = 3;
  EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_PIN, bad.get()); }), EINVAL);
  bad->first = 0;
  bad->flags = 0x80;
  EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_PIN, bad.get()); }), EINVAL);
  ptstore_ioc_unpin un{PTSTORE_IOCTL_VERSION, 0, lease};
  ASSERT_EQ(ioctl(fd, PTSTORE_IOC_UNPIN, &un), 0);
  EXPECT_EQ(client_->Stats()->active_leases, base_leases);
  EXPECT_EQ(ErrnoOf([&] { return ioctl(fd, PTSTORE_IOC_UNPIN, &un); }), EINVAL);  // gone

  // Only the increment's own bytes: one extent.
  auto own = std::make_unique<ptstore_ioc_pin>();
  own->version = PTSTORE_IOCTL_VERSION;
  ASSERT_EQ(ioctl(fd, PTSTORE_IOC_PIN, own.get()), 0);
  EXPECT_EQ(own->total, 1u);
  EXPECT_EQ(own->bytes, bb);
  EXPECT_EQ(own->tokens, layout_.block_tokens);
  EXPECT_EQ(client_->Stats()->active_leases, base_leases + 1);
  // Closing the kv file releases what it still holds.
  close(fd);
  for (int i = 0; i < 100 && client_->Stats()->active_leases != before_open; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(client_->Stats()->active_leases, before_open);
}

TEST_F(FsIoctlTest, PinsOfAKilledProcessAreReleased) {
  SaveTree();
  const std::string inc = M(Paths("ns").begin()->first);
  const uint64_t base = client_->Stats()->active_leases;
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open((inc + "/kv").c_str(), O_RDONLY);
    auto pin = std::make_unique<ptstore_ioc_pin>();
    pin->version = PTSTORE_IOCTL_VERSION;
    char ok = (fd >= 0 && ioctl(fd, PTSTORE_IOC_PIN, pin.get()) == 0 && pin->total == 1) ? 'y' : 'n';
    (void)!write(pipefd[1], &ok, 1);
    pause();
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(pipefd[0], &ok, 1), 1);
  EXPECT_EQ(ok, 'y');
  EXPECT_EQ(client_->Stats()->active_leases, base + 2);  // the open kv file's own pin and the ioctl's
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  close(pipefd[0]);
  close(pipefd[1]);
  for (int i = 0; i < 250 && client_->Stats()->active_leases != base; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(client_->Stats()->active_leases, base);
}

// Client::LoadPath: a load by path through the ioctl, paged, byte-exact.
TEST_F(FsIoctlTest, LoadPathLoadsTheWholePrefixByteExact) {
  constexpr size_t kBlocks = 600;  // more extents than one ioctl page holds
  auto toks = RandomTokens(43, kBlocks * layout_.block_tokens);
  auto kv = KvOf(toks, 0, layout_);
  const uint64_t bb = layout_.BytesPerBlock();
  for (size_t b = 1; b <= kBlocks; ++b) {
    ASSERT_OK(client_->Save("ns", std::span(toks).first(b * layout_.block_tokens), kv.data(), b * bb));
  }
  std::string deepest, middle;
  for (const auto& [path, node] : Paths("ns")) {
    if (node.start_token + node.tokens == toks.size()) deepest = path;
    if (node.start_token + node.tokens == toks.size() / 2) middle = path;
  }
  ASSERT_FALSE(deepest.empty());
  ASSERT_FALSE(middle.empty());
  const uint64_t base_leases = client_->Stats()->active_leases;

  std::vector<uint8_t> out(kv.size() + 4096, 0xee);
  auto got = client_->LoadPath(M(deepest), out.data(), out.size());
  ASSERT_OK(got);
  EXPECT_EQ(*got, toks.size());
  EXPECT_TRUE(std::equal(kv.begin(), kv.end(), out.begin()));
  EXPECT_EQ(out[kv.size()], 0xee);  // nothing past the prefix
  // Half way down the chain: the prefix that ends there.
  std::fill(out.begin(), out.end(), 0);
  got = client_->LoadPath(M(middle), out.data(), out.size());
  ASSERT_OK(got);
  EXPECT_EQ(*got, toks.size() / 2);
  EXPECT_TRUE(std::equal(kv.begin(), kv.begin() + kv.size() / 2, out.begin()));
  // Its lease is gone once it returns; the kv file it opened (a pin of its
  // own while open) goes with the kernel's RELEASE, which is asynchronous.
  for (int i = 0; i < 100 && client_->Stats()->active_leases != base_leases; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(client_->Stats()->active_leases, base_leases);

  // Errors name what was wrong.
  auto small = client_->LoadPath(M(deepest), out.data(), kv.size() - 1);
  EXPECT_ERROR(small, Code::kInvalidArgument);
  EXPECT_NE(small.status().message().find(std::to_string(kv.size())), std::string::npos) << small.status().message();
  EXPECT_ERROR(client_->LoadPath(M("ns/00000000000000000000000000000001"), out.data(), out.size()), Code::kNotFound);
  auto outside = client_->LoadPath("/tmp", out.data(), out.size());
  EXPECT_ERROR(outside, Code::kInvalidArgument);
  auto file = client_->LoadPath(M(deepest) + "/kv", out.data(), out.size());
  EXPECT_ERROR(file, Code::kInvalidArgument);
  // A namespace has no prefix: 0 tokens, not an error.
  auto ns = client_->LoadPath(M("ns"), out.data(), out.size());
  ASSERT_OK(ns);
  EXPECT_EQ(*ns, 0u);
  EXPECT_EQ(client_->Stats()->active_leases, base_leases);
}

}  // namespace
}  // namespace ptstore
