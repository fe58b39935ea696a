// The SSD tier's on-disk format (docs/ssd-tier.md): segment files of
// self-describing, checksummed records.
//
// A segment file "seg-<16 hex digits>.pts" is a 4 KiB segment header
// followed by records, each starting on a 4 KiB boundary so that payloads
// can be read with O_DIRECT straight into the (4 KiB-aligned) arena:
//
//   record = header (padded to 4 KiB) | stored payload (padded to 4 KiB)
//
// Headers are little-endian; the fixed part comes first so a scanner can
// find a record's size from its first 16 bytes. Every header ends with an
// XXH3-64 of the header bytes before it, seeded with the data directory's
// secret seed (kept in every segment header); the header holds the payload
// checksum: the XXH3-64 (same seed) of the XXH3-64s of the stored payload's
// 1 MiB chunks, so that large payloads are read and checked by several
// threads at once. Nothing in a client's KV bytes can
// therefore pass for a record header: a scanner that lost its way after a
// corrupt header cannot be fooled by a crafted payload.
//
// A record is never moved or grown in place. Its header alone may be
// rewritten in place to record a removal: live_tokens drops to the tokens
// still indexed (a removal of the tail of a tensor) or to 0 (dead); and to
// record newer times (the last 24 bytes before the checksum).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"

namespace ptstore::storage {

inline constexpr uint64_t kRecordAlignment = 4096;
inline constexpr uint64_t kSegmentHeaderBytes = 4096;
inline constexpr uint64_t kSegmentMagic = 0x3130474553535450ull;  // "PTSSEG01"
inline constexpr uint64_t kRecordMagic = 0x3130434552535450ull;   // "PTSREC01"
inline constexpr uint32_t kFormatVersion = 1;
// Largest header a scanner accepts (tokens are 4 bytes each: 4M tokens).
inline constexpr uint32_t kMaxRecordHeaderBytes = 16u << 20;

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// kRemote: an increment another node owns, with no payload: its tokens and
// owner, written so that this node's own increments below it can be placed
// again after a restart (docs/ssd-tier.md).
enum class RecordKind : uint16_t { kTensor = 1, kNamespace = 2, kRemote = 3 };

// Record flags.
inline constexpr uint16_t kRecordCompressed = 1;  // payload is a storage/ssd_format/codec.h stream
// A namespace record with quotas: u64 dram_quota and u64 ssd_quota follow
// its mode. Set only when one of them is not 0, so the records of
// namespaces without quotas are what builds before quotas wrote and read.
inline constexpr uint16_t kRecordQuotas = 2;

struct SegmentHeader {
  uint32_t version = kFormatVersion;
  uint32_t node_id = 0;
  uint64_t segment_id = 0;
  uint64_t created_ns = 0;
  uint64_t seed = 0;  // checksum seed of every record in the directory
};

struct RecordHeader {
  RecordKind kind = RecordKind::kTensor;
  uint16_t flags = 0;
  uint64_t seq = 0;               // store-wide, increasing; newer wins
  uint64_t payload_bytes = 0;     // logical (uncompressed) payload length
  uint64_t stored_bytes = 0;      // on disk, before padding
  uint64_t payload_checksum = 0;  // PayloadChecksum of the stored bytes
  uint64_t live_tokens = 0;       // tensor: tokens still indexed (0: dead); namespace: 1 live, 0 dead
  uint32_t owner_node = 0;

  // The namespace (both kinds). ns_incarnation is the seq of the namespace
  // record that created it, so a record of a dropped and re-created
  // namespace of the same name is never taken for the new one's.
  std::string ns_name;
  uint64_t ns_incarnation = 0;
  Layout layout;

  // kTensor: the increment's place in its prefix and its tokens.
  ChainKey parent_key;           // key of the block before start_token; zero at the root
  uint64_t start_token = 0;
  uint64_t hits = 0;             // GDSF frequency when written
  std::vector<uint32_t> tokens;

  // kNamespace: what CreateNamespace was given.
  std::string salt;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0;
  // kNamespace with kRecordQuotas: its quotas (0: no limit).
  uint64_t dram_quota = 0;
  uint64_t ssd_quota = 0;

  // Every kind: the increment's times (a tensor's: the newest of its
  // nodes'), or the namespace's creation. Rewritten in place (the size of a
  // header does not change). Absent from records written before times
  // existed (has_times false): those cannot be rewritten.
  Times times;
  bool has_times = true;

  bool dead() const { return live_tokens == 0; }
};

// Encodes a segment header into exactly kSegmentHeaderBytes.
std::vector<uint8_t> EncodeSegmentHeader(const SegmentHeader& h);
// Corruption (naming the field) when magic, version or checksum are wrong.
Result<SegmentHeader> DecodeSegmentHeader(std::span<const uint8_t> bytes);

// Encodes `h` with its checksum, zero-padded to a multiple of 4 KiB.
std::vector<uint8_t> EncodeRecordHeader(const RecordHeader& h, uint64_t seed);
// The header's unpadded length from its first 16 bytes (magic + length), or
// Corruption if they are not a record header's. Never reads past `prefix`.
Result<uint32_t> PeekRecordHeaderBytes(std::span<const uint8_t> prefix);
// Decodes and verifies a whole header (`bytes` at least the unpadded length).
Result<RecordHeader> DecodeRecordHeader(std::span<const uint8_t> bytes, uint64_t seed);

// Bytes a record takes in its segment (header and payload, both padded).
uint64_t RecordFootprint(uint64_t header_bytes_padded, uint64_t stored_bytes);

// The payload checksum: XXH3-64(seed) over the XXH3-64(seed)s of each
// kChecksumChunk bytes of `stored` (the last chunk may be shorter).
inline constexpr uint64_t kChecksumChunk = 1ull << 20;
uint64_t PayloadChecksum(std::span<const uint8_t> stored, uint64_t seed);
// The checksum of one chunk, and the payload checksum of a chunk sequence.
uint64_t ChunkChecksum(std::span<const uint8_t> chunk, uint64_t seed);
uint64_t CombineChunkChecksums(std::span<const uint64_t> chunk_sums, uint64_t seed);

// PayloadChecksum of bytes that arrive in pieces of any size.
class PayloadHasher {
 public:
  explicit PayloadHasher(uint64_t seed);
  ~PayloadHasher();
  PayloadHasher(const PayloadHasher&) = delete;
  PayloadHasher& operator=(const PayloadHasher&) = delete;
  void Update(std::span<const uint8_t> bytes);
  uint64_t Digest();

 private:
  uint64_t seed_;
  void* state_;          // XXH3_state_t of the current chunk
  uint64_t in_chunk_ = 0;
  std::vector<uint64_t> sums_;
};

// "seg-000000000000002a.pts" <-> 42.
std::string SegmentFileName(uint64_t segment_id);
std::optional<uint64_t> ParseSegmentFileName(const std::string& name);

// Where a record is, and what the Store needs to read it back.
struct SsdLocation {
  uint64_t segment = 0;
  uint64_t offset = 0;        // of its header
  uint64_t header_bytes = 0;  // padded
  uint64_t stored_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
  uint16_t flags = 0;
  uint64_t footprint() const { return RecordFootprint(header_bytes, stored_bytes); }
  bool operator==(const SsdLocation&) const = default;
};

}  // namespace ptstore::storage
