// tools/format.h: the members of the cluster (ptstore-stat on a node in a
// cluster), as a table and as JSON.
#include "tools/format.h"

namespace ptstore::tools {

namespace {
const char* StateName(MemberState s) {
  switch (s) {
    case MemberState::kSelf: return "self";
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
  }
  return "?";
}
}  // namespace

std::string RenderCluster(const ClusterStatus& c) {
  using A = Table::Align;
  std::string out = "cluster: " + std::to_string(c.members.size()) + " nodes, loads over " + c.data_path +
                    (c.fabric_provider.empty() ? "" : " (" + c.fabric_provider + ")") + "\n";
  Table t({{"ID", A::kRight}, {"ADDRESS"}, {"STATE"}, {"RTT", A::kRight}, {"SEEN", A::kRight},
           {"ARENA", A::kRight}, {"USED", A::kRight}, {"OWNED", A::kRight}, {"REPLICA", A::kRight}});
  for (const ClusterMember& m : c.members) {
    const bool known = m.state == MemberState::kSelf || m.incarnation != 0;
    t.AddRow({std::to_string(m.id), m.address, StateName(m.state),
              m.state == MemberState::kSelf || !known ? "-" : std::to_string(m.rtt_us) + "us",
              m.state == MemberState::kSelf ? "-" : (known ? std::to_string(m.last_seen_ms) + "ms ago" : "never"),
              known ? HumanBytes(m.arena_bytes) : "-", known ? HumanBytes(m.used_bytes) : "-",
              known ? HumanBytes(m.owned_bytes) : "-", known ? HumanBytes(m.replica_bytes) : "-"});
  }
  return out + t.Render();
}

Json ToJson(const ClusterStatus& c) {
  Json members = Json::array();
  for (const ClusterMember& m : c.members) {
    members.push_back({{"id", m.id},
                       {"address", m.address},
                       {"state", StateName(m.state)},
                       {"incarnation", m.incarnation},
                       {"rtt_us", m.rtt_us},
                       {"last_seen_ms", m.last_seen_ms},
                       {"arena_bytes", m.arena_bytes},
                       {"used_bytes", m.used_bytes},
                       {"owned_bytes", m.owned_bytes},
                       {"replica_bytes", m.replica_bytes}});
  }
  return {{"self", c.self_id}, {"data_path", c.data_path}, {"fabric_provider", c.fabric_provider},
          {"members", members}};
}

}  // namespace ptstore::tools
