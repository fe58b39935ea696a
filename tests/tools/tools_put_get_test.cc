// ptstore-put and ptstore-get against a real ptstored: prefixes imported
// from files and exported back byte for byte (raw and text token files),
// --create, the errors for files whose sizes do not fit (exit 2), unknown
// namespaces and keys (exit 1), a miss (an empty file, exit 0), and the
// export of one increment by chain key, alone or with its whole prefix.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "ptstore/client.h"
#include "tests/testing/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/generators.h"
#include "tests/testing/run_tool.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using nlohmann::json;
using testing::Lines;
using testing::RunTool;
using testing::SequentialTokens;
using testing::ToolRun;

const std::string kPut = PTSTORE_PUT_PATH;
const std::string kGet = PTSTORE_GET_PATH;
constexpr const char* kNs = "pg";

// 2 layers, 2 KV heads, head_dim 64, bf16: 1 KiB per token; blocks of 16.
Layout TestLayout() { return *Layout::Parse("layers=2 kv_heads=2 head_dim=64 dtype=bf16 block_tokens=16"); }
constexpr uint64_t kBpt = 1024;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string Raw(const std::vector<uint32_t>& t) {
  std::string s(t.size() * 4, '\0');
  for (size_t i = 0; i < t.size(); ++i) {
    s[4 * i] = static_cast<char>(t[i] & 0xff);
    s[4 * i + 1] = static_cast<char>((t[i] >> 8) & 0xff);
    s[4 * i + 2] = static_cast<char>((t[i] >> 16) & 0xff);
    s[4 * i + 3] = static_cast<char>(t[i] >> 24);
  }
  return s;
}

void WriteFile(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
  std::fclose(f);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

class PutGetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(daemon_.Start());
    auto c = testing::ConnectTo(daemon_.socket_path());
    ASSERT_OK(c);
    client_ = std::move(*c);
    ASSERT_OK(client_->CreateNamespace(kNs, TestLayout()));
  }

  ToolRun Put(std::vector<std::string> args) {
    args.insert(args.begin(), {"-s", daemon_.socket_path()});
    return RunTool(kPut, args);
  }
  ToolRun Get(std::vector<std::string> args) {
    args.insert(args.begin(), {"-s", daemon_.socket_path()});
    return RunTool(kGet, args);
  }
  std::string F(const std::string& name) const { return dir_.Join(name); }
  // The bytes the store holds for `tokens` (its longest stored prefix).
  std::string Stored(const std::string& ns, const std::vector<uint32_t>& tokens) {
    std::string dst(tokens.size() * kBpt, '\0');
    auto n = client_->Load(ns, tokens, dst.data(), dst.size());
    EXPECT_OK(n);
    dst.resize(n.ok() ? *n * kBpt : 0);
    return dst;
  }
  const PrefixNodeInfo* FindNode(const std::vector<PrefixNodeInfo>& nodes, uint64_t start, uint64_t tokens) {
    for (const auto& n : nodes) {
      if (n.start_token == start && n.tokens == tokens) return &n;
    }
    return nullptr;
  }

  testing::Daemon daemon_;
  std::unique_ptr<Client> client_;
  testing::TempDir dir_{"ptstore-put-get"};
};

TEST_F(PutGetTest, RoundTripRawTokens) {
  // 40 tokens: two whole blocks and 8 tokens of a partial one (ignored).
  const auto tokens = SequentialTokens(1000, 40);
  const std::string kv = RandomBytes(40 * kBpt, 1);
  WriteFile(F("t.bin"), Raw(tokens));
  WriteFile(F("kv.bin"), kv);

  ToolRun r = Put({kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "pg: matched 0 tokens, stored 32 tokens (32.0 KiB new); 8 tokens past the last whole block ignored\n");
  EXPECT_EQ(Stored(kNs, tokens), kv.substr(0, 32 * kBpt));

  // Again: all there already.
  r = Put({kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("pg: matched 32 tokens, stored 0 tokens (0 B new)", 0), 0u) << r.out;

  r = Get({kNs, "--tokens", F("t.bin"), "-o", F("out.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "32 tokens matched of 40: 32.0 KiB written to " + F("out.kv") + "\n");
  EXPECT_EQ(testing::ReadFile(F("out.kv")), kv.substr(0, 32 * kBpt));

  // --tokens-out: the ids of what was exported (the matched tokens).
  r = Get({kNs, "--tokens", F("t.bin"), "-o", F("out2.kv"), "--tokens-out", F("out.tok")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("out.tok")), Raw(SequentialTokens(1000, 32)));
}

TEST_F(PutGetTest, RoundTripTextTokens) {
  // 48 tokens (3 blocks), written with assorted white space.
  const auto tokens = SequentialTokens(4000000000u, 48);
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) text += std::to_string(tokens[i]) + (i % 5 == 4 ? "\n" : i % 3 ? "\t" : "  ");
  const std::string kv = RandomBytes(48 * kBpt, 2);
  WriteFile(F("t.txt"), text);
  WriteFile(F("kv.bin"), kv);

  ToolRun r = Put({"--json", kNs, "--tokens-format", "text", "--tokens", F("t.txt"), "--kv", F("kv.bin")});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["namespace"], kNs);
  EXPECT_EQ(j["tokens"], 48);
  EXPECT_EQ(j["whole_block_tokens"], 48);
  EXPECT_EQ(j["ignored_tokens"], 0);
  EXPECT_EQ(j["matched_tokens"], 0);
  EXPECT_EQ(j["stored_tokens"], 48);
  EXPECT_EQ(j["new_bytes"], 48 * kBpt);
  EXPECT_EQ(Stored(kNs, tokens), kv);

  r = Get({kNs, "--tokens-format", "text", "--tokens", F("t.txt"), "-o", F("out.kv"), "--tokens-out", F("out.txt"),
           "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["namespace"], kNs);
  EXPECT_TRUE(j["key"].is_null());
  EXPECT_EQ(j["requested_tokens"], 48);
  EXPECT_EQ(j["start_token"], 0);
  EXPECT_EQ(j["tokens"], 48);
  EXPECT_EQ(j["bytes"], 48 * kBpt);
  EXPECT_EQ(j["output"], F("out.kv"));
  EXPECT_EQ(j["tokens_output"], F("out.txt"));
  EXPECT_EQ(testing::ReadFile(F("out.kv")), kv);
  // Text token files are written one id per line.
  std::string want;
  for (uint32_t t : tokens) want += std::to_string(t) + "\n";
  EXPECT_EQ(testing::ReadFile(F("out.txt")), want);

  // The same ids as a raw file find the same prefix.
  WriteFile(F("t.bin"), Raw(tokens));
  r = Get({kNs, "--tokens", F("t.bin"), "-o", F("out.raw.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("out.raw.kv")), kv);
}

TEST_F(PutGetTest, KvOfTheWholeBlocksOnlyIsAccepted) {
  // What ptstore-get writes (whole blocks) goes back in with the full ids.
  const auto tokens = SequentialTokens(77, 40);
  const std::string kv = RandomBytes(32 * kBpt, 3);
  WriteFile(F("t.bin"), Raw(tokens));
  WriteFile(F("kv.bin"), kv);
  ToolRun r = Put({kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Stored(kNs, tokens), kv);

  // Fewer tokens than one block: nothing to store, not an error.
  WriteFile(F("short.bin"), Raw(SequentialTokens(5, 10)));
  WriteFile(F("short.kv"), RandomBytes(10 * kBpt, 4));
  r = Put({kNs, "--tokens", F("short.bin"), "--kv", F("short.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "pg: matched 0 tokens, stored 0 tokens (0 B new); 10 tokens past the last whole block ignored\n");
}

TEST_F(PutGetTest, CreateTheNamespaceFirst) {
  // 1 layer, 1 head, head_dim 8, fp32: 64 bytes per token; blocks of 4.
  const std::string layout = "layers=1 kv_heads=1 head_dim=8 dtype=fp32 block_tokens=4";
  const auto tokens = SequentialTokens(10, 12);
  const std::string kv = RandomBytes(12 * 64, 5);
  WriteFile(F("t.bin"), Raw(tokens));
  WriteFile(F("kv.bin"), kv);
  ToolRun r = Put({"new-ns", "--create", layout, "--mode", "0750", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "new-ns: matched 0 tokens, stored 12 tokens (768 B new)\n");
  auto info = client_->GetNamespace("new-ns");
  ASSERT_OK(info);
  EXPECT_EQ(info->layout, *Layout::Parse(layout));
  EXPECT_EQ(info->mode, 0750u);
  EXPECT_EQ(info->bytes, 12u * 64);
  r = Get({"new-ns", "--tokens", F("t.bin"), "-o", F("out.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("out.kv")), kv);

  // The same layout again: the namespace is used as it is.
  r = Put({"new-ns", "--create", layout, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "new-ns: matched 12 tokens, stored 0 tokens (0 B new)\n");
  // Another layout for an existing namespace: the server says no.
  r = Put({"new-ns", "--create", "layers=2 kv_heads=1 head_dim=8 dtype=fp32 block_tokens=4", "--tokens", F("t.bin"),
           "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("ptstore-put: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("new-ns"), std::string::npos) << r.err;

  // A malformed layout or mode is a usage error, found before the server.
  r = Put({"other", "--create", "layers=2 kv_heads=1", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-put: --create: layout is missing field 'head_dim' (see --help)\n");
  r = Put({"other", "--create", "layers=0 kv_heads=1 head_dim=8 dtype=fp32 block_tokens=4", "--tokens", F("t.bin"),
           "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--create: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("layers"), std::string::npos) << r.err;
  r = Put({"other", "--create", layout, "--mode", "0999", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-put: --mode '0999' is not an octal mode from 0 to 0777 (see --help)\n");
  r = Put({kNs, "--mode", "0700", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-put: --mode goes with --create (see --help)\n");
  EXPECT_FALSE(client_->GetNamespace("other").ok());
}

TEST_F(PutGetTest, CreateANamespaceOfAGroupedLayout) {
  // Blocks of 4 tokens: a full group of 1 layer, 1 head of 8 fp32 (256
  // bytes), a state group of 3 layers of 10 bytes (30) at byte 256, the
  // block padded to 320: 80 bytes per token.
  const std::string layout =
      "block_tokens=4 group=full:layers=1:kv_heads=1:head_dim=8:dtype=fp32 group=state:layers=3:bytes=10";
  ASSERT_EQ(Layout::Parse(layout)->BytesPerToken(), 80u);
  const auto tokens = SequentialTokens(10, 12);
  const std::string kv = RandomBytes(12 * 80, 6);
  WriteFile(F("t.bin"), Raw(tokens));
  WriteFile(F("kv.bin"), kv);
  ToolRun r = Put({"hybrid", "--create", layout, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "hybrid: matched 0 tokens, stored 12 tokens (960 B new)\n");
  auto info = client_->GetNamespace("hybrid");
  ASSERT_OK(info);
  EXPECT_EQ(info->layout, *Layout::Parse(layout));
  EXPECT_TRUE(info->layout.grouped());
  r = Get({"hybrid", "--tokens", F("t.bin"), "-o", F("out.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("out.kv")), kv);
  // The KV file must be the grouped layout's bytes per token.
  WriteFile(F("short.kv"), kv.substr(0, 12 * 64));
  r = Put({"hybrid", "--tokens", F("t.bin"), "--kv", F("short.kv")});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.err.find("80 bytes per token"), std::string::npos) << r.err;
  // A bad group is a usage error naming it, found before the server.
  r = Put({"other", "--create", "block_tokens=4 group=state:layers=3", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-put: --create: layout group 0 (state) is missing field 'bytes' (see --help)\n");
  EXPECT_FALSE(client_->GetNamespace("other").ok());
}

TEST_F(PutGetTest, FilesThatDoNotFitAreUsageErrors) {
  const auto tokens = SequentialTokens(1000, 40);
  WriteFile(F("t.bin"), Raw(tokens));
  WriteFile(F("kv.bin"), RandomBytes(1000, 6));
  const uint64_t saves = client_->Stats()->saves;

  // A KV file of the wrong size: exit 2, one line naming both sizes.
  ToolRun r = Put({kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ptstore-put: kv file '" + F("kv.bin") + "' holds 1000 bytes, but the 40 tokens of '" + F("t.bin") +
                       "' need 40960 bytes (or 32768 for the 32 tokens in whole blocks) at 1024 bytes per token "
                       "(layout " + TestLayout().ToString() + ")\n");
  // One byte short of the whole blocks, one byte over all tokens.
  for (size_t size : {32 * kBpt - 1, 40 * kBpt + 1, size_t{0}}) {
    WriteFile(F("kv.bin"), std::string(size, 'x'));
    r = Put({kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
    EXPECT_EQ(r.rc, 2) << size;
    EXPECT_NE(r.err.find("holds " + std::to_string(size) + " bytes"), std::string::npos) << r.err;
  }
  // A raw token file of an odd size.
  WriteFile(F("odd.bin"), std::string(7, '\1'));
  r = Put({kNs, "--tokens", F("odd.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("ptstore-put: tokens file '" + F("odd.bin") +
                            "': holds 7 bytes, not a whole number of 4-byte token ids",
                        0),
            0u)
      << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u);
  // A text token file with a word that is not a token id.
  WriteFile(F("bad.txt"), "1 2 3\n4 five 6\n");
  r = Put({kNs, "--tokens-format", "text", "--tokens", F("bad.txt"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-put: tokens file '" + F("bad.txt") +
                       "': line 2: 'five' is not a token id (a decimal integer from 0 to 4294967295)\n");
  r = Get({kNs, "--tokens-format", "text", "--tokens", F("bad.txt"), "-o", F("out.kv")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_FALSE(Exists(F("out.kv")));
  // A bad --tokens-format.
  r = Put({kNs, "--tokens-format", "csv", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-put: --tokens-format: token file format 'csv' is not raw or text (see --help)\n");

  // Files that cannot be read are I/O errors: exit 1.
  r = Put({kNs, "--tokens", F("missing.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "ptstore-put: not_found: cannot open '" + F("missing.bin") + "': No such file or directory\n");
  r = Put({kNs, "--tokens", F("t.bin"), "--kv", F("missing.kv")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cannot open '" + F("missing.kv") + "'"), std::string::npos) << r.err;
  r = Get({kNs, "--tokens", F("missing.bin"), "-o", F("out.kv")});
  EXPECT_EQ(r.rc, 1);
  // An output file that cannot be created.
  WriteFile(F("kv.bin"), RandomBytes(40 * kBpt, 7));
  ASSERT_EQ(Put({kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")}).rc, 0);
  r = Get({kNs, "--tokens", F("t.bin"), "-o", F("no-dir/out.kv")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "ptstore-get: not_found: cannot create '" + F("no-dir/out.kv") + "': No such file or directory\n");

  // Nothing was stored by the failed puts (only the last one saved).
  EXPECT_EQ(client_->Stats()->saves, saves + 1);
  // Missing required options.
  r = Put({kNs, "--tokens", F("t.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--kv"), std::string::npos) << r.err;
  r = Get({kNs, "--tokens", F("t.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--output"), std::string::npos) << r.err;
}

TEST_F(PutGetTest, UnknownNamespace) {
  WriteFile(F("t.bin"), Raw(SequentialTokens(1, 16)));
  WriteFile(F("kv.bin"), RandomBytes(16 * kBpt, 8));
  ToolRun r = Put({"no-such", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("ptstore-put: not_found: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("'no-such'"), std::string::npos) << r.err;
  r = Get({"no-such", "--tokens", F("t.bin"), "-o", F("out.kv")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind("ptstore-get: not_found: ", 0), 0u) << r.err;
  EXPECT_FALSE(Exists(F("out.kv")));  // no file on an error
  r = Get({"no-such", "--key", std::string(32, 'a'), "-o", F("out.kv")});
  EXPECT_EQ(r.rc, 1);
  // A malformed name is a usage error.
  r = Put({"bad name", "--tokens", F("t.bin"), "--kv", F("kv.bin")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("ptstore-put: ", 0), 0u);
}

TEST_F(PutGetTest, AMissWritesAnEmptyFile) {
  WriteFile(F("t.bin"), Raw(SequentialTokens(123456, 32)));
  WriteFile(F("out.kv"), "old contents");
  ToolRun r = Get({kNs, "--tokens", F("t.bin"), "-o", F("out.kv"), "--tokens-out", F("out.tok")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "0 tokens matched of 32: 0 B written to " + F("out.kv") + ", token ids to " + F("out.tok") + "\n");
  ASSERT_TRUE(Exists(F("out.kv")));
  EXPECT_EQ(testing::ReadFile(F("out.kv")), "");
  EXPECT_EQ(testing::ReadFile(F("out.tok")), "");
  r = Get({"--json", kNs, "--tokens", F("t.bin"), "-o", F("out.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["tokens"], 0);
  EXPECT_EQ(j["bytes"], 0);
  EXPECT_EQ(j["requested_tokens"], 32);
  // An empty token file is a miss too.
  WriteFile(F("empty.bin"), "");
  r = Get({kNs, "--tokens", F("empty.bin"), "-o", F("out.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "0 tokens matched of 0: 0 B written to " + F("out.kv") + "\n");
}

TEST_F(PutGetTest, ExportAnIncrementByKey) {
  // A: 64 tokens. B: A's first 32, then 32 others (splits A at 32).
  // C: A, then 16 more: a third level.   root -- [0,32) -- [32,64) A -- [64,80) C
  //                                                      `- [32,64) B
  auto a = SequentialTokens(1000, 64);
  auto b = SequentialTokens(1000, 32);
  auto b_tail = SequentialTokens(5000, 32);
  b.insert(b.end(), b_tail.begin(), b_tail.end());
  auto c = a;
  auto c_tail = SequentialTokens(7000, 16);
  c.insert(c.end(), c_tail.begin(), c_tail.end());
  const std::string kv_c = RandomBytes(80 * kBpt, 9);
  std::string kv_b = kv_c.substr(0, 32 * kBpt) + RandomBytes(32 * kBpt, 10);
  for (const auto& [t, kv, name] : {std::tuple{a, kv_c.substr(0, 64 * kBpt), "a"}, std::tuple{b, kv_b, "b"},
                                    std::tuple{c, kv_c, "c"}}) {
    WriteFile(F(std::string(name) + ".tok"), Raw(t));
    WriteFile(F(std::string(name) + ".kv"), kv);
    ToolRun r = Put({kNs, "--tokens", F(std::string(name) + ".tok"), "--kv", F(std::string(name) + ".kv")});
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  auto nodes = *client_->ListTree(kNs, {}, true);
  ASSERT_EQ(nodes.size(), 4u);
  const PrefixNodeInfo* top = FindNode(nodes, 0, 32);
  const PrefixNodeInfo* leaf = FindNode(nodes, 64, 16);
  ASSERT_NE(top, nullptr);
  ASSERT_NE(leaf, nullptr);
  const PrefixNodeInfo* mid = nullptr;  // A's [32,64), the parent of C's leaf
  for (const auto& n : nodes) {
    if (n.key == leaf->parent) mid = &n;
  }
  ASSERT_NE(mid, nullptr);
  ASSERT_EQ(mid->parent, top->key);

  // One increment: its own bytes and ids.
  ToolRun r = Get({kNs, "--key", leaf->key.ToHex(), "-o", F("leaf.kv"), "--tokens-out", F("leaf.tok")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "16 tokens (64..79) of increment " + leaf->key.ToHex() + ": 16.0 KiB written to " + F("leaf.kv") +
                       ", token ids to " + F("leaf.tok") + "\n");
  EXPECT_EQ(testing::ReadFile(F("leaf.kv")), kv_c.substr(64 * kBpt));
  EXPECT_EQ(testing::ReadFile(F("leaf.tok")), Raw(c_tail));
  r = Get({kNs, "--key", mid->key.ToHex(), "-o", F("mid.kv"), "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["key"], mid->key.ToHex());
  EXPECT_FALSE(j["whole_prefix"].get<bool>());
  EXPECT_TRUE(j["requested_tokens"].is_null());
  EXPECT_EQ(j["start_token"], 32);
  EXPECT_EQ(j["tokens"], 32);
  EXPECT_EQ(j["bytes"], 32 * kBpt);
  EXPECT_TRUE(j["tokens_output"].is_null());
  EXPECT_EQ(testing::ReadFile(F("mid.kv")), kv_c.substr(32 * kBpt, 32 * kBpt));
  r = Get({kNs, "--key", top->key.ToHex(), "-o", F("top.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("top.kv")), kv_c.substr(0, 32 * kBpt));
  // B's tail: its own bytes, not A's.
  const PrefixNodeInfo* b_node = nullptr;
  for (const auto& n : nodes) {
    if (n.start_token == 32 && n.key != mid->key) b_node = &n;
  }
  ASSERT_NE(b_node, nullptr);
  r = Get({kNs, "--key", b_node->key.ToHex(), "-o", F("b.out"), "--tokens-out", F("b.out.txt"), "--tokens-format",
           "text"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("b.out")), kv_b.substr(32 * kBpt));
  EXPECT_EQ(Lines(testing::ReadFile(F("b.out.txt"))).size(), 32u);
  EXPECT_EQ(Lines(testing::ReadFile(F("b.out.txt")))[0], "5000");

  // The whole prefix ending at the leaf: three increments, 80 tokens.
  r = Get({kNs, "--key", leaf->key.ToHex(), "--whole-prefix", "-o", F("whole.kv"), "--tokens-out", F("whole.tok")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "80 tokens (0..79) of the prefix ending at " + leaf->key.ToHex() + ": 80.0 KiB written to " +
                       F("whole.kv") + ", token ids to " + F("whole.tok") + "\n");
  EXPECT_EQ(testing::ReadFile(F("whole.kv")), kv_c);
  EXPECT_EQ(testing::ReadFile(F("whole.tok")), Raw(c));
  r = Get({"--json", kNs, "--key", mid->key.ToHex(), "-w", "-o", F("whole2.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_TRUE(j["whole_prefix"].get<bool>());
  EXPECT_EQ(j["start_token"], 0);
  EXPECT_EQ(j["tokens"], 64);
  EXPECT_EQ(testing::ReadFile(F("whole2.kv")), kv_c.substr(0, 64 * kBpt));

  // What was exported goes into another namespace as it is, and comes back
  // out the same.
  ASSERT_OK(client_->CreateNamespace("copy", TestLayout()));
  r = Put({"copy", "--tokens", F("whole.tok"), "--kv", F("whole.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Stored("copy", c), kv_c);

  // Upper-case hex is accepted; an unknown key is a failure (exit 1) and
  // writes nothing; a malformed one is a usage error.
  std::string upper = leaf->key.ToHex();
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  r = Get({kNs, "--key", upper, "-o", F("upper.kv")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("upper.kv")), kv_c.substr(64 * kBpt));
  r = Get({kNs, "--key", std::string(32, 'a'), "-o", F("none.kv")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "ptstore-get: not_found: no increment named " + std::string(32, 'a') + " in namespace 'pg'\n");
  EXPECT_FALSE(Exists(F("none.kv")));
  r = Get({kNs, "--key", "xyz", "-o", F("none.kv")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-get: --key: chain key 'xyz' must be 32 hex digits (see --help)\n");
}

TEST_F(PutGetTest, GetUsageErrors) {
  WriteFile(F("t.bin"), Raw(SequentialTokens(1, 16)));
  const std::string key(32, '0');
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{kNs, "-o", F("o")}, "what to export: --tokens FILE or --key KEY"},
           {{kNs, "--tokens", F("t.bin"), "--key", key, "-o", F("o")}, "--tokens and --key exclude each other"},
           {{kNs, "--tokens", F("t.bin"), "--whole-prefix", "-o", F("o")}, "--whole-prefix goes with --key"},
       }) {
    ToolRun r = Get(c.args);
    EXPECT_EQ(r.rc, 2) << c.message;
    EXPECT_EQ(r.err, "ptstore-get: " + c.message + " (see --help)\n");
    EXPECT_FALSE(Exists(F("o")));
  }
  ToolRun r = RunTool(kGet, {"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--whole-prefix"), std::string::npos) << r.out;
  r = RunTool(kPut, {"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--create"), std::string::npos) << r.out;
}

TEST_F(PutGetTest, SocketFromTheEnvironment) {
  WriteFile(F("t.bin"), Raw(SequentialTokens(1, 16)));
  WriteFile(F("kv.bin"), RandomBytes(16 * kBpt, 11));
  ToolRun r = RunTool(kPut, {kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")},
                      {{"PTSTORE_SOCKET", daemon_.socket_path()}});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = RunTool(kGet, {kNs, "--tokens", F("t.bin"), "-o", F("o.kv")}, {{"PTSTORE_SOCKET", daemon_.socket_path()}});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(testing::ReadFile(F("o.kv")), testing::ReadFile(F("kv.bin")));
  // No server there: exit 1, one line.
  const std::string sock = F("none.sock");
  for (const std::string& tool : {kPut, kGet}) {
    if (tool == kPut) r = RunTool(tool, {"-s", sock, kNs, "--tokens", F("t.bin"), "--kv", F("kv.bin")});
    if (tool == kGet) r = RunTool(tool, {"-s", sock, kNs, "--tokens", F("t.bin"), "-o", F("x")});
    EXPECT_EQ(r.rc, 1) << tool;
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find("unavailable: connecting to ptstored at " + sock), std::string::npos) << r.err;
  }
  EXPECT_FALSE(Exists(F("x")));
}

}  // namespace
}  // namespace ptstore
