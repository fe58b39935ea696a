#include "storage/ssd_format/segment_scanner.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <xxhash.h>

#include "storage/ssd_format/io_buffers.h"

namespace ptstore::storage {

namespace {

constexpr uint64_t kScanChunk = 8ull << 20;  // payload bytes hashed per read


bool IsZeroBlock(const uint8_t* b) { return b[0] == 0 && std::memcmp(b, b + 1, kRecordAlignment - 1) == 0; }

// PayloadChecksum of `stored` payload bytes at `offset`, read in chunks.
Result<uint64_t> HashPayload(File* file, uint64_t offset, uint64_t stored, uint64_t seed) {
  PayloadHasher hasher(seed);
  AlignedBuffer chunk(std::min<uint64_t>(kScanChunk, AlignUp(stored, kRecordAlignment)));
  for (uint64_t done = 0; done < stored;) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), AlignUp(stored - done, kRecordAlignment));
    PTS_RETURN_IF_ERROR(ReadFully(file, offset + done, chunk.span(n)));
    const uint64_t use = std::min<uint64_t>(n, stored - done);
    hasher.Update(chunk.span(use));
    done += use;
  }
  return hasher.Digest();
}

void Report(const SegmentVisitor& visitor, SegmentProblem p) {
  if (visitor.problem) visitor.problem(p);
}

// The segment header in the first block (read into `block`), or why there
// is none: the I/O error, a short file, the Corruption of decoding it.
Result<SegmentHeader> ReadSegmentHeader(File* file, AlignedBuffer& block) {
  Result<size_t> n = file->ReadAt(0, block.span(kRecordAlignment));
  if (!n.ok()) return n.status();
  if (*n != kRecordAlignment) {
    return Corruption("segment header: short file (" + std::to_string(*n) + " of " +
                      std::to_string(kSegmentHeaderBytes) + " bytes)");
  }
  return DecodeSegmentHeader(block.span(kRecordAlignment));
}

// The run of blocks that are not records (one kBadHeader problem), reported
// when it ends: at a valid record, a problem of another kind, an I/O error,
// or the end of the file.
class BadRun {
 public:
  explicit BadRun(const SegmentVisitor& visitor) : visitor_(visitor) {}

  // Block `off` is not a record header, for reason `why`.
  void BadBlock(uint64_t off, const std::string& why) {
    if (!run_) run_ = SegmentProblem{SegmentProblemKind::kBadHeader, off, 0, why};
    run_end_ = off + kRecordAlignment;
  }
  // Block `off` is a header whose length runs past the end of the file.
  // That length is not verified (the header's checksum is at its end), so
  // the scan goes on past it: if a valid record follows, the length was
  // damaged and the run is a bad header; if the file ends first, the record
  // was torn there (EndTorn).
  void PastEnd(uint64_t off, const std::string& why) {
    if (torn_at_ == kNotTorn) torn_at_ = off;
    BadBlock(off, why);
  }
  // Reports the run, if there is one.
  void End() {
    torn_at_ = kNotTorn;
    if (!run_) return;
    run_->length = run_end_ - run_->offset;
    Report(visitor_, std::move(*run_));
    run_.reset();
  }
  // At the end of a file of `size` bytes: when a header ran past the end
  // with nothing valid after it, reports the run before it (if any) and the
  // torn record, and returns true (the partial block at the end, if any, is
  // part of that record). Otherwise reports nothing and returns false.
  bool EndTorn(uint64_t size) {
    if (!run_ || torn_at_ == kNotTorn) return false;
    const uint64_t torn = torn_at_;
    if (torn > run_->offset) {
      run_->length = torn - run_->offset;
      Report(visitor_, std::move(*run_));
    }
    run_.reset();
    torn_at_ = kNotTorn;
    Report(visitor_, {SegmentProblemKind::kTornRecord, torn, size - torn, "header cut short by the end of the file"});
    return true;
  }

 private:
  static constexpr uint64_t kNotTorn = UINT64_MAX;

  const SegmentVisitor& visitor_;
  std::optional<SegmentProblem> run_;
  uint64_t run_end_ = 0;         // end of its last bad block
  uint64_t torn_at_ = kNotTorn;  // where a header that ran past the end started
};

}  // namespace

const char* SegmentProblemKindName(SegmentProblemKind kind) {
  switch (kind) {
    case SegmentProblemKind::kBadHeader: return "bad_header";
    case SegmentProblemKind::kPayloadChecksum: return "payload_checksum";
    case SegmentProblemKind::kTornRecord: return "torn_record";
    case SegmentProblemKind::kPartialBlock: return "partial_block";
  }
  return "?";
}

Status ScanSegmentFile(File* file, uint64_t segment_id, uint64_t fallback_seed, bool verify_payloads,
                       const SegmentVisitor& visitor) {
  SegmentScanOptions o;
  o.segment_id = segment_id;
  o.fallback_seed = fallback_seed;
  o.verify_payloads = verify_payloads;
  return ScanSegmentFile(file, o, visitor);
}

Status ScanSegmentFile(File* file, const SegmentScanOptions& options, const SegmentVisitor& visitor) {
  uint64_t size;
  if (options.size) {
    size = *options.size;
  } else {
    PTS_ASSIGN_OR_RETURN(size, file->Size());
  }

  AlignedBuffer block(kRecordAlignment);
  uint64_t seed = options.fallback_seed;
  {
    Result<SegmentHeader> h = ReadSegmentHeader(file, block);
    if (h.ok()) seed = h->seed;
    if (visitor.segment_header) visitor.segment_header(h);
  }

  BadRun run(visitor);
  auto fail = [&](Status s) {
    run.End();
    return s;
  };

  uint64_t off = kSegmentHeaderBytes;
  while (off + kRecordAlignment <= size) {
    if (Status s = ReadFully(file, off, block.span(kRecordAlignment)); !s.ok()) return fail(s);
    if (IsZeroBlock(block.data())) {
      off += kRecordAlignment;  // never written (a reservation a crash cut short)
      continue;
    }
    Result<uint32_t> len = PeekRecordHeaderBytes(block.span(kRecordAlignment));
    if (!len.ok()) {
      run.BadBlock(off, len.status().message());
      off += kRecordAlignment;
      continue;
    }
    const uint64_t hpad = AlignUp(*len, kRecordAlignment);
    if (off + hpad > size) {
      run.PastEnd(off, "record header: its length (" + std::to_string(*len) + " bytes) runs past the end of the file");
      off += kRecordAlignment;
      continue;
    }
    Result<RecordHeader> h = Corruption("unread");
    if (hpad == kRecordAlignment) {
      h = DecodeRecordHeader(block.span(kRecordAlignment), seed);
    } else {
      AlignedBuffer big(hpad);
      if (Status s = ReadFully(file, off, big.span(hpad)); !s.ok()) return fail(s);
      h = DecodeRecordHeader(big.span(hpad), seed);
    }
    if (!h.ok()) {
      run.BadBlock(off, h.status().message());
      off += kRecordAlignment;
      continue;
    }
    SsdLocation loc{options.segment_id, off, hpad, h->stored_bytes, h->payload_bytes, h->payload_checksum, h->flags};
    // (The first test keeps an absurd stored_bytes from wrapping the sum.)
    if (h->stored_bytes > size || off + loc.footprint() > size) {
      run.End();
      Report(visitor, {SegmentProblemKind::kTornRecord, off, size - off, "payload cut short by the end of the file"});
      break;
    }
    const uint64_t foot = loc.footprint();
    bool verified = false;
    if (!h->dead() && options.verify_payloads) {
      Result<uint64_t> sum = HashPayload(file, off + hpad, loc.stored_bytes, seed);
      if (!sum.ok()) return fail(sum.status());
      if (*sum != loc.payload_checksum) {
        run.End();
        Report(visitor, {SegmentProblemKind::kPayloadChecksum, off, foot, "payload checksum mismatch"});
        off += foot;  // the header was good: the next record starts after this one
        continue;
      }
      verified = true;
    }
    run.End();
    if (visitor.record) visitor.record(*h, loc, verified);
    off += foot;
  }
  if (run.EndTorn(size)) return Status::OK();
  run.End();
  if (off < size && off + kRecordAlignment > size) {
    Report(visitor, {SegmentProblemKind::kPartialBlock, off, size - off, "a partial block at the end of the file"});
  }
  return Status::OK();
}

}  // namespace ptstore::storage
