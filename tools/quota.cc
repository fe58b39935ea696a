#include "tools/quota.h"

#include <tuple>

#include "tools/commands.h"

namespace ptstore::tools {

namespace {

std::string Share(uint64_t used, uint64_t quota) { return quota == 0 ? "-" : Percent(Ratio(used, quota)); }
std::string QuotaText(uint64_t quota) { return quota == 0 ? "-" : HumanBytes(quota); }

Json TierJson(uint64_t used, uint64_t quota) {
  Json j;
  j["used"] = used;
  j["quota"] = quota == 0 ? Json(nullptr) : Json(quota);
  auto r = quota == 0 ? std::nullopt : Ratio(used, quota);
  j["ratio"] = r ? Json(*r) : Json(nullptr);
  return j;
}

}  // namespace

bool AnySsd(const std::vector<NamespaceQuota>& quotas) {
  for (const NamespaceQuota& q : quotas) {
    if (q.ssd_quota != 0 || q.ssd_bytes != 0 || q.ssd_evictions != 0) return true;
  }
  return false;
}

std::string RenderQuotas(const std::vector<NamespaceQuota>& quotas, bool with_ssd) {
  using A = Table::Align;
  std::vector<Table::Column> cols = {{"NAMESPACE"}, {"DRAM USED", A::kRight}, {"DRAM QUOTA", A::kRight},
                                     {"DRAM %", A::kRight}};
  if (with_ssd) {
    cols.insert(cols.end(), {{"SSD USED", A::kRight}, {"SSD QUOTA", A::kRight}, {"SSD %", A::kRight}});
  }
  cols.insert(cols.end(), {{"EVICTED", A::kRight}, {"CUT SAVES", A::kRight}});
  Table t(std::move(cols));
  for (const NamespaceQuota& q : quotas) {
    std::vector<std::string> row = {q.ns, HumanBytes(q.dram_bytes), QuotaText(q.dram_quota),
                                    Share(q.dram_bytes, q.dram_quota)};
    if (with_ssd) {
      row.insert(row.end(), {HumanBytes(q.ssd_bytes), QuotaText(q.ssd_quota), Share(q.ssd_bytes, q.ssd_quota)});
    }
    row.insert(row.end(), {std::to_string(q.dram_evictions + q.ssd_evictions), std::to_string(q.cut_saves)});
    t.AddRow(std::move(row));
  }
  return t.rows() ? t.Render() : "";
}

Json ToJson(const NamespaceQuota& q) {
  Json j;
  j["namespace"] = q.ns;
  j["dram"] = TierJson(q.dram_bytes, q.dram_quota);
  j["ssd"] = TierJson(q.ssd_bytes, q.ssd_quota);
  j["dram_evictions"] = q.dram_evictions;
  j["ssd_evictions"] = q.ssd_evictions;
  j["cut_saves"] = q.cut_saves;
  return j;
}

Json QuotasJson(const std::vector<NamespaceQuota>& quotas) {
  Json j = Json::array();
  for (const NamespaceQuota& q : quotas) j.push_back(ToJson(q));
  return j;
}

int RunQuota(const QuotaOptions& opt, std::ostream& out, std::ostream& err) {
  constexpr const char* kProg = "ptstore-quota";
  if (opt.ns) {
    if (Status st = ValidateNamespaceName(*opt.ns); !st.ok()) return Usage(err, kProg, st.message());
  }
  QuotaChange change;
  for (const auto& [flag, text, dst] :
       {std::tuple{"--dram", &opt.dram, &change.dram}, std::tuple{"--ssd", &opt.ssd, &change.ssd}}) {
    if (!*text) continue;
    auto b = ParseQuotaBytes(**text);
    if (!b.ok()) return Usage(err, kProg, std::string(flag) + ": " + b.status().message());
    *dst = *b;
  }
  const bool setting = change.dram || change.ssd;
  if (setting && !opt.ns) return Usage(err, kProg, "--dram and --ssd need a namespace: ptstore-quota NS --dram SIZE");
  auto client = ConnectTool(opt.socket, kProg);
  if (!client.ok()) {
    Report(err, kProg, client.status());
    return kExitFailure;
  }
  std::vector<NamespaceQuota> quotas;
  if (setting) {
    auto q = (*client)->SetQuota(*opt.ns, change);
    if (!q.ok()) {
      Report(err, kProg, q.status());
      return kExitFailure;
    }
    quotas.push_back(*q);
  } else {
    auto q = (*client)->Quotas(opt.ns.value_or(""));
    if (!q.ok()) {
      Report(err, kProg, q.status());
      return kExitFailure;
    }
    quotas = std::move(*q);
  }
  if (opt.json) {
    Json j;
    j["node"] = (*client)->node_id();
    j["quotas"] = QuotasJson(quotas);
    Emit(out, j);
  } else {
    out << RenderQuotas(quotas, AnySsd(quotas));
  }
  return kExitOk;
}

}  // namespace ptstore::tools
