// How ptstore-fsck prints its reports (tools/fsck_check.h): as JSON
// objects (the fields man/ptstore-fsck.8 documents) or as text tables.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "tools/format.h"
#include "tools/fsck_check.h"

namespace ptstore::tools::fsck {

Json RecordJson(const RecordInfo& r);
Json SegmentJson(const SegmentReport& g);
Json NamespaceJson(const NsReport& n);
Json SummaryJson(const Summary& s);

std::string SegmentTable(const std::vector<SegmentReport>& segments);
std::string RecordTable(const std::vector<SegmentReport>& segments);  // "(no records)\n" when none
std::string NamespaceTable(const std::vector<NsReport>& namespaces);  // "(none)\n" when none
// `quick`: the check was headers only.
std::string SummaryText(const Summary& s, bool quick);

}  // namespace ptstore::tools::fsck
