// What the SSD tier's tests share (tests/storage/ssd_tier*_test.cc): layouts,
// records with known payloads (Tensor, Namespace), options of a small tier
// in a temp directory, a scan that collects every reported record
// (ScanAll, OpenTier), aligned buffers, payload checks (PayloadIs) and
// in-place file damage (FlipBitInFile). Test-only; not thread-safe (each
// test uses its own).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/ssd_format/record.h"
#include "storage/ssd_format/env.h"
#include "storage/ssd/ssd_tier.h"
#include "tests/testing/segment_files.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage::ssd_tier_testing {

using testing::ExpectSameRecord;

inline constexpr uint64_t kMiB = 1ull << 20;

// ------------------------------------------------------------------ helpers

inline Layout MakeLayout(uint32_t layers, uint32_t kv_heads, uint32_t head_dim) {
  Layout l;
  l.layers = layers;
  l.kv_heads = kv_heads;
  l.head_dim = head_dim;
  l.dtype = DType::kBF16;
  l.block_tokens = 16;
  return l;
}

// 256 bytes a token: one block is exactly 4 KiB.
inline const Layout kBlockLayout = MakeLayout(1, 1, 64);
// 160 bytes a token: a block is 2560 bytes, not a multiple of 4 KiB.
inline const Layout kOddLayout = MakeLayout(1, 1, 40);
// 16 KiB a token: a block is 256 KiB.
inline const Layout kBigLayout = MakeLayout(4, 8, 128);

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

// bf16 values of a normal distribution: what a KV cache holds, and what
// the byte-shuffle + zstd codec shrinks.
inline std::vector<uint8_t> Bf16Like(size_t n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i + 2 <= n; i += 2) {
    const uint32_t u = std::bit_cast<uint32_t>(normal(rng));
    const uint16_t h = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    std::memcpy(&v[i], &h, 2);
  }
  if (n % 2) v[n - 1] = 0x3f;
  return v;
}

enum class Fill { kRandom, kBf16 };

struct Rec {
  RecordHeader h;
  std::vector<uint8_t> payload;
  SsdLocation loc;
};

inline Rec Tensor(const Layout& layout, uint64_t tokens, uint64_t seq, Fill fill = Fill::kRandom) {
  Rec r;
  r.h.kind = RecordKind::kTensor;
  r.h.seq = seq;
  r.h.owner_node = 7;
  r.h.ns_name = "ns-" + std::to_string(seq % 3);
  r.h.ns_incarnation = 1 + seq % 3;
  r.h.layout = layout;
  r.h.parent_key = ChainKey{seq, ~seq};
  r.h.start_token = 16 * (seq % 5);
  r.h.hits = seq * 3;
  for (uint64_t i = 0; i < tokens; ++i) r.h.tokens.push_back(static_cast<uint32_t>(seq * 100000 + i));
  r.h.live_tokens = tokens;
  const size_t bytes = tokens * layout.BytesPerToken();
  r.payload = fill == Fill::kRandom ? RandomBytes(bytes, seq * 7919 + 1) : Bf16Like(bytes, seq * 7919 + 1);
  return r;
}

inline Rec Namespace(uint64_t seq) {
  Rec r;
  r.h.kind = RecordKind::kNamespace;
  r.h.seq = seq;
  r.h.live_tokens = 1;
  r.h.owner_node = 7;
  r.h.ns_name = "ns-" + std::to_string(seq);
  r.h.ns_incarnation = seq;
  r.h.layout = kBlockLayout;
  r.h.salt = "salt-" + std::to_string(seq);
  r.h.uid = 1000;
  r.h.gid = 1001;
  r.h.mode = 0750;
  return r;
}

inline SsdOptions Options(const std::string& dir, bool compress = false, bool direct = true) {
  SsdOptions o;
  o.dir = dir + "/ssd";
  o.capacity = 64 * kMiB;
  o.segment_bytes = 1 * kMiB;
  o.compress = compress;
  o.direct_io = direct;
  o.sync = SsdOptions::Sync::kNone;
  return o;
}

inline std::string SegmentPath(const SsdOptions& o, uint64_t segment) { return o.dir + "/" + SegmentFileName(segment); }

struct ScanResult {
  Status status;
  ScanStats stats;
  std::map<uint64_t, std::pair<RecordHeader, SsdLocation>> by_seq;
  int duplicates = 0;
};

inline ScanResult ScanAll(SsdTier* tier) {
  ScanResult r;
  r.status = tier->Scan(
      [&](const RecordHeader& h, const SsdLocation& loc) {
        if (!r.by_seq.emplace(h.seq, std::make_pair(h, loc)).second) r.duplicates++;
      },
      &r.stats);
  return r;
}

inline std::unique_ptr<SsdTier> OpenTier(Env* env, const SsdOptions& o, ScanResult* scan = nullptr) {
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(env, o, 7);
  EXPECT_OK(t);
  if (!t.ok()) return nullptr;
  // Scan comes first, even on an empty directory.
  ScanResult r = ScanAll(t->get());
  EXPECT_OK(r.status);
  EXPECT_EQ(r.duplicates, 0);
  if (scan) *scan = std::move(r);
  return std::move(t).value();
}

inline std::set<uint64_t> KeysOf(const std::map<uint64_t, Rec>& m) {
  std::set<uint64_t> s;
  for (const auto& entry : m) s.insert(entry.first);
  return s;
}

inline std::set<uint64_t> Seqs(const ScanResult& r) {
  std::set<uint64_t> s;
  for (const auto& [seq, v] : r.by_seq) s.insert(seq);
  return s;
}

// A 4 KiB-aligned buffer; `skew` bytes past alignment when asked.
class Buffer {
 public:
  Buffer(size_t n, size_t skew) : raw_(static_cast<uint8_t*>(std::aligned_alloc(4096, AlignUp(n + skew + 1, 4096)))) {
    std::memset(raw_, 0xa5, AlignUp(n + skew + 1, 4096));
    span_ = {raw_ + skew, n};
  }
  ~Buffer() { std::free(raw_); }
  std::span<uint8_t> span() { return span_; }

 private:
  uint8_t* raw_;
  std::span<uint8_t> span_;
};

inline ::testing::AssertionResult PayloadIs(SsdTier* tier, const SsdLocation& loc, const std::vector<uint8_t>& want,
                                     size_t skew = 0) {
  Buffer out(loc.payload_bytes, skew);
  Status s = tier->ReadPayload(loc, out.span());
  if (!s.ok()) return ::testing::AssertionFailure() << "ReadPayload: " << s.ToString();
  if (out.span().size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << out.span().size() << " != " << want.size();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (out.span()[i] != want[i]) return ::testing::AssertionFailure() << "payload differs at byte " << i;
  }
  return ::testing::AssertionSuccess();
}

inline void AppendOk(SsdTier* tier, Rec* r) {
  Result<SsdLocation> loc = tier->Append(r->h, r->payload);
  ASSERT_OK(loc) << "seq " << r->h.seq << ": " << loc.status().ToString();
  r->loc = *loc;
}

// Appends make(seq) for seq = first..last and keeps each record, with its
// location, in (*recs)[seq].
inline void AppendSeqs(SsdTier* tier, uint64_t first, uint64_t last, std::map<uint64_t, Rec>* recs,
                const std::function<Rec(uint64_t seq)>& make) {
  for (uint64_t seq = first; seq <= last; ++seq) {
    Rec r = make(seq);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier, &r));
    (*recs)[seq] = std::move(r);
  }
}

inline void FlipBitInFile(const std::string& path, uint64_t offset, int bit) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  uint8_t b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= static_cast<uint8_t>(1u << bit);
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

inline uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  const uint64_t n = std::filesystem::file_size(path, ec);
  EXPECT_FALSE(ec) << path << ": " << ec.message();
  return n;
}

// Every reported record is one that was written, with its payload intact.
inline void ExpectReportedRecordsValid(SsdTier* tier, const ScanResult& scan, const std::map<uint64_t, Rec>& written) {
  for (const auto& [seq, v] : scan.by_seq) {
    auto it = written.find(seq);
    ASSERT_NE(it, written.end()) << "scan reported seq " << seq << ", which was never written";
    ExpectSameRecord(v.first, it->second.h);
    EXPECT_TRUE(PayloadIs(tier, v.second, it->second.payload)) << "seq " << seq;
  }
}

}  // namespace ptstore::storage::ssd_tier_testing
