// A read-only scan of one SSD-tier segment file (storage/ssd_format/record.h): the
// loop shared by the restart scan (SsdTier::Scan) and the offline checker
// (ptstore-fsck, tools/fsck.h).
//
// The scanner walks the file block by block from the end of the segment
// header, and tells a visitor what it finds, in file order:
//
//   - the segment header (or why it does not decode: the records are then
//     checked with the caller's fallback seed);
//   - every record whose header decodes and verifies, with its location and
//     whether its payload was verified;
//   - every problem, with the region it skipped:
//       kBadHeader       a run of 4 KiB blocks that are not a record header
//                        (bad magic, implausible length, header checksum
//                        mismatch, nonsense fields, a length past the end
//                        of the file). The run is reported once, at its
//                        first block, with that block's reason; it ends at
//                        the next valid record, a problem of another kind,
//                        or the end of the file. Blocks of zeros inside it
//                        do not end it and are not counted in its length.
//       kPayloadChecksum a valid header whose payload does not match its
//                        checksum; the scan resumes after the record.
//       kTornRecord      a record that runs past the end of the file: a
//                        crash cut the append short. Either a valid header
//                        whose payload does, or a header whose (unverified)
//                        length does, with nothing valid after it up to the
//                        end of the file (with a valid record after it, the
//                        length was damaged: a kBadHeader run). The scan
//                        ends there.
//       kPartialBlock    the file ends with less than one block.
//
// Blocks of zeros (never written: a reservation a crash cut short) are
// skipped silently. Dead records are reported but their payloads are never
// read (they are never read again), so payload_verified is false for them.
//
// The scanner never writes, and it reads with 4 KiB-aligned buffers,
// offsets and lengths, so the file may be opened with O_DIRECT or not.
//
// Thread safety: reentrant; the visitor runs on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ptstore/status.h"
#include "storage/ssd_format/env.h"
#include "storage/ssd_format/record.h"

namespace ptstore::storage {

enum class SegmentProblemKind { kBadHeader, kPayloadChecksum, kTornRecord, kPartialBlock };

// "bad_header", "payload_checksum", "torn_record", "partial_block".
const char* SegmentProblemKindName(SegmentProblemKind kind);

struct SegmentProblem {
  SegmentProblemKind kind = SegmentProblemKind::kBadHeader;
  uint64_t offset = 0;  // of the region's first byte
  uint64_t length = 0;  // bytes the scan skipped there (always known; > 0)
  std::string message;  // why, e.g. "record header: checksum mismatch"
};

struct SegmentVisitor {
  // Called once, first: the decoded segment header, or its error (a
  // Corruption, or the I/O error of reading it).
  std::function<void(const Result<SegmentHeader>& header)> segment_header;
  // Every record with a valid header, live or dead. `payload_verified`:
  // its payload was read and matched its checksum (only for live records,
  // and only when verify_payloads is set).
  std::function<void(const RecordHeader& header, const SsdLocation& location, bool payload_verified)> record;
  std::function<void(const SegmentProblem& problem)> problem;
};

struct SegmentScanOptions {
  uint64_t segment_id = 0;       // goes into every SsdLocation
  uint64_t fallback_seed = 0;    // checksum seed when the segment header is bad
  bool verify_payloads = true;   // read and checksum every live record's payload
  std::optional<uint64_t> size;  // bytes of the file to scan; default: File::Size()
};

// Scans `file`. Returns OK after the whole file (or up to a torn record) was
// visited, whatever corruption was found; an error only when reading fails
// (the I/O error, or Corruption when the file got shorter during the scan),
// after reporting what came before.
Status ScanSegmentFile(File* file, const SegmentScanOptions& options, const SegmentVisitor& visitor);

// The same with the file's current size.
Status ScanSegmentFile(File* file, uint64_t segment_id, uint64_t fallback_seed, bool verify_payloads,
                       const SegmentVisitor& visitor);

}  // namespace ptstore::storage
