#include "tools/commands.h"

#include "tools/quota.h"

#include <langinfo.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

#include "rdma/fabric_report.h"

namespace ptstore::tools {

Result<LsTarget> ParseLsTarget(std::string_view arg) {
  LsTarget t;
  std::string_view ns = arg;
  std::string_view key;
  if (size_t slash = arg.find('/'); slash != std::string_view::npos) {
    ns = arg.substr(0, slash);
    key = arg.substr(slash + 1);
    if (!key.empty() && key.back() == '/') key.remove_suffix(1);  // "ns/KEY/"
    if (key.find('/') != std::string_view::npos) {
      return InvalidArgument("'" + std::string(arg) + "' is not NAMESPACE or NAMESPACE/KEY (one key only)");
    }
  }
  if (Status st = ValidateNamespaceName(ns); !st.ok()) {
    return InvalidArgument("'" + std::string(arg) + "': " + st.message());
  }
  t.ns = std::string(ns);
  if (!key.empty()) {
    auto k = ChainKey::FromHex(key);
    if (!k.ok()) return InvalidArgument("'" + std::string(arg) + "': " + k.status().message());
    t.key = *k;
    t.has_key = true;
  }
  return t;
}

void Report(std::ostream& err, const char* prog, const Status& st) { err << prog << ": " << st.ToString() << "\n"; }

int Usage(std::ostream& err, const char* prog, const std::string& message) {
  err << prog << ": " << message << " (see --help)\n";
  return kExitUsage;
}

Result<std::unique_ptr<Client>> ConnectTool(const std::string& socket, const char* prog) {
  ClientOptions o;
  o.socket_path = socket;  // empty: $PTSTORE_SOCKET, else the default
  o.client_name = prog;
  o.want_mapping = false;  // loads (ptstore-get) are copied: never map the arena
  o.max_connections = 1;
  return Client::Connect(o);
}

void Emit(std::ostream& out, const Json& j) { out << j.dump(2) << "\n"; }

Result<uint64_t> ParseDuration(std::string_view text) {
  const std::string t(text);
  auto bad = [&] {
    return InvalidArgument("'" + t + "' is not a duration (a number with s, m, h or d, e.g. 90s, 15m, 1.5h, 2d)");
  };
  if (t.empty()) return bad();
  size_t used = 0;
  double v;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    return bad();
  }
  double unit = 1;
  const std::string rest = t.substr(used);
  if (rest == "" || rest == "s") {
    unit = 1;
  } else if (rest == "m") {
    unit = 60;
  } else if (rest == "h") {
    unit = 3600;
  } else if (rest == "d") {
    unit = 86400;
  } else {
    return bad();
  }
  const double ns = v * unit * 1e9;
  if (!(ns >= 0) || ns > 1e19 || !std::isdigit(static_cast<unsigned char>(t[0]))) return bad();
  return static_cast<uint64_t>(ns);
}

namespace {

// Keeps what --unused-for asks for and sorts by time with -t.
void SelectIncrements(const LsOptions& opt, uint64_t now, std::vector<PrefixNodeInfo>* nodes) {
  if (opt.unused_for_ns) {
    const uint64_t before = now > *opt.unused_for_ns ? now - *opt.unused_for_ns : 0;
    std::unordered_set<ChainKey, ChainKeyHash> cold;
    std::vector<PrefixNodeInfo> kept;
    for (const PrefixNodeInfo& n : *nodes) {  // parents before children (ListTree's pre-order)
      if (n.times.atime_ns >= before) continue;
      const bool below_cold = cold.count(n.parent) != 0;
      cold.insert(n.key);
      if (!below_cold) kept.push_back(n);
    }
    *nodes = std::move(kept);
  }
  if (opt.sort_time) {
    std::stable_sort(nodes->begin(), nodes->end(), [&](const PrefixNodeInfo& a, const PrefixNodeInfo& b) {
      return TimeOf(a.times, opt.time) > TimeOf(b.times, opt.time);
    });
  }
}

void SelectNamespaces(const LsOptions& opt, uint64_t now, bool filter, std::vector<NamespaceInfo>* namespaces) {
  if (filter && opt.unused_for_ns) {
    const uint64_t before = now > *opt.unused_for_ns ? now - *opt.unused_for_ns : 0;
    std::erase_if(*namespaces, [&](const NamespaceInfo& ns) { return ns.times.atime_ns >= before; });
  }
  if (opt.sort_time) {
    std::stable_sort(namespaces->begin(), namespaces->end(), [&](const NamespaceInfo& a, const NamespaceInfo& b) {
      return TimeOf(a.times, opt.time) > TimeOf(b.times, opt.time);
    });
  }
}

}  // namespace

int RunLs(const LsOptions& opt, std::ostream& out, std::ostream& err) {
  constexpr const char* kProg = "ptstore-ls";
  std::optional<LsTarget> target;
  if (opt.target) {
    auto t = ParseLsTarget(*opt.target);
    if (!t.ok()) return Usage(err, kProg, t.status().message());
    target = *t;
  }
  auto client = ConnectTool(opt.socket, kProg);
  if (!client.ok()) {
    Report(err, kProg, client.status());
    return kExitFailure;
  }
  Client& c = **client;
  const uint64_t now = WallClockNs();

  if (target) {
    auto nodes = c.ListTree(target->ns, target->key, opt.recursive);
    if (!nodes.ok()) {
      Report(err, kProg, nodes.status());
      return kExitFailure;
    }
    SelectIncrements(opt, now, &*nodes);
    std::optional<std::vector<IncrementLocation>> where;
    if (opt.where) {
      std::vector<ChainKey> keys;
      for (const auto& n : *nodes) keys.push_back(n.key);
      auto w = c.Locate(target->ns, keys);
      if (!w.ok()) {
        Report(err, kProg, w.status());
        return kExitFailure;
      }
      where = std::move(*w);
    }
    const std::vector<IncrementLocation>* wp = where ? &*where : nullptr;
    if (opt.json) {
      Json j = {{"namespace", target->ns},
                          {"parent", KeyJson(target->key)},
                          {"recursive", opt.recursive}};
      if (opt.recursive) {
        j["increments"] = TreeJson(*nodes, target->key);
      } else {
        Json a = Json::array();
        for (const auto& n : *nodes) a.push_back(ToJson(n));
        j["increments"] = std::move(a);
      }
      if (wp) j["locations"] = LocationsJson(*wp);
      Emit(out, j);
    } else if (opt.recursive) {
      out << RenderTree(*nodes, target->key, opt.long_format || wp, opt.style, wp, opt.time);
    } else {
      out << RenderIncrements(*nodes, opt.long_format || wp, wp, opt.time);
    }
    return kExitOk;
  }

  auto listed = c.ListNamespaces();
  if (!listed.ok()) {
    Report(err, kProg, listed.status());
    return kExitFailure;
  }
  std::vector<NamespaceInfo> namespaces = std::move(*listed);
  std::sort(namespaces.begin(), namespaces.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  // -R --unused-for: every namespace's cold increments (a namespace in use
  // may hold cold ones).
  SelectNamespaces(opt, now, /*filter=*/!opt.recursive, &namespaces);

  if (!opt.recursive) {
    if (opt.json) {
      Json a = Json::array();
      for (const auto& ns : namespaces) a.push_back(ToJson(ns));
      Emit(out, {{"namespaces", std::move(a)}});
    } else {
      out << RenderNamespaces(namespaces, opt.long_format, opt.time);
    }
    return kExitOk;
  }

  // -R without a namespace: every namespace and its whole tree. A namespace
  // that cannot be listed (no read permission, dropped meanwhile) is
  // reported and skipped; the exit status then says so.
  int rc = kExitOk;
  Json a = Json::array();
  bool first = true;
  for (const auto& ns : namespaces) {
    auto nodes = c.ListTree(ns.name, {}, true);
    if (!nodes.ok()) {
      Report(err, kProg, nodes.status());
      rc = kExitFailure;
      if (nodes.status().code() == Code::kUnavailable) return rc;
      continue;
    }
    SelectIncrements(opt, now, &*nodes);
    if (opt.json) {
      Json j = ToJson(ns);
      j["tree"] = TreeJson(*nodes, {});
      a.push_back(std::move(j));
    } else {
      if (!first) out << "\n";
      first = false;
      out << ns.name << ":\n" << RenderTree(*nodes, {}, opt.long_format, opt.style, nullptr, opt.time);
    }
  }
  if (opt.json) Emit(out, {{"namespaces", std::move(a)}});
  return rc;
}

namespace {

// ptstore-stat --fabric: probes locally, no server.
int RunFabricReport(const StatOptions& opt, std::ostream& out, std::ostream& err) {
  constexpr const char* kProg = "ptstore-stat";
  if (opt.ns || opt.key) return Usage(err, kProg, "--fabric takes no namespace or --key");
  rdma::FabricOptions fo;
  if (opt.fabric_provider) fo.provider = *opt.fabric_provider;
  if (opt.fabric_node) fo.node = *opt.fabric_node;
  auto report = rdma::ProbeFabric(fo);
  if (!report.ok()) {
    Report(err, kProg, report.status());
    return kExitFailure;
  }
  if (opt.json) {
    Emit(out, rdma::FabricReportJson(*report));
  } else {
    out << rdma::FormatFabricReport(*report);
  }
  if (!report->choice) {
    err << kProg << ": " << report->choice_error << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int RunStat(const StatOptions& opt, std::ostream& out, std::ostream& err) {
  constexpr const char* kProg = "ptstore-stat";
  if (opt.fabric) return RunFabricReport(opt, out, err);
  if (opt.fabric_provider || opt.fabric_node) return Usage(err, kProg, "--provider and --node go with --fabric");
  if (opt.ns) {
    if (Status st = ValidateNamespaceName(*opt.ns); !st.ok()) return Usage(err, kProg, st.message());
  }
  std::optional<ChainKey> key;
  if (opt.key) {
    if (!opt.ns) return Usage(err, kProg, "--key needs a namespace: ptstore-stat NAMESPACE --key KEY");
    auto k = ChainKey::FromHex(*opt.key);
    if (!k.ok()) return Usage(err, kProg, "--key: " + k.status().message());
    key = *k;
  }
  auto client = ConnectTool(opt.socket, kProg);
  if (!client.ok()) {
    Report(err, kProg, client.status());
    return kExitFailure;
  }
  Client& c = **client;
  if (key) {
    // One increment: the namespace (for its layout) and the increment.
    auto info = c.GetNamespace(*opt.ns);
    if (!info.ok()) {
      Report(err, kProg, info.status());
      return kExitFailure;
    }
    auto inc = c.GetIncrement(*opt.ns, *key);
    if (!inc.ok()) {
      Report(err, kProg, inc.status());
      return kExitFailure;
    }
    if (opt.json) {
      Emit(out, IncrementReportJson(c.node_id(), *info, *inc));
    } else {
      out << RenderIncrementReport(*info, *inc);
    }
    return kExitOk;
  }
  auto stats = c.Stats();
  if (!stats.ok()) {
    Report(err, kProg, stats.status());
    return kExitFailure;
  }
  std::optional<NamespaceReport> report;
  if (opt.ns) {
    auto info = c.GetNamespace(*opt.ns);
    if (!info.ok()) {
      Report(err, kProg, info.status());
      return kExitFailure;
    }
    report = NamespaceReport{*info, std::nullopt};
    // The per-increment figures need read access to the namespace; without
    // it the node-wide figures and the namespace's totals are still shown.
    auto nodes = c.ListTree(*opt.ns, {}, true);
    if (nodes.ok()) {
      report->tree = Summarize(*nodes);
    } else {
      err << kProg << ": warning: cannot list the increments of '" << *opt.ns << "': " << nodes.status().ToString()
          << "\n";
    }
  }
  // A node of a cluster: its members too (an older server without the
  // request: none).
  Result<ClusterStatus> cluster = c.GetClusterStatus();
  const bool in_cluster = cluster.ok() && cluster->enabled;
  // Every namespace's use against its quotas (or the one asked for).
  Result<std::vector<NamespaceQuota>> quotas = c.Quotas(opt.ns.value_or(""));
  if (!quotas.ok()) {
    err << kProg << ": warning: cannot read the quotas: " << quotas.status().ToString() << "\n";
  }
  if (opt.json) {
    Json j = StatsReportJson(c.node_id(), *stats, report);
    if (quotas.ok()) j["quotas"] = QuotasJson(*quotas);
    if (in_cluster) j["cluster"] = ToJson(*cluster);
    Emit(out, j);
  } else {
    out << RenderStats(c.node_id(), *stats, report);
    if (quotas.ok() && !quotas->empty()) out << "\n" << RenderQuotas(*quotas, stats->ssd_capacity != 0 || AnySsd(*quotas));
    if (in_cluster) out << "\n" << RenderCluster(*cluster);
  }
  return kExitOk;
}

std::optional<int> ParseCommandLine(CLI::App& app, const char* prog, int argc, char** argv, std::ostream& out,
                                    std::ostream& err) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e, out, err);  // --help
    return Usage(err, prog, e.what());
  }
  return std::nullopt;
}

TreeStyle TreeStyleFromLocale() {
  const char* cs = nl_langinfo(CODESET);
  return cs != nullptr && (std::strcmp(cs, "UTF-8") == 0 || std::strcmp(cs, "utf8") == 0) ? TreeStyle::kUnicode
                                                                                           : TreeStyle::kAscii;
}

}  // namespace ptstore::tools
