#include "storage/session.h"

#include <unistd.h>

#include <algorithm>
#include <unordered_map>

#include "core/logging.h"
#include "core/messages.h"
#include "core/peer_messages.h"
#include "storage/cluster.h"
#include "storage/server.h"

namespace ptstore::storage {

using core::MsgType;

namespace {
constexpr uint32_t kMaxBuffers = 64;
}

Session::Session(Store* store, const ServerOptions* options, int fd, uint64_t id, const Credentials& peer)
    : store_(store), options_(options), cluster_(options->cluster), socket_(fd), id_(id), peer_(peer) {}

Session::~Session() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void Session::Start() { thread_ = std::thread([this] { Run(); }); }

void Session::Stop() { socket_.Shutdown(); }

void Session::Run() {
  trusted_ = peer_.uid == 0 || peer_.uid == geteuid() ||
             (options_->trusted_gid >= 0 && peer_.InGroup(static_cast<uint32_t>(options_->trusted_gid)));
  for (;;) {
    Result<rdma::Frame> f = socket_.ReceiveWithin(static_cast<int>(options_->frame_timeout_ms));
    if (!f.ok()) {
      if (f.status().code() == Code::kProtocol || f.status().code() == Code::kDeadlineExceeded) {
        // A malformed frame, or one that stalled half-way (server.frame_timeout_ms):
        // say why, then drop the connection (we can no longer find the next
        // frame boundary, and a stalled peer must not hold this thread).
        PTS_WARN("server", "session " << id_ << " (pid " << peer_.pid << ", uid " << peer_.uid
                                      << "): " << f.status().ToString() << "; closing it");
        core::ErrorReply e{f.status().code(), f.status().message()};
        socket_.SendMessage(0, e).IgnoreError();
      }
      break;
    }
    Status st = Dispatch(*f);
    if (!st.ok()) {
      core::ErrorReply e{st.code(), st.message()};
      if (!socket_.SendMessage(f->request_id, e).ok()) break;
    }
  }
  // Let the peer see the end now, not when the Session object is reaped.
  socket_.Shutdown();
  store_->ReleaseSession(id_);
  buffers_.clear();
  PTS_DEBUG("server", "session " << id_ << " (pid " << peer_.pid << ") ended");
  done_ = true;
}

Result<NamespaceInfo> Session::Authorize(const std::string& ns, Access access) {
  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->GetNamespace(ns));
  PTS_RETURN_IF_ERROR(CheckAccess(info, peer_, access));
  return info;
}

Result<uint8_t*> Session::BufferRange(uint32_t buffer_id, uint64_t offset, uint64_t bytes) {
  auto it = buffers_.find(buffer_id);
  if (it == buffers_.end()) return NotFound("buffer " + std::to_string(buffer_id) + " is not registered");
  const uint64_t size = it->second->size();
  if (offset > size || bytes > size - offset) {
    return InvalidArgument("range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                           ") is outside registered buffer " + std::to_string(buffer_id) + " of " +
                           std::to_string(size) + " bytes");
  }
  return it->second->data() + offset;
}

Status Session::Dispatch(rdma::Frame& f) {
  const auto type = static_cast<MsgType>(f.type);
  if (!hello_ && type != MsgType::kHello) {
    return ProtocolError(std::string("expected Hello first, got ") + core::MsgTypeName(f.type));
  }
  switch (type) {
    case MsgType::kHello: {
      core::HelloRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      hello_ = true;
      core::HelloReply rep;
      rep.node_id = store_->options().node_id;
      rep.arena_bytes = store_->arena_bytes();
      rep.mapped = trusted_ && req.want_mapping;
      rep.session_id = id_;
      rep.lease_ms = store_->options().default_lease_ms;
      PTS_INFO("server", "session " << id_ << ": '" << req.client_name << "' pid " << peer_.pid << " uid "
                                    << peer_.uid << (rep.mapped ? " (arena mapped)" : " (copy loads)"));
      return Reply(f, rep, rep.mapped ? store_->arena_fd() : -1);
    }
    case MsgType::kRegisterBuffer: {
      core::RegisterBufferRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      int fd = f.TakeFd();
      if (fd < 0) return InvalidArgument("RegisterBuffer carried no file descriptor");
      if (buffers_.size() >= kMaxBuffers) {
        close(fd);
        return ResourceExhausted("a session may register at most " + std::to_string(kMaxBuffers) + " buffers");
      }
      if (req.size == 0) {
        close(fd);
        return InvalidArgument("cannot register an empty buffer");
      }
      PTS_ASSIGN_OR_RETURN(auto shm, core::SharedMemory::Map(fd, req.size, /*read_only=*/false, /*populate=*/true));
      uint32_t id = next_buffer_++;
      buffers_.emplace(id, std::move(shm));
      return Reply(f, core::RegisterBufferReply{id});
    }
    case MsgType::kUnregisterBuffer: {
      core::UnregisterBufferRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      if (buffers_.erase(req.buffer_id) == 0) {
        return NotFound("buffer " + std::to_string(req.buffer_id) + " is not registered");
      }
      return Reply(f, core::EmptyReply{});
    }
    case MsgType::kCreateNamespace: {
      core::CreateNamespaceRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->CreateNamespace(req.name, req.layout, req.salt, peer_.uid,
                                                                       peer_.gid, req.mode, req.exist_ok));
      return Reply(f, core::NamespaceReply{info});
    }
    case MsgType::kGetNamespace: {
      core::NameRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->GetNamespace(req.name));
      return Reply(f, core::NamespaceReply{info});
    }
    case MsgType::kListNamespaces: {
      return Reply(f, core::ListNamespacesReply{store_->ListNamespaces()});
    }
    case MsgType::kDropNamespace: {
      core::NameRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->GetNamespace(req.name));
      if (peer_.uid != 0 && peer_.uid != info.uid) {
        return PermissionDenied("only the owner (uid " + std::to_string(info.uid) + ") or root may drop namespace '" +
                                req.name + "'");
      }
      PTS_ASSIGN_OR_RETURN(RemoveResult r, store_->DropNamespace(req.name));
      core::RemoveReply rep{r.nodes, r.bytes};
      return Reply(f, rep);
    }
    case MsgType::kSave: {
      core::SaveRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kWrite).status());
      PTS_ASSIGN_OR_RETURN(uint8_t * data, BufferRange(req.buffer_id, req.buffer_offset, req.length));
      // Blocks other nodes hold are not stored again: learn of them first,
      // and make sure their owners still hold them.
      if (cluster_) {
        cluster_->Refresh(req.ns, req.tokens);
        cluster_->CheckRemoteMatch(req.ns, req.tokens);
      }
      PTS_ASSIGN_OR_RETURN(SaveResult r, store_->Save(req.ns, req.tokens, data, req.length, req.first_block));
      if (cluster_ && r.stored_tokens > 0) cluster_->Announce(req.ns, req.tokens);
      return Reply(f, core::SaveReply{r.matched_tokens, r.stored_tokens, r.new_bytes});
    }
    case MsgType::kLookup: {
      core::PrefixRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kRead).status());
      if (cluster_) cluster_->Refresh(req.ns, req.tokens);
      PTS_ASSIGN_OR_RETURN(PrefixResult r, store_->Lookup(req.ns, req.tokens));
      return Reply(f, core::PrefixReply{r.matched_tokens, 0, std::move(r.extents)});
    }
    case MsgType::kPin: {
      core::PrefixRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      if (!trusted_) {
        return PermissionDenied("this client does not map the arena (uid " + std::to_string(peer_.uid) +
                                " is not in the store group): load by copy instead");
      }
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kRead).status());
      if (cluster_) cluster_->Refresh(req.ns, req.tokens);
      PTS_ASSIGN_OR_RETURN(PrefixResult r, store_->Pin(req.ns, req.tokens, id_));
      core::PrefixReply rep{r.matched_tokens, r.lease_id, std::move(r.extents)};
      return Reply(f, rep);
    }
    case MsgType::kLoadCopy: {
      core::PrefixRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kRead).status());
      PTS_ASSIGN_OR_RETURN(uint8_t * dst, BufferRange(req.buffer_id, req.buffer_offset, req.capacity));
      if (cluster_) cluster_->Refresh(req.ns, req.tokens);
      PTS_ASSIGN_OR_RETURN(uint64_t tokens, store_->LoadCopy(req.ns, req.tokens, dst, req.capacity));
      core::PrefixReply rep{tokens, 0, {}};
      return Reply(f, rep);
    }
    case MsgType::kRelease: {
      core::ReleaseRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(store_->Release(req.lease_id, id_));
      return Reply(f, core::EmptyReply{});
    }
    case MsgType::kRemove: {
      core::RemoveRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kWrite).status());
      RemovalPoint point;
      Result<RemoveResult> r = req.by_key ? store_->RemoveByKey(req.ns, req.key, &point)
                                          : store_->Remove(req.ns, req.tokens, &point);
      PTS_RETURN_IF_ERROR(r.status());
      // Cluster-wide: no node serves the removed bytes afterwards.
      if (cluster_) cluster_->PropagateRemoval(point);
      return Reply(f, core::RemoveReply{r->nodes, r->bytes});
    }
    case MsgType::kStats: {
      return Reply(f, core::StatsReply{store_->Stats()});
    }
    case MsgType::kListTree: {
      core::ListTreeRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kRead).status());
      PTS_ASSIGN_OR_RETURN(auto nodes, store_->ListTree(req.ns, req.parent, req.recursive));
      return Reply(f, core::ListTreeReply{std::move(nodes)});
    }
    case MsgType::kIncrement: {
      core::IncrementRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      if (req.pin && !trusted_) {
        return PermissionDenied("this client does not map the arena (uid " + std::to_string(peer_.uid) +
                                " is not in the store group): it cannot pin extents");
      }
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kRead).status());
      PTS_ASSIGN_OR_RETURN(IncrementResult r, store_->Increment(req.ns, req.key, req.pin, req.whole_prefix, id_));
      core::IncrementReply rep{r.node, std::move(r.tokens), r.lease_id, std::move(r.extents)};
      return Reply(f, rep);
    }
    case MsgType::kSetTimes: {
      core::SetTimesRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kWrite).status());
      PTS_ASSIGN_OR_RETURN(PrefixNodeInfo node, store_->SetTimes(req.ns, req.key, req.atime_ns, req.mtime_ns));
      return Reply(f, core::SetTimesReply{node});
    }
    case MsgType::kChanges: {
      core::ChangesRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      constexpr uint32_t kMaxChanges = 4096;
      const uint32_t max = req.max == 0 ? kMaxChanges : std::min(req.max, kMaxChanges);
      core::ChangesReply rep{store_->Changes(req.epoch, req.since, max)};
      // Only what this peer may read: a namespace's keys are its contents.
      std::unordered_map<std::string, bool> readable;
      std::erase_if(rep.changes.changes, [&](const TreeChange& c) {
        if (c.kind == ChangeKind::kNamespace) return false;  // names are listed to everyone
        auto [it, fresh] = readable.try_emplace(c.ns, false);
        if (fresh) it->second = Authorize(c.ns, Access::kRead).ok();
        return !it->second;
      });
      return Reply(f, rep);
    }
    case MsgType::kLocate: {
      core::LocateRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kRead).status());
      core::LocateReply rep;
      PTS_ASSIGN_OR_RETURN(rep.locations, cluster_ ? cluster_->Locate(req.ns, req.keys)
                                                   : LocateLocal(store_, req.ns, req.keys));
      return Reply(f, rep);
    }
    case MsgType::kLocatePrefix: {
      core::LocatePrefixRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(Authorize(req.ns, Access::kRead).status());
      core::LocatePrefixReply rep;
      PTS_ASSIGN_OR_RETURN(rep.location, cluster_ ? cluster_->LocatePrefix(req.ns, req.tokens)
                                                  : LocatePrefixLocal(store_, req.ns, req.tokens));
      return Reply(f, rep);
    }
    case MsgType::kSetQuota: {
      core::SetQuotaRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->GetNamespace(req.ns));
      if (peer_.uid != 0 && peer_.uid != info.uid) {
        return PermissionDenied("only the owner (uid " + std::to_string(info.uid) + ") or root may set the quota of "
                                "namespace '" + req.ns + "' (this client is uid " + std::to_string(peer_.uid) + ")");
      }
      QuotaChange change;
      if (req.set & core::kQuotaSetDram) change.dram = req.dram_quota;
      if (req.set & core::kQuotaSetSsd) change.ssd = req.ssd_quota;
      PTS_ASSIGN_OR_RETURN(NamespaceQuota q, store_->SetQuota(req.ns, change));
      PTS_INFO("server", "session " << id_ << " (uid " << peer_.uid << ") set the quota of namespace '" << req.ns
                                    << "'");
      return Reply(f, core::SetQuotaReply{q});
    }
    case MsgType::kQuotas: {
      // Everyone may see them, as everyone sees namespaces' sizes.
      core::QuotasRequest req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      core::QuotasReply rep;
      if (req.ns.empty()) {
        rep.quotas = store_->ListQuotas();
      } else {
        PTS_ASSIGN_OR_RETURN(NamespaceQuota q, store_->GetQuota(req.ns));
        rep.quotas.push_back(std::move(q));
      }
      return Reply(f, rep);
    }
    case MsgType::kClusterStatus: {
      if (cluster_) return Reply(f, cluster_->MemberStatus());
      core::ClusterStatusReply rep;
      rep.self_id = store_->options().node_id;
      return Reply(f, rep);
    }
    default:
      return ProtocolError(std::string("unexpected message type ") + std::to_string(f.type) + " (" +
                           core::MsgTypeName(f.type) + ") from a client");
  }
}

}  // namespace ptstore::storage
