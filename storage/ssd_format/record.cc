#include "storage/ssd_format/record.h"

#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t
#include <xxhash.h>

#include "core/wire.h"
#include "core/wire_types.h"

namespace ptstore::storage {

using core::Decoder;
using core::Encoder;
using core::GetKey;
using core::GetLayout;
using core::PutKey;
using core::PutLayout;

namespace {

// Fixed prefix of every record header: magic, unpadded length.
constexpr size_t kPeekBytes = 16;

uint64_t Hash(std::span<const uint8_t> bytes, uint64_t seed) { return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed); }

Status AsCorruption(const Status& s, const char* what) {
  if (s.ok()) return s;
  return Corruption(std::string(what) + ": " + s.message());
}

}  // namespace

std::vector<uint8_t> EncodeSegmentHeader(const SegmentHeader& h) {
  Encoder e;
  e.PutU64(kSegmentMagic);
  e.PutU32(h.version);
  e.PutU32(h.node_id);
  e.PutU64(h.segment_id);
  e.PutU64(h.created_ns);
  e.PutU64(h.seed);
  // The header checksum is unseeded: the seed is what it protects.
  const uint64_t sum = XXH3_64bits(e.buffer().data(), e.buffer().size());
  e.PutU64(sum);
  std::vector<uint8_t> out = e.Take();
  out.resize(kSegmentHeaderBytes, 0);
  return out;
}

Result<SegmentHeader> DecodeSegmentHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < 48) return Corruption("segment header: " + std::to_string(bytes.size()) + " bytes, need 48");
  Decoder d(bytes.first(48));
  uint64_t magic, sum;
  SegmentHeader h;
  PTS_RETURN_IF_ERROR(d.GetU64("magic", &magic));
  if (magic != kSegmentMagic) return Corruption("segment header: bad magic (not a PTStore segment file)");
  PTS_RETURN_IF_ERROR(d.GetU32("version", &h.version));
  PTS_RETURN_IF_ERROR(d.GetU32("node_id", &h.node_id));
  PTS_RETURN_IF_ERROR(d.GetU64("segment_id", &h.segment_id));
  PTS_RETURN_IF_ERROR(d.GetU64("created_ns", &h.created_ns));
  PTS_RETURN_IF_ERROR(d.GetU64("seed", &h.seed));
  PTS_RETURN_IF_ERROR(d.GetU64("checksum", &sum));
  if (XXH3_64bits(bytes.data(), 40) != sum) return Corruption("segment header: checksum mismatch");
  if (h.version != kFormatVersion) {
    return Corruption("segment header: format version " + std::to_string(h.version) + ", this build reads " +
                      std::to_string(kFormatVersion));
  }
  return h;
}

std::vector<uint8_t> EncodeRecordHeader(const RecordHeader& h, uint64_t seed) {
  Encoder e;
  e.PutU64(kRecordMagic);
  e.PutU32(0);  // unpadded length, filled in below
  e.PutU16(static_cast<uint16_t>(h.kind));
  e.PutU16(h.flags);
  e.PutU64(h.seq);
  e.PutU64(h.payload_bytes);
  e.PutU64(h.stored_bytes);
  e.PutU64(h.payload_checksum);
  e.PutU64(h.live_tokens);
  e.PutU32(h.owner_node);
  e.PutString(h.ns_name);
  e.PutU64(h.ns_incarnation);
  PutLayout(e, h.layout);
  if (h.kind != RecordKind::kNamespace) {
    PutKey(e, h.parent_key);
    e.PutU64(h.start_token);
    e.PutU64(h.hits);
    e.PutU32Array(h.tokens);
  } else {
    e.PutString(h.salt);
    e.PutU32(h.uid);
    e.PutU32(h.gid);
    e.PutU32(h.mode);
    if (h.flags & kRecordQuotas) {
      e.PutU64(h.dram_quota);
      e.PutU64(h.ssd_quota);
    }
  }
  if (h.has_times) core::PutTimes(e, h.times);
  std::vector<uint8_t>& buf = e.buffer();
  const uint32_t len = static_cast<uint32_t>(buf.size() + 8);
  std::memcpy(buf.data() + 8, &len, 4);
  const uint64_t sum = Hash(buf, seed);
  e.PutU64(sum);
  std::vector<uint8_t> out = e.Take();
  out.resize(AlignUp(out.size(), kRecordAlignment), 0);
  return out;
}

Result<uint32_t> PeekRecordHeaderBytes(std::span<const uint8_t> prefix) {
  if (prefix.size() < kPeekBytes) return Corruption("record header: truncated");
  uint64_t magic;
  uint32_t len;
  std::memcpy(&magic, prefix.data(), 8);
  std::memcpy(&len, prefix.data() + 8, 4);
  if (magic != kRecordMagic) return Corruption("record header: bad magic");
  if (len < 64 || len > kMaxRecordHeaderBytes) {
    return Corruption("record header: implausible length " + std::to_string(len));
  }
  return len;
}

Result<RecordHeader> DecodeRecordHeader(std::span<const uint8_t> bytes, uint64_t seed) {
  PTS_ASSIGN_OR_RETURN(uint32_t len, PeekRecordHeaderBytes(bytes));
  if (bytes.size() < len) return Corruption("record header: truncated (" + std::to_string(bytes.size()) + " of " +
                                            std::to_string(len) + " bytes)");
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + len - 8, 8);
  if (Hash(bytes.first(len - 8), seed) != sum) return Corruption("record header: checksum mismatch");

  Decoder d(bytes.subspan(12, len - 20));
  RecordHeader h;
  uint16_t kind;
  Status s = [&]() -> Status {
    PTS_RETURN_IF_ERROR(d.GetU16("kind", &kind));
    PTS_RETURN_IF_ERROR(d.GetU16("flags", &h.flags));
    PTS_RETURN_IF_ERROR(d.GetU64("seq", &h.seq));
    PTS_RETURN_IF_ERROR(d.GetU64("payload_bytes", &h.payload_bytes));
    PTS_RETURN_IF_ERROR(d.GetU64("stored_bytes", &h.stored_bytes));
    PTS_RETURN_IF_ERROR(d.GetU64("payload_checksum", &h.payload_checksum));
    PTS_RETURN_IF_ERROR(d.GetU64("live_tokens", &h.live_tokens));
    PTS_RETURN_IF_ERROR(d.GetU32("owner_node", &h.owner_node));
    PTS_RETURN_IF_ERROR(d.GetString("ns_name", &h.ns_name, 1024));
    PTS_RETURN_IF_ERROR(d.GetU64("ns_incarnation", &h.ns_incarnation));
    PTS_RETURN_IF_ERROR(GetLayout(d, &h.layout));
    if (kind == static_cast<uint16_t>(RecordKind::kTensor) || kind == static_cast<uint16_t>(RecordKind::kRemote)) {
      h.kind = static_cast<RecordKind>(kind);
      PTS_RETURN_IF_ERROR(GetKey(d, "parent_key", &h.parent_key));
      PTS_RETURN_IF_ERROR(d.GetU64("start_token", &h.start_token));
      PTS_RETURN_IF_ERROR(d.GetU64("hits", &h.hits));
      PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &h.tokens, kMaxRecordHeaderBytes / 4));
    } else if (kind == static_cast<uint16_t>(RecordKind::kNamespace)) {
      h.kind = RecordKind::kNamespace;
      PTS_RETURN_IF_ERROR(d.GetString("salt", &h.salt, 1 << 16));
      PTS_RETURN_IF_ERROR(d.GetU32("uid", &h.uid));
      PTS_RETURN_IF_ERROR(d.GetU32("gid", &h.gid));
      PTS_RETURN_IF_ERROR(d.GetU32("mode", &h.mode));
      if (h.flags & kRecordQuotas) {
        PTS_RETURN_IF_ERROR(d.GetU64("dram_quota", &h.dram_quota));
        PTS_RETURN_IF_ERROR(d.GetU64("ssd_quota", &h.ssd_quota));
      }
    } else {
      return Corruption("unknown record kind " + std::to_string(kind));
    }
    // Records written before times existed end here.
    h.has_times = d.remaining() != 0;
    if (h.has_times) PTS_RETURN_IF_ERROR(core::GetTimes(d, &h.times));
    return d.Finish("record header");
  }();
  PTS_RETURN_IF_ERROR(AsCorruption(s, "record header"));
  // A checksummed header can still be nonsense if a bug wrote it; the
  // store relies on these.
  if (h.kind != RecordKind::kNamespace) {
    PTS_RETURN_IF_ERROR(AsCorruption(h.layout.Validate(), "record header"));
    const uint64_t bt = h.layout.block_tokens;
    if (h.tokens.empty() || h.tokens.size() % bt != 0 || h.start_token % bt != 0) {
      return Corruption("record header: " + std::to_string(h.tokens.size()) + " tokens at " +
                        std::to_string(h.start_token) + " are not whole blocks of " + std::to_string(bt));
    }
    if (h.kind == RecordKind::kRemote && (h.payload_bytes != 0 || h.stored_bytes != 0)) {
      return Corruption("record header: a remote increment's record has no payload");
    }
    if (h.kind == RecordKind::kTensor && h.payload_bytes != h.tokens.size() * h.layout.BytesPerToken()) {
      return Corruption("record header: payload of " + std::to_string(h.payload_bytes) + " bytes does not hold " +
                        std::to_string(h.tokens.size()) + " tokens of layout {" + h.layout.ToString() + "}");
    }
    if (h.live_tokens > h.tokens.size() || h.live_tokens % bt != 0) {
      return Corruption("record header: live_tokens " + std::to_string(h.live_tokens) + " is not a block count <= " +
                        std::to_string(h.tokens.size()));
    }
    if (!(h.flags & kRecordCompressed) && h.stored_bytes != h.payload_bytes) {
      return Corruption("record header: uncompressed payload stored in " + std::to_string(h.stored_bytes) +
                        " bytes, not " + std::to_string(h.payload_bytes));
    }
  } else if (h.stored_bytes != 0 || h.payload_bytes != 0) {
    return Corruption("record header: a namespace record has no payload");
  }
  return h;
}

uint64_t RecordFootprint(uint64_t header_bytes_padded, uint64_t stored_bytes) {
  return header_bytes_padded + AlignUp(stored_bytes, kRecordAlignment);
}

uint64_t ChunkChecksum(std::span<const uint8_t> chunk, uint64_t seed) { return Hash(chunk, seed); }

uint64_t CombineChunkChecksums(std::span<const uint64_t> chunk_sums, uint64_t seed) {
  return XXH3_64bits_withSeed(chunk_sums.data(), chunk_sums.size_bytes(), seed);
}

uint64_t PayloadChecksum(std::span<const uint8_t> stored, uint64_t seed) {
  std::vector<uint64_t> sums;
  for (uint64_t off = 0; off < stored.size(); off += kChecksumChunk) {
    sums.push_back(ChunkChecksum(stored.subspan(off, std::min<uint64_t>(kChecksumChunk, stored.size() - off)), seed));
  }
  return CombineChunkChecksums(sums, seed);
}

PayloadHasher::PayloadHasher(uint64_t seed) : seed_(seed), state_(XXH3_createState()) {
  XXH3_64bits_reset_withSeed(static_cast<XXH3_state_t*>(state_), seed_);
}

PayloadHasher::~PayloadHasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void PayloadHasher::Update(std::span<const uint8_t> bytes) {
  auto* st = static_cast<XXH3_state_t*>(state_);
  while (!bytes.empty()) {
    const uint64_t n = std::min<uint64_t>(bytes.size(), kChecksumChunk - in_chunk_);
    XXH3_64bits_update(st, bytes.data(), n);
    in_chunk_ += n;
    bytes = bytes.subspan(n);
    if (in_chunk_ == kChecksumChunk) {
      sums_.push_back(XXH3_64bits_digest(st));
      XXH3_64bits_reset_withSeed(st, seed_);
      in_chunk_ = 0;
    }
  }
}

uint64_t PayloadHasher::Digest() {
  if (in_chunk_ > 0) {
    sums_.push_back(XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)));
    XXH3_64bits_reset_withSeed(static_cast<XXH3_state_t*>(state_), seed_);
    in_chunk_ = 0;
  }
  return CombineChunkChecksums(sums_, seed_);
}

std::string SegmentFileName(uint64_t segment_id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "seg-%016" PRIx64 ".pts", segment_id);
  return buf;
}

std::optional<uint64_t> ParseSegmentFileName(const std::string& name) {
  if (name.size() != 24 || name.compare(0, 4, "seg-") != 0 || name.compare(20, 4, ".pts") != 0) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 4; i < 20; ++i) {
    const char c = name[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace ptstore::storage
