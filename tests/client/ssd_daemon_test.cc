// The SSD tier through real ptstored processes and real files: kill -9
// during heavy writes and a restart that serves every prefix it reports
// byte for byte; bit flips in payloads and headers on disk; a torn last
// record; a real full file system (a small tmpfs); a restart with another
// configuration; SIGTERM persisting DRAM to SSD; a namespace of a grouped
// layout saved, loaded, spilled and recovered.
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <algorithm>

#include "ptstore/client.h"
#include "storage/ssd_format/record.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/daemon.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using namespace storage::testkv;  // NOLINT: the shared KV fixture
using testing::Daemon;

class SsdDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("ptstore-ssd-daemon");
    ASSERT_FALSE(dir_.empty());
    ssd_ = dir_ + "/ssd";
  }
  void TearDown() override {
    client_.reset();
    daemon_.reset();
    if (!mounted_.empty()) umount2(mounted_.c_str(), MNT_DETACH);
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  void Start(std::vector<std::string> extra = {}, const std::string& arena = "4MiB") {
    client_.reset();
    daemon_ = std::make_unique<Daemon>();
    Daemon::Options o;
    o.arena_size = arena;
    o.extra_args = {"--ssd-dir", ssd_, "--ssd-capacity", "256MiB"};
    o.extra_args.insert(o.extra_args.end(), extra.begin(), extra.end());
    ASSERT_OK(daemon_->Start(o)) << daemon_->ReadLog();
    client_ = Connect();
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions co;
    co.socket_path = daemon_->socket_path();
    auto c = Client::Connect(co);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Loads the longest stored prefix and checks every byte; returns its tokens.
  static uint64_t LoadAndCheck(Client* c, const Tokens& t) {
    std::vector<uint8_t> out(t.size() * kBpt);
    auto r = c->Load("m", t, out.data(), out.size());
    EXPECT_OK(r);
    if (!r.ok()) return 0;
    std::vector<uint8_t> want = Kv(t, 0, *r);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin())) << "wrong bytes in a prefix of " << *r;
    return *r;
  }

  // Prompt i of a family: groups of 8 share a 128-token head.
  static Tokens Prompt(int i, size_t tokens = 1024) {
    return Cat(RandomTokens(100000 + i / 8, 128), RandomTokens(200000 + i, tokens - 128));
  }

  void SaveAll(Client* c, int from, int to) {
    for (int i = from; i < to; ++i) {
      Tokens t = Prompt(i);
      std::vector<uint8_t> kv = Kv(t, 0, t.size());
      auto r = c->Save("m", t, kv.data(), kv.size());
      ASSERT_OK(r);
    }
  }

  std::vector<std::string> Segments() {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(ssd_)) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  static void FlipBit(const std::string& path, uint64_t offset, int bit) {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr) << path;
    std::fseek(f, static_cast<long>(offset), SEEK_SET);
    int c = std::fgetc(f);
    std::fseek(f, static_cast<long>(offset), SEEK_SET);
    std::fputc(c ^ (1 << bit), f);
    std::fclose(f);
  }

  std::string dir_, ssd_, mounted_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(SsdDaemonTest, KillNineDuringHeavyWritesThenEveryReportedPrefixIsExact) {
  Start();
  ASSERT_OK(client_->CreateNamespace("m", SmallLayout()));
  // Four writers save 256 KiB prompts into a 4 MiB arena: constant spills.
  std::atomic<bool> stop{false};
  std::atomic<int> saved{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      auto c = Connect();
      for (int i = w; !stop; i += 4) {
        Tokens t = Prompt(i);
        std::vector<uint8_t> kv = Kv(t, 0, t.size());
        if (!c->Save("m", t, kv.data(), kv.size()).ok()) return;  // the server died
        saved++;
      }
    });
  }
  while (saved < 300) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  daemon_->Kill();
  stop = true;
  for (auto& t : writers) t.join();
  const int attempted = saved + 4;

  Start();
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_GT(stats->recovered_tensors, 0u);
  // Every increment it lists is on a path of prompts the test saved; load
  // every prompt (and the ones that were in flight) and check every byte.
  uint64_t served = 0;
  for (int i = 0; i < attempted + 4; ++i) served += LoadAndCheck(client_.get(), Prompt(i));
  EXPECT_GT(served, 0u);
  std::printf("saved %d prompts before the kill; after the restart: %llu tensors recovered, %llu corrupt records "
              "skipped, %llu tokens served\n",
              saved.load(), static_cast<unsigned long long>(stats->recovered_tensors),
              static_cast<unsigned long long>(stats->recovery_corrupt), static_cast<unsigned long long>(served));
  auto tree = client_->ListTree("m", {}, true);
  ASSERT_OK(tree);
  uint64_t listed_bytes = 0;
  for (const auto& n : *tree) listed_bytes += n.bytes;
  EXPECT_EQ(listed_bytes, client_->GetNamespace("m")->bytes);
  EXPECT_GT(tree->size(), 0u);
}

TEST_F(SsdDaemonTest, SigtermPersistsDramAndRestartServesEverything) {
  Start();
  ASSERT_OK(client_->CreateNamespace("m", SmallLayout(), "salt", 0750));
  SaveAll(client_.get(), 0, 40);
  client_.reset();
  EXPECT_EQ(daemon_->Stop(), 0);
  Start();
  auto ns = client_->GetNamespace("m");
  ASSERT_OK(ns);
  EXPECT_TRUE(ns->salted);
  EXPECT_EQ(ns->mode, 0750u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(LoadAndCheck(client_.get(), Prompt(i)), 1024u) << i;
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_GT(stats->ssd_hits, 0u);
  EXPECT_EQ(stats->recovery_corrupt, 0u);
}

TEST_F(SsdDaemonTest, BitFlipsInPayloadsAndHeadersAreSkippedNeverServed) {
  Start();
  ASSERT_OK(client_->CreateNamespace("m", SmallLayout()));
  SaveAll(client_.get(), 0, 40);
  client_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  auto segs = Segments();
  ASSERT_FALSE(segs.empty());
  // The first record after the namespace record: flip a header bit; in the
  // last segment flip a payload bit far into it.
  const std::string& first = segs.front();
  FlipBit(first, storage::kSegmentHeaderBytes + storage::kRecordAlignment + 40, 2);
  const std::string& last = segs.back();
  FlipBit(last, std::filesystem::file_size(last) - 5000, 6);
  Start();
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_GE(stats->recovery_corrupt, 2u);
  uint64_t full = 0;
  for (int i = 0; i < 40; ++i) full += LoadAndCheck(client_.get(), Prompt(i)) == 1024;
  EXPECT_LT(full, 40u);
  EXPECT_GT(full, 20u);
  // Saving again heals: the lost prompts are stored anew.
  SaveAll(client_.get(), 0, 40);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(LoadAndCheck(client_.get(), Prompt(i)), 1024u);
}

TEST_F(SsdDaemonTest, TornLastRecordIsSkippedAndTheRestServed) {
  Start();
  ASSERT_OK(client_->CreateNamespace("m", SmallLayout()));
  SaveAll(client_.get(), 0, 24);
  client_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  auto segs = Segments();
  const std::string& last = segs.back();
  const uint64_t size = std::filesystem::file_size(last);
  ASSERT_GT(size, storage::kSegmentHeaderBytes + 3 * storage::kRecordAlignment);
  std::filesystem::resize_file(last, size - 3 * storage::kRecordAlignment - 100);
  Start();
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->recovery_corrupt, 1u);
  uint64_t full = 0;
  for (int i = 0; i < 24; ++i) full += LoadAndCheck(client_.get(), Prompt(i)) == 1024;
  EXPECT_GE(full, 20u);
}

TEST_F(SsdDaemonTest, RealFullFileSystemKeepsTheServerServing) {
  const std::string small = dir_ + "/small";
  std::filesystem::create_directories(small);
  if (mount("tmpfs", small.c_str(), "tmpfs", 0, "size=3m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs root";
  }
  mounted_ = small;
  ssd_ = small + "/ssd";
  Start();  // capacity 256 MiB on a 3 MiB file system: ENOSPC comes first
  ASSERT_OK(client_->CreateNamespace("m", SmallLayout()));
  SaveAll(client_.get(), 0, 60);
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_GT(stats->ssd_spill_failures, 0u);
  EXPECT_GT(stats->ssd_spills, 0u);
  uint64_t served = 0;
  for (int i = 0; i < 60; ++i) served += LoadAndCheck(client_.get(), Prompt(i));
  EXPECT_GT(served, 0u);
  EXPECT_NE(daemon_->ReadLog().find("No space left on device"), std::string::npos);
}

TEST_F(SsdDaemonTest, RestartWithChangedConfig) {
  Start();
  ASSERT_OK(client_->CreateNamespace("m", SmallLayout()));
  SaveAll(client_.get(), 0, 32);
  client_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  // Compression on, a bigger arena, another node id: old records read as
  // they were written.
  Start({"--ssd-compress", "--node-id", "7"}, "8MiB");
  for (int i = 0; i < 32; ++i) EXPECT_EQ(LoadAndCheck(client_.get(), Prompt(i)), 1024u);
  SaveAll(client_.get(), 32, 64);
  client_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  // Smaller capacity than what is stored: GDSF trims at start.
  client_.reset();
  daemon_ = std::make_unique<Daemon>();
  Daemon::Options o;
  o.arena_size = "4MiB";
  o.extra_args = {"--ssd-dir", ssd_, "--ssd-capacity", "8MiB"};
  ASSERT_OK(daemon_->Start(o)) << daemon_->ReadLog();
  client_ = Connect();
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_LE(stats->ssd_live_bytes, 8 * kMiB);
  EXPECT_GT(stats->ssd_evictions, 0u);
  for (int i = 0; i < 64; ++i) LoadAndCheck(client_.get(), Prompt(i));
}

// A hybrid model's layout in 16-token blocks: per block a full group of
// 1024 bytes at 0, a window group of 1024 at 1024, a latent group of 1536
// at 2048 and a state group of 200 at 3584, padded to 3840 (240 per token).
Layout HybridTestLayout() {
  return Layout::FromGroups({LayoutGroup::Full(1, 1, 16, DType::kBF16), LayoutGroup::Window(1, 1, 16, DType::kBF16, 32),
                             LayoutGroup::Latent(2, 24, DType::kFP16), LayoutGroup::State(2, 100)},
                            16);
}

// The bytes of the whole blocks of `t` in `layout`: each group's slice a
// function of the block's tokens (and every token before), the padding zero
// as a writer leaves it.
std::vector<uint8_t> GroupedKv(const Layout& layout, const Tokens& t) {
  const uint64_t blocks = layout.FullBlocks(t.size());
  std::vector<uint8_t> out(blocks * layout.BytesPerBlock(), 0);
  uint64_t h = 0x9a1e;
  for (uint64_t b = 0; b < blocks; ++b) {
    for (uint32_t i = 0; i < layout.block_tokens; ++i) h = Mix(h ^ t[b * layout.block_tokens + i]);
    uint8_t* block = out.data() + b * layout.BytesPerBlock();
    for (size_t g = 0; g < layout.GroupCount(); ++g) {
      for (uint64_t j = 0; j < layout.GroupBytesPerBlock(g); ++j) {
        block[layout.GroupOffset(g) + j] = static_cast<uint8_t>(Mix(h + g * 1000003 + j) | 1);
      }
    }
  }
  return out;
}

TEST_F(SsdDaemonTest, GroupedNamespaceIsSavedLoadedSpilledAndRecovered) {
  const Layout layout = HybridTestLayout();
  ASSERT_OK(layout.Validate());
  ASSERT_EQ(layout.BytesPerToken(), 240u);
  Start({"--ssd-compress"});
  auto created = client_->CreateNamespace("hybrid", layout, "", 0750);
  ASSERT_OK(created);
  EXPECT_EQ(created->layout, layout);
  // The same layout again is fine; a dense one is another layout.
  EXPECT_OK(client_->CreateNamespace("hybrid", layout, "", 0750));
  EXPECT_ERROR(client_->CreateNamespace("hybrid", SmallLayout()), Code::kAlreadyExists);
  // 40 prompts of 1024 tokens (240 KiB each) through a 4 MiB arena: most
  // of them are spilled to the SSD tier.
  for (int i = 0; i < 40; ++i) {
    const Tokens t = Prompt(i);
    const std::vector<uint8_t> kv = GroupedKv(layout, t);
    auto r = client_->Save("hybrid", t, kv.data(), kv.size());
    ASSERT_OK(r);
  }
  auto check_all = [&](const char* when) {
    for (int i = 0; i < 40; ++i) {
      const Tokens t = Prompt(i);
      const std::vector<uint8_t> want = GroupedKv(layout, t);
      std::vector<uint8_t> out(want.size() + 7, 0xee);
      auto r = client_->Load("hybrid", t, out.data(), out.size());
      ASSERT_OK(r) << when << ": " << r.status().ToString();
      ASSERT_EQ(*r, 1024u) << when << " prompt " << i;
      ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin())) << when << ": wrong bytes in prompt " << i;
      // A load of a prefix that ends inside a block gets its whole blocks.
      const Tokens head = Head(t, 100);
      std::vector<uint8_t> part(100 * layout.BytesPerToken());
      auto p = client_->Load("hybrid", head, part.data(), part.size());
      ASSERT_OK(p);
      ASSERT_EQ(*p, 96u);
      ASSERT_TRUE(std::equal(want.begin(), want.begin() + 96 * 240, part.begin())) << when << " head of " << i;
    }
  };
  check_all("before the restart");
  auto stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_GT(stats->ssd_spills, 0u);
  auto got = client_->GetNamespace("hybrid");
  ASSERT_OK(got);
  EXPECT_EQ(got->layout, layout);
  EXPECT_EQ(got->layout.ToString(), layout.ToString());

  // A restart: the namespace and the data come back from the SSD records.
  client_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  Start({"--ssd-compress"});
  got = client_->GetNamespace("hybrid");
  ASSERT_OK(got);
  EXPECT_EQ(got->layout, layout);
  EXPECT_EQ(got->mode, 0750u);
  stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->recovery_corrupt, 0u);
  EXPECT_EQ(stats->recovery_dropped, 0u);
  EXPECT_GT(stats->recovered_tensors, 0u);
  check_all("after the restart");
  stats = client_->Stats();
  ASSERT_OK(stats);
  EXPECT_GT(stats->ssd_hits, 0u);
  auto list = client_->ListNamespaces();
  ASSERT_OK(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].layout, layout);
}

TEST_F(SsdDaemonTest, BadSsdConfigIsAClearStartupError) {
  Daemon d;
  Daemon::Options o;
  o.extra_args = {"--ssd-dir", ssd_};  // no capacity
  Status s = d.Start(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(d.ReadLog().find("needs a capacity"), std::string::npos) << d.ReadLog();
}

}  // namespace
}  // namespace ptstore
