// Unit tests of the filesystem's pieces that need no mount.
#include <fuse_lowlevel.h>
#include <gtest/gtest.h>

#include <cerrno>

#include "fs/errors.h"
#include "fs/inode_table.h"
#include "fs/listing_cache.h"
#include "fs/options.h"
#include "fs/tree.h"
#include "fs/xattrs.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::fs {
namespace {

TEST(InodeTable, NumbersAreStableAndLiveWhileLookedUp) {
  InodeTable t;
  NodeRef inc{NodeKind::kIncrement, "ns", ChainKey{1, 2}};
  NodeRef kv{NodeKind::kKvFile, "ns", ChainKey{1, 2}};
  fuse_ino_t a = t.Ref(inc);
  EXPECT_GT(a, FUSE_ROOT_ID);
  EXPECT_EQ(t.Peek(inc), a);
  EXPECT_NE(t.Ref(kv), a);
  EXPECT_EQ(t.Ref(inc), a);
  t.Forget(a, 1);
  EXPECT_TRUE(t.Get(a).has_value());
  t.Forget(a, 1);
  EXPECT_FALSE(t.Get(a).has_value());
  EXPECT_EQ(t.Ref(inc), a);  // the same number again
  EXPECT_EQ(t.Get(FUSE_ROOT_ID)->kind, NodeKind::kRoot);
  t.Forget(FUSE_ROOT_ID, 100);
  EXPECT_TRUE(t.Get(FUSE_ROOT_ID).has_value());
}

TEST(InodeTable, UpdateChildrenReportsVanishedNames) {
  InodeTable t;
  EXPECT_TRUE(t.UpdateChildren(FUSE_ROOT_ID, {"a", "b", "c"}).empty());
  EXPECT_EQ(t.UpdateChildren(FUSE_ROOT_ID, {"c", "d"}), (std::vector<std::string>{"a", "b"}));
}

TEST(Xattrs, IncrementAttributes) {
  PrefixNodeInfo n;
  n.key = ChainKey{0xab, 0xcd};
  n.tokens = 16;
  n.bytes = 4096;
  n.start_token = 32;
  n.tensor = TensorId::Make(NodeId{3}, 9);
  n.tier = kTierDram | kTierSsd;
  auto a = IncrementXattrs(n, nullptr);
  EXPECT_EQ(*FindXattr(a, "user.ptstore.owner"), "3");
  EXPECT_EQ(*FindXattr(a, "user.ptstore.tier"), "dram+ssd");
  EXPECT_EQ(*FindXattr(a, "user.ptstore.chain_key"), n.key.ToHex());
  EXPECT_EQ(*FindXattr(a, "user.ptstore.replicas"), "") << "not asked where it is";
  const IncrementLocation where{n.key, 3, {3, 5, 7}};
  EXPECT_EQ(*FindXattr(IncrementXattrs(n, &where), "user.ptstore.replicas"), "2") << "nodes 5 and 7";
  const IncrementLocation elsewhere{n.key, 3, {5}};  // the owner lost it; a replica is left
  EXPECT_EQ(ReplicaCount(elsewhere), 1u);
  EXPECT_FALSE(FindXattr(a, "user.ptstore.layout").has_value());
  std::string list = XattrList(a);
  EXPECT_EQ(std::count(list.begin(), list.end(), '\0'), 9);
}

TEST(Tree, KeyNamesAreLowercaseHex) {
  ChainKey k;
  EXPECT_TRUE(ParseKeyName("000000000000000a00000000000000ff", &k));
  EXPECT_EQ(k, (ChainKey{0xa, 0xff}));
  EXPECT_FALSE(ParseKeyName("000000000000000A00000000000000ff", &k));
  EXPECT_FALSE(ParseKeyName("kv", &k));
}

TEST(Errors, ErrnoOfStatus) {
  EXPECT_EQ(ErrnoOf(NotFound("x")), ENOENT);
  EXPECT_EQ(ErrnoOf(PermissionDenied("x")), EACCES);
  EXPECT_EQ(ErrnoOf(ResourceExhausted("x")), ENOMEM);
  EXPECT_EQ(ErrnoOf(Status::OK()), 0);
}

TEST(Options, ParsesOurOptionsAndLeavesTheRest) {
  const char* argv[] = {"ptstore-fuse", "/mnt", "-o",
                        "allow_other,socket=/tmp/s.sock,layout=layers=2:kv_heads=2:head_dim=16:dtype=bf16:block_tokens=4,"
                        "attr_timeout=0.5"};
  fuse_args args = FUSE_ARGS_INIT(4, const_cast<char**>(argv));
  auto o = ParseMountOptions(&args);
  ASSERT_OK(o);
  EXPECT_EQ(o->socket_path, "/tmp/s.sock");
  EXPECT_EQ(o->layout.block_tokens, 4u);
  EXPECT_EQ(o->layout.layers, 2u);
  EXPECT_DOUBLE_EQ(o->attr_timeout, 0.5);
  EXPECT_DOUBLE_EQ(o->entry_timeout, 3600.0);  // the change watcher pushes changes
  EXPECT_EQ(o->change_poll_ms, 100u);
  EXPECT_EQ(o->spin_us, 50u);
  std::string rest;
  for (int i = 0; i < args.argc; ++i) rest += std::string(args.argv[i]) + " ";
  EXPECT_NE(rest.find("allow_other"), std::string::npos);
  EXPECT_EQ(rest.find("socket="), std::string::npos);
  fuse_opt_free_args(&args);

  const char* bad[] = {"ptstore-fuse", "/mnt", "-o", "layout=layers=0"};
  fuse_args bad_args = FUSE_ARGS_INIT(4, const_cast<char**>(bad));
  EXPECT_ERROR(ParseMountOptions(&bad_args), Code::kInvalidArgument);
  fuse_opt_free_args(&bad_args);
}

TEST(Options, WithoutChangePollsTimeoutsAreShortAndBadValuesAreRefused) {
  const char* argv[] = {"ptstore-fuse", "/mnt", "-o", "change_poll_ms=0,prefetch_limit=0,spin_us=0"};
  fuse_args args = FUSE_ARGS_INIT(4, const_cast<char**>(argv));
  auto o = ParseMountOptions(&args);
  ASSERT_OK(o);
  EXPECT_EQ(o->change_poll_ms, 0u);
  EXPECT_EQ(o->spin_us, 0u);
  EXPECT_EQ(o->prefetch_limit, 0u);
  EXPECT_DOUBLE_EQ(o->entry_timeout, 1.0);
  EXPECT_DOUBLE_EQ(o->attr_timeout, 1.0);
  fuse_opt_free_args(&args);
  for (const char* bad :
       {"change_poll_ms=-1", "change_poll_ms=60001", "prefetch_limit=-5", "attr_timeout=-2", "spin_us=-1", "spin_us=10001"}) {
    const char* bad_argv[] = {"ptstore-fuse", "/mnt", "-o", bad};
    fuse_args bad_args = FUSE_ARGS_INIT(4, const_cast<char**>(bad_argv));
    auto b = ParseMountOptions(&bad_args);
    EXPECT_ERROR(b, Code::kInvalidArgument) << bad;
    EXPECT_NE(b.status().message().find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
        << b.status().message();
    fuse_opt_free_args(&bad_args);
  }
}

TEST(Options, TakesAGroupedLayoutWithColonsForSpaces) {
  const char* argv[] = {"ptstore-fuse", "/mnt", "-o",
                        "layout=block_tokens=16:group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16:"
                        "group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16:window=1024:"
                        "group=state:layers=8:bytes=65536,allow_other"};
  fuse_args args = FUSE_ARGS_INIT(4, const_cast<char**>(argv));
  auto o = ParseMountOptions(&args);
  ASSERT_OK(o);
  EXPECT_EQ(o->layout, Layout::FromGroups({LayoutGroup::Full(24, 8, 128, DType::kBF16),
                                           LayoutGroup::Window(24, 8, 128, DType::kBF16, 1024),
                                           LayoutGroup::State(8, 65536)},
                                          16));
  fuse_opt_free_args(&args);
  const char* bad[] = {"ptstore-fuse", "/mnt", "-o", "layout=block_tokens=16:group=full:layers=24"};
  fuse_args bad_args = FUSE_ARGS_INIT(4, const_cast<char**>(bad));
  auto b = ParseMountOptions(&bad_args);
  EXPECT_ERROR(b, Code::kInvalidArgument);
  EXPECT_NE(b.status().message().find("layout group 0 (full) is missing field 'kv_heads'"), std::string::npos)
      << b.status().message();
  fuse_opt_free_args(&bad_args);
}

TEST(ListingCache, KeepsAListingPerInodeAndReaderForItsLaterCallsAndForgetsTheOldest) {
  ListingCache c;
  auto listing = [](uint64_t gen, uint64_t at) {
    auto l = std::make_shared<Listing>();
    l->gen = gen;
    l->taken_ns = at;
    return l;
  };
  const uint64_t t0 = 1'000'000'000;
  c.Put(5, 100, listing(1, t0));
  c.Put(5, 200, listing(2, t0));
  ASSERT_NE(c.Get(5, 100, t0), nullptr);
  EXPECT_EQ(c.Get(5, 100, t0)->gen, 1u);
  EXPECT_EQ(c.Get(5, 200, t0)->gen, 2u);  // another reader of the same directory: its own
  EXPECT_EQ(c.Get(6, 100, t0), nullptr);
  c.Put(5, 100, listing(3, t0));  // a new stream from offset 0 replaces it
  EXPECT_EQ(c.Get(5, 100, t0)->gen, 3u);
  // Too old for the same stream: none.
  EXPECT_NE(c.Get(5, 100, t0 + ListingCache::kMaxAgeNs), nullptr);
  EXPECT_EQ(c.Get(5, 100, t0 + ListingCache::kMaxAgeNs + 1), nullptr);
  // Bounded: the least recently used goes.
  for (uint64_t ino = 10; ino < 10 + ListingCache::kMaxListings; ++ino) {
    c.Put(ino, 1, listing(ino, t0));
    ASSERT_NE(c.Get(5, 200, t0), nullptr);  // kept in use
  }
  EXPECT_EQ(c.size(), ListingCache::kMaxListings);
  EXPECT_NE(c.Get(5, 200, t0), nullptr);
  EXPECT_EQ(c.Get(5, 100, t0), nullptr);  // the oldest unused went
  EXPECT_EQ(c.Get(10, 1, t0), nullptr);
  EXPECT_NE(c.Get(11, 1, t0), nullptr);
}

}  // namespace
}  // namespace ptstore::fs
