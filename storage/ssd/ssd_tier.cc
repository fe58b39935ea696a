// SsdTier (storage/ssd/ssd_tier.h): opening, appends, header rewrites and
// compaction; recovery is ssd_tier_recovery.cc, the read path ssd_tier_read.cc.
#include "storage/ssd/ssd_tier.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <xxhash.h>

#include "core/logging.h"
#include "storage/ssd_format/codec.h"
#include "storage/ssd_format/io_buffers.h"
#include "storage/ssd_format/segment_scanner.h"
#include "storage/ssd/ssd_tier_where.h"

namespace ptstore::storage {

using ssd_detail::Where;

namespace {

// The element size the codec shuffles by: the dtype's, or for a grouped
// layout the one dtype its K/V groups share (state bytes and padding go
// along); 1 (no shuffle) when they mix dtypes. Any value decodes: the
// payload header records it.
uint32_t ShuffleElementSize(const Layout& layout) {
  if (!layout.grouped()) return static_cast<uint32_t>(DTypeSize(layout.dtype));
  size_t size = 0;
  for (const LayoutGroup& g : layout.groups) {
    if (g.kind == GroupKind::kState) continue;
    if (size != 0 && DTypeSize(g.dtype) != size) return 1;
    size = DTypeSize(g.dtype);
  }
  return size == 0 ? 1 : static_cast<uint32_t>(size);
}

constexpr uint64_t kScanChunk = 8ull << 20;  // payload bytes hashed per read during scans and copies

bool IsAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kDirectIoAlignment == 0; }

}  // namespace

const char* SyncName(SsdOptions::Sync s) {
  switch (s) {
    case SsdOptions::Sync::kNone: return "none";
    case SsdOptions::Sync::kSegment: return "segment";
    case SsdOptions::Sync::kRecord: return "record";
  }
  return "?";
}

SsdTier::SsdTier(Env* env, const SsdOptions& options, uint32_t node_id)
    : env_(env), options_(options), node_id_(node_id), bounce_(8ull << 20, 8) {}

Result<std::unique_ptr<SsdTier>> SsdTier::Open(Env* env, const SsdOptions& options, uint32_t node_id) {
  if (options.dir.empty()) return InvalidArgument("ssd: no data directory given");
  if (options.capacity < (8ull << 20)) {
    return InvalidArgument("ssd: capacity " + std::to_string(options.capacity) + " is below the 8 MiB minimum");
  }
  SsdOptions o = options;
  // At least eight segments fit, so reclaiming one never needs much room.
  o.segment_bytes = std::clamp<uint64_t>(AlignUp(std::min(o.segment_bytes, o.capacity / 8), kRecordAlignment),
                                         1ull << 20, 1ull << 40);
  if (o.io_threads == 0) o.io_threads = 1;
  std::unique_ptr<SsdTier> tier(new SsdTier(env, o, node_id));
  PTS_RETURN_IF_ERROR(tier->Init());
  return tier;
}

SsdTier::~SsdTier() {
  std::shared_ptr<File> active;
  {
    core::MutexLock lk(mu_);
    auto it = segments_.find(active_);
    if (it != segments_.end()) active = it->second.file;
  }
  if (active && options_.sync != SsdOptions::Sync::kNone) {
    Status s = active->Sync();
    if (!s.ok()) PTS_WARN("ssd", "sync of the active segment at shutdown: " << s.ToString());
  }
}

std::string SsdTier::PathOf(uint64_t segment) const { return options_.dir + "/" + SegmentFileName(segment); }

// ---------------------------------------------------------------- writing

uint64_t SsdTier::FootprintBound(const RecordHeader& header) {
  // The encoded header is the fixed part plus the strings and tokens.
  const uint64_t header_bytes = AlignUp(256 + header.ns_name.size() + header.salt.size() + 4 * header.tokens.size(),
                                        kRecordAlignment);
  return header_bytes + AlignUp(header.payload_bytes, kRecordAlignment);
}

Status SsdTier::OpenNewSegmentLocked() {
  const uint64_t id = next_segment_++;
  OpenOptions oo;
  oo.create = true;
  oo.exclusive = true;
  oo.writable = true;
  oo.direct = options_.direct_io;
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->Open(PathOf(id), oo));
  SegmentHeader h;
  h.node_id = node_id_;
  h.segment_id = id;
  h.created_ns = env_->NowNanos();
  h.seed = seed_;
  std::vector<uint8_t> bytes = EncodeSegmentHeader(h);
  AlignedBuffer buf(bytes.size());
  std::memcpy(buf.data(), bytes.data(), bytes.size());
  Status ws = f->WriteAt(0, buf.span(bytes.size()));
  if (!ws.ok()) {
    env_->DeleteFile(PathOf(id)).IgnoreError();
    return ws;
  }
  // fdatasync of the file does not make its directory entry durable: a
  // synced record in a segment whose name was lost would be lost with it.
  if (options_.sync != SsdOptions::Sync::kNone) {
    Status ds = env_->SyncDir(options_.dir);
    if (!ds.ok()) PTS_WARN("ssd", "sync of " << options_.dir << " after creating a segment: " << ds.ToString());
  }
  direct_ = f->direct();
  stats_.direct_io = direct_;
  Segment s;
  s.id = id;
  s.file = std::move(f);
  s.size = kSegmentHeaderBytes;
  s.seed = seed_;
  s.sealed = false;
  file_bytes_ += kSegmentHeaderBytes;
  segments_.emplace(id, std::move(s));
  active_ = id;
  return Status::OK();
}

std::shared_ptr<File> SsdTier::SealLocked(Segment* s) {
  s->sealed = true;
  // The last append into it may have finished already: then nobody else
  // will sync it.
  if (s->inflight == 0 && options_.sync == SsdOptions::Sync::kSegment) return s->file;
  return nullptr;
}

Result<std::pair<std::shared_ptr<File>, uint64_t>> SsdTier::ReserveLocked(uint64_t bytes, uint64_t slack,
                                                                         uint64_t* segment_id,
                                                                         std::shared_ptr<File>* to_sync) {
  auto it = segments_.find(active_);
  const bool need_new = it == segments_.end() ||
                        (it->second.size + bytes > options_.segment_bytes && it->second.size > kSegmentHeaderBytes);
  const uint64_t grow = bytes + (need_new ? kSegmentHeaderBytes : 0);
  if (file_bytes_ + grow > options_.capacity + slack) {
    return ResourceExhausted("ssd tier full: a record of " + std::to_string(bytes) + " bytes does not fit (" +
                             std::to_string(file_bytes_) + " of " + std::to_string(options_.capacity) +
                             " bytes in segment files, " + std::to_string(live_bytes_) + " live)");
  }
  if (need_new) {
    if (it != segments_.end()) *to_sync = SealLocked(&it->second);
    PTS_RETURN_IF_ERROR(OpenNewSegmentLocked());
    it = segments_.find(active_);
  }
  Segment& s = it->second;
  const uint64_t off = s.size;
  s.size += bytes;
  s.inflight++;
  file_bytes_ += bytes;
  *segment_id = s.id;
  return std::make_pair(s.file, off);
}

void SsdTier::FinishAppend(const SsdLocation& loc, bool ok) {
  std::shared_ptr<File> to_sync;
  {
    core::MutexLock lk(mu_);
    if (ok) {
      stats_.records_written++;
      stats_.payload_bytes_written += loc.payload_bytes;
      stats_.stored_bytes_written += loc.stored_bytes;
    } else {
      stats_.write_errors++;
    }
    auto it = segments_.find(loc.segment);
    if (it == segments_.end()) return;
    Segment& s = it->second;
    if (ok) {
      s.live += loc.footprint();
      live_bytes_ += loc.footprint();
    }
    s.inflight--;
    if (s.sealed && s.inflight == 0 && options_.sync == SsdOptions::Sync::kSegment) to_sync = s.file;
  }
  if (to_sync) {
    Status st = to_sync->Sync();
    if (!st.ok()) PTS_WARN("ssd", "sync of a sealed segment: " << st.ToString());
  }
}

Result<SsdLocation> SsdTier::Append(RecordHeader header, std::span<const uint8_t> payload) {
  return AppendImpl(std::move(header), payload, 0);
}

Result<SsdLocation> SsdTier::AppendImpl(RecordHeader header, std::span<const uint8_t> payload, uint64_t slack) {
  std::vector<uint8_t> compressed;
  std::span<const uint8_t> stored = payload;
  header.flags &= static_cast<uint16_t>(~kRecordCompressed);
  if (options_.compress && !payload.empty()) {
    CodecOptions co;
    co.element_size = ShuffleElementSize(header.layout);
    co.level = options_.compress_level;
    PTS_RETURN_IF_ERROR(Compress(payload, co, &compressed));
    if (compressed.size() < payload.size()) {
      stored = compressed;
      header.flags |= kRecordCompressed;
    }
  }
  header.payload_bytes = payload.size();
  header.stored_bytes = stored.size();
  header.payload_checksum = PayloadChecksum(stored, seed_);
  const std::vector<uint8_t> hbytes = EncodeRecordHeader(header, seed_);
  // Never write a record that cannot be read back: a restart would drop it
  // as corrupt, long after the caller was told it was written.
  if (Result<RecordHeader> check = DecodeRecordHeader(hbytes, seed_); !check.ok()) {
    return InvalidArgument("ssd: refusing to write an invalid record (" + check.status().message() + ")");
  }
  SsdLocation loc;
  loc.header_bytes = hbytes.size();
  loc.stored_bytes = stored.size();
  loc.payload_bytes = payload.size();
  loc.payload_checksum = header.payload_checksum;
  loc.flags = header.flags;
  const uint64_t foot = loc.footprint();

  std::shared_ptr<File> file, sealed;
  {
    core::MutexLock lk(mu_);
    Result<std::pair<std::shared_ptr<File>, uint64_t>> r = ReserveLocked(foot, slack, &loc.segment, &sealed);
    if (!r.ok()) {
      stats_.write_errors++;
      return r.status();
    }
    file = r->first;
    loc.offset = r->second;
  }
  if (sealed) {
    Status ss = sealed->Sync();
    if (!ss.ok()) PTS_WARN("ssd", "sync of a sealed segment: " << ss.ToString());
  }

  // The payload goes first and the header last: a crash in between leaves
  // payload blocks without a header, which a scan skips as garbage.
  Status s;
  const uint64_t body = stored.size() / kRecordAlignment * kRecordAlignment;
  const uint64_t tail = stored.size() - body;
  if (!file->direct() || IsAligned(stored.data())) {
    if (body > 0) s = file->WriteAt(loc.offset + loc.header_bytes, stored.first(body));
    if (s.ok() && tail > 0) {
      AlignedBuffer last(kRecordAlignment);
      std::memcpy(last.data(), stored.data() + body, tail);
      s = file->WriteAt(loc.offset + loc.header_bytes + body, last.span(kRecordAlignment));
    }
  } else {
    // An unaligned source under O_DIRECT: through a bounce buffer.
    AlignedBuffer bounce(std::min<uint64_t>(kScanChunk, AlignUp(stored.size(), kRecordAlignment)));
    for (uint64_t done = 0; done < stored.size() && s.ok();) {
      const uint64_t n = std::min<uint64_t>(bounce.size(), stored.size() - done);
      std::memcpy(bounce.data(), stored.data() + done, n);
      if (n < bounce.size()) std::memset(bounce.data() + n, 0, bounce.size() - n);
      s = file->WriteAt(loc.offset + loc.header_bytes + done, bounce.span(AlignUp(n, kRecordAlignment)));
      done += n;
    }
  }
  const bool header_tried = s.ok();
  if (s.ok()) {
    AlignedBuffer hb(hbytes.size());
    std::memcpy(hb.data(), hbytes.data(), hbytes.size());
    s = file->WriteAt(loc.offset, hb.span(hbytes.size()));
  }
  // Namespace records are rare and everything else depends on them: they
  // are made durable at once unless syncing is off altogether.
  const bool sync_now = options_.sync == SsdOptions::Sync::kRecord ||
                        (options_.sync == SsdOptions::Sync::kSegment && header.kind == RecordKind::kNamespace);
  if (s.ok() && sync_now) s = file->Sync();
  if (!s.ok() && header_tried) {
    // The header may be on disk anyway (a write torn after its last byte,
    // a failed sync): blank it, so that a restart never finds a record the
    // caller was told is not there.
    AlignedBuffer zeros(hbytes.size());
    Status zs = file->WriteAt(loc.offset, zeros.span(hbytes.size()));
    if (zs.ok() && options_.sync != SsdOptions::Sync::kNone) zs = file->Sync();
    if (!zs.ok()) PTS_WARN("ssd", "blanking the header of a failed append: " << zs.ToString());
  }
  FinishAppend(loc, s.ok());
  if (!s.ok()) return s.WithContext("ssd: writing a record to " + Where(loc.segment, loc.offset));
  return loc;
}

// --------------------------------------------------------------- removal

Status SsdTier::SetLiveTokens(const SsdLocation& loc, uint64_t live_tokens) {
  // Rewrites of one header may be queued in any order: live_tokens only
  // ever goes down, so each rewrite keeps the smaller value and the order
  // does not matter. One rewrite at a time keeps read-modify-write whole.
  core::MutexLock rw(rewrite_mu_);
  PTS_ASSIGN_OR_RETURN(SegmentRef seg, SegmentOf(loc.segment));
  PTS_ASSIGN_OR_RETURN(RecordHeader h, ReadHeader(loc));
  // A count the header cannot hold would turn the record into garbage.
  if (h.kind != RecordKind::kNamespace && live_tokens % h.layout.block_tokens != 0) {
    return InvalidArgument("ssd: live_tokens " + std::to_string(live_tokens) + " is not a whole number of " +
                           std::to_string(h.layout.block_tokens) + "-token blocks");
  }
  if (h.live_tokens <= live_tokens) return Status::OK();
  h.live_tokens = live_tokens;
  return WriteHeaderLocked(seg, loc, h);
}

Status SsdTier::WriteHeaderLocked(const SegmentRef& seg, const SsdLocation& loc, const RecordHeader& h) {
  std::vector<uint8_t> bytes = EncodeRecordHeader(h, seg.seed);
  if (bytes.size() != loc.header_bytes) return Internal("ssd: a rewritten header changed size");
  AlignedBuffer buf(bytes.size());
  std::memcpy(buf.data(), bytes.data(), bytes.size());
  PTS_RETURN_IF_ERROR(seg.file->WriteAt(loc.offset, buf.span(bytes.size())));
  if (options_.sync == SsdOptions::Sync::kRecord) PTS_RETURN_IF_ERROR(seg.file->Sync());
  return Status::OK();
}

Status SsdTier::SetTimes(const SsdLocation& loc, const Times& times) {
  core::MutexLock rw(rewrite_mu_);
  PTS_ASSIGN_OR_RETURN(SegmentRef seg, SegmentOf(loc.segment));
  PTS_ASSIGN_OR_RETURN(RecordHeader h, ReadHeader(loc));
  if (!h.has_times || h.times == times) return Status::OK();
  h.times = times;
  return WriteHeaderLocked(seg, loc, h);
}

void SsdTier::Forget(const SsdLocation& loc) {
  uint64_t to_delete = 0;
  {
    core::MutexLock lk(mu_);
    auto it = segments_.find(loc.segment);
    if (it == segments_.end()) return;
    Segment& s = it->second;
    const uint64_t foot = std::min(loc.footprint(), s.live);
    s.live -= foot;
    live_bytes_ -= std::min(foot, live_bytes_);
    if (s.live == 0 && s.sealed && s.inflight == 0) to_delete = s.id;
  }
  if (to_delete) {
    Status st = DeleteSegment(to_delete);
    if (!st.ok()) PTS_WARN("ssd", "deleting an empty segment: " << st.ToString());
  }
}

// ------------------------------------------------------------- compaction

Result<SsdLocation> SsdTier::CopyRecord(const SsdLocation& loc) {
  // A copy may go past the capacity by one segment: compaction copies at
  // most one segment's live records, then deletes that segment. Without
  // the slack a tier whose files are full of dead space could never
  // reclaim it.
  const uint64_t kCompactionSlack = options_.segment_bytes + kSegmentHeaderBytes;
  PTS_ASSIGN_OR_RETURN(RecordHeader h, ReadHeader(loc));
  PTS_ASSIGN_OR_RETURN(SegmentRef seg, SegmentOf(loc.segment));
  AlignedBuffer stored(loc.stored_bytes);
  PTS_RETURN_IF_ERROR(ReadFully(seg.file.get(), loc.offset + loc.header_bytes,
                                stored.span(AlignUp(loc.stored_bytes, kRecordAlignment))));
  if (PayloadChecksum(stored.span(loc.stored_bytes), seg.seed) != loc.payload_checksum) {
    core::MutexLock lk(mu_);
    stats_.read_errors++;
    return Corruption("ssd: payload checksum mismatch at " + Where(loc.segment, loc.offset));
  }
  if (loc.flags & kRecordCompressed) {
    // Keep the stored form: write header and compressed bytes as they are.
    std::vector<uint8_t> raw(loc.payload_bytes);
    PTS_RETURN_IF_ERROR(Decompress(stored.span(loc.stored_bytes), raw, 1));
    return AppendImpl(std::move(h), raw, kCompactionSlack);
  }
  return AppendImpl(std::move(h), stored.span(loc.stored_bytes), kCompactionSlack);
}

std::optional<uint64_t> SsdTier::PickSegmentToCompact(bool pressure) const {
  core::MutexLock lk(mu_);
  std::optional<uint64_t> best;
  double best_ratio = 0;
  for (const auto& [id, s] : segments_) {
    if (!s.sealed || s.inflight != 0 || id == active_ || s.size <= kSegmentHeaderBytes) continue;
    const uint64_t body = s.size - kSegmentHeaderBytes;
    const double dead = static_cast<double>(body - std::min(body, s.live)) / static_cast<double>(body);
    if (dead <= 0) continue;
    if (dead >= options_.compact_dead_ratio || pressure) {
      if (!best || dead > best_ratio) {
        best = id;
        best_ratio = dead;
      }
    }
  }
  return best;
}

Status SsdTier::DeleteSegment(uint64_t segment) {
  {
    core::MutexLock lk(mu_);
    auto it = segments_.find(segment);
    if (it == segments_.end()) return Status::OK();
    live_bytes_ -= std::min(live_bytes_, it->second.live);
    file_bytes_ -= std::min(file_bytes_, it->second.size);
    if (active_ == segment) active_ = 0;
    segments_.erase(it);
    stats_.segments_deleted++;
  }
  return env_->DeleteFile(PathOf(segment));
}

// ------------------------------------------------------------------ stats

uint64_t SsdTier::live_bytes() const {
  core::MutexLock lk(mu_);
  return live_bytes_;
}

uint64_t SsdTier::file_bytes() const {
  core::MutexLock lk(mu_);
  return file_bytes_;
}

SsdTierStats SsdTier::Stats() const {
  core::MutexLock lk(mu_);
  SsdTierStats s = stats_;
  s.file_bytes = file_bytes_;
  s.live_bytes = live_bytes_;
  s.segments = segments_.size();
  return s;
}

}  // namespace ptstore::storage
