// ptstore-fsck's command (tools/fsck.h): the directory listed, every
// segment checked (tools/fsck_check.h), the reports printed
// (tools/fsck_print.h).
#include "tools/fsck.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "storage/ssd_format/env.h"
#include "storage/ssd_format/record.h"
#include "tools/commands.h"
#include "tools/format.h"
#include "tools/fsck_check.h"
#include "tools/fsck_print.h"

namespace ptstore::tools {

namespace {

using fsck::CheckSegment;
using fsck::DirectorySeed;
using fsck::NamespaceJson;
using fsck::Namespaces;
using fsck::NamespaceTable;
using fsck::NsReport;
using fsck::Problem;
using fsck::RecordInfo;
using fsck::RecordJson;
using fsck::RecordTable;
using fsck::SegmentJson;
using fsck::SegmentReport;
using fsck::SegmentTable;
using fsck::Summary;
using fsck::SummarizeDir;
using fsck::SummaryJson;
using fsck::SummaryText;
using storage::Env;

constexpr const char* kProg = "ptstore-fsck";

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
