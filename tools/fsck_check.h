// The checks of ptstore-fsck (tools/fsck.h): what each segment file of an
// SSD-tier directory holds (scanned as ptstored's restart scan scans it,
// storage/segment_scanner.h), the namespaces its live records describe, and
// the directory's totals. The reports are plain values; printing them is
// tools/fsck_print.h.
//
// Thread safety: functions of their arguments; the files are only read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ptstore/layout.h"
#include "storage/ssd_format/record.h"
#include "storage/ssd_format/env.h"

namespace ptstore::tools::fsck {

// One record as the scan saw it.
struct RecordInfo {
  uint64_t segment = 0;
  uint64_t offset = 0;
  storage::RecordKind kind = storage::RecordKind::kTensor;
  std::string ns;
  uint64_t ns_incarnation = 0;
  Layout layout;
  uint64_t seq = 0;
  uint64_t start_token = 0;
  uint64_t tokens = 0;
  uint64_t live_tokens = 0;
  uint64_t payload_bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t footprint = 0;
  uint16_t flags = 0;
  bool payload_verified = false;
  std::optional<bool> decompressed;  // compressed and checked: whether it decompressed
  // Namespace records: what CreateNamespace was given.
  uint32_t uid = 0, gid = 0, mode = 0;
  bool salted = false;

  bool dead() const { return live_tokens == 0; }
  bool partial() const { return kind != storage::RecordKind::kNamespace && live_tokens > 0 && live_tokens < tokens; }
};

// Something wrong in a segment.
struct Problem {
  std::string kind;  // a SegmentProblemKindName, "segment_header", "decompress" or "read_error"
  std::optional<uint64_t> offset;
  uint64_t length = 0;
  std::string message;
};

// What the check of one segment file found.
struct SegmentReport {
  uint64_t id = 0;
  std::string file;
  uint64_t bytes = 0;
  std::optional<storage::SegmentHeader> header;
  bool seed_matches = true;
  std::vector<RecordInfo> records;
  std::vector<Problem> problems;
  std::vector<std::string> notes;  // worth knowing, not problems
  uint64_t corrupt_records = 0;    // counted as ptstored's restart scan counts them, plus undecodable payloads
  bool rechecked = false;
  bool vanished = false;           // deleted between the listing and the check (a running ptstored reclaimed it)

  uint64_t body() const { return bytes > storage::kSegmentHeaderBytes ? bytes - storage::kSegmentHeaderBytes : 0; }
  uint64_t count_live() const { return Count([](const RecordInfo& r) { return !r.dead() && !r.partial(); }); }
  uint64_t count_partial() const { return Count([](const RecordInfo& r) { return r.partial(); }); }
  uint64_t count_dead() const { return Count([](const RecordInfo& r) { return r.dead(); }); }
  uint64_t live_bytes() const { return Sum([](const RecordInfo& r) { return r.dead() ? 0 : r.footprint; }); }
  uint64_t dead_bytes() const { return Sum([](const RecordInfo& r) { return r.dead() ? r.footprint : 0; }); }
  uint64_t corrupt_bytes() const {
    uint64_t n = 0;
    for (const Problem& p : problems) {
      if (p.kind != "segment_header") n += p.length;
    }
    return n;
  }
  // Space a compaction would give back: the body minus the live records.
  uint64_t dead_space() const { return body() - std::min(body(), live_bytes()); }

 private:
  template <typename F>
  uint64_t Count(F f) const {
    return static_cast<uint64_t>(std::count_if(records.begin(), records.end(), f));
  }
  template <typename F>
  uint64_t Sum(F f) const {
    uint64_t n = 0;
    for (const RecordInfo& r : records) n += f(r);
    return n;
  }
};

// One namespace (name and incarnation) as the live records describe it.
struct NsReport {
  std::string name;
  uint64_t incarnation = 0;
  std::optional<Layout> layout;
  const RecordInfo* record = nullptr;  // its live namespace record, if any
  uint64_t tensors = 0;                // live and partially live tensor records
  uint64_t partial_tensors = 0;
  uint64_t tokens = 0;                 // live tokens
  uint64_t payload_bytes = 0;          // logical bytes of those records
  uint64_t stored_bytes = 0;           // on disk
  std::string state;                   // "live", "stale" or "orphan"
};

// The directory's totals.
struct Summary {
  uint64_t segments = 0, file_bytes = 0, body_bytes = 0;
  uint64_t records = 0, live = 0, partial = 0, dead = 0;
  uint64_t namespaces = 0;  // live
  uint64_t tensors = 0, tokens = 0, payload_bytes = 0, stored_bytes = 0, compressed = 0;
  uint64_t live_bytes = 0, dead_space = 0;
  uint64_t corrupt_records = 0, corrupt_bytes = 0, bad_segment_headers = 0, unreadable = 0;
  uint64_t problems = 0;
};

// The seed of the first segment (by id) whose header decodes: the one
// ptstored checks records with when a segment's own header is bad.
std::optional<uint64_t> DirectorySeed(storage::Env* env, const std::string& dir, const std::vector<uint64_t>& ids);

// Scans segment `id` of `dir` (headers, and unless `quick` payload
// checksums and decompression); a segment with problems is scanned again and
// the second look reported (tools/fsck.h).
SegmentReport CheckSegment(storage::Env* env, const std::string& dir, uint64_t id, uint64_t seed, bool quick);

// The namespaces of the segments' live records, each "live", "stale" or
// "orphan" as the restart scan would decide. Points into `segments`.
std::vector<NsReport> Namespaces(const std::vector<SegmentReport>& segments);

Summary SummarizeDir(const std::vector<SegmentReport>& segments, const std::vector<NsReport>& namespaces);

}  // namespace ptstore::tools::fsck
