// Tests of Layout validation, Parse/ToString, dtypes and namespace names
// (include/ptstore/layout.h).
#include "ptstore/layout.h"

#include <gtest/gtest.h>

#include <string>

namespace ptstore {
namespace {

// Asserts `s` is InvalidArgument and its message mentions `needle`.
void ExpectInvalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
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
  EXPECT_TRUE(l.Validate().ok());
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
  EXPECT_TRUE(l.Validate().ok());
  l.layers = 1024;
  l.kv_heads = 1024;
  l.head_dim = 1;
  l.block_tokens = 1;
  EXPECT_TRUE(l.Validate().ok());
  l = MistralLayout();
  l.head_dim = 16384;
  EXPECT_TRUE(l.Validate().ok());
  l = MistralLayout();
  l.layers = 1;
  l.kv_heads = 1;
  l.head_dim = 1;
  l.block_tokens = 65536;
  EXPECT_TRUE(l.Validate().ok());
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
  EXPECT_TRUE(l.Validate().ok());
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
      ASSERT_TRUE(l.Validate().ok()) << l.ToString();
      Result<Layout> p = Layout::Parse(l.ToString());
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(*p, l);
      EXPECT_EQ(p->ToString(), l.ToString());
    }
  }
}

TEST(LayoutTest, ParseAcceptsAnyOrderAndSeparators) {
  Result<Layout> p = Layout::Parse("  block_tokens=16,dtype=bfloat16\n head_dim=128\tkv_heads=8, layers=32\n");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
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

TEST(DTypeTest, NamesSizesAndAliases) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFP16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFP32), 4u);
  EXPECT_EQ(DTypeSize(DType::kFP8), 1u);
  EXPECT_EQ(DTypeSize(static_cast<DType>(0)), 0u);
  for (DType dt : {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8}) {
    Result<DType> p = ParseDType(DTypeName(dt));
    ASSERT_TRUE(p.ok());
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
    EXPECT_TRUE(ValidateNamespaceName(ok).ok()) << ok;
  }
  EXPECT_TRUE(ValidateNamespaceName(std::string(128, 'n')).ok());
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
