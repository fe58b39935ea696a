// Tests of Layout validation, Parse/ToString, dtypes and namespace names
// (include/ptstore/layout.h).
#include "ptstore/layout.h"
#include "tests/testing/status_matchers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ptstore {
namespace {

// Asserts `s` is InvalidArgument and its message mentions `needle`.
void ExpectInvalid(const Status& s, const std::string& needle) {
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message '" << s.message() << "' does not mention '" << needle << "'";
}

TEST(LayoutTest, MistralIs128KiBPerToken) {
  Layout l = MistralLayout();
  EXPECT_EQ(l.layers, 32u);
  EXPECT_EQ(l.kv_heads, 8u);
  EXPECT_EQ(l.head_dim, 128u);
  EXPECT_EQ(l.dtype, DType::kBF16);
  EXPECT_EQ(l.block_tokens, 16u);
  EXPECT_OK(l.Validate());
  EXPECT_EQ(l.BytesPerToken(), 131072u);
  EXPECT_EQ(l.BytesPerBlock(), 131072u * 16);
}

TEST(LayoutTest, BytesScaleWithDType) {
  Layout l = MistralLayout();
  l.dtype = DType::kFP32;
  EXPECT_EQ(l.BytesPerToken(), 262144u);
  l.dtype = DType::kFP16;
  EXPECT_EQ(l.BytesPerToken(), 131072u);
  l.dtype = DType::kFP8;
  EXPECT_EQ(l.BytesPerToken(), 65536u);
}

TEST(LayoutTest, FullBlocksDropsPartialBlock) {
  Layout l = MistralLayout();
  EXPECT_EQ(l.FullBlocks(0), 0u);
  EXPECT_EQ(l.FullBlocks(15), 0u);
  EXPECT_EQ(l.FullBlocks(16), 1u);
  EXPECT_EQ(l.FullBlocks(47), 2u);
  EXPECT_EQ(l.FullBlocks(48), 3u);
}

TEST(LayoutTest, BoundsAreInclusive) {
  Layout l = MistralLayout();
  l.layers = 1;
  l.kv_heads = 1;
  l.head_dim = 1;
  l.block_tokens = 1;
  EXPECT_OK(l.Validate());
  l.layers = 1024;
  l.kv_heads = 1024;
  l.head_dim = 1;
  l.block_tokens = 1;
  EXPECT_OK(l.Validate());
  l = MistralLayout();
  l.head_dim = 16384;
  EXPECT_OK(l.Validate());
  l = MistralLayout();
  l.layers = 1;
  l.kv_heads = 1;
  l.head_dim = 1;
  l.block_tokens = 65536;
  EXPECT_OK(l.Validate());
}

TEST(LayoutTest, EveryInvalidFieldIsRejectedByName) {
  struct Case {
    const char* field;
    void (*mutate)(Layout&);
  };
  const Case cases[] = {
      {"layers", [](Layout& l) { l.layers = 0; }},
      {"layers", [](Layout& l) { l.layers = 1025; }},
      {"kv_heads", [](Layout& l) { l.kv_heads = 0; }},
      {"kv_heads", [](Layout& l) { l.kv_heads = 1025; }},
      {"head_dim", [](Layout& l) { l.head_dim = 0; }},
      {"head_dim", [](Layout& l) { l.head_dim = 16385; }},
      {"block_tokens", [](Layout& l) { l.block_tokens = 0; }},
      {"block_tokens", [](Layout& l) { l.block_tokens = 65537; }},
      {"block_tokens", [](Layout& l) { l.block_tokens = 0xffffffffu; }},
      {"dtype", [](Layout& l) { l.dtype = static_cast<DType>(0); }},
      {"dtype", [](Layout& l) { l.dtype = static_cast<DType>(5); }},
      {"dtype", [](Layout& l) { l.dtype = static_cast<DType>(255); }},
  };
  for (const Case& c : cases) {
    Layout l = MistralLayout();
    c.mutate(l);
    SCOPED_TRACE(l.ToString());
    ExpectInvalid(l.Validate(), std::string("layout field ") + c.field + "=");
  }
}

TEST(LayoutTest, RangeMessageNamesValueAndRange) {
  Layout l = MistralLayout();
  l.layers = 2000;
  EXPECT_EQ(l.Validate().message(), "layout field layers=2000 is out of range [1, 1024]");
}

TEST(LayoutTest, OversizedBlockIsRejected) {
  // Every field in range, but one block is 2^37 bytes.
  Layout l;
  l.layers = 1024;
  l.kv_heads = 1024;
  l.head_dim = 16384;
  l.dtype = DType::kFP32;
  l.block_tokens = 1;
  ExpectInvalid(l.Validate(), "4 GiB");
  // Exactly 4 GiB per block is allowed: 2 * 2^31 bytes.
  l.layers = 1;
  l.kv_heads = 1;
  l.head_dim = 8192;
  l.dtype = DType::kFP32;
  l.block_tokens = 65536;
  EXPECT_EQ(l.BytesPerBlock(), uint64_t{4} << 30);
  EXPECT_OK(l.Validate());
  l.dtype = DType::kFP32;
  l.head_dim = 8193;
  ExpectInvalid(l.Validate(), "4 GiB");
}

TEST(LayoutTest, ToStringFormat) {
  EXPECT_EQ(MistralLayout().ToString(), "layers=32 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16");
}

TEST(LayoutTest, ParseToStringRoundTrip) {
  for (DType dt : {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8}) {
    for (uint32_t bt : {1u, 16u, 256u, 4096u}) {
      Layout l;
      l.layers = 61;
      l.kv_heads = 3;
      l.head_dim = 96;
      l.dtype = dt;
      l.block_tokens = bt;
      ASSERT_OK(l.Validate()) << l.ToString();
      Result<Layout> p = Layout::Parse(l.ToString());
      ASSERT_OK(p);
      EXPECT_EQ(*p, l);
      EXPECT_EQ(p->ToString(), l.ToString());
    }
  }
}

TEST(LayoutTest, ParseAcceptsAnyOrderAndSeparators) {
  Result<Layout> p = Layout::Parse("  block_tokens=16,dtype=bfloat16\n head_dim=128\tkv_heads=8, layers=32\n");
  ASSERT_OK(p);
  EXPECT_EQ(*p, MistralLayout());
}

TEST(LayoutTest, ParseErrorsNameTheProblem) {
  const std::string good = "layers=32 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16";
  struct Case {
    std::string text;
    std::string needle;
  };
  const Case cases[] = {
      {"", "missing field 'layers'"},
      {"kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16", "missing field 'layers'"},
      {"layers=32 head_dim=128 dtype=bf16 block_tokens=16", "missing field 'kv_heads'"},
      {"layers=32 kv_heads=8 dtype=bf16 block_tokens=16", "missing field 'head_dim'"},
      {"layers=32 kv_heads=8 head_dim=128 block_tokens=16", "missing field 'dtype'"},
      {"layers=32 kv_heads=8 head_dim=128 dtype=bf16", "missing field 'block_tokens'"},
      {good + " colour=blue", "unknown field 'colour'"},
      {good + " =3", "unknown field ''"},
      {good + " junk", "'junk' is not key=value"},
      {"layers=abc kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16", "'layers' has non-numeric value 'abc'"},
      {"layers= kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16", "'layers' has non-numeric value ''"},
      {"layers=-1 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16", "'layers' has non-numeric value '-1'"},
      {"layers=32x kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16", "'layers' has non-numeric value '32x'"},
      {"layers=4294967296 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16", "'layers' has non-numeric"},
      {"layers=32 kv_heads=8 head_dim=128 dtype=int4 block_tokens=16", "unknown dtype 'int4'"},
      {"layers=0 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16", "layout field layers=0"},
      {"layers=32 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=0", "layout field block_tokens=0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    Result<Layout> p = Layout::Parse(c.text);
    ASSERT_FALSE(p.ok());
    ExpectInvalid(p.status(), c.needle);
  }
}

// ------------------------------------------------------------ grouped layouts

// Gemma-3-like: full attention beside sliding-window attention.
Layout HybridLayout() {
  return Layout::FromGroups({LayoutGroup::Full(24, 8, 128, DType::kBF16),
                             LayoutGroup::Window(24, 8, 128, DType::kBF16, 1024)},
                            16);
}

// Every kind, one of each.
Layout MixedLayout() {
  return Layout::FromGroups({LayoutGroup::Full(24, 8, 128, DType::kBF16),
                             LayoutGroup::Window(24, 8, 128, DType::kBF16, 1024),
                             LayoutGroup::Latent(61, 576, DType::kBF16), LayoutGroup::State(8, 65536)},
                            16);
}

TEST(LayoutGroupsTest, TextFormOfEachKind) {
  EXPECT_EQ(LayoutGroup::Full(24, 8, 128, DType::kBF16).ToString(), "full:layers=24:kv_heads=8:head_dim=128:dtype=bf16");
  EXPECT_EQ(LayoutGroup::Window(24, 8, 128, DType::kFP16, 1024).ToString(),
            "window:layers=24:kv_heads=8:head_dim=128:dtype=fp16:window=1024");
  EXPECT_EQ(LayoutGroup::Latent(61, 576, DType::kBF16).ToString(), "latent:layers=61:head_dim=576:dtype=bf16");
  EXPECT_EQ(LayoutGroup::State(8, 65536).ToString(), "state:layers=8:bytes=65536");
  EXPECT_EQ(MixedLayout().ToString(),
            "block_tokens=16 group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16 "
            "group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16:window=1024 "
            "group=latent:layers=61:head_dim=576:dtype=bf16 group=state:layers=8:bytes=65536");
}

TEST(LayoutGroupsTest, FactoriesFillTheFieldsOfTheirKind) {
  const LayoutGroup latent = LayoutGroup::Latent(61, 576, DType::kBF16);
  EXPECT_EQ(latent.kind, GroupKind::kLatent);
  EXPECT_EQ(latent.kv_heads, 1u);
  const LayoutGroup state = LayoutGroup::State(8, 100);
  EXPECT_EQ(state.kv_heads, 0u);
  EXPECT_EQ(state.head_dim, 0u);
  EXPECT_EQ(state.dtype, DType::kNone);
  EXPECT_EQ(state.window_tokens, 0u);
  const Layout l = MixedLayout();
  EXPECT_TRUE(l.grouped());
  EXPECT_EQ(l.GroupCount(), 4u);
  EXPECT_EQ(l.layers, 0u);
  EXPECT_EQ(l.kv_heads, 0u);
  EXPECT_EQ(l.head_dim, 0u);
  EXPECT_EQ(l.dtype, DType::kNone);
  EXPECT_EQ(l.AsGroups(), l.groups);
  EXPECT_OK(l.Validate());
}

TEST(LayoutGroupsTest, ParseToStringRoundTripOfEachKindAndMixedLists) {
  std::vector<Layout> layouts = {
      HybridLayout(),
      MixedLayout(),
      Layout::FromGroups({LayoutGroup::Window(1, 1, 1, DType::kFP8, 1)}, 1),
      Layout::FromGroups({LayoutGroup::Latent(61, 576, DType::kBF16)}, 64),
      Layout::FromGroups({LayoutGroup::State(1, 1)}, 3),
      Layout::FromGroups({LayoutGroup::State(8, 12345), LayoutGroup::Full(4, 2, 64, DType::kFP32),
                          LayoutGroup::State(8, 7)},
                         7),
      Layout::FromGroups({LayoutGroup::Full(2, 2, 64, DType::kBF16), LayoutGroup::Full(2, 4, 64, DType::kFP16)}, 16),
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.ToString());
    ASSERT_TRUE(l.grouped());
    ASSERT_OK(l.Validate());
    Result<Layout> p = Layout::Parse(l.ToString());
    ASSERT_OK(p);
    EXPECT_EQ(*p, l);
    EXPECT_EQ(p->ToString(), l.ToString());
  }
}

TEST(LayoutGroupsTest, ParseKeepsGroupOrderAcceptsSeparatorsAndAnyFieldOrder) {
  Result<Layout> p = Layout::Parse(
      "group=window:window=1024:dtype=bf16:head_dim=128:kv_heads=8:layers=24\n"
      "  group=full:layers=24:kv_heads=8:head_dim=128:dtype=bfloat16,block_tokens=16\tgroup=state:bytes=9:layers=2\n");
  ASSERT_OK(p);
  ASSERT_EQ(p->groups.size(), 3u);
  EXPECT_EQ(p->groups[0], LayoutGroup::Window(24, 8, 128, DType::kBF16, 1024));
  EXPECT_EQ(p->groups[1], LayoutGroup::Full(24, 8, 128, DType::kBF16));
  EXPECT_EQ(p->groups[2], LayoutGroup::State(2, 9));
  EXPECT_EQ(p->block_tokens, 16u);
}

TEST(LayoutGroupsTest, OneFullGroupIsTheDenseLayout) {
  const Layout one = Layout::FromGroups({LayoutGroup::Full(32, 8, 128, DType::kBF16)}, 16);
  EXPECT_FALSE(one.grouped());
  EXPECT_EQ(one, MistralLayout());
  EXPECT_EQ(one.ToString(), MistralLayout().ToString());
  Result<Layout> p = Layout::Parse("block_tokens=16 group=full:layers=32:kv_heads=8:head_dim=128:dtype=bf16");
  ASSERT_OK(p);
  EXPECT_EQ(*p, MistralLayout());
  EXPECT_FALSE(p->grouped());
  // A dense layout's groups are its one full group.
  ASSERT_EQ(MistralLayout().AsGroups().size(), 1u);
  EXPECT_EQ(MistralLayout().AsGroups()[0], LayoutGroup::Full(32, 8, 128, DType::kBF16));
  EXPECT_EQ(MistralLayout().GroupCount(), 1u);
  EXPECT_EQ(MistralLayout().GroupOffset(0), 0u);
  EXPECT_EQ(MistralLayout().GroupBytesPerBlock(0), MistralLayout().BytesPerBlock());
  // One window group, or a full group beside another, stays grouped.
  EXPECT_TRUE(Layout::FromGroups({LayoutGroup::Window(32, 8, 128, DType::kBF16, 4)}, 16).grouped());
  EXPECT_TRUE(HybridLayout().grouped());
  // Made by hand, the non-canonical form is refused.
  Layout hand;
  hand.dtype = DType::kNone;
  hand.groups = {LayoutGroup::Full(32, 8, 128, DType::kBF16)};
  ExpectInvalid(hand.Validate(), "one full group is the dense layout");
}

TEST(LayoutGroupsTest, OffsetsPaddingAndBytesPerBlock) {
  // 16-token blocks: full 16*24*2*8*128*2 = 1572864 bytes, window the same,
  // latent 16*61*576*2 = 1124352, state 8*65536 = 524288; every one a
  // multiple of 64, so no padding between; the total 4794368 is a multiple
  // of lcm(64, 16) = 64.
  const Layout l = MixedLayout();
  EXPECT_EQ(l.GroupBytesPerBlock(0), 1572864u);
  EXPECT_EQ(l.GroupBytesPerBlock(1), 1572864u);
  EXPECT_EQ(l.GroupBytesPerBlock(2), 1124352u);
  EXPECT_EQ(l.GroupBytesPerBlock(3), 524288u);
  EXPECT_EQ(l.GroupOffset(0), 0u);
  EXPECT_EQ(l.GroupOffset(1), 1572864u);
  EXPECT_EQ(l.GroupOffset(2), 3145728u);
  EXPECT_EQ(l.GroupOffset(3), 4270080u);
  EXPECT_EQ(l.BytesPerBlock(), 4794368u);
  EXPECT_EQ(l.BytesPerToken(), 4794368u / 16);

  // A state group of 1000 bytes per layer (not a multiple of anything)
  // between two latent groups, in blocks of 3 tokens:
  //   latent 3*1*5*1 = 15 bytes at 0, pad to 64;
  //   state 2*1000 = 2000 bytes at 64, ends at 2064, pad to 2112;
  //   latent 3*2*3*2 = 36 bytes at 2112, ends at 2148;
  //   block padded to a multiple of lcm(64, 3) = 192: 2304 = 12 * 192.
  const Layout odd = Layout::FromGroups(
      {LayoutGroup::Latent(1, 5, DType::kFP8), LayoutGroup::State(2, 1000), LayoutGroup::Latent(2, 3, DType::kBF16)}, 3);
  ASSERT_OK(odd.Validate());
  EXPECT_EQ(odd.GroupBytesPerBlock(0), 15u);
  EXPECT_EQ(odd.GroupBytesPerBlock(1), 2000u);
  EXPECT_EQ(odd.GroupBytesPerBlock(2), 36u);
  EXPECT_EQ(odd.GroupOffset(0), 0u);
  EXPECT_EQ(odd.GroupOffset(1), 64u);
  EXPECT_EQ(odd.GroupOffset(2), 2112u);
  EXPECT_EQ(odd.BytesPerBlock(), 2304u);
  EXPECT_EQ(odd.BytesPerToken(), 768u);
  EXPECT_EQ(odd.BytesPerToken() * odd.block_tokens, odd.BytesPerBlock());

  // Every group's slice starts at a multiple of 64, after the one before,
  // and every block is a whole number of tokens, for any block size.
  for (uint32_t bt : {1u, 2u, 3u, 5u, 16u, 17u, 63u, 64u, 100u, 4096u, 65535u}) {
    const Layout m = Layout::FromGroups({LayoutGroup::State(3, 77), LayoutGroup::Latent(1, 3, DType::kFP8),
                                         LayoutGroup::Window(1, 1, 1, DType::kBF16, 8)},
                                        bt);
    SCOPED_TRACE(bt);
    ASSERT_OK(m.Validate());
    uint64_t end = 0;
    for (size_t g = 0; g < m.GroupCount(); ++g) {
      EXPECT_EQ(m.GroupOffset(g) % Layout::kGroupAlignment, 0u);
      EXPECT_GE(m.GroupOffset(g), end);
      EXPECT_LT(m.GroupOffset(g), end + Layout::kGroupAlignment);
      end = m.GroupOffset(g) + m.GroupBytesPerBlock(g);
    }
    EXPECT_GE(m.BytesPerBlock(), end);
    EXPECT_EQ(m.BytesPerBlock() % Layout::kGroupAlignment, 0u);
    EXPECT_EQ(m.BytesPerBlock() % bt, 0u);
    EXPECT_EQ(m.BytesPerToken() * bt, m.BytesPerBlock());
  }
}

TEST(LayoutGroupsTest, DenseBytesAreUnchanged) {
  // No padding in a dense layout, whatever its block size.
  Layout l;
  l.layers = 1;
  l.kv_heads = 1;
  l.head_dim = 1;
  l.dtype = DType::kFP8;
  l.block_tokens = 3;
  EXPECT_EQ(l.BytesPerToken(), 2u);
  EXPECT_EQ(l.BytesPerBlock(), 6u);
  EXPECT_EQ(MistralLayout().BytesPerToken(), 131072u);
  EXPECT_FALSE(MistralLayout().grouped());
}

TEST(LayoutGroupsTest, ValidationNamesTheGroupAndField) {
  struct Case {
    std::string needle;
    void (*mutate)(Layout&);
  };
  const Case cases[] = {
      {"layout group 0 (full) field layers=0 is out of range [1, 1024]", [](Layout& l) { l.groups[0].layers = 0; }},
      {"layout group 0 (full) field layers=1025", [](Layout& l) { l.groups[0].layers = 1025; }},
      {"layout group 0 (full) field kv_heads=0", [](Layout& l) { l.groups[0].kv_heads = 0; }},
      {"layout group 1 (window) field kv_heads=1025", [](Layout& l) { l.groups[1].kv_heads = 1025; }},
      {"layout group 1 (window) field head_dim=16385", [](Layout& l) { l.groups[1].head_dim = 16385; }},
      {"layout group 1 (window) field dtype=0 is not one of", [](Layout& l) { l.groups[1].dtype = DType::kNone; }},
      {"layout group 1 (window) field window_tokens=0 is out of range",
       [](Layout& l) { l.groups[1].window_tokens = 0; }},
      {"layout group 0 (full) field window_tokens=5 must be 0", [](Layout& l) { l.groups[0].window_tokens = 5; }},
      {"layout group 2 (latent) field kv_heads=2 must be 1", [](Layout& l) { l.groups[2].kv_heads = 2; }},
      {"layout group 2 (latent) field head_dim=0", [](Layout& l) { l.groups[2].head_dim = 0; }},
      {"layout group 2 (latent) field dtype=9", [](Layout& l) { l.groups[2].dtype = static_cast<DType>(9); }},
      {"layout group 2 (latent) field state_bytes=4 must be 0", [](Layout& l) { l.groups[2].state_bytes = 4; }},
      {"layout group 3 (state) field state_bytes=0 is out of range [1, 1073741824]",
       [](Layout& l) { l.groups[3].state_bytes = 0; }},
      {"layout group 3 (state) field state_bytes=1073741825",
       [](Layout& l) { l.groups[3].state_bytes = (uint64_t{1} << 30) + 1; }},
      {"layout group 3 (state) field kv_heads=8 must be 0", [](Layout& l) { l.groups[3].kv_heads = 8; }},
      {"layout group 3 (state) field head_dim=64 must be 0", [](Layout& l) { l.groups[3].head_dim = 64; }},
      {"layout group 3 (state) field dtype=1 must be 0", [](Layout& l) { l.groups[3].dtype = DType::kBF16; }},
      {"layout group 3 (state) field layers=0", [](Layout& l) { l.groups[3].layers = 0; }},
      {"layout group 3 field kind=9 is not one of", [](Layout& l) { l.groups[3].kind = static_cast<GroupKind>(9); }},
      {"layout group 0 field kind=0", [](Layout& l) { l.groups[0].kind = static_cast<GroupKind>(0); }},
      {"layout field layers=32 must be 0", [](Layout& l) { l.layers = 32; }},
      {"layout field kv_heads=8 must be 0", [](Layout& l) { l.kv_heads = 8; }},
      {"layout field head_dim=128 must be 0", [](Layout& l) { l.head_dim = 128; }},
      {"layout field dtype=1 must be 0", [](Layout& l) { l.dtype = DType::kBF16; }},
      {"layout field block_tokens=0", [](Layout& l) { l.block_tokens = 0; }},
      {"layout field block_tokens=65537", [](Layout& l) { l.block_tokens = 65537; }},
      {"layout has 17 groups, at most 16",
       [](Layout& l) { l.groups.resize(17, LayoutGroup::State(1, 1)); }},
  };
  for (const Case& c : cases) {
    Layout l = MixedLayout();
    c.mutate(l);
    SCOPED_TRACE(l.ToString());
    ExpectInvalid(l.Validate(), c.needle);
  }
  // 16 groups are fine.
  Layout sixteen = MixedLayout();
  sixteen.groups.resize(16, LayoutGroup::State(1, 1));
  EXPECT_OK(sixteen.Validate());
  // A group on its own is checked the same way, without an index.
  ExpectInvalid(LayoutGroup::Window(1, 1, 1, DType::kBF16, 0).Validate(),
                "layout group (window) field window_tokens=0");
  EXPECT_OK(LayoutGroup::State(1, 1).Validate());
}

TEST(LayoutGroupsTest, OversizedGroupedBlockIsRejected) {
  // Two state groups of 1024 layers of 1 GiB: each in range, 2 TiB a block.
  ExpectInvalid(Layout::FromGroups({LayoutGroup::State(1024, 1 << 30), LayoutGroup::State(1024, 1 << 30)}).Validate(),
                "4 GiB");
  // 4 state groups of exactly 1 GiB: 4 GiB, allowed; one byte more is not.
  Layout l = Layout::FromGroups({LayoutGroup::State(1, 1 << 30), LayoutGroup::State(1, 1 << 30),
                                 LayoutGroup::State(1, 1 << 30), LayoutGroup::State(1, 1 << 30)},
                                64);
  EXPECT_EQ(l.BytesPerBlock(), uint64_t{4} << 30);
  EXPECT_OK(l.Validate());
  l.groups.push_back(LayoutGroup::State(1, 1));
  ExpectInvalid(l.Validate(), "4 GiB");
}

TEST(LayoutGroupsTest, ParseErrorsNameTheGroupAndField) {
  const std::string full = "group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16";
  const std::string win = "group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16:window=1024";
  struct Case {
    std::string text;
    std::string needle;
  };
  const Case cases[] = {
      {full + " " + win, "layout is missing field 'block_tokens'"},
      {"block_tokens=16 " + full + " group=mamba:layers=1", "layout group 1: unknown layout group kind 'mamba'"},
      {"block_tokens=16 group=", "layout group 0: unknown layout group kind ''"},
      {"block_tokens=16 group=full", "layout group 0 (full) is missing field 'layers'"},
      {"block_tokens=16 " + full + " group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16",
       "layout group 1 (window) is missing field 'window'"},
      {"block_tokens=16 " + full + " group=latent:layers=61:kv_heads=1:head_dim=576:dtype=bf16",
       "layout group 1 (latent) has unknown field 'kv_heads'"},
      {"block_tokens=16 " + full + " group=latent:layers=61:head_dim=576",
       "layout group 1 (latent) is missing field 'dtype'"},
      {"block_tokens=16 " + full + " group=state:layers=8", "layout group 1 (state) is missing field 'bytes'"},
      {"block_tokens=16 " + full + " group=state:layers=8:bytes=64:dtype=bf16",
       "layout group 1 (state) has unknown field 'dtype'"},
      {"block_tokens=16 " + full + " group=state:layers=8:bytes=lots",
       "layout group 1 (state) field 'bytes' has non-numeric value 'lots'"},
      {"block_tokens=16 " + full + " group=state:layers=-1:bytes=9",
       "layout group 1 (state) field 'layers' has non-numeric value '-1'"},
      {"block_tokens=16 " + full + " group=state:layers=8:bytes", "layout group 1 (state) item 'bytes' is not key=value"},
      {"block_tokens=16 " + full + " group=state:layers=8:layers=9:bytes=1",
       "layout group 1 (state) has field 'layers' twice"},
      {"block_tokens=16 " + full + " group=window:layers=24:kv_heads=8:head_dim=128:dtype=int4:window=4",
       "layout group 1 (window): unknown dtype 'int4'"},
      {"block_tokens=16 " + full + " group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16:window=0",
       "layout group 1 (window) field window_tokens=0"},
      {"block_tokens=16 layers=32 " + full + " " + win, "layout field 'layers' cannot be given with group= items"},
      {"block_tokens=16 dtype=bf16 " + full + " " + win, "layout field 'dtype' cannot be given with group= items"},
      {"block_tokens=16 colour=blue " + full + " " + win, "layout has unknown field 'colour'"},
      {"block_tokens=x " + full + " " + win, "layout field 'block_tokens' has non-numeric value 'x'"},
      {"block_tokens=0 " + full + " " + win, "layout field block_tokens=0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    Result<Layout> p = Layout::Parse(c.text);
    ASSERT_FALSE(p.ok());
    ExpectInvalid(p.status(), c.needle);
  }
  std::string seventeen = "block_tokens=16";
  for (int i = 0; i < 17; ++i) seventeen += " group=state:layers=1:bytes=1";
  ExpectInvalid(Layout::Parse(seventeen).status(), "layout has 17 groups, at most 16");
}

TEST(LayoutGroupsTest, ColonsMayStandForSpaces) {
  // A mount option or an xattr value: no spaces. A group's fields run to
  // the next group= or block_tokens=.
  Result<Layout> dense = Layout::Parse("layers=32:kv_heads=8:head_dim=128:dtype=bf16:block_tokens=16");
  ASSERT_OK(dense);
  EXPECT_EQ(*dense, MistralLayout());
  std::string colons = MixedLayout().ToString();
  for (char& c : colons) c = c == ' ' ? ':' : c;
  Result<Layout> grouped = Layout::Parse(colons);
  ASSERT_OK(grouped);
  EXPECT_EQ(*grouped, MixedLayout());
  grouped = Layout::Parse("group=state:layers=8:bytes=65536:block_tokens=16:group=latent:layers=61:head_dim=576:dtype=bf16");
  ASSERT_OK(grouped);
  EXPECT_EQ(*grouped, Layout::FromGroups({LayoutGroup::State(8, 65536), LayoutGroup::Latent(61, 576, DType::kBF16)}, 16));
  // A dense field after a group belongs to the group.
  ExpectInvalid(Layout::Parse("block_tokens=16:group=state:layers=8:bytes=1:kv_heads=3").status(),
                "layout group 0 (state) has unknown field 'kv_heads'");
  ExpectInvalid(Layout::Parse("layers=32:kv_heads=8:head_dim=128:dtype=bf16:block_tokens=16:junk").status(),
                "'junk' is not key=value");
}

TEST(LayoutGroupsTest, KindNames) {
  for (GroupKind k : {GroupKind::kFull, GroupKind::kWindow, GroupKind::kLatent, GroupKind::kState}) {
    Result<GroupKind> p = ParseGroupKind(GroupKindName(k));
    ASSERT_OK(p);
    EXPECT_EQ(*p, k);
  }
  EXPECT_EQ(GroupKindName(GroupKind::kFull), "full");
  EXPECT_EQ(GroupKindName(GroupKind::kWindow), "window");
  EXPECT_EQ(GroupKindName(GroupKind::kLatent), "latent");
  EXPECT_EQ(GroupKindName(GroupKind::kState), "state");
  EXPECT_EQ(GroupKindName(static_cast<GroupKind>(0)), "invalid");
  ExpectInvalid(ParseGroupKind("Full").status(), "expected full, window, latent or state");
  // "none" names the grouped layout's dtype but is never parsed.
  EXPECT_EQ(DTypeName(DType::kNone), "none");
  EXPECT_EQ(DTypeSize(DType::kNone), 0u);
  ExpectInvalid(ParseDType("none").status(), "unknown dtype 'none'");
}

TEST(DTypeTest, NamesSizesAndAliases) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFP16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFP32), 4u);
  EXPECT_EQ(DTypeSize(DType::kFP8), 1u);
  EXPECT_EQ(DTypeSize(static_cast<DType>(0)), 0u);
  for (DType dt : {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8}) {
    Result<DType> p = ParseDType(DTypeName(dt));
    ASSERT_OK(p);
    EXPECT_EQ(*p, dt);
  }
  EXPECT_EQ(DTypeName(static_cast<DType>(9)), "invalid");
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float16"), DType::kFP16);
  EXPECT_EQ(*ParseDType("half"), DType::kFP16);
  EXPECT_EQ(*ParseDType("float32"), DType::kFP32);
  EXPECT_EQ(*ParseDType("float"), DType::kFP32);
  EXPECT_EQ(*ParseDType("float8_e4m3fn"), DType::kFP8);
  for (const char* bad : {"", "BF16", "int8", "fp64", "bf16 "}) {
    Result<DType> p = ParseDType(bad);
    EXPECT_FALSE(p.ok()) << bad;
    ExpectInvalid(p.status(), "unknown dtype");
  }
}

TEST(NamespaceNameTest, AcceptsValidNames) {
  for (const char* ok : {"a", "mistral-7b-instruct-v0.2", "A_b.c-9", "x.", "0"}) {
    EXPECT_OK(ValidateNamespaceName(ok)) << ok;
  }
  EXPECT_OK(ValidateNamespaceName(std::string(128, 'n')));
}

TEST(NamespaceNameTest, RejectsBadNames) {
  ExpectInvalid(ValidateNamespaceName(""), "1..128 characters, got 0");
  ExpectInvalid(ValidateNamespaceName(std::string(129, 'n')), "got 129");
  ExpectInvalid(ValidateNamespaceName("."), "must not start with '.'");
  ExpectInvalid(ValidateNamespaceName(".."), "must not start with '.'");
  ExpectInvalid(ValidateNamespaceName(".hidden"), "must not start with '.'");
  for (const char* bad : {"a/b", "a b", "a\nb", "caf\xc3\xa9", "x:y", "a*", "a\\b"}) {
    ExpectInvalid(ValidateNamespaceName(bad), "outside [A-Za-z0-9._-]");
  }
  ExpectInvalid(ValidateNamespaceName(std::string("a\0b", 3)), "outside");
}

}  // namespace
}  // namespace ptstore
