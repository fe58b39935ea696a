// The node store's pins, leases and copies (storage/cache/store.h Pin, Release,
// ReleaseSession, ExpireLeases, LoadCopy): a pin holds its bytes until its
// session releases it or its lease expires, a miss needs no lease, at most
// max_leases are held, and LoadCopy copies whole blocks byte-exact.
#include <algorithm>

#include "tests/storage/store_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_testing;  // NOLINT: the shared fixture (StoreTest)

// ----------------------------------------------------------- pins and leases

TEST_F(StoreTest, PinHoldsUntilReleaseAndOnlyItsSessionMayRelease) {
  Tokens t = RandomTokens(1, 4 * kBt);
  Save(t);
  Result<PrefixResult> p = store_->Pin("ns", t, kSession);
  ASSERT_OK(p);
  EXPECT_EQ(p->matched_tokens, 4 * kBt);
  EXPECT_NE(p->lease_id, 0u);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.pinned_bytes, 4096u);
  EXPECT_EQ(s.active_leases, 1u);
  Status wrong = store_->Release(p->lease_id, kSession + 1);
  EXPECT_ERROR(wrong, Code::kNotFound);
  EXPECT_EQ(store_->Stats().active_leases, 1u) << "a foreign release must not drop the lease";
  EXPECT_OK(store_->Release(p->lease_id, kSession));
  EXPECT_ERROR(store_->Release(p->lease_id, kSession), Code::kNotFound) << "double release";
  EXPECT_ERROR(store_->Release(123456, kSession), Code::kNotFound);
  s = store_->Stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.active_leases, 0u);
  // Two pins of one tensor: pinned once, unpinned after the second release.
  auto p1 = store_->Pin("ns", t, 1);
  auto p2 = store_->Pin("ns", t, 2);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_NE(p1->lease_id, p2->lease_id);
  EXPECT_EQ(store_->Stats().pinned_bytes, 4096u);
  EXPECT_OK(store_->Release(p1->lease_id, 1));
  EXPECT_EQ(store_->Stats().pinned_bytes, 4096u);
  EXPECT_OK(store_->Release(p2->lease_id, 2));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
}

TEST_F(StoreTest, PinOfAMissHoldsNothing) {
  Result<PrefixResult> p = store_->Pin("ns", RandomTokens(1, 8 * kBt), kSession);
  ASSERT_OK(p) << "a miss is not an error";
  EXPECT_EQ(p->matched_tokens, 0u);
  EXPECT_EQ(p->lease_id, 0u);
  EXPECT_TRUE(p->extents.empty());
  EXPECT_EQ(store_->Stats().active_leases, 0u);
  EXPECT_ERROR(store_->Release(0, kSession), Code::kNotFound);
}

TEST_F(StoreTest, ReleaseSessionDropsOnlyThatSessionsLeases) {
  Tokens a = RandomTokens(1, 4 * kBt), b = RandomTokens(2, 4 * kBt);
  Save(a);
  Save(b);
  auto a1 = store_->Pin("ns", a, 1);
  auto a2 = store_->Pin("ns", a, 1);
  auto b1 = store_->Pin("ns", b, 1);
  auto b2 = store_->Pin("ns", b, 2);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok() && b2.ok());
  EXPECT_EQ(store_->Stats().active_leases, 4u);
  store_->ReleaseSession(1);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.active_leases, 1u);
  EXPECT_EQ(s.pinned_bytes, 4096u) << "b is still pinned by session 2";
  EXPECT_ERROR(store_->Release(a1->lease_id, 1), Code::kNotFound);
  EXPECT_OK(store_->Release(b2->lease_id, 2));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
  store_->ReleaseSession(99);  // nothing to do
}

TEST_F(StoreTest, ExpireLeasesDropsOnlyLeasesPastTheirTime) {
  Tokens a = RandomTokens(1, 4 * kBt), b = RandomTokens(2, 4 * kBt);
  Save(a);
  Save(b);
  auto short_lease = store_->Pin("ns", a, 1, /*lease_ms=*/1);
  auto long_lease = store_->Pin("ns", b, 1, /*lease_ms=*/3600 * 1000);
  auto default_lease = store_->Pin("ns", b, 2);  // 30 s by default
  ASSERT_TRUE(short_lease.ok() && long_lease.ok() && default_lease.ok());
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() - std::chrono::seconds(1)), 0u);
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::milliseconds(50)), 1u);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.expired_leases, 1u);
  EXPECT_EQ(s.active_leases, 2u);
  EXPECT_EQ(s.pinned_bytes, 4096u);
  EXPECT_ERROR(store_->Release(short_lease->lease_id, 1), Code::kNotFound) << "an expired lease is gone";
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::seconds(60)), 1u);
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::hours(2)), 1u);
  s = store_->Stats();
  EXPECT_EQ(s.expired_leases, 3u);
  EXPECT_EQ(s.active_leases, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
  ExpectStored(a, 4 * kBt);
}

TEST_F(StoreTest, AVeryLongLeaseDoesNotWrapIntoThePast) {
  Tokens t = RandomTokens(1, 4 * kBt);
  Save(t);
  auto p = store_->Pin("ns", t, kSession, UINT64_MAX);
  ASSERT_OK(p);
  auto q = store_->Pin("ns", t, kSession, uint64_t{1} << 62);
  ASSERT_OK(q);
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::hours(24 * 365)), 0u);
  EXPECT_EQ(store_->Stats().active_leases, 2u);
  EXPECT_OK(store_->Release(p->lease_id, kSession));
  EXPECT_OK(store_->Release(q->lease_id, kSession));
}

TEST_F(StoreTest, MaxLeasesIsEnforcedAndAMissNeedsNoLease) {
  StoreOptions o = SmallOptions();
  o.max_leases = 2;
  Reopen(o);
  Tokens t = RandomTokens(1, 4 * kBt);
  Save(t);
  auto p1 = store_->Pin("ns", t, 1);
  auto p2 = store_->Pin("ns", t, 1);
  ASSERT_TRUE(p1.ok() && p2.ok());
  auto p3 = store_->Pin("ns", t, 1);
  EXPECT_ERROR(p3, Code::kResourceExhausted);
  EXPECT_OK(store_->Pin("ns", RandomTokens(2, 4 * kBt), 1)) << "a miss takes no lease";
  std::vector<uint8_t> buf(4 * kBb);
  EXPECT_ERROR(store_->LoadCopy("ns", t, buf.data(), buf.size()), Code::kResourceExhausted);
  EXPECT_EQ(store_->Stats().pinned_bytes, 4096u);
  EXPECT_OK(store_->Release(p1->lease_id, 1));
  auto p4 = store_->LoadCopy("ns", t, buf.data(), buf.size());
  ASSERT_OK(p4);
  EXPECT_EQ(*p4, 4 * kBt);
  EXPECT_OK(store_->Release(p2->lease_id, 1));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
}

// ------------------------------------------------------------------ LoadCopy

TEST_F(StoreTest, LoadCopyIsByteExactAndCopiesOnlyWholeBlocksThatFit) {
  Tokens a = RandomTokens(1, 5 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 6 * kBt));
  Save(a);
  Save(ab);
  Save(Cat(Head(ab, 7 * kBt), RandomTokens(3, kBt)));  // splits the second tensor's node
  const Tokens query = Cat(ab, RandomTokens(4, 9));     // longer than stored, partial tail
  const std::vector<uint8_t> expect = Kv(query, 0, 11 * kBt);
  for (uint64_t capacity : {11 * kBb, 11 * kBb + 100, 20 * kBb, 10 * kBb + kBb - 1, 5 * kBb, 5 * kBb + 1,
                            3 * kBb + kBb / 2, kBb, kBb - 1, uint64_t{0}}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    std::vector<uint8_t> buf(capacity + 64, 0xAB);
    Result<uint64_t> n = store_->LoadCopy("ns", query, buf.data(), capacity);
    ASSERT_OK(n);
    const uint64_t fit = std::min<uint64_t>(11, capacity / kBb) * kBt;
    EXPECT_EQ(*n, fit);
    EXPECT_TRUE(std::equal(buf.begin(), buf.begin() + fit * kBpt, expect.begin())) << "bytes differ";
    EXPECT_TRUE(std::all_of(buf.begin() + fit * kBpt, buf.end(), [](uint8_t c) { return c == 0xAB; }))
        << "LoadCopy wrote past the whole blocks it reported";
  }
  // A miss copies nothing.
  std::vector<uint8_t> buf(4 * kBb, 0xCD);
  Result<uint64_t> miss = store_->LoadCopy("ns", RandomTokens(9, 4 * kBt), buf.data(), buf.size());
  ASSERT_OK(miss);
  EXPECT_EQ(*miss, 0u);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t c) { return c == 0xCD; }));
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.pinned_bytes, 0u) << "LoadCopy unpins what it pinned";
  EXPECT_EQ(s.active_leases, 0u);
}

}  // namespace
}  // namespace ptstore::storage
