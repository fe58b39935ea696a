// The checks of ptstore-fsck (tools/fsck_check.h).
#include "tools/fsck_check.h"

#include <sys/stat.h>

#include <map>
#include <new>
#include <utility>

#include "storage/ssd_format/codec.h"
#include "storage/ssd_format/segment_scanner.h"

namespace ptstore::tools::fsck {

using storage::Env;
using storage::File;
using storage::kRecordCompressed;
using storage::kSegmentHeaderBytes;
using storage::RecordHeader;
using storage::RecordKind;
using storage::SegmentHeader;
using storage::SegmentProblem;
using storage::SegmentProblemKind;
using storage::SegmentVisitor;
using storage::SsdLocation;

namespace {

std::string SegmentFileName(uint64_t id) { return storage::SegmentFileName(id); }

// Reads a compressed payload again and decompresses it.
Status CheckDecompress(File* file, const SsdLocation& loc) {
  try {
    std::vector<uint8_t> stored(loc.stored_bytes);
    PTS_RETURN_IF_ERROR(storage::ReadFully(file, loc.offset + loc.header_bytes, stored));
    PTS_ASSIGN_OR_RETURN(uint64_t raw, storage::CompressedRawSize(stored));
    if (raw != loc.payload_bytes) {
      return Corruption("the compressed payload holds " + std::to_string(raw) + " bytes, the header says " +
                        std::to_string(loc.payload_bytes));
    }
    std::vector<uint8_t> out(raw);
    return storage::Decompress(stored, out, 1);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("no memory to decompress a payload of " + std::to_string(loc.payload_bytes) + " bytes");
  }
}

// Not a FIFO (opening it would block), a device or a directory. False as
// well when it does not exist.
bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

SegmentReport ScanOnce(Env* env, const std::string& dir, uint64_t id, uint64_t seed, bool quick) {
  SegmentReport r;
  r.id = id;
  r.file = SegmentFileName(id);
  const std::string path = dir + "/" + r.file;
  struct stat lst;
  if (::lstat(path.c_str(), &lst) == 0 && !IsRegularFile(path)) {
    // Opening a FIFO would block; a directory cannot be read. (One that is
    // not there at all was deleted since the listing: see below.)
    struct stat st;
    const bool dangling = S_ISLNK(lst.st_mode) && ::stat(path.c_str(), &st) != 0;
    r.problems.push_back({"read_error", std::nullopt, 0,
                          path + (dangling ? ": a symbolic link to nothing" : ": not a regular file")});
    return r;
  }
  auto opened = env->Open(path, storage::OpenOptions{});  // read-only, buffered
  if (!opened.ok() && opened.status().code() == Code::kNotFound) {
    r.vanished = true;
    r.notes.push_back("deleted while the directory was being checked (reclaimed by ptstored)");
    return r;
  }
  if (!opened.ok()) {
    r.problems.push_back({"read_error", std::nullopt, 0, opened.status().ToString()});
    return r;
  }
  File* file = opened->get();
  Result<uint64_t> size = file->Size();
  if (!size.ok()) {
    r.problems.push_back({"read_error", std::nullopt, 0, size.status().ToString()});
    return r;
  }
  r.bytes = *size;

  bool in_garbage = false;
  SegmentVisitor v;
  v.segment_header = [&](const Result<SegmentHeader>& h) {
    if (!h.ok()) {
      r.problems.push_back({"segment_header", 0, std::min<uint64_t>(r.bytes, kSegmentHeaderBytes),
                            h.status().message() + "; records checked with the directory's seed"});
      return;
    }
    r.header = *h;
    r.seed_matches = h->seed == seed;
    if (!r.seed_matches) r.notes.push_back("its checksum seed is not the directory's (that of its first segment)");
    if (h->segment_id != id) {
      r.notes.push_back("its header names segment " + std::to_string(h->segment_id) + " (" +
                        SegmentFileName(h->segment_id) + ")");
    }
  };
  v.problem = [&](const SegmentProblem& p) {
    // Counted as the restart scan counts them: once per run of garbage.
    if (!in_garbage) r.corrupt_records++;
    in_garbage = p.kind != SegmentProblemKind::kPayloadChecksum;
    r.problems.push_back({storage::SegmentProblemKindName(p.kind), p.offset, p.length, p.message});
  };
  v.record = [&](const RecordHeader& h, const SsdLocation& loc, bool verified) {
    in_garbage = false;
    RecordInfo i;
    i.segment = id;
    i.offset = loc.offset;
    i.kind = h.kind;
    i.ns = h.ns_name;
    i.ns_incarnation = h.ns_incarnation;
    i.layout = h.layout;
    i.seq = h.seq;
    i.start_token = h.start_token;
    i.tokens = h.tokens.size();
    i.live_tokens = h.live_tokens;
    i.payload_bytes = h.payload_bytes;
    i.stored_bytes = h.stored_bytes;
    i.footprint = loc.footprint();
    i.flags = h.flags;
    i.payload_verified = verified;
    i.uid = h.uid;
    i.gid = h.gid;
    i.mode = h.mode;
    i.salted = !h.salt.empty();
    if (verified && (h.flags & kRecordCompressed) && !quick) {
      Status s = CheckDecompress(file, loc);
      i.decompressed = s.ok();
      if (!s.ok()) {
        r.corrupt_records++;
        r.problems.push_back({"decompress", loc.offset, loc.footprint(),
                              "payload checksum good, but it does not decompress: " + s.message()});
      }
    }
    r.records.push_back(std::move(i));
  };
  Status s = storage::ScanSegmentFile(file, id, seed, !quick, v);
  if (!s.ok()) r.problems.push_back({"read_error", std::nullopt, 0, s.ToString()});
  return r;
}

}  // namespace

std::optional<uint64_t> DirectorySeed(Env* env, const std::string& dir, const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    const std::string path = dir + "/" + SegmentFileName(id);
    if (!IsRegularFile(path)) continue;
    auto f = env->Open(path, storage::OpenOptions{});
    if (!f.ok()) continue;
    std::vector<uint8_t> head(kSegmentHeaderBytes);
    Result<size_t> n = (*f)->ReadAt(0, head);
    if (!n.ok() || *n != kSegmentHeaderBytes) continue;
    Result<SegmentHeader> h = storage::DecodeSegmentHeader(head);
    if (h.ok()) return h->seed;
  }
  return std::nullopt;
}

SegmentReport CheckSegment(Env* env, const std::string& dir, uint64_t id, uint64_t seed, bool quick) {
  SegmentReport r = ScanOnce(env, dir, id, seed, quick);
  if (r.problems.empty()) return r;
  // A record being appended by a running ptstored looks torn, or like
  // garbage, until its header is written: read the segment again and
  // believe the second look.
  SegmentReport again = ScanOnce(env, dir, id, seed, quick);
  again.rechecked = true;
  if (again.problems.empty()) {
    again.notes.push_back("problems seen on a first read were gone on a second (a record was being written)");
  }
  return again;
}

std::vector<NsReport> Namespaces(const std::vector<SegmentReport>& segments) {
  std::map<std::pair<std::string, uint64_t>, NsReport> by_key;
  auto get = [&](const RecordInfo& r) -> NsReport& {
    NsReport& n = by_key[{r.ns, r.ns_incarnation}];
    n.name = r.ns;
    n.incarnation = r.ns_incarnation;
    return n;
  };
  for (const SegmentReport& s : segments) {
    for (const RecordInfo& r : s.records) {
      if (r.dead()) continue;
      NsReport& n = get(r);
      if (r.kind == RecordKind::kNamespace) {
        if (n.record == nullptr || r.seq > n.record->seq) n.record = &r;
        n.layout = r.layout;
      } else if (r.kind == RecordKind::kRemote) {
        if (!n.layout) n.layout = r.layout;  // another node's increment: no bytes here
      } else {
        if (!n.layout) n.layout = r.layout;
        n.tensors++;
        if (r.partial()) n.partial_tensors++;
        n.tokens += r.live_tokens;
        n.payload_bytes += r.payload_bytes;
        n.stored_bytes += r.stored_bytes;
      }
    }
  }
  // As the restart scan decides: the newest live namespace record of a name
  // defines the namespace; records of other incarnations are dropped.
  std::map<std::string, uint64_t> newest;
  for (const auto& [key, n] : by_key) {
    if (n.record != nullptr) newest[n.name] = std::max(newest[n.name], n.incarnation);
  }
  std::vector<NsReport> out;
  for (auto& [key, n] : by_key) {
    if (n.record == nullptr) {
      n.state = "orphan";
    } else {
      n.state = newest.at(n.name) == n.incarnation ? "live" : "stale";
    }
    out.push_back(std::move(n));
  }
  return out;
}

Summary SummarizeDir(const std::vector<SegmentReport>& segments, const std::vector<NsReport>& namespaces) {
  Summary s;
  for (const SegmentReport& g : segments) {
    s.segments++;
    s.file_bytes += g.bytes;
    s.body_bytes += g.body();
    s.live += g.count_live();
    s.partial += g.count_partial();
    s.dead += g.count_dead();
    s.live_bytes += g.live_bytes();
    s.dead_space += g.dead_space();
    s.corrupt_records += g.corrupt_records;
    s.corrupt_bytes += g.corrupt_bytes();
    s.problems += g.problems.size();
    for (const Problem& p : g.problems) {
      if (p.kind == "segment_header") s.bad_segment_headers++;
      if (p.kind == "read_error") s.unreadable++;
    }
    for (const RecordInfo& r : g.records) {
      if (r.kind != RecordKind::kTensor || r.dead()) continue;
      if (r.flags & kRecordCompressed) s.compressed++;
    }
  }
  s.records = s.live + s.partial + s.dead;
  for (const NsReport& n : namespaces) {
    if (n.state == "live") s.namespaces++;
    s.tensors += n.tensors;
    s.tokens += n.tokens;
    s.payload_bytes += n.payload_bytes;
    s.stored_bytes += n.stored_bytes;
  }
  return s;
}

}  // namespace ptstore::tools::fsck
