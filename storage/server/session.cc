#include "storage/server/session.h"

#include <unistd.h>


#include "core/logging.h"
#include "core/messages.h"
#include "core/peer_messages.h"
#include "storage/server/node.h"
#include "storage/server/server.h"

namespace ptstore::storage {

using core::MsgType;

namespace {
constexpr uint32_t kMaxBuffers = 64;
}

Session::Session(Node* node, const ServerOptions* options, int fd, uint64_t id, const local::Credentials& peer)
    : node_(node), store_(&node->store()), options_(options), socket_(fd), id_(id), peer_(peer) {}

Session::~Session() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void Session::Start() { thread_ = std::thread([this] { Run(); }); }

void Session::Stop() { socket_.Shutdown(); }

void Session::Run() {
  socket_.SetSpin(options_->spin_us);
  trusted_ = peer_.uid == 0 || peer_.uid == geteuid() ||
             (options_->trusted_gid >= 0 && peer_.InGroup(static_cast<uint32_t>(options_->trusted_gid)));
  for (;;) {
    Result<local::Frame> f = socket_.ReceiveWithin(static_cast<int>(options_->frame_timeout_ms));
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

Result<NamespaceInfo> Session::Authorize(const std::string& ns, local::Access access) {
  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->GetNamespace(ns));
  PTS_RETURN_IF_ERROR(local::CheckAccess(info, peer_, access));
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

Status Session::Dispatch(local::Frame& f) {
  const auto type = static_cast<MsgType>(f.type);
  if (!hello_ && type != MsgType::kHello) {
    return ProtocolError(std::string("expected Hello first, got ") + core::MsgTypeName(f.type));
  }
  switch (type) {
    case MsgType::kHello: return OnHello(f);
    case MsgType::kRegisterBuffer: return OnRegisterBuffer(f);
    case MsgType::kUnregisterBuffer: return OnUnregisterBuffer(f);
    case MsgType::kCreateNamespace: return OnCreateNamespace(f);
    case MsgType::kGetNamespace: return OnGetNamespace(f);
    case MsgType::kListNamespaces: return OnListNamespaces(f);
    case MsgType::kDropNamespace: return OnDropNamespace(f);
    case MsgType::kSave: return OnSave(f);
    case MsgType::kLookup: return OnLookup(f);
    case MsgType::kPin: return OnPin(f);
    case MsgType::kLoadCopy: return OnLoadCopy(f);
    case MsgType::kRelease: return OnRelease(f);
    case MsgType::kRemove: return OnRemove(f);
    case MsgType::kStats: return OnStats(f);
    case MsgType::kListTree: return OnListTree(f);
    case MsgType::kIncrement: return OnIncrement(f);
    case MsgType::kSetTimes: return OnSetTimes(f);
    case MsgType::kChanges: return OnChanges(f);
    case MsgType::kLocate: return OnLocate(f);
    case MsgType::kLocatePrefix: return OnLocatePrefix(f);
    case MsgType::kSetQuota: return OnSetQuota(f);
    case MsgType::kQuotas: return OnQuotas(f);
    case MsgType::kClusterStatus: return OnClusterStatus(f);
    default:
      return ProtocolError(std::string("unexpected message type ") + std::to_string(f.type) + " (" +
                           core::MsgTypeName(f.type) + ") from a client");
  }
}

// The connection and namespaces.

Status Session::OnHello(local::Frame& f) {
  core::HelloRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
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

Status Session::OnRegisterBuffer(local::Frame& f) {
  core::RegisterBufferRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
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

Status Session::OnUnregisterBuffer(local::Frame& f) {
  core::UnregisterBufferRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  if (buffers_.erase(req.buffer_id) == 0) {
    return NotFound("buffer " + std::to_string(req.buffer_id) + " is not registered");
  }
  return Reply(f, core::EmptyReply{});
}

Status Session::OnCreateNamespace(local::Frame& f) {
  core::CreateNamespaceRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->CreateNamespace(req.name, req.layout, req.salt, peer_.uid,
                                                                   peer_.gid, req.mode, req.exist_ok));
  return Reply(f, core::NamespaceReply{info});
}

Status Session::OnGetNamespace(local::Frame& f) {
  core::NameRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->GetNamespace(req.name));
  return Reply(f, core::NamespaceReply{info});
}

Status Session::OnListNamespaces(local::Frame& f) {
  return Reply(f, core::ListNamespacesReply{store_->ListNamespaces()});
}

Status Session::OnDropNamespace(local::Frame& f) {
  core::NameRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_ASSIGN_OR_RETURN(NamespaceInfo info, store_->GetNamespace(req.name));
  if (peer_.uid != 0 && peer_.uid != info.uid) {
    return PermissionDenied("only the owner (uid " + std::to_string(info.uid) + ") or root may drop namespace '" +
                            req.name + "'");
  }
  PTS_ASSIGN_OR_RETURN(RemoveResult r, store_->DropNamespace(req.name));
  core::RemoveReply rep{r.nodes, r.bytes};
  return Reply(f, rep);
}

Status Session::OnSetQuota(local::Frame& f) {
  core::SetQuotaRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
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

Status Session::OnQuotas(local::Frame& f) {
  // Everyone may see them, as everyone sees namespaces' sizes.
  core::QuotasRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  core::QuotasReply rep;
  if (req.ns.empty()) {
    rep.quotas = store_->ListQuotas();
  } else {
    PTS_ASSIGN_OR_RETURN(NamespaceQuota q, store_->GetQuota(req.ns));
    rep.quotas.push_back(std::move(q));
  }
  return Reply(f, rep);
}

}  // namespace ptstore::storage
