#include "storage/segment_scanner.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <xxhash.h>

#include "storage/ssd/io_buffers.h"

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
  auto report = [&](SegmentProblem p) {
    if (visitor.problem) visitor.problem(p);
  };

  AlignedBuffer block(kRecordAlignment);
  uint64_t seed = options.fallback_seed;
  {
    Result<size_t> n = file->ReadAt(0, block.span(kRecordAlignment));
    Result<SegmentHeader> h = !n.ok() ? Result<SegmentHeader>(n.status())
                              : *n == kRecordAlignment
                                  ? DecodeSegmentHeader(block.span(kRecordAlignment))
                                  : Result<SegmentHeader>(Corruption("segment header: short file (" +
                                                                     std::to_string(*n) + " of " +
                                                                     std::to_string(kSegmentHeaderBytes) + " bytes)"));
    if (h.ok()) seed = h->seed;
    if (visitor.segment_header) visitor.segment_header(h);
  }

  // The run of blocks that are not records, reported when it ends.
  std::optional<SegmentProblem> run;
  uint64_t run_end = 0;  // end of its last bad block
  // Where in the run a header first claimed to run past the end of the
  // file. That length is not verified (the header's checksum is at its
  // end), so the scan goes on past it: if a valid record follows, the
  // length was damaged and the run is a bad header; if the file ends first,
  // the record was torn there.
  // Where a header that ran past the end of the file started (kNotTorn: none).
  constexpr uint64_t kNotTorn = UINT64_MAX;
  uint64_t torn_at = kNotTorn;
  auto bad_block = [&](uint64_t off, const std::string& why) {
    if (!run) run = SegmentProblem{SegmentProblemKind::kBadHeader, off, 0, why};
    run_end = off + kRecordAlignment;
  };
  auto end_run = [&] {
    torn_at = kNotTorn;
    if (!run) return;
    run->length = run_end - run->offset;
    report(std::move(*run));
    run.reset();
  };
  auto fail = [&](Status s) {
    end_run();
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
      bad_block(off, len.status().message());
      off += kRecordAlignment;
      continue;
    }
    const uint64_t hpad = AlignUp(*len, kRecordAlignment);
    if (off + hpad > size) {
      if (torn_at == kNotTorn) torn_at = off;
      bad_block(off, "record header: its length (" + std::to_string(*len) + " bytes) runs past the end of the file");
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
      bad_block(off, h.status().message());
      off += kRecordAlignment;
      continue;
    }
    SsdLocation loc{options.segment_id, off, hpad, h->stored_bytes, h->payload_bytes, h->payload_checksum, h->flags};
    // (The first test keeps an absurd stored_bytes from wrapping the sum.)
    if (h->stored_bytes > size || off + loc.footprint() > size) {
      end_run();
      report({SegmentProblemKind::kTornRecord, off, size - off, "payload cut short by the end of the file"});
      break;
    }
    const uint64_t foot = loc.footprint();
    bool verified = false;
    if (!h->dead() && options.verify_payloads) {
      Result<uint64_t> sum = HashPayload(file, off + hpad, loc.stored_bytes, seed);
      if (!sum.ok()) return fail(sum.status());
      if (*sum != loc.payload_checksum) {
        end_run();
        report({SegmentProblemKind::kPayloadChecksum, off, foot, "payload checksum mismatch"});
        off += foot;  // the header was good: the next record starts after this one
        continue;
      }
      verified = true;
    }
    end_run();
    if (visitor.record) visitor.record(*h, loc, verified);
    off += foot;
  }
  if (run && torn_at != kNotTorn) {
    // Nothing valid after the header that ran past the end: it was torn
    // (the partial block at the end, if any, is part of it).
    const uint64_t torn = torn_at;
    if (torn > run->offset) {
      run->length = torn - run->offset;
      report(std::move(*run));
    }
    report({SegmentProblemKind::kTornRecord, torn, size - torn, "header cut short by the end of the file"});
    return Status::OK();
  }
  end_run();
  if (off < size && off + kRecordAlignment > size) {
    report({SegmentProblemKind::kPartialBlock, off, size - off, "a partial block at the end of the file"});
  }
  return Status::OK();
}

}  // namespace ptstore::storage
