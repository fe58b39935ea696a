// Quota sizes as people write them (ptstore/quota.h): units, decimals,
// "none", and clear errors for what is not a size.
#include "ptstore/quota.h"
#include "tests/testing/status_matchers.h"

#include <gtest/gtest.h>

namespace ptstore {
namespace {

uint64_t Parse(const char* text) {
  auto r = ParseQuotaBytes(text);
  EXPECT_OK(r) << text << ": " << r.status().ToString();
  return r.ok() ? *r : ~0ull;
}

std::string Error(const char* text) {
  auto r = ParseQuotaBytes(text);
  EXPECT_FALSE(r.ok()) << text << " parsed as " << (r.ok() ? *r : 0);
  if (r.ok()) return "";
  EXPECT_ERROR(r, Code::kInvalidArgument);
  return r.status().message();
}

TEST(QuotaTest, SizesWithUnits) {
  EXPECT_EQ(Parse("4GiB"), 4ull << 30);
  EXPECT_EQ(Parse("4G"), 4ull << 30);
  EXPECT_EQ(Parse("4gib"), 4ull << 30);
  EXPECT_EQ(Parse(" 512 MiB "), 512ull << 20);
  EXPECT_EQ(Parse("10GB"), 10'000'000'000ull);
  EXPECT_EQ(Parse("1kB"), 1000u);
  EXPECT_EQ(Parse("1K"), 1024u);
  EXPECT_EQ(Parse("123"), 123u);
  EXPECT_EQ(Parse("123B"), 123u);
  EXPECT_EQ(Parse("1.5GiB"), 3ull << 29);
  EXPECT_EQ(Parse("0.5KiB"), 512u);
  EXPECT_EQ(Parse("2TiB"), 2ull << 40);
  EXPECT_EQ(Parse("1EiB"), kMaxQuotaBytes);
  EXPECT_EQ(Parse("+1M"), 1u << 20);
}

TEST(QuotaTest, NoLimit) {
  EXPECT_EQ(Parse("0"), 0u);
  EXPECT_EQ(Parse("0GiB"), 0u);
  EXPECT_EQ(Parse("none"), 0u);
  EXPECT_EQ(Parse("Unlimited"), 0u);
}

TEST(QuotaTest, BadSizesSayWhatIsWrong) {
  EXPECT_NE(Error("-4GiB").find("negative"), std::string::npos);
  EXPECT_NE(Error("4 parsecs").find("unknown unit 'parsecs'"), std::string::npos);
  EXPECT_NE(Error("4GiBs").find("unknown unit"), std::string::npos);
  EXPECT_NE(Error("").find("empty"), std::string::npos);
  EXPECT_NE(Error("GiB").find("does not start with a number"), std::string::npos);
  EXPECT_NE(Error("2EiB").find("too large"), std::string::npos);
  EXPECT_NE(Error("99999999999999999999999").find("too large"), std::string::npos);
  EXPECT_NE(Error("1025PiB").find("too large"), std::string::npos);
  EXPECT_NE(Error("0.5B").find("whole number of bytes"), std::string::npos);
  EXPECT_NE(Error("-1").find("quota '-1'"), std::string::npos) << "the text is quoted";
}

TEST(QuotaTest, FormatRoundTrips) {
  for (uint64_t b : {uint64_t{0}, uint64_t{1}, uint64_t{1000}, uint64_t{1024}, uint64_t{1536} << 20,
                     uint64_t{4} << 30, kMaxQuotaBytes, uint64_t{12345678901}}) {
    EXPECT_EQ(Parse(FormatQuotaBytes(b).c_str()), b) << FormatQuotaBytes(b);
  }
  EXPECT_EQ(FormatQuotaBytes(0), "unlimited");
  EXPECT_EQ(FormatQuotaBytes(4ull << 30), "4GiB");
  EXPECT_EQ(FormatQuotaBytes(1536ull << 20), "1536MiB");
  EXPECT_EQ(FormatQuotaBytes(1000), "1000");
}

TEST(QuotaTest, Tiers) {
  EXPECT_EQ(*ParseQuotaTier("dram"), QuotaTier::kDram);
  EXPECT_EQ(*ParseQuotaTier("ssd"), QuotaTier::kSsd);
  EXPECT_EQ(ParseQuotaTier("hbm").status().code(), Code::kInvalidArgument);
  EXPECT_STREQ(QuotaTierName(QuotaTier::kSsd), "ssd");
}

}  // namespace
}  // namespace ptstore
