// SsdTier's recovery (storage/ssd/ssd_tier.h): listing the directory's
// segments at Open, and the Scan that rebuilds the index from their records.
#include <sys/random.h>

#include <algorithm>

#include "core/logging.h"
#include "storage/ssd_format/segment_scanner.h"
#include "storage/ssd/ssd_tier.h"
#include "storage/ssd/ssd_tier_where.h"

namespace ptstore::storage {

using ssd_detail::Where;

Status SsdTier::Init() {
  // Before Open returns, no other thread has the tier: holding mu_ over the
  // directory's I/O here costs nothing and lets the analysis check it.
  core::MutexLock lk(mu_);
  PTS_RETURN_IF_ERROR(env_->CreateDirs(options_.dir));
  PTS_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(options_.dir));
  bool have_seed = false;
  AlignedBuffer head(kSegmentHeaderBytes);
  for (const std::string& name : names) {
    std::optional<uint64_t> id = ParseSegmentFileName(name);
    if (!id) continue;
    OpenOptions oo;
    oo.writable = true;  // header rewrites
    oo.direct = options_.direct_io;
    PTS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->Open(PathOf(*id), oo));
    PTS_ASSIGN_OR_RETURN(uint64_t size, f->Size());
    Segment s;
    s.id = *id;
    s.size = size;
    s.file = std::move(f);
    if (!have_seed && size >= kSegmentHeaderBytes) {
      Result<size_t> n = s.file->ReadAt(0, head.span(kSegmentHeaderBytes));
      if (n.ok() && *n == kSegmentHeaderBytes) {
        Result<SegmentHeader> h = DecodeSegmentHeader(head.span(kSegmentHeaderBytes));
        if (h.ok()) {
          seed_ = h->seed;
          have_seed = true;
        }
      }
    }
    file_bytes_ += size;
    next_segment_ = std::max(next_segment_, *id + 1);
    segments_.emplace(*id, std::move(s));
  }
  if (!have_seed) {
    if (!segments_.empty()) {
      PTS_ERROR("ssd", options_.dir << ": no segment has a readable header; their records cannot be verified and "
                                       "will be dropped");
    }
    if (getrandom(&seed_, sizeof(seed_), 0) != sizeof(seed_)) {
      seed_ = env_->NowNanos() * 0x9e3779b97f4a7c15ull;
    }
  }
  stats_.capacity = options_.capacity;
  return Status::OK();
}

Status SsdTier::Scan(const ScanFn& fn, ScanStats* stats) {
  std::vector<uint64_t> ids;
  {
    core::MutexLock lk(mu_);
    for (auto& [id, s] : segments_) ids.push_back(id);
  }
  for (uint64_t id : ids) PTS_RETURN_IF_ERROR(ScanSegment(id, fn, stats));
  // Segments with nothing live are reclaimed now.
  std::vector<uint64_t> empty;
  {
    core::MutexLock lk(mu_);
    for (auto& [id, s] : segments_) {
      if (s.live == 0) empty.push_back(id);
    }
  }
  for (uint64_t id : empty) PTS_RETURN_IF_ERROR(DeleteSegment(id));
  return Status::OK();
}

Status SsdTier::ScanSegment(uint64_t id, const ScanFn& fn, ScanStats* stats) {
  std::shared_ptr<File> file;
  uint64_t size;
  {
    core::MutexLock lk(mu_);
    Segment& s = segments_.at(id);
    file = s.file;
    size = s.size;
  }
  stats->segments++;
  stats->bytes += size;
  uint64_t seed = seed_;
  uint64_t live = 0;
  SegmentVisitor visitor;
  visitor.segment_header = [&](const Result<SegmentHeader>& h) {
    if (h.ok()) {
      seed = h->seed;
      return;
    }
    stats->bad_segment_headers++;
    PTS_WARN("ssd", SegmentFileName(id) << ": bad segment header (" << h.status().message()
                                        << "); scanning its records with the directory's seed");
  };
  // The scanner reports a run of garbage (bad blocks up to the next valid
  // record) once: each problem is one corrupt record.
  visitor.problem = [&](const SegmentProblem& p) {
    stats->corrupt_records++;
    PTS_WARN("ssd", Where(id, p.offset) << ": skipping a corrupt record (" << p.message << ")");
  };
  visitor.record = [&](const RecordHeader& h, const SsdLocation& loc, bool /*payload_verified*/) {
    stats->records++;
    if (h.dead()) {
      stats->dead_records++;
    } else {
      live += loc.footprint();
    }
    fn(h, loc);
  };
  SegmentScanOptions so;
  so.segment_id = id;
  so.fallback_seed = seed_;
  so.verify_payloads = options_.verify_on_recovery;
  so.size = size;
  PTS_RETURN_IF_ERROR(ScanSegmentFile(file.get(), so, visitor));
  core::MutexLock lk(mu_);
  Segment& s = segments_.at(id);
  s.live = live;
  s.seed = seed;
  live_bytes_ += live;
  if (seed != seed_) {
    // Written for another directory (copied here by hand): its records are
    // read with its own seed, and compaction re-checksums them.
    PTS_WARN("ssd", SegmentFileName(id) << " has another checksum seed than the directory's first segment");
  }
  return Status::OK();
}

}  // namespace ptstore::storage
