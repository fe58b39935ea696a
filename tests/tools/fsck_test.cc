// ptstore-fsck, the real binary, over real segment files written by
// SsdTier (then damaged), and over the directory of a running ptstored.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "ptstore/client.h"
#include "storage/ssd_format/codec.h"
#include "storage/ssd_format/env.h"
#include "storage/ssd_format/record.h"
#include "storage/ssd/ssd_tier.h"
#include "tests/testing/daemon.h"
#include "tests/testing/run_tool.h"
#include "tests/testing/segment_files.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using nlohmann::json;
using storage::kRecordAlignment;
using storage::SsdLocation;
using testing::FlipBit;
using testing::Lines;
using testing::NamespaceRecord;
using testing::RunTool;
using testing::TensorRecord;
using testing::TestPayload;
using testing::ToolRun;

const std::string kFsck = PTSTORE_FSCK_PATH;

ToolRun RunFsck(const std::vector<std::string>& args) { return RunTool(kFsck, args); }

json Json(const ToolRun& r) {
  json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

// The problems of every segment, flattened.
std::vector<json> Problems(const json& j) {
  std::vector<json> out;
  for (const auto& s : j["segments"]) {
    for (const auto& p : s["problems"]) {
      json q = p;
      q["file"] = s["file"];
      out.push_back(q);
    }
  }
  return out;
}

class FsckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("ptstore-fsck-test");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    tier_.reset();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  void OpenTier(bool compress) {
    storage::SsdOptions o;
    o.dir = dir_;
    o.capacity = 64ull << 20;
    o.segment_bytes = 1ull << 20;  // several segments
    o.compress = compress;
    o.sync = storage::SsdOptions::Sync::kNone;
    auto t = storage::SsdTier::Open(storage::Env::Default(), o, 3);
    ASSERT_OK(t);
    tier_ = std::move(*t);
  }
  SsdLocation Append(storage::RecordHeader h, uint32_t salt, bool compressible) {
    std::vector<uint8_t> payload = TestPayload(h.tokens.size() * h.layout.BytesPerToken(), salt, compressible);
    auto loc = tier_->Append(std::move(h), payload);
    EXPECT_OK(loc);
    return loc.ok() ? *loc : SsdLocation{};
  }

  // Namespaces "m" (seq 1) and "other" (seq 6), with compression on:
  //   m/2: 64 tokens, compressible (stored compressed)
  //   m/3: 32 tokens, random (stored raw: compression does not pay)
  //   m/4: 48 tokens, compressible, then only 16 live (partially live)
  //   m/5: 16 tokens, then dead
  //   other/7: 1040 tokens, random: too big for the first segment
  void WriteSample() {
    OpenTier(/*compress=*/true);
    ns_m_ = Append(NamespaceRecord("m", 1), 0, false);
    t2_ = Append(TensorRecord("m", 1, 2, 0, 64), 2, true);
    t3_ = Append(TensorRecord("m", 1, 3, 64, 32), 3, false);
    t4_ = Append(TensorRecord("m", 1, 4, 0, 48), 4, true);
    t5_ = Append(TensorRecord("m", 1, 5, 0, 16), 5, false);
    ns_other_ = Append(NamespaceRecord("other", 6), 0, false);
    t7_ = Append(TensorRecord("other", 6, 7, 0, 1040), 7, false);
    ASSERT_OK(tier_->SetLiveTokens(t4_, 16));
    ASSERT_OK(tier_->SetLiveTokens(t5_, 0));
    tier_.reset();
    ASSERT_TRUE(t2_.flags & storage::kRecordCompressed);
    ASSERT_FALSE(t3_.flags & storage::kRecordCompressed);
    ASSERT_TRUE(t4_.flags & storage::kRecordCompressed);
    ASSERT_FALSE(t7_.flags & storage::kRecordCompressed);
    ASSERT_NE(t7_.segment, t2_.segment);
  }
  std::vector<SsdLocation> All() const { return {ns_m_, t2_, t3_, t4_, t5_, ns_other_, t7_}; }
  std::string PathOf(const SsdLocation& loc) const { return dir_ + "/" + storage::SegmentFileName(loc.segment); }
  uint64_t Seed(uint64_t segment) const {
    auto h = storage::DecodeSegmentHeader(
        testing::ReadAt(dir_ + "/" + storage::SegmentFileName(segment), 0, storage::kSegmentHeaderBytes));
    EXPECT_OK(h);
    return h.ok() ? h->seed : 0;
  }

  std::string dir_;
  std::unique_ptr<storage::SsdTier> tier_;
  SsdLocation ns_m_, t2_, t3_, t4_, t5_, ns_other_, t7_;
};

TEST_F(FsckTest, CleanDirectoryCountsEverything) {
  WriteSample();
  std::set<uint64_t> segments;
  for (const auto& l : All()) segments.insert(l.segment);
  ASSERT_GE(segments.size(), 2u);

  ToolRun r = RunFsck({"--json", dir_});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  json j = Json(r);
  EXPECT_EQ(j["dir"], dir_);
  EXPECT_EQ(j["check"], "full");
  EXPECT_TRUE(j["clean"].get<bool>());
  const json& s = j["summary"];
  EXPECT_EQ(s["segments"].get<uint64_t>(), segments.size());
  EXPECT_EQ(s["records"], 7);
  EXPECT_EQ(s["live_records"], 5);  // 2 namespaces, m/2, m/3, other/7
  EXPECT_EQ(s["partial_records"], 1);
  EXPECT_EQ(s["dead_records"], 1);
  EXPECT_EQ(s["namespaces"], 2);
  EXPECT_EQ(s["tensors"], 4);
  EXPECT_EQ(s["compressed_tensors"], 2);
  EXPECT_EQ(s["tokens"], 64 + 32 + 16 + 1040);
  EXPECT_EQ(s["payload_bytes"].get<uint64_t>(), (64 + 32 + 48 + 1040) * 1024u);
  const uint64_t stored = t2_.stored_bytes + t3_.stored_bytes + t4_.stored_bytes + t7_.stored_bytes;
  EXPECT_EQ(s["stored_bytes"].get<uint64_t>(), stored);
  EXPECT_DOUBLE_EQ(s["compression_ratio"].get<double>(), double((64 + 32 + 48 + 1040) * 1024) / double(stored));
  EXPECT_GT(s["compression_ratio"].get<double>(), 1.0);
  uint64_t file_bytes = 0;
  const uint64_t live = ns_m_.footprint() + t2_.footprint() + t3_.footprint() + t4_.footprint() + ns_other_.footprint() +
         t7_.footprint();
  for (uint64_t id : segments) file_bytes += testing::SizeOf(dir_ + "/" + storage::SegmentFileName(id));
  EXPECT_EQ(s["live_bytes"].get<uint64_t>(), live);
  EXPECT_EQ(s["file_bytes"].get<uint64_t>(), file_bytes);
  EXPECT_EQ(s["dead_space_bytes"].get<uint64_t>(), file_bytes - live - segments.size() * storage::kSegmentHeaderBytes);
  EXPECT_EQ(s["corrupt_records"], 0);
  EXPECT_EQ(s["bad_segment_headers"], 0);
  EXPECT_EQ(s["problems"], 0);
  EXPECT_TRUE(j["ignored_files"].empty());
  EXPECT_FALSE(j.contains("records"));  // only with --list

  // Per segment: the one with m/5 has a dead record.
  for (const auto& g : j["segments"]) {
    EXPECT_TRUE(g["clean"].get<bool>());
    EXPECT_TRUE(g["problems"].empty());
    EXPECT_EQ(g["header"]["node_id"], 3);
    EXPECT_EQ(g["header"]["segment_id"], g["id"]);
    EXPECT_TRUE(g["header"]["seed_matches"].get<bool>());
    EXPECT_FALSE(g["header"].contains("seed"));  // the seed is a secret
    if (g["id"].get<uint64_t>() == t5_.segment) {
      EXPECT_GE(g["records"]["dead"].get<uint64_t>(), 1u);
      EXPECT_GE(g["dead_bytes"].get<uint64_t>(), t5_.footprint());
    }
  }
  // Per namespace.
  ASSERT_EQ(j["namespaces"].size(), 2u);
  const json& m = j["namespaces"][0];
  EXPECT_EQ(m["name"], "m");
  EXPECT_EQ(m["incarnation"], 1);
  EXPECT_EQ(m["state"], "live");
  EXPECT_EQ(m["tensors"], 3);
  EXPECT_EQ(m["partial_tensors"], 1);
  EXPECT_EQ(m["tokens"], 64 + 32 + 16);
  EXPECT_EQ(m["layout"]["block_tokens"], 16);
  EXPECT_EQ(m["layout"]["bytes_per_token"], 1024);
  EXPECT_EQ(m["owner"]["uid"], 1000);
  EXPECT_EQ(m["owner"]["mode"], "0750");
  EXPECT_EQ(j["namespaces"][1]["name"], "other");
  EXPECT_EQ(j["namespaces"][1]["tokens"], 1040);

  // --list: every record where SsdTier put it.
  r = RunFsck({"--json", "--list", dir_});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = Json(r);
  ASSERT_EQ(j["records"].size(), 7u);
  std::map<std::pair<uint64_t, uint64_t>, json> by_place;
  for (const auto& rec : j["records"]) {
    by_place[{rec["segment"].get<uint64_t>(), rec["offset"].get<uint64_t>()}] = rec;
  }
  for (const auto& l : All()) ASSERT_TRUE(by_place.count({l.segment, l.offset})) << l.offset;
  const json& r4 = by_place.at({t4_.segment, t4_.offset});
  EXPECT_EQ(r4["kind"], "tensor");
  EXPECT_EQ(r4["namespace"], "m");
  EXPECT_EQ(r4["seq"], 4);
  EXPECT_EQ(r4["start_token"], 0);
  EXPECT_EQ(r4["tokens"], 48);
  EXPECT_EQ(r4["live_tokens"], 16);
  EXPECT_EQ(r4["state"], "partial");
  EXPECT_EQ(r4["payload_bytes"], 48 * 1024);
  EXPECT_TRUE(r4["payload_verified"].get<bool>());
  const json& r2 = by_place.at({t2_.segment, t2_.offset});
  EXPECT_TRUE(r2["compressed"].get<bool>());
  EXPECT_EQ(r2["stored_bytes"].get<uint64_t>(), t2_.stored_bytes);
  EXPECT_TRUE(r2["decompressed"].get<bool>());
  EXPECT_EQ(by_place.at({t5_.segment, t5_.offset})["state"], "dead");
  EXPECT_FALSE(by_place.at({t5_.segment, t5_.offset})["payload_verified"].get<bool>());
  EXPECT_EQ(by_place.at({ns_m_.segment, ns_m_.offset})["kind"], "namespace");
  EXPECT_TRUE(by_place.at({ns_m_.segment, ns_m_.offset})["tokens"].is_null());

  // Text.
  r = RunFsck({"--list", dir_});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind(dir_ + ": " + std::to_string(segments.size()) + " segment files\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n\nSEGMENT "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  BYTES  LIVE  PARTIAL  DEAD  LIVE BYTES  DEAD BYTES  DEAD SPACE  CORRUPT  STATUS\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  0  ok\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nrecords:\nSEGMENT "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  compressed\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nnamespaces:\nNAMESPACE "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nresult               clean\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ncorrupt records      0 (0 B)\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("problems:"), std::string::npos) << r.out;

  // Quick: the same records, nothing read beyond the headers.
  r = RunFsck({"--json", "--quick", "--list", dir_});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = Json(r);
  EXPECT_EQ(j["check"], "quick");
  EXPECT_EQ(j["summary"]["records"], 7);
  for (const auto& rec : j["records"]) {
    EXPECT_FALSE(rec["payload_verified"].get<bool>());
    EXPECT_TRUE(rec["decompressed"].is_null());
  }
}

// Records of a grouped layout (a hybrid model's namespace), compressed and
// not: fsck reads them, checks every payload and shows the layout's groups.
TEST_F(FsckTest, GroupedRecordsAreReadAndShowTheirLayout) {
  const Layout grouped = Layout::FromGroups(
      {LayoutGroup::Full(2, 2, 64, DType::kBF16), LayoutGroup::Latent(3, 40, DType::kFP16), LayoutGroup::State(2, 1000)},
      16);
  ASSERT_OK(grouped.Validate());
  OpenTier(/*compress=*/true);
  storage::RecordHeader ns = NamespaceRecord("hybrid", 1);
  ns.layout = grouped;
  Append(ns, 0, false);
  storage::RecordHeader a = TensorRecord("hybrid", 1, 2, 0, 64);
  a.layout = grouped;
  const SsdLocation la = Append(a, 2, /*compressible=*/true);
  storage::RecordHeader b = TensorRecord("hybrid", 1, 3, 64, 32);
  b.layout = grouped;
  const SsdLocation lb = Append(b, 3, /*compressible=*/false);
  tier_.reset();
  EXPECT_TRUE(la.flags & storage::kRecordCompressed);
  EXPECT_FALSE(lb.flags & storage::kRecordCompressed);

  ToolRun r = RunFsck({"--json", "--list", dir_});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  json j = Json(r);
  EXPECT_TRUE(j["clean"].get<bool>());
  EXPECT_EQ(j["summary"]["tensors"], 2);
  EXPECT_EQ(j["summary"]["payload_bytes"].get<uint64_t>(), 96 * grouped.BytesPerToken());
  ASSERT_EQ(j["namespaces"].size(), 1u);
  const json& l = j["namespaces"][0]["layout"];
  EXPECT_EQ(l["bytes_per_block"].get<uint64_t>(), grouped.BytesPerBlock());
  ASSERT_EQ(l["groups"].size(), 3u);
  EXPECT_EQ(l["groups"][1]["kind"], "latent");
  EXPECT_EQ(l["groups"][2]["state_bytes"], 1000);
  for (const auto& rec : j["records"]) {
    if (rec["kind"] != "tensor") continue;
    EXPECT_TRUE(rec["payload_verified"].get<bool>()) << rec.dump();
    if (rec["compressed"].get<bool>()) EXPECT_TRUE(rec["decompressed"].get<bool>()) << rec.dump();
  }
  r = RunFsck({dir_});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(grouped.ToString()), std::string::npos) << r.out;
}

TEST_F(FsckTest, FlippedPayloadBitIsReportedWithItsOffset) {
  WriteSample();
  FlipBit(PathOf(t3_), t3_.offset + t3_.header_bytes + 1234);
  ToolRun r = RunFsck({"--json", dir_});
  ASSERT_EQ(r.rc, 1) << r.out << r.err;
  json j = Json(r);
  EXPECT_FALSE(j["clean"].get<bool>());
  auto problems = Problems(j);
  ASSERT_EQ(problems.size(), 1u) << j.dump(2);
  EXPECT_EQ(problems[0]["file"], storage::SegmentFileName(t3_.segment));
  EXPECT_EQ(problems[0]["kind"], "payload_checksum");
  EXPECT_EQ(problems[0]["offset"].get<uint64_t>(), t3_.offset);
  EXPECT_EQ(problems[0]["length"].get<uint64_t>(), t3_.footprint());
  EXPECT_EQ(j["summary"]["corrupt_records"], 1);
  EXPECT_EQ(j["summary"]["corrupt_bytes"].get<uint64_t>(), t3_.footprint());
  EXPECT_EQ(j["summary"]["tensors"], 3);  // m/3 is not counted
  EXPECT_EQ(j["summary"]["records"], 6);

  r = RunFsck({dir_});
  ASSERT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("\nproblems:\n  " + storage::SegmentFileName(t3_.segment) + " offset " +
                       std::to_string(t3_.offset) + " (" + std::to_string(t3_.footprint()) +
                       " bytes): payload_checksum: payload checksum mismatch\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nresult               1 problem found\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 problem\n"), std::string::npos) << r.out;  // the segment's STATUS

  // --quick reads no payload: it cannot see this.
  r = RunFsck({"--quick", dir_});
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST_F(FsckTest, FlippedHeaderBitIsOneCorruptRegion) {
  WriteSample();
  FlipBit(PathOf(t4_), t4_.offset + 50);
  ToolRun r = RunFsck({"--json", dir_});
  ASSERT_EQ(r.rc, 1) << r.out << r.err;
  json j = Json(r);
  auto problems = Problems(j);
  ASSERT_EQ(problems.size(), 1u) << j.dump(2);
  EXPECT_EQ(problems[0]["kind"], "bad_header");
  EXPECT_EQ(problems[0]["offset"].get<uint64_t>(), t4_.offset);
  EXPECT_EQ(problems[0]["length"].get<uint64_t>(), t4_.footprint());
  EXPECT_NE(problems[0]["message"].get<std::string>().find("checksum"), std::string::npos);
  EXPECT_EQ(j["summary"]["corrupt_records"], 1);
  EXPECT_EQ(j["summary"]["records"], 6);  // the records after it are found
}

TEST_F(FsckTest, CompressedPayloadThatDoesNotDecompress) {
  WriteSample();
  // Damage the codec header of m/2 and give the record a matching checksum,
  // as a bug writing it would: only decompressing finds it.
  const std::string path = PathOf(t2_);
  const uint64_t seed = Seed(t2_.segment);
  std::vector<uint8_t> stored = testing::ReadAt(path, t2_.offset + t2_.header_bytes, t2_.stored_bytes);
  ASSERT_EQ(stored.size(), t2_.stored_bytes);
  stored[8] ^= 0x40;  // raw_bytes
  auto h = storage::DecodeRecordHeader(testing::ReadAt(path, t2_.offset, t2_.header_bytes), seed);
  ASSERT_OK(h);
  h->payload_checksum = storage::PayloadChecksum(stored, seed);
  testing::WriteAt(path, t2_.offset + t2_.header_bytes, stored);
  testing::WriteAt(path, t2_.offset, storage::EncodeRecordHeader(*h, seed));

  ToolRun r = RunFsck({"--json", "--list", dir_});
  ASSERT_EQ(r.rc, 1) << r.out << r.err;
  json j = Json(r);
  auto problems = Problems(j);
  ASSERT_EQ(problems.size(), 1u) << j.dump(2);
  EXPECT_EQ(problems[0]["kind"], "decompress");
  EXPECT_EQ(problems[0]["offset"].get<uint64_t>(), t2_.offset);
  EXPECT_EQ(j["summary"]["corrupt_records"], 1);
  for (const auto& rec : j["records"]) {
    if (rec["offset"].get<uint64_t>() == t2_.offset && rec["segment"].get<uint64_t>() == t2_.segment) {
      EXPECT_TRUE(rec["payload_verified"].get<bool>());
      EXPECT_FALSE(rec["decompressed"].get<bool>());
    }
  }
  // Quick does not decompress.
  EXPECT_EQ(RunFsck({"--quick", dir_}).rc, 0);
}

TEST_F(FsckTest, TruncatedFileHasATornRecord) {
  WriteSample();
  // other/7 is the last record of the last segment: cut it mid-payload.
  const std::string path = PathOf(t7_);
  ASSERT_EQ(testing::SizeOf(path), t7_.offset + t7_.footprint());
  testing::TruncateTo(path, t7_.offset + t7_.header_bytes + 5 * kRecordAlignment + 17);
  ToolRun r = RunFsck({"--json", dir_});
  ASSERT_EQ(r.rc, 1) << r.out << r.err;
  json j = Json(r);
  auto problems = Problems(j);
  ASSERT_EQ(problems.size(), 1u) << j.dump(2);
  EXPECT_EQ(problems[0]["kind"], "torn_record");
  EXPECT_EQ(problems[0]["offset"].get<uint64_t>(), t7_.offset);
  EXPECT_EQ(problems[0]["length"].get<uint64_t>(), t7_.header_bytes + 5 * kRecordAlignment + 17);
  EXPECT_NE(problems[0]["message"].get<std::string>().find("cut short"), std::string::npos);
  // Its namespace record is still there; its only tensor is not.
  for (const auto& n : j["namespaces"]) {
    if (n["name"] == "other") {
      EXPECT_EQ(n["tensors"], 0);
    }
  }

  r = RunFsck({dir_});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(" offset " + std::to_string(t7_.offset) + " ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("torn_record: payload cut short by the end of the file"), std::string::npos) << r.out;
}

TEST_F(FsckTest, GarbageFilesNamedLikeSegmentsDoNotCrashIt) {
  WriteSample();
  const std::string junk1 = dir_ + "/" + storage::SegmentFileName(0xff);
  const std::string junk2 = dir_ + "/" + storage::SegmentFileName(0x100);
  const std::string junk3 = dir_ + "/" + storage::SegmentFileName(0x101);
  {
    std::vector<uint8_t> bytes = TestPayload(50 * kRecordAlignment + 7, 42, false);
    // Some blocks dressed as record headers, with plausible and absurd lengths.
    for (uint64_t b = 2; b < 50; b += 5) {
      const uint64_t magic = storage::kRecordMagic;
      std::memcpy(bytes.data() + b * kRecordAlignment, &magic, 8);
      const uint32_t len = b * 1000 + 64;
      std::memcpy(bytes.data() + b * kRecordAlignment + 8, &len, 4);
    }
    std::ofstream(junk1, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    std::ofstream(junk2, std::ios::binary);  // empty
    std::ofstream(junk3, std::ios::binary) << "not a segment";
    std::ofstream(dir_ + "/README", std::ios::binary) << "hello";
    std::filesystem::create_directory(dir_ + "/seg-zz.pts");
  }
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, {"--quick"}, {"--list"}}) {
    std::vector<std::string> args = {"--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(dir_);
    ToolRun r = RunFsck(args);
    ASSERT_EQ(r.rc, 1) << r.out << r.err;
    json j = Json(r);
    EXPECT_EQ(j["ignored_files"], json({"README", "seg-zz.pts"}));
    std::map<std::string, json> by_file;
    for (const auto& g : j["segments"]) by_file[g["file"].get<std::string>()] = g;
    for (const std::string& f : {junk1, junk2, junk3}) {
      const json& g = by_file.at(std::filesystem::path(f).filename().string());
      EXPECT_FALSE(g["clean"].get<bool>());
      EXPECT_TRUE(g["header"].is_null());
      EXPECT_EQ(g["problems"][0]["kind"], "segment_header");
      EXPECT_EQ(g["records"]["live"], 0);
    }
    EXPECT_EQ(by_file.at(storage::SegmentFileName(0xff))["problems"][1]["offset"], kRecordAlignment);
    EXPECT_EQ(j["summary"]["bad_segment_headers"], 3);
    // The good segments are still good, and counted.
    EXPECT_EQ(j["summary"]["records"], 7);
    EXPECT_TRUE(by_file.at(storage::SegmentFileName(t2_.segment))["clean"].get<bool>());
  }
  ToolRun r = RunFsck({dir_});
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.out.find("(2 other entries ignored)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(storage::SegmentFileName(0x100) + " offset 0 (0 bytes): segment_header: "), std::string::npos)
      << r.out;
}

TEST_F(FsckTest, NonRegularFilesAreReportedWithoutOpeningThem) {
  // A FIFO would block an open; a directory cannot be read.
  ASSERT_EQ(mkfifo((dir_ + "/" + storage::SegmentFileName(1)).c_str(), 0600), 0);
  std::filesystem::create_directory(dir_ + "/" + storage::SegmentFileName(2));
  std::filesystem::create_symlink("/nonexistent", dir_ + "/" + storage::SegmentFileName(3));
  ToolRun r = RunFsck({"--json", dir_});
  ASSERT_EQ(r.rc, 1) << r.out << r.err;
  json j = Json(r);
  auto problems = Problems(j);
  ASSERT_EQ(problems.size(), 3u) << j.dump(2);
  for (const auto& p : problems) {
    EXPECT_EQ(p["kind"], "read_error");
    EXPECT_TRUE(p["offset"].is_null());
  }
  EXPECT_NE(problems[0]["message"].get<std::string>().find("not a regular file"), std::string::npos);
  EXPECT_NE(problems[2]["message"].get<std::string>().find("symbolic link to nothing"), std::string::npos);
  EXPECT_EQ(j["summary"]["unreadable_segments"], 3);
}

TEST_F(FsckTest, EmptyDirectoryIsClean) {
  ToolRun r = RunFsck({dir_});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind(dir_ + ": 0 segment files\n", 0), 0u) << r.out;
  r = RunFsck({"--json", dir_});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(Json(r)["summary"]["segments"], 0);
}

// DIR missing or not a directory: a usage error (2), nothing checked.
TEST_F(FsckTest, UsageErrors) {
  const std::string missing = dir_ + "/no-such-dir";
  ToolRun r = RunFsck({missing});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ptstore-fsck: " + missing + ": No such file or directory (see --help)\n");
  r = RunFsck({"--json", missing});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "");

  const std::string file = dir_ + "/file";
  std::ofstream(file) << "x";
  r = RunFsck({file});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-fsck: " + file + ": not a directory (see --help)\n");

  r = RunFsck({});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("ptstore-fsck: ", 0), 0u) << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  r = RunFsck({"--no-such-flag", dir_});
  EXPECT_EQ(r.rc, 2);
  r = RunFsck({dir_, dir_});
  EXPECT_EQ(r.rc, 2);
  r = RunFsck({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("Usage: ptstore-fsck"), std::string::npos) << r.out;
  r = RunFsck({"--version"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.rfind("ptstore-fsck ", 0), 0u) << r.out;
}

// The directory of a running ptstored: read-only, and clean.
TEST(FsckLiveTest, DirectoryOfARunningServer) {
  std::string ssd = testing::MakeTempDir("ptstore-fsck-live");
  testing::Daemon daemon;
  testing::Daemon::Options o;
  o.arena_size = "1MiB";
  o.extra_args = {"--ssd-dir", ssd, "--ssd-capacity", "64MiB"};
  ASSERT_OK(daemon.Start(o)) << daemon.ReadLog();
  ClientOptions co;
  co.socket_path = daemon.socket_path();
  auto c = Client::Connect(co);
  ASSERT_OK(c);
  ASSERT_OK((*c)->CreateNamespace("live-ns", testing::SegmentTestLayout(), "", 0750));
  // 48 prompts of 64 KiB through a 1 MiB arena: most of them spill.
  for (uint32_t p = 0; p < 48; ++p) {
    std::vector<uint32_t> tokens(64);
    for (uint32_t i = 0; i < 64; ++i) tokens[i] = p * 1000 + i;
    std::vector<uint8_t> kv = TestPayload(64 * 1024, p, true);
    auto r = (*c)->Save("live-ns", tokens, kv.data(), kv.size());
    ASSERT_OK(r);
  }
  auto stats = (*c)->Stats();
  ASSERT_OK(stats);
  EXPECT_GT(stats->ssd_spills, 0u);

  ToolRun r = RunFsck({"--json", ssd});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  json j = Json(r);
  EXPECT_TRUE(j["clean"].get<bool>()) << j.dump(2);
  bool found = false;
  for (const auto& n : j["namespaces"]) {
    if (n["name"] == "live-ns" && n["state"] == "live") {
      found = true;
      EXPECT_GE(n["tensors"].get<uint64_t>(), 1u);
    }
  }
  EXPECT_TRUE(found) << j.dump(2);
  EXPECT_GE(j["summary"]["tensors"].get<uint64_t>(), stats->ssd_tensors > 0 ? 1u : 0u);
  // The server is unharmed.
  EXPECT_OK((*c)->Stats());
  c->reset();
  EXPECT_EQ(daemon.Stop(), 0) << daemon.ReadLog();
  std::filesystem::remove_all(ssd);
}

}  // namespace
}  // namespace ptstore
