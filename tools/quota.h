// ptstore-quota: the DRAM and SSD quotas of namespaces on the local node,
// and their use (see man/ptstore-quota.1, ptstore/quota.h). Also the
// quotas table of ptstore-stat.
//
//   ptstore-quota                          every namespace: use and quota
//   ptstore-quota NS                       one namespace
//   ptstore-quota NS --dram 4GiB --ssd 0   set (0 / none: no limit)
//
// Exit status as every tool (tools/commands.h): 1 for what the server
// refuses (not the owner or root: permission_denied), 2 for a bad size or
// namespace name (nothing is sent).
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ptstore/quota.h"
#include "tools/format.h"

namespace ptstore::tools {

struct QuotaOptions {
  std::string socket;
  bool json = false;
  std::optional<std::string> ns;
  std::optional<std::string> dram;  // as typed: ParseQuotaBytes
  std::optional<std::string> ssd;
};
int RunQuota(const QuotaOptions& options, std::ostream& out, std::ostream& err);

// NAMESPACE, DRAM USED, DRAM QUOTA, DRAM %, with `with_ssd` SSD USED, SSD
// QUOTA, SSD %, then EVICTED (to keep under quota: DRAM evictions + SSD
// drops), CUT SAVES. A quota of 0 shows "-" and its share "-".
std::string RenderQuotas(const std::vector<NamespaceQuota>& quotas, bool with_ssd);
// Whether any of them has an SSD quota or SSD use (the SSD columns matter).
bool AnySsd(const std::vector<NamespaceQuota>& quotas);
// {"namespace", "dram": {"used", "quota" (null: none), "ratio"},
//  "ssd": {...}, "dram_evictions", "ssd_evictions", "cut_saves"}
Json ToJson(const NamespaceQuota& q);
Json QuotasJson(const std::vector<NamespaceQuota>& quotas);

}  // namespace ptstore::tools
