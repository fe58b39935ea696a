// The SSD tier's files: append-only segment files of records
// (storage/ssd_format/record.h) in the node's data directory, with space accounting,
// in-place header rewrites for removals, reclaiming of sparse segments and a
// recovery scan. Policy (what to spill, what to evict, which records stay
// live after a restart) belongs to the Store; this class only keeps the
// files right.
//
// Space: `file_bytes` is what the segment files take; `live_bytes` what
// their live records take. Append fails with ResourceExhausted past the
// capacity; the Store keeps live bytes under kEvictAt of it by GDSF, and
// compaction (CopyRecord + the Store updating its locations, then
// DeleteSegment) gives back the dead space.
//
// Thread safety: all methods are safe from many threads. The internal mutex
// only guards bookkeeping; file I/O runs outside it. Lock order: rewrite_mu_,
// then mu_.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "core/mutex.h"
#include "ptstore/status.h"
#include "storage/ssd_format/env.h"
#include "storage/ssd_format/io_buffers.h"
#include "storage/ssd_format/record.h"

namespace ptstore::storage {

struct SsdOptions {
  std::string dir;                         // empty: no SSD tier
  uint64_t capacity = 0;                   // bytes of segment files at most
  uint64_t segment_bytes = 256ull << 20;   // a segment is sealed past this
  bool compress = false;                   // byte-shuffle + zstd (storage/ssd_format/codec.h)
  int compress_level = 1;
  bool direct_io = true;                   // O_DIRECT where the file system has it
  enum class Sync { kNone, kSegment, kRecord } sync = Sync::kSegment;
  uint32_t io_threads = 2;
  double compact_dead_ratio = 0.5;         // rewrite a sealed segment once this share is dead
  bool verify_on_recovery = true;          // check payload checksums during the restart scan
  bool background_compaction = true;       // the Store's cleaner thread (tests turn it off)
};

const char* SyncName(SsdOptions::Sync s);

struct ScanStats {
  uint64_t segments = 0;
  uint64_t bad_segment_headers = 0;  // scanned with the directory's seed anyway
  uint64_t records = 0;              // valid headers (live and dead)
  uint64_t dead_records = 0;
  uint64_t corrupt_records = 0;      // bad header or payload checksum, or cut short
  uint64_t bytes = 0;                // segment file bytes
};

struct SsdTierStats {
  uint64_t capacity = 0;
  uint64_t file_bytes = 0;
  uint64_t live_bytes = 0;
  uint64_t segments = 0;
  uint64_t records_written = 0;
  uint64_t payload_bytes_written = 0;  // logical
  uint64_t stored_bytes_written = 0;   // after compression
  uint64_t records_read = 0;
  uint64_t bytes_read = 0;             // stored bytes read for loads
  uint64_t write_errors = 0;
  uint64_t read_errors = 0;            // I/O errors and checksum failures on reads
  uint64_t segments_deleted = 0;
  bool direct_io = false;              // O_DIRECT in effect
};

class SsdTier {
 public:
  // Creates the directory if needed and learns the segments in it (their
  // records are read by Scan). Refuses a capacity below two segments.
  static Result<std::unique_ptr<SsdTier>> Open(Env* env, const SsdOptions& options, uint32_t node_id);
  ~SsdTier();  // syncs and closes the active segment

  // Reads every segment (oldest first) and calls `fn` for each valid record
  // header, live or dead. Records with a bad header or payload checksum, and
  // a record cut short by the end of its file, are skipped and counted.
  // Every valid live record counts as live until Kill; call once, before
  // any Append.
  using ScanFn = std::function<void(const RecordHeader&, const SsdLocation&)>;
  Status Scan(const ScanFn& fn, ScanStats* stats) EXCLUDES(mu_);

  // Writes a record (compressing the payload when enabled) and returns where
  // it is. `payload` must stay valid and unchanged until it returns.
  // ResourceExhausted when the capacity or the disk is full.
  Result<SsdLocation> Append(RecordHeader header, std::span<const uint8_t> payload) EXCLUDES(mu_);

  // Reads, verifies and (if compressed) decompresses a payload into `out`
  // (exactly payload_bytes long). Corruption on a checksum mismatch.
  Status ReadPayload(const SsdLocation& loc, std::span<uint8_t> out) EXCLUDES(mu_);
  // Reads and verifies a record's header.
  Result<RecordHeader> ReadHeader(const SsdLocation& loc) EXCLUDES(mu_);

  // Rewrites the header in place with `live_tokens` (0: the record is dead,
  // so a restart will not bring it back). Only the file changes: the caller
  // does the accounting with Forget, at once, since a rewrite may wait in a
  // queue. A rewrite that never comes costs at most a stale record after a
  // crash, which a restart then resolves by sequence number.
  Status SetLiveTokens(const SsdLocation& loc, uint64_t live_tokens) EXCLUDES(rewrite_mu_, mu_);
  // Rewrites the header in place with `times`. A record written before
  // times existed has no room for them: left as it is (OK).
  Status SetTimes(const SsdLocation& loc, const Times& times) EXCLUDES(rewrite_mu_, mu_);
  // Counts a record's space as dead (it was killed, or copied elsewhere).
  // A sealed segment left with nothing live is deleted.
  void Forget(const SsdLocation& loc) EXCLUDES(mu_);

  // Copies a record (verified) to the active segment: compaction.
  Result<SsdLocation> CopyRecord(const SsdLocation& loc) EXCLUDES(mu_);

  // A sealed segment worth rewriting (most dead space first), if any.
  // `pressure`: the tier is near capacity, so any dead space counts.
  std::optional<uint64_t> PickSegmentToCompact(bool pressure) const EXCLUDES(mu_);
  // Deletes a segment file (its live records were copied or killed).
  Status DeleteSegment(uint64_t segment) EXCLUDES(mu_);

  SsdTierStats Stats() const EXCLUDES(mu_);
  uint64_t capacity() const { return options_.capacity; }
  uint64_t live_bytes() const EXCLUDES(mu_);
  uint64_t file_bytes() const EXCLUDES(mu_);
  const SsdOptions& options() const { return options_; }
  // Footprint of a record with this header and payload before compression
  // (an upper bound when compression is on: stored raw if it does not pay).
  static uint64_t FootprintBound(const RecordHeader& header);

 private:
  struct Segment {
    uint64_t id = 0;
    std::shared_ptr<File> file;
    uint64_t size = 0;        // bytes appended (file size)
    uint64_t live = 0;        // footprint of live records
    uint64_t inflight = 0;    // appends reserved but not written
    uint64_t seed = 0;        // its records' checksum seed (set by Scan, or at creation)
    bool sealed = true;
  };
  struct SegmentRef {
    std::shared_ptr<File> file;
    uint64_t seed;
  };

  SsdTier(Env* env, const SsdOptions& options, uint32_t node_id);
  Status Init() EXCLUDES(mu_);
  // Reserves `bytes` in the active segment (sealing it and opening another
  // when full). Returns the segment and offset.
  // `*to_sync` is set to a segment this sealed that needs its sync now.
  // `slack`: bytes the files may go past the capacity (compaction copies).
  Result<std::pair<std::shared_ptr<File>, uint64_t>> ReserveLocked(uint64_t bytes, uint64_t slack,
                                                                   uint64_t* segment_id,
                                                                   std::shared_ptr<File>* to_sync)
      REQUIRES(mu_);
  Result<SsdLocation> AppendImpl(RecordHeader header, std::span<const uint8_t> payload, uint64_t slack)
      EXCLUDES(mu_);
  Status OpenNewSegmentLocked() REQUIRES(mu_);
  // Marks `s` sealed; returns its file when the caller must sync it.
  std::shared_ptr<File> SealLocked(Segment* s) REQUIRES(mu_);
  // An append's writes are over: its space counts as live if they
  // succeeded, and a sealed segment left with no append in flight is synced.
  void FinishAppend(const SsdLocation& loc, bool ok) EXCLUDES(mu_);
  Result<SegmentRef> SegmentOf(uint64_t segment) EXCLUDES(mu_);
  // Writes `h` over the header at `loc` (same size).
  Status WriteHeaderLocked(const SegmentRef& seg, const SsdLocation& loc, const RecordHeader& h)
      REQUIRES(rewrite_mu_);
  std::string PathOf(uint64_t segment) const;
  Status ScanSegment(uint64_t id, const ScanFn& fn, ScanStats* stats) EXCLUDES(mu_);

  Env* env_;
  const SsdOptions options_;
  const uint32_t node_id_;
  uint64_t seed_ = 0;  // set by Init, then constant

  BouncePool bounce_;                                 // reads of large payloads
  core::Mutex rewrite_mu_ ACQUIRED_BEFORE(mu_);       // one header read-modify-write at a time
  mutable core::Mutex mu_;                            // the bookkeeping below
  bool direct_ GUARDED_BY(mu_) = false;
  std::map<uint64_t, Segment> segments_ GUARDED_BY(mu_);
  uint64_t active_ GUARDED_BY(mu_) = 0;               // 0: none yet
  uint64_t next_segment_ GUARDED_BY(mu_) = 1;
  uint64_t file_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t live_bytes_ GUARDED_BY(mu_) = 0;
  SsdTierStats stats_ GUARDED_BY(mu_);
};

}  // namespace ptstore::storage
