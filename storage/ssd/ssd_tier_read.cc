// SsdTier's read path (storage/ssd/ssd_tier.h): payloads read in parallel
// pieces and checksummed as they arrive, decompressed in place; headers.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "storage/ssd_format/codec.h"
#include "storage/ssd/ssd_tier.h"
#include "storage/ssd/ssd_tier_where.h"

namespace ptstore::storage {

using ssd_detail::Where;

Result<SsdTier::SegmentRef> SsdTier::SegmentOf(uint64_t segment) {
  core::MutexLock lk(mu_);
  auto it = segments_.find(segment);
  if (it == segments_.end()) return NotFound("ssd: segment " + SegmentFileName(segment) + " is gone");
  return SegmentRef{it->second.file, it->second.seed};
}

namespace {

// Reads `n` bytes at `start` of `file` into `dst` (any alignment) and
// returns their payload checksum. Pieces of kReadPiece bytes go to
// `threads` threads, each reading its piece and hashing its 1 MiB chunks
// while the others read: the disk sees several requests at once and the
// checksum costs no extra pass over memory. A direct file is read into the
// pool's huge-page bounce buffers and copied on (see io_buffers.h for why);
// a buffered one straight into `dst`.
constexpr uint64_t kReadPiece = 8ull << 20;  // a multiple of kChecksumChunk

Result<uint64_t> ReadAndHash(File* file, uint64_t start, uint8_t* dst, uint64_t n, unsigned threads, uint64_t seed,
                             BouncePool* pool) {
  const uint64_t pieces = (n + kReadPiece - 1) / kReadPiece;
  std::vector<uint64_t> sums((n + kChecksumChunk - 1) / kChecksumChunk);
  std::atomic<uint64_t> next{0};
  core::Mutex err_mu;
  Status err;
  auto work = [&] {
    uint8_t* bounce = file->direct() ? pool->Acquire() : nullptr;
    for (uint64_t p = next++; p < pieces; p = next++) {
      const uint64_t off = p * kReadPiece;
      const uint64_t len = std::min(kReadPiece, n - off);
      Status s;
      if (bounce != nullptr) {
        s = ReadFully(file, start + off, {bounce, AlignUp(len, kRecordAlignment)});
        if (s.ok()) std::memcpy(dst + off, bounce, len);
      } else {
        s = ReadFully(file, start + off, {dst + off, len});
      }
      if (!s.ok()) {
        core::MutexLock lk(err_mu);
        if (err.ok()) err = s;
        break;
      }
      const uint8_t* hashed = bounce != nullptr ? bounce : dst + off;
      for (uint64_t c = 0; c < len; c += kChecksumChunk) {
        sums[(off + c) / kChecksumChunk] = ChunkChecksum({hashed + c, std::min(kChecksumChunk, len - c)}, seed);
      }
    }
    if (bounce != nullptr) pool->Release(bounce);
  };
  const unsigned extra = pieces > 1 ? std::min<uint64_t>(threads, pieces) - 1 : 0;
  std::vector<std::thread> helpers;
  for (unsigned i = 0; i < extra; ++i) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
  PTS_RETURN_IF_ERROR(err);
  return CombineChunkChecksums(sums, seed);
}

}  // namespace

Status SsdTier::ReadPayload(const SsdLocation& loc, std::span<uint8_t> out) {
  if (out.size() != loc.payload_bytes) {
    return InvalidArgument("ssd: read of a " + std::to_string(loc.payload_bytes) + "-byte payload into " +
                           std::to_string(out.size()) + " bytes");
  }
  PTS_ASSIGN_OR_RETURN(SegmentRef seg, SegmentOf(loc.segment));
  File* file = seg.file.get();
  const uint64_t start = loc.offset + loc.header_bytes;
  const bool compressed = loc.flags & kRecordCompressed;
  const unsigned threads = std::max<uint32_t>(4, options_.io_threads);
  Status s;
  if (!compressed) {
    Result<uint64_t> sum = ReadAndHash(file, start, out.data(), loc.stored_bytes, threads, seg.seed, &bounce_);
    if (!sum.ok()) s = sum.status();
    else if (*sum != loc.payload_checksum) s = Corruption("payload checksum mismatch");
  } else {
    // Read the compressed bytes into the end of the destination and
    // decompress them in place: no staging buffer (fresh memory costs a
    // page fault per 4 KiB on these machines).
    if (loc.stored_bytes > out.size()) {
      s = Corruption("a compressed payload larger than its raw size");
    } else {
      uint8_t* tail = out.data() + out.size() - loc.stored_bytes;
      Result<uint64_t> sum = ReadAndHash(file, start, tail, loc.stored_bytes, threads, seg.seed, &bounce_);
      if (!sum.ok()) {
        s = sum.status();
      } else if (*sum != loc.payload_checksum) {
        s = Corruption("payload checksum mismatch");
      } else {
        s = DecompressInPlace(out, loc.stored_bytes, 2);
      }
    }
  }
  core::MutexLock lk(mu_);
  if (!s.ok()) {
    stats_.read_errors++;
    return s.WithContext("ssd: reading the record at " + Where(loc.segment, loc.offset));
  }
  stats_.records_read++;
  stats_.bytes_read += loc.stored_bytes;
  return Status::OK();
}

Result<RecordHeader> SsdTier::ReadHeader(const SsdLocation& loc) {
  PTS_ASSIGN_OR_RETURN(SegmentRef seg, SegmentOf(loc.segment));
  AlignedBuffer buf(loc.header_bytes);
  PTS_RETURN_IF_ERROR(ReadFully(seg.file.get(), loc.offset, buf.span(loc.header_bytes)));
  Result<RecordHeader> h = DecodeRecordHeader(buf.span(loc.header_bytes), seg.seed);
  if (!h.ok()) return h.status().WithContext("ssd: " + Where(loc.segment, loc.offset));
  return h;
}

}  // namespace ptstore::storage
