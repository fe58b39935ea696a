#include "bench/workload.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace ptstore::bench {
namespace {

TEST(QaWorkload, IsDeterministicAndShaped) {
  QaWorkloadOptions o;
  o.docs = 4;
  o.questions = 3;
  o.min_doc_tokens = 100;
  o.max_doc_tokens = 300;
  QaWorkload a = QaWorkload::Make(o), b = QaWorkload::Make(o);
  ASSERT_EQ(a.requests().size(), 12u);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (size_t i = 0; i < a.requests().size(); ++i) {
    const QaRequest& r = a.requests()[i];
    EXPECT_EQ(r.tokens, b.requests()[i].tokens);
    EXPECT_TRUE(seen.insert({r.doc, r.question}).second);
    EXPECT_GE(r.doc_tokens, 100u);
    EXPECT_LE(r.doc_tokens, 300u);
    const size_t q = r.tokens.size() - r.system_tokens - r.doc_tokens;
    EXPECT_GE(q, 32u);
    EXPECT_LE(q, 96u);
    for (uint32_t t : r.tokens) EXPECT_LT(t, o.vocab);
  }
  // Every request starts with the same system prompt, and the questions on a
  // document share its tokens.
  const auto& r0 = a.requests()[0];
  for (const QaRequest& r : a.requests()) {
    EXPECT_TRUE(std::equal(r0.tokens.begin(), r0.tokens.begin() + o.system_tokens, r.tokens.begin()));
    if (r.doc == r0.doc) {
      EXPECT_TRUE(std::equal(r0.tokens.begin(), r0.tokens.begin() + r0.system_tokens + r0.doc_tokens, r.tokens.begin()));
    }
  }
  o.seed = 43;
  EXPECT_NE(QaWorkload::Make(o).requests()[0].tokens, a.requests()[0].tokens);
}

TEST(QaWorkload, InterleavesOrKeepsDocumentOrder) {
  QaWorkloadOptions o;
  o.docs = 6;
  o.questions = 4;
  o.min_doc_tokens = o.max_doc_tokens = 50;
  o.interleave = false;
  QaWorkload seq = QaWorkload::Make(o);
  for (size_t i = 0; i < seq.requests().size(); ++i) EXPECT_EQ(seq.requests()[i].doc, i / 4);
  o.interleave = true;
  QaWorkload mixed = QaWorkload::Make(o);
  bool out_of_order = false;
  for (size_t i = 0; i < mixed.requests().size(); ++i) out_of_order |= mixed.requests()[i].doc != i / 4;
  EXPECT_TRUE(out_of_order);
}

TEST(Kv, DependsOnlyOnTokenAndPositionAndVerifies) {
  const uint64_t bpt = 1000;  // not a multiple of 8: exercises the tail
  std::vector<uint32_t> a = {1, 2, 3, 4, 5}, b = {1, 2, 3, 9, 9};
  std::vector<uint8_t> ka(a.size() * bpt), kb(b.size() * bpt);
  FillKv(a, 0, bpt, ka.data());
  FillKv(b, 0, bpt, kb.data());
  // The shared prefix has the same bytes; the rest differs.
  EXPECT_TRUE(std::equal(ka.begin(), ka.begin() + 3 * bpt, kb.begin()));
  EXPECT_FALSE(std::equal(ka.begin() + 3 * bpt, ka.begin() + 4 * bpt, kb.begin() + 3 * bpt));
  // A sub-range made alone equals the same range of the whole.
  std::vector<uint8_t> tail(2 * bpt);
  FillKv(std::span<const uint32_t>(a).subspan(3), 3, bpt, tail.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), ka.begin() + 3 * bpt));
  // Same token at another position: other bytes.
  std::vector<uint8_t> moved(bpt);
  FillKv(std::span<const uint32_t>(a).first(1), 1, bpt, moved.data());
  EXPECT_FALSE(std::equal(moved.begin(), moved.end(), ka.begin()));

  EXPECT_FALSE(VerifyKv(a, 0, bpt, ka.data()).has_value());
  for (uint64_t off : {uint64_t{0}, uint64_t{7}, 2 * bpt + 999, 4 * bpt + 996}) {
    std::vector<uint8_t> bad = ka;
    bad[off] ^= 0x10;
    auto m = VerifyKv(a, 0, bpt, bad.data());
    ASSERT_TRUE(m.has_value()) << off;
    EXPECT_EQ(m->byte_offset, off);
    EXPECT_EQ(m->token_index, off / bpt);
    EXPECT_EQ(m->expected, ka[off]);
  }
  // Loading the right bytes for the wrong position is caught too.
  EXPECT_TRUE(VerifyKv(std::span<const uint32_t>(a).subspan(1), 0, bpt, ka.data() + bpt).has_value());
}

}  // namespace
}  // namespace ptstore::bench
