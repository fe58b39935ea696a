// How ptstore-fsck prints its reports (tools/fsck_print.h).
#include "tools/fsck_print.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <utility>

namespace ptstore::tools::fsck {

using storage::kRecordCompressed;
using storage::RecordKind;

namespace {

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

}  // namespace

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

}  // namespace ptstore::tools::fsck
