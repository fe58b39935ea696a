#include "tools/fsck.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "storage/ssd_format/codec.h"
#include "storage/ssd_format/env.h"
#include "storage/ssd_format/record.h"
#include "storage/ssd_format/segment_scanner.h"
#include "tools/commands.h"
#include "tools/format.h"

namespace ptstore::tools {

namespace {

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

constexpr const char* kProg = "ptstore-fsck";

struct RecordInfo {
  uint64_t segment = 0;
  uint64_t offset = 0;
  RecordKind kind = RecordKind::kTensor;
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
  bool partial() const { return kind != RecordKind::kNamespace && live_tokens > 0 && live_tokens < tokens; }
};

struct Problem {
  std::string kind;  // a SegmentProblemKindName, "segment_header", "decompress" or "read_error"
  std::optional<uint64_t> offset;
  uint64_t length = 0;
  std::string message;
};

struct SegmentReport {
  uint64_t id = 0;
  std::string file;
  uint64_t bytes = 0;
  std::optional<SegmentHeader> header;
  bool seed_matches = true;
  std::vector<RecordInfo> records;
  std::vector<Problem> problems;
  std::vector<std::string> notes;  // worth knowing, not problems
  uint64_t corrupt_records = 0;    // counted as ptstored's restart scan counts them, plus undecodable payloads
  bool rechecked = false;
  bool vanished = false;           // deleted between the listing and the check (a running ptstored reclaimed it)

  uint64_t body() const { return bytes > kSegmentHeaderBytes ? bytes - kSegmentHeaderBytes : 0; }
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

std::string SegmentFileName(uint64_t id) { return storage::SegmentFileName(id); }

// "2025-06-01T11:50:00.123456789Z" (UTC). Nanoseconds since the epoch do
// not fit the 2^53 of a JSON number as JavaScript reads it.
std::string TimeText(uint64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1000000000u);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%09" PRIu64 "Z", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ns % 1000000000u);
  return buf;
}

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

// The seed of the first segment (by id) whose header decodes: the one
// ptstored checks records with when a segment's own header is bad.
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

struct Summary {
  uint64_t segments = 0, file_bytes = 0, body_bytes = 0;
  uint64_t records = 0, live = 0, partial = 0, dead = 0;
  uint64_t namespaces = 0;  // live
  uint64_t tensors = 0, tokens = 0, payload_bytes = 0, stored_bytes = 0, compressed = 0;
  uint64_t live_bytes = 0, dead_space = 0;
  uint64_t corrupt_records = 0, corrupt_bytes = 0, bad_segment_headers = 0, unreadable = 0;
  uint64_t problems = 0;
};

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

const char* KindName(RecordKind k) {
  return k == RecordKind::kNamespace ? "namespace" : k == RecordKind::kRemote ? "remote" : "tensor";
}

// ------------------------------------------------------------------ JSON

Json ProblemJson(const Problem& p) {
  return {{"kind", p.kind},
          {"offset", p.offset ? Json(*p.offset) : Json(nullptr)},
          {"length", p.length},
          {"message", p.message}};
}

Json RecordJson(const RecordInfo& r) {
  Json j = {{"segment", r.segment},
            {"file", SegmentFileName(r.segment)},
            {"offset", r.offset},
            {"kind", KindName(r.kind)},
            {"namespace", r.ns},
            {"incarnation", r.ns_incarnation},
            {"seq", r.seq}};
  if (r.kind != RecordKind::kNamespace) {
    j["start_token"] = r.start_token;
    j["tokens"] = r.tokens;
  } else {
    j["start_token"] = nullptr;
    j["tokens"] = nullptr;
  }
  j["live_tokens"] = r.live_tokens;
  j["state"] = r.dead() ? "dead" : r.partial() ? "partial" : "live";
  j["payload_bytes"] = r.payload_bytes;
  j["stored_bytes"] = r.stored_bytes;
  j["footprint"] = r.footprint;
  j["compressed"] = (r.flags & kRecordCompressed) != 0;
  j["flags"] = r.flags;
  j["payload_verified"] = r.payload_verified;
  j["decompressed"] = r.decompressed ? Json(*r.decompressed) : Json(nullptr);
  return j;
}

Json SegmentJson(const SegmentReport& g) {
  Json header = nullptr;
  if (g.header) {
    header = {{"node_id", g.header->node_id},
              {"segment_id", g.header->segment_id},
              {"created", TimeText(g.header->created_ns)},
              {"seed_matches", g.seed_matches}};
  }
  Json problems = Json::array();
  for (const Problem& p : g.problems) problems.push_back(ProblemJson(p));
  return {{"file", g.file},
          {"id", g.id},
          {"bytes", g.bytes},
          {"header", std::move(header)},
          {"records", {{"live", g.count_live()}, {"partial", g.count_partial()}, {"dead", g.count_dead()}}},
          {"live_bytes", g.live_bytes()},
          {"dead_bytes", g.dead_bytes()},
          {"corrupt_bytes", g.corrupt_bytes()},
          {"dead_space_bytes", g.dead_space()},
          {"dead_ratio", RatioJson(Ratio(g.dead_space(), g.body()))},
          {"corrupt_records", g.corrupt_records},
          {"clean", g.problems.empty()},
          {"rechecked", g.rechecked},
          {"vanished", g.vanished},
          {"problems", std::move(problems)},
          {"notes", g.notes}};
}

Json NamespaceJson(const NsReport& n) {
  Json j = {{"name", n.name},
            {"incarnation", n.incarnation},
            {"state", n.state},
            {"layout", n.layout ? ToJson(*n.layout) : Json(nullptr)}};
  if (n.record != nullptr) {
    j["owner"] = {{"uid", n.record->uid}, {"gid", n.record->gid}, {"mode", OctalMode(n.record->mode)},
                  {"salted", n.record->salted}};
  } else {
    j["owner"] = nullptr;
  }
  j["tensors"] = n.tensors;
  j["partial_tensors"] = n.partial_tensors;
  j["tokens"] = n.tokens;
  j["payload_bytes"] = n.payload_bytes;
  j["stored_bytes"] = n.stored_bytes;
  j["compression_ratio"] = RatioJson(CompressionRatio(n.payload_bytes, n.stored_bytes));
  return j;
}

Json SummaryJson(const Summary& s) {
  return {{"segments", s.segments},
          {"file_bytes", s.file_bytes},
          {"records", s.records},
          {"live_records", s.live},
          {"partial_records", s.partial},
          {"dead_records", s.dead},
          {"namespaces", s.namespaces},
          {"tensors", s.tensors},
          {"compressed_tensors", s.compressed},
          {"tokens", s.tokens},
          {"payload_bytes", s.payload_bytes},
          {"stored_bytes", s.stored_bytes},
          {"compression_ratio", RatioJson(CompressionRatio(s.payload_bytes, s.stored_bytes))},
          {"live_bytes", s.live_bytes},
          {"dead_space_bytes", s.dead_space},
          {"dead_ratio", RatioJson(Ratio(s.dead_space, s.body_bytes))},
          {"corrupt_records", s.corrupt_records},
          {"corrupt_bytes", s.corrupt_bytes},
          {"bad_segment_headers", s.bad_segment_headers},
          {"unreadable_segments", s.unreadable},
          {"problems", s.problems}};
}

// ------------------------------------------------------------------ text

std::string SegmentTable(const std::vector<SegmentReport>& segments) {
  using A = Table::Align;
  Table t({{"SEGMENT"},
           {"BYTES", A::kRight},
           {"LIVE", A::kRight},
           {"PARTIAL", A::kRight},
           {"DEAD", A::kRight},
           {"LIVE BYTES", A::kRight},
           {"DEAD BYTES", A::kRight},
           {"DEAD SPACE", A::kRight},
           {"CORRUPT", A::kRight},
           {"STATUS"}});
  for (const SegmentReport& g : segments) {
    std::string status = g.vanished ? "gone" : "ok";
    if (!g.problems.empty()) {
      status = std::to_string(g.problems.size()) + (g.problems.size() == 1 ? " problem" : " problems");
    }
    t.AddRow({g.file, HumanBytes(g.bytes), std::to_string(g.count_live()), std::to_string(g.count_partial()),
              std::to_string(g.count_dead()), HumanBytes(g.live_bytes()), HumanBytes(g.dead_bytes()),
              Percent(Ratio(g.dead_space(), g.body())), std::to_string(g.corrupt_records), status});
  }
  return t.Render();
}

std::string RecordTable(const std::vector<SegmentReport>& segments) {
  using A = Table::Align;
  Table t({{"SEGMENT"},
           {"OFFSET", A::kRight},
           {"KIND"},
           {"NAMESPACE"},
           {"SEQ", A::kRight},
           {"START", A::kRight},
           {"TOKENS", A::kRight},
           {"LIVE", A::kRight},
           {"PAYLOAD", A::kRight},
           {"STORED", A::kRight},
           {"FLAGS"}});
  for (const SegmentReport& g : segments) {
    for (const RecordInfo& r : g.records) {
      const bool tensor = r.kind != RecordKind::kNamespace;
      t.AddRow({g.file, std::to_string(r.offset), KindName(r.kind), r.ns, std::to_string(r.seq),
                tensor ? std::to_string(r.start_token) : "-", tensor ? std::to_string(r.tokens) : "-",
                std::to_string(r.live_tokens), std::to_string(r.payload_bytes), std::to_string(r.stored_bytes),
                (r.flags & kRecordCompressed) ? "compressed" : "-"});
    }
  }
  return t.rows() ? t.Render() : "(no records)\n";
}

std::string NamespaceTable(const std::vector<NsReport>& namespaces) {
  using A = Table::Align;
  Table t({{"NAMESPACE"},
           {"INCARNATION", A::kRight},
           {"STATE"},
           {"TENSORS", A::kRight},
           {"TOKENS", A::kRight},
           {"BYTES", A::kRight},
           {"STORED", A::kRight},
           {"RATIO", A::kRight},
           {"LAYOUT"}});
  for (const NsReport& n : namespaces) {
    t.AddRow({n.name, std::to_string(n.incarnation), n.state, std::to_string(n.tensors), std::to_string(n.tokens),
              HumanBytes(n.payload_bytes), HumanBytes(n.stored_bytes), CompressionRatioText(n.payload_bytes, n.stored_bytes),
              n.layout ? n.layout->ToString() : "?"});
  }
  return t.rows() ? t.Render() : "(none)\n";
}

std::string SummaryText(const Summary& s, bool quick) {
  std::vector<std::pair<std::string, std::string>> rows;
  auto add = [&](std::string label, std::string value) { rows.emplace_back(std::move(label), std::move(value)); };
  auto num = [](uint64_t v) { return std::to_string(v); };
  add("segments", num(s.segments) + " (" + HumanBytes(s.file_bytes) + ")");
  add("records", num(s.records) + ": " + num(s.live) + " live, " + num(s.partial) + " partially live, " +
                     num(s.dead) + " dead");
  add("namespaces", num(s.namespaces));
  add("tensors", num(s.tensors) + " (" + num(s.compressed) + " compressed)");
  add("tokens", num(s.tokens));
  add("payload bytes", HumanBytes(s.payload_bytes));
  add("stored bytes",
      HumanBytes(s.stored_bytes) + " (compression ratio " + CompressionRatioText(s.payload_bytes, s.stored_bytes) + ")");
  add("live bytes", HumanBytes(s.live_bytes));
  add("dead space", HumanBytes(s.dead_space) + " (" + Percent(Ratio(s.dead_space, s.body_bytes)) + ")");
  add("corrupt records", num(s.corrupt_records) + " (" + HumanBytes(s.corrupt_bytes) + ")");
  add("bad segment headers", num(s.bad_segment_headers));
  add("unreadable", num(s.unreadable));
  add("check", quick ? "quick (headers only)" : "full (headers, payload checksums, decompression)");
  add("result", s.problems == 0 ? "clean"
                                : num(s.problems) + (s.problems == 1 ? " problem found" : " problems found"));
  size_t width = 0;
  for (const auto& [label, value] : rows) width = std::max(width, label.size());
  std::string out;
  for (const auto& [label, value] : rows) {
    out += label;
    out.append(width + 2 - label.size(), ' ');
    out += value;
    out += "\n";
  }
  return out;
}

}  // namespace

int RunFsck(const FsckOptions& opt, std::ostream& out, std::ostream& err) {
  if (opt.dir.empty()) {
    err << kProg << ": no directory given (see --help)\n";
    return kExitUsage;
  }
  struct stat st;
  if (::stat(opt.dir.c_str(), &st) != 0) {
    err << kProg << ": " << opt.dir << ": " << std::strerror(errno) << " (see --help)\n";
    return kExitUsage;
  }
  if (!S_ISDIR(st.st_mode)) {
    err << kProg << ": " << opt.dir << ": not a directory (see --help)\n";
    return kExitUsage;
  }
  Env* env = Env::Default();
  auto names = env->ListDir(opt.dir);
  if (!names.ok()) {
    err << kProg << ": " << names.status().ToString() << "\n";
    return kExitFailure;
  }
  std::vector<uint64_t> ids;
  std::vector<std::string> ignored;
  for (const std::string& name : *names) {
    if (auto id = storage::ParseSegmentFileName(name)) {
      ids.push_back(*id);
    } else {
      ignored.push_back(name);
    }
  }
  std::sort(ids.begin(), ids.end());
  std::sort(ignored.begin(), ignored.end());

  const uint64_t seed = DirectorySeed(env, opt.dir, ids).value_or(0);
  std::vector<SegmentReport> segments;
  segments.reserve(ids.size());
  for (uint64_t id : ids) segments.push_back(CheckSegment(env, opt.dir, id, seed, opt.quick));
  std::vector<NsReport> namespaces = Namespaces(segments);
  Summary sum = SummarizeDir(segments, namespaces);
  const bool clean = sum.problems == 0;

  if (opt.json) {
    Json segs = Json::array();
    for (const SegmentReport& g : segments) segs.push_back(SegmentJson(g));
    Json nss = Json::array();
    for (const NsReport& n : namespaces) nss.push_back(NamespaceJson(n));
    Json j = {{"dir", opt.dir},
              {"check", opt.quick ? "quick" : "full"},
              {"clean", clean},
              {"summary", SummaryJson(sum)},
              {"segments", std::move(segs)},
              {"namespaces", std::move(nss)},
              {"ignored_files", ignored}};
    if (opt.list) {
      Json recs = Json::array();
      for (const SegmentReport& g : segments) {
        for (const RecordInfo& r : g.records) recs.push_back(RecordJson(r));
      }
      j["records"] = std::move(recs);
    }
    out << j.dump(2) << "\n";
    return clean ? kExitOk : kExitFailure;
  }

  out << opt.dir << ": " << segments.size() << (segments.size() == 1 ? " segment file" : " segment files");
  if (!ignored.empty()) out << " (" << ignored.size() << " other " << (ignored.size() == 1 ? "entry" : "entries") << " ignored)";
  out << "\n";
  if (!segments.empty()) out << "\n" << SegmentTable(segments);
  bool any_problem = false, any_note = false;
  for (const SegmentReport& g : segments) {
    any_problem |= !g.problems.empty();
    any_note |= !g.notes.empty();
  }
  if (any_problem) {
    out << "\nproblems:\n";
    for (const SegmentReport& g : segments) {
      for (const Problem& p : g.problems) {
        out << "  " << g.file;
        if (p.offset) out << " offset " << *p.offset << " (" << p.length << " bytes)";
        out << ": " << p.kind << ": " << p.message << "\n";
      }
    }
  }
  if (any_note) {
    out << "\nnotes:\n";
    for (const SegmentReport& g : segments) {
      for (const std::string& n : g.notes) out << "  " << g.file << ": " << n << "\n";
    }
  }
  if (opt.list) out << "\nrecords:\n" << RecordTable(segments);
  if (!namespaces.empty()) out << "\nnamespaces:\n" << NamespaceTable(namespaces);
  out << "\n" << SummaryText(sum, opt.quick);
  return clean ? kExitOk : kExitFailure;
}

}  // namespace ptstore::tools
