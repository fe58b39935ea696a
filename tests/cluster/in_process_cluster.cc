#include "tests/cluster/in_process_cluster.h"

#include <chrono>
#include <thread>

#include "core/logging.h"
#include "rdma/tcp.h"
#include "storage/cluster/rma_transport.h"
#include "storage/cluster/tcp_transport.h"
#include "tests/storage/kv_fixture.h"
#include <unistd.h>

namespace ptstore::testing {

using storage::testkv::Kv;
using storage::testkv::kBpt;
using storage::testkv::SmallLayout;

namespace {
constexpr uint64_t kArenaBytes = 16ull << 20;

// A free loopback port (bound, then let go: the node binds it again).
Result<uint16_t> FreePort() {
  uint16_t port = 0;
  PTS_ASSIGN_OR_RETURN(int fd, rdma::ListenTcp("127.0.0.1", 0, &port));
  close(fd);
  return port;
}
}  // namespace

InProcessCluster::InProcessCluster(Options options) : options_(options), nodes_(options.nodes) {}

InProcessCluster::~InProcessCluster() {
  for (auto& n : nodes_) {
    if (n) n->cluster()->Stop();
  }
  nodes_.clear();
}

Status InProcessCluster::Start() {
  std::vector<core::Member> members;
  for (uint32_t i = 0; i < options_.nodes; ++i) {
    core::Member m;
    m.node_id = i;
    m.host = "127.0.0.1";
    if (options_.link != Link::kLoopback) {
      PTS_ASSIGN_OR_RETURN(m.port, FreePort());
    } else {
      m.port = static_cast<uint16_t>(1 + i);  // never dialled: loopback nodes are named by id
    }
    members.push_back(m);
  }
  PTS_ASSIGN_OR_RETURN(membership_, core::Membership::FromMembers(members, "in-process cluster"));
  for (uint32_t i = 0; i < options_.nodes; ++i) PTS_RETURN_IF_ERROR(StartNode(i));
  return Status::OK();
}

Status InProcessCluster::StartNode(uint32_t i) {
  storage::StoreOptions so;
  so.arena_bytes = kArenaBytes;
  so.node_id = i;
  so.prefault = false;
  so.try_huge_pages = false;
  so.replicate_after = options_.replicate_after;
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<storage::Store> store, storage::Store::Open(so));
  PTS_RETURN_IF_ERROR(store->CreateNamespace(kNs, SmallLayout(), "", 1000, 1000, 0755, false).status());
  storage::ClusterOptions co;
  co.cluster_file = "in-process cluster";
  co.rpc_timeout_ms = options_.rpc_timeout_ms;
  co.connect_timeout_ms = options_.rpc_timeout_ms;
  co.heartbeat_ms = options_.heartbeat_ms;
  co.negative_ttl_ms = 0;  // every lookup asks: what the tests count on
  uint8_t* arena = const_cast<uint8_t*>(store->arena_base());
  std::unique_ptr<storage::PeerTransport> transport;
  if (options_.link != Link::kLoopback) {
    PTS_ASSIGN_OR_RETURN(core::Member self, membership_.Self(i));
    PTS_ASSIGN_OR_RETURN(rdma::ClusterSecret secret, rdma::ClusterSecret::FromBytes(std::string(48, 's')));
    if (options_.link == Link::kRma) {
      co.data_path = core::DataPath::kRma;
      PTS_ASSIGN_OR_RETURN(transport, storage::RmaTransport::Create(co, self, std::move(secret), store.get()));
    } else {
      transport = std::make_unique<storage::TcpTransport>(co, self, std::move(secret), arena);
    }
  } else {
    transport = net_.Transport(i, arena);
  }
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<storage::Cluster> cluster,
                       storage::Cluster::Start(store.get(), co, membership_, std::move(transport)));
  nodes_[i] = std::make_unique<storage::Node>(std::move(store), std::move(cluster));
  return Status::OK();
}

Status InProcessCluster::WaitConverged(const std::vector<uint32_t>& dead) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string why;
  while (std::chrono::steady_clock::now() < until) {
    why.clear();
    for (uint32_t i = 0; i < nodes_.size(); ++i) {
      if (!running(i)) continue;
      for (const core::MemberInfo& m : nodes_[i]->cluster()->MemberStatus().members) {
        if (m.id == i) continue;
        const bool want_dead = !running(m.id) || std::find(dead.begin(), dead.end(), m.id) != dead.end();
        const bool is_dead = m.state == core::MemberState::kDead;
        if (want_dead != is_dead) {
          why += " node " + std::to_string(i) + " sees node " + std::to_string(m.id) +
                 (is_dead ? " dead;" : " alive;");
        }
      }
    }
    if (why.empty()) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return DeadlineExceeded("the in-process cluster did not converge:" + why);
}

Result<SaveResult> InProcessCluster::Save(uint32_t node, const std::vector<uint32_t>& tokens) {
  const uint64_t whole = tokens.size() / SmallLayout().block_tokens * SmallLayout().block_tokens;
  const std::vector<uint8_t> data = Kv(tokens, 0, whole);
  return nodes_[node]->Save(kNs, tokens, data.data(), data.size(), 0);
}

Result<uint64_t> InProcessCluster::Load(uint32_t node, const std::vector<uint32_t>& tokens) {
  std::vector<uint8_t> dst(tokens.size() * kBpt);
  PTS_ASSIGN_OR_RETURN(uint64_t n, nodes_[node]->LoadCopy(kNs, tokens, dst.data(), dst.size()));
  dst.resize(n * kBpt);
  if (dst != Kv(tokens, 0, n)) {
    return Corruption("node " + std::to_string(node) + " loaded wrong bytes for " + std::to_string(n) + " tokens");
  }
  return n;
}

Result<RemoveResult> InProcessCluster::Remove(uint32_t node, const std::vector<uint32_t>& tokens) {
  return nodes_[node]->Remove(kNs, tokens);
}

void InProcessCluster::Kill(uint32_t node) {
  net_.Kill(node);
  nodes_[node].reset();
}

Status InProcessCluster::Restart(uint32_t node) { return StartNode(node); }

}  // namespace ptstore::testing
