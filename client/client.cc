#include "ptstore/client.h"

#include <algorithm>
#include <cstring>

#include "client/connection.h"
#include "client/parallel_copy.h"
#include "core/messages.h"
#include "core/peer_messages.h"

namespace ptstore {

using client::ClientCore;
using client::Connection;
using core::MsgType;

namespace {
// Saves at least this large first ask what is stored, so that only the new
// blocks are copied into the staging buffer.
constexpr uint64_t kSkipStoredThreshold = 4ull << 20;

core::PrefixRequest PrefixRequestFor(const std::string& ns, std::span<const uint32_t> tokens) {
  core::PrefixRequest req;
  req.ns = ns;
  req.tokens.assign(tokens.begin(), tokens.end());
  return req;
}

uint64_t TokensThatFit(uint64_t matched_tokens, const Layout& l, uint64_t capacity) {
  uint64_t fit_blocks = capacity / l.BytesPerBlock();
  return std::min(matched_tokens, fit_blocks * l.block_tokens);
}
}  // namespace

// ------------------------------------------------------------ PinnedPrefix

PinnedPrefix::PinnedPrefix(PinnedPrefix&& o) noexcept
    : core_(std::move(o.core_)), conn_(std::move(o.conn_)), lease_(std::exchange(o.lease_, 0)),
      tokens_(std::exchange(o.tokens_, 0)), extents_(std::move(o.extents_)) {}

PinnedPrefix& PinnedPrefix::operator=(PinnedPrefix&& o) noexcept {
  if (this != &o) {
    Release().IgnoreError();
    core_ = std::move(o.core_);
    conn_ = std::move(o.conn_);
    lease_ = std::exchange(o.lease_, 0);
    tokens_ = std::exchange(o.tokens_, 0);
    extents_ = std::move(o.extents_);
  }
  return *this;
}

PinnedPrefix::~PinnedPrefix() { Release().IgnoreError(); }

uint64_t PinnedPrefix::bytes() const {
  uint64_t b = 0;
  for (const Extent& e : extents_) b += e.length;
  return b;
}

const uint8_t* PinnedPrefix::data(const Extent& e) const { return conn_->arena()->data() + e.arena_offset; }

Status PinnedPrefix::CopyTo(void* dst, uint64_t bytes) const {
  if (bytes > this->bytes()) {
    return InvalidArgument("cannot copy " + std::to_string(bytes) + " bytes out of a pinned prefix of " +
                           std::to_string(this->bytes()));
  }
  if (bytes > 0 && lease_ == 0) return InvalidArgument("the prefix is no longer pinned");
  auto* out = static_cast<uint8_t*>(dst);
  std::vector<client::CopySpan> spans;
  spans.reserve(extents_.size());
  for (const Extent& e : extents_) {
    if (bytes == 0) break;
    uint64_t n = std::min(bytes, e.length);
    spans.push_back({out, data(e), n});
    out += n;
    bytes -= n;
  }
  client::CopyParallel(spans, core_->options().copy_threads);
  return Status::OK();
}

Status PinnedPrefix::Release() {
  if (lease_ == 0) return Status::OK();
  uint64_t lease = std::exchange(lease_, 0);
  // The lease belongs to the session (connection) that pinned it.
  std::lock_guard lk(conn_->mu);
  if (conn_->broken()) return Status::OK();  // the server dropped the session's leases
  core::ReleaseRequest req{lease};
  core::EmptyReply rep;
  return conn_->Call(MsgType::kRelease, req, MsgType::kReleaseReply, &rep);
}

// -------------------------------------------------------- RegisteredBuffer

struct RegisteredBuffer::Impl {
  std::shared_ptr<Connection> conn;
  std::unique_ptr<core::SharedMemory> shm;
  uint32_t id = 0;
};

RegisteredBuffer& RegisteredBuffer::operator=(RegisteredBuffer&& other) noexcept {
  if (this != &other) {
    RegisteredBuffer old(std::move(*this));  // unregistered when `old` goes
    impl_ = std::move(other.impl_);
  }
  return *this;
}

RegisteredBuffer::~RegisteredBuffer() {
  if (!impl_) return;
  std::lock_guard lk(impl_->conn->mu);
  if (!impl_->conn->broken()) impl_->conn->Unregister(impl_->id).IgnoreError();
}
uint8_t* RegisteredBuffer::data() const { return impl_ ? impl_->shm->data() : nullptr; }
uint64_t RegisteredBuffer::size() const { return impl_ ? impl_->shm->size() : 0; }

// ------------------------------------------------------------------ Client

Client::Client(std::shared_ptr<ClientCore> core) : core_(std::move(core)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto core = std::make_shared<ClientCore>(options);
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core->Acquire());  // says Hello now: fail early
  h.lock.unlock();
  return std::unique_ptr<Client>(new Client(std::move(core)));
}

bool Client::mapped() const { return core_->hello().mapped; }
uint32_t Client::node_id() const { return core_->hello().node_id; }
uint64_t Client::arena_id() const { return core_->arena_id(); }

Status Client::CopyFromArena(std::span<const ArenaPiece> pieces, void* dst, uint64_t dst_bytes) const {
  std::shared_ptr<core::SharedMemory> arena = core_->arena();
  if (!arena) return PermissionDenied("this client has no arena mapping: it cannot copy out of the arena");
  const uint64_t size = arena->size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ArenaPiece& p = pieces[i];
    if (p.arena_offset > size || p.length > size - p.arena_offset) {
      return InvalidArgument("arena piece " + std::to_string(i) + " (" + std::to_string(p.length) + " bytes at " +
                             std::to_string(p.arena_offset) + ") lies outside the arena of " + std::to_string(size) +
                             " bytes");
    }
    if (p.dst_offset > dst_bytes || p.length > dst_bytes - p.dst_offset) {
      return InvalidArgument("arena piece " + std::to_string(i) + " (" + std::to_string(p.length) + " bytes to " +
                             std::to_string(p.dst_offset) + ") lies outside the destination of " +
                             std::to_string(dst_bytes) + " bytes");
    }
  }
  auto* out = static_cast<uint8_t*>(dst);
  std::vector<client::CopySpan> spans;
  spans.reserve(pieces.size());
  for (const ArenaPiece& p : pieces) spans.push_back({out + p.dst_offset, arena->data() + p.arena_offset, p.length});
  client::CopyParallel(spans, core_->options().copy_threads);
  return Status::OK();
}

Result<NamespaceInfo> Client::CreateNamespace(const std::string& name, const Layout& layout, const std::string& salt,
                                              uint32_t mode, bool exist_ok) {
  PTS_RETURN_IF_ERROR(ValidateNamespaceName(name));
  PTS_RETURN_IF_ERROR(layout.Validate());
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::CreateNamespaceRequest req{name, layout, salt, mode, exist_ok};
  core::NamespaceReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kCreateNamespace, req, MsgType::kCreateNamespaceReply, &rep));
  return rep.info;
}

Result<NamespaceInfo> Client::GetNamespace(const std::string& name) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::NameRequest req{name};
  core::NamespaceReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kGetNamespace, req, MsgType::kGetNamespaceReply, &rep));
  return rep.info;
}

Result<std::vector<NamespaceInfo>> Client::ListNamespaces() {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::ListNamespacesReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kListNamespaces, core::NameRequest{}, MsgType::kListNamespacesReply, &rep));
  return std::move(rep.namespaces);
}

Result<RemoveResult> Client::DropNamespace(const std::string& name) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::RemoveReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kDropNamespace, core::NameRequest{name}, MsgType::kDropNamespaceReply, &rep));
  core_->ForgetLayout(name);
  return RemoveResult{rep.nodes, rep.bytes};
}

Result<SaveResult> Client::Save(const std::string& ns, std::span<const uint32_t> tokens, const void* kv,
                                uint64_t bytes) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  PTS_ASSIGN_OR_RETURN(Layout layout, core_->LayoutOf(h, ns));
  const uint64_t blocks = tokens.size() / layout.block_tokens;
  const uint64_t bb = layout.BytesPerBlock();
  if (bytes != blocks * bb) {
    return InvalidArgument("save: the KV buffer holds " + std::to_string(bytes) + " bytes, but " +
                           std::to_string(blocks) + " whole blocks in layout {" + layout.ToString() + "} need " +
                           std::to_string(blocks * bb));
  }
  uint64_t first_block = 0;
  if (bytes >= kSkipStoredThreshold) {
    core::PrefixRequest lreq = PrefixRequestFor(ns, tokens);
    core::PrefixReply lrep;
    PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kLookup, lreq, MsgType::kLookupReply, &lrep));
    first_block = lrep.matched_tokens / layout.block_tokens;
  }
  for (;;) {
    const uint64_t offset = first_block * bb;
    const uint64_t len = bytes - offset;
    PTS_RETURN_IF_ERROR(h.conn->EnsureStaging(std::max<uint64_t>(len, 1)));
    const client::CopySpan in{h.conn->staging(), static_cast<const uint8_t*>(kv) + offset, len};
    client::CopyParallel({&in, 1}, core_->options().copy_threads);
    core::SaveRequest req;
    req.ns = ns;
    req.tokens.assign(tokens.begin(), tokens.end());
    req.buffer_id = h.conn->staging_id();
    req.buffer_offset = 0;
    req.length = len;
    req.first_block = first_block;
    core::SaveReply rep;
    Status st = h.conn->Call(MsgType::kSave, req, MsgType::kSaveReply, &rep);
    if (st.code() == Code::kAborted && first_block > 0) {
      first_block = 0;  // what we skipped was evicted meanwhile: send it all
      continue;
    }
    PTS_RETURN_IF_ERROR(st);
    return SaveResult{rep.matched_tokens, rep.stored_tokens, rep.new_bytes};
  }
}

Result<SaveResult> Client::Save(const std::string& ns, std::span<const uint32_t> tokens, const RegisteredBuffer& buf,
                                uint64_t offset, uint64_t bytes) {
  if (!buf.impl_) return InvalidArgument("save: the registered buffer is empty (moved from?)");
  std::lock_guard lk(buf.impl_->conn->mu);
  core::SaveRequest req;
  req.ns = ns;
  req.tokens.assign(tokens.begin(), tokens.end());
  req.buffer_id = buf.impl_->id;
  req.buffer_offset = offset;
  req.length = bytes;
  core::SaveReply rep;
  PTS_RETURN_IF_ERROR(buf.impl_->conn->Call(MsgType::kSave, req, MsgType::kSaveReply, &rep));
  return SaveResult{rep.matched_tokens, rep.stored_tokens, rep.new_bytes};
}

Result<PrefixInfo> Client::Lookup(const std::string& ns, std::span<const uint32_t> tokens) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::PrefixRequest req = PrefixRequestFor(ns, tokens);
  core::PrefixReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kLookup, req, MsgType::kLookupReply, &rep));
  return PrefixInfo{rep.matched_tokens, std::move(rep.extents)};
}

Result<PinnedPrefix> Client::Pin(const std::string& ns, std::span<const uint32_t> tokens) {
  if (!mapped()) {
    return PermissionDenied("this client has no arena mapping (not trusted with every namespace): use Load");
  }
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::PrefixRequest req = PrefixRequestFor(ns, tokens);
  core::PrefixReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kPin, req, MsgType::kPinReply, &rep));
  return MakePinned(h.conn, rep.lease_id, rep.matched_tokens, std::move(rep.extents));
}

Result<PinnedPrefix> Client::MakePinned(const std::shared_ptr<client::Connection>& conn, uint64_t lease,
                                        uint64_t tokens, std::vector<Extent> extents) {
  PinnedPrefix p;
  p.core_ = core_;
  p.conn_ = conn;
  p.lease_ = lease;
  p.tokens_ = tokens;
  p.extents_ = std::move(extents);
  const uint64_t arena = conn->arena() ? conn->arena()->size() : 0;
  for (const Extent& e : p.extents_) {
    if (e.arena_offset > arena || e.length > arena - e.arena_offset) {
      return ProtocolError("the server returned an extent outside its arena");
    }
  }
  return p;
}

Result<uint64_t> Client::Load(const std::string& ns, std::span<const uint32_t> tokens, void* dst,
                              uint64_t capacity) {
  if (mapped()) {
    PTS_ASSIGN_OR_RETURN(PinnedPrefix pin, Pin(ns, tokens));
    if (pin.tokens() == 0) return uint64_t{0};
    Layout layout;
    {
      PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
      PTS_ASSIGN_OR_RETURN(layout, core_->LayoutOf(h, ns));
    }
    const uint64_t n = TokensThatFit(pin.tokens(), layout, capacity);
    PTS_RETURN_IF_ERROR(pin.CopyTo(dst, n * layout.BytesPerToken()));
    PTS_RETURN_IF_ERROR(pin.Release());
    return n;
  }
  // Copy path: the server copies into our staging buffer, we copy out. One
  // RPC, so the server counts the hit or the miss as for a pinned load.
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  PTS_ASSIGN_OR_RETURN(Layout layout, core_->LayoutOf(h, ns));
  const uint64_t most = TokensThatFit(tokens.size() / layout.block_tokens * layout.block_tokens, layout, capacity) *
                        layout.BytesPerToken();
  PTS_RETURN_IF_ERROR(h.conn->EnsureStaging(std::max<uint64_t>(most, 1)));
  core::PrefixRequest req = PrefixRequestFor(ns, tokens);
  req.buffer_id = h.conn->staging_id();
  req.buffer_offset = 0;
  req.capacity = most;
  core::PrefixReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kLoadCopy, req, MsgType::kLoadCopyReply, &rep));
  const client::CopySpan out{dst, h.conn->staging(), rep.matched_tokens * layout.BytesPerToken()};
  client::CopyParallel({&out, 1}, core_->options().copy_threads);
  return rep.matched_tokens;
}

Result<uint64_t> Client::Load(const std::string& ns, std::span<const uint32_t> tokens, const RegisteredBuffer& buf,
                              uint64_t offset, uint64_t capacity) {
  if (!buf.impl_) return InvalidArgument("load: the registered buffer is empty (moved from?)");
  std::lock_guard lk(buf.impl_->conn->mu);
  core::PrefixRequest req = PrefixRequestFor(ns, tokens);
  req.buffer_id = buf.impl_->id;
  req.buffer_offset = offset;
  req.capacity = capacity;
  core::PrefixReply rep;
  PTS_RETURN_IF_ERROR(buf.impl_->conn->Call(MsgType::kLoadCopy, req, MsgType::kLoadCopyReply, &rep));
  return rep.matched_tokens;
}

Result<RemoveResult> Client::Remove(const std::string& ns, std::span<const uint32_t> tokens) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::RemoveRequest req;
  req.ns = ns;
  req.tokens.assign(tokens.begin(), tokens.end());
  core::RemoveReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kRemove, req, MsgType::kRemoveReply, &rep));
  return RemoveResult{rep.nodes, rep.bytes};
}

Result<RemoveResult> Client::RemoveByKey(const std::string& ns, const ChainKey& key) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::RemoveRequest req;
  req.ns = ns;
  req.by_key = true;
  req.key = key;
  core::RemoveReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kRemove, req, MsgType::kRemoveReply, &rep));
  return RemoveResult{rep.nodes, rep.bytes};
}

Result<StoreStats> Client::Stats() {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::StatsReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kStats, core::NameRequest{}, MsgType::kStatsReply, &rep));
  return rep.stats;
}

Result<std::vector<IncrementLocation>> Client::Locate(const std::string& ns, const std::vector<ChainKey>& keys) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::LocateRequest req{ns, keys};
  core::LocateReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kLocate, req, MsgType::kLocateReply, &rep));
  return std::move(rep.locations);
}

Result<PrefixLocation> Client::LocatePrefix(const std::string& ns, std::span<const uint32_t> tokens) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::LocatePrefixRequest req{ns, std::vector<uint32_t>(tokens.begin(), tokens.end())};
  core::LocatePrefixReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kLocatePrefix, req, MsgType::kLocatePrefixReply, &rep));
  return std::move(rep.location);
}

Result<ClusterStatus> Client::GetClusterStatus() {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::ClusterStatusReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kClusterStatus, core::EmptyReply{}, MsgType::kClusterStatusReply, &rep));
  return static_cast<ClusterStatus>(rep);
}

Result<IncrementInfo> Client::GetIncrement(const std::string& ns, const ChainKey& key) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::IncrementRequest req{ns, key, false, false};
  core::IncrementReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kIncrement, req, MsgType::kIncrementReply, &rep));
  return IncrementInfo{rep.node, std::move(rep.tokens)};
}

Result<PrefixNodeInfo> Client::SetTimes(const std::string& ns, const ChainKey& key, uint64_t atime_ns,
                                        uint64_t mtime_ns) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::SetTimesRequest req{ns, key, atime_ns, mtime_ns};
  core::SetTimesReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kSetTimes, req, MsgType::kSetTimesReply, &rep));
  return rep.node;
}

Result<NamespaceQuota> Client::SetQuota(const std::string& ns, const QuotaChange& change) {
  if (!change.dram && !change.ssd) return InvalidArgument("set quota of namespace '" + ns + "': no tier given");
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::SetQuotaRequest req;
  req.ns = ns;
  if (change.dram) {
    req.set |= core::kQuotaSetDram;
    req.dram_quota = *change.dram;
  }
  if (change.ssd) {
    req.set |= core::kQuotaSetSsd;
    req.ssd_quota = *change.ssd;
  }
  core::SetQuotaReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kSetQuota, req, MsgType::kSetQuotaReply, &rep));
  return rep.quota;
}

Result<std::vector<NamespaceQuota>> Client::Quotas(const std::string& ns) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::QuotasRequest req{ns};
  core::QuotasReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kQuotas, req, MsgType::kQuotasReply, &rep));
  if (!ns.empty() && (rep.quotas.size() != 1 || rep.quotas[0].ns != ns)) {
    return ProtocolError("Quotas of namespace '" + ns + "' answered for " + std::to_string(rep.quotas.size()) +
                         " namespaces");
  }
  return std::move(rep.quotas);
}

Result<TreeChanges> Client::Changes(uint64_t epoch, uint64_t since, uint32_t max) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::ChangesRequest req{epoch, since, max};
  core::ChangesReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kChanges, req, MsgType::kChangesReply, &rep));
  return std::move(rep.changes);
}

Result<PinnedPrefix> Client::PinIncrement(const std::string& ns, const ChainKey& key, bool whole_prefix) {
  if (!mapped()) {
    return PermissionDenied("this client has no arena mapping (not trusted with every namespace): it cannot pin");
  }
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::IncrementRequest req{ns, key, true, whole_prefix};
  core::IncrementReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kIncrement, req, MsgType::kIncrementReply, &rep));
  const uint64_t tokens = whole_prefix ? rep.node.start_token + rep.node.tokens : rep.node.tokens;
  return MakePinned(h.conn, rep.lease_id, tokens, std::move(rep.extents));
}

Result<std::vector<PrefixNodeInfo>> Client::ListTree(const std::string& ns, const ChainKey& parent, bool recursive) {
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  core::ListTreeRequest req{ns, parent, recursive};
  core::ListTreeReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kListTree, req, MsgType::kListTreeReply, &rep));
  return std::move(rep.nodes);
}

Result<RegisteredBuffer> Client::AllocateBuffer(uint64_t bytes) {
  if (bytes == 0) return InvalidArgument("cannot allocate an empty buffer");
  core::SharedMemory::CreateOptions o;
  o.name = "ptstore-buffer";
  o.try_huge_pages = false;
  o.seal_future_writes = false;
  PTS_ASSIGN_OR_RETURN(auto shm, core::SharedMemory::Create(bytes, o));
  PTS_ASSIGN_OR_RETURN(ClientCore::Held h, core_->Acquire());
  PTS_ASSIGN_OR_RETURN(uint32_t id, h.conn->Register(*shm));
  RegisteredBuffer b;
  b.impl_ = std::make_shared<RegisteredBuffer::Impl>();
  b.impl_->conn = h.conn;
  b.impl_->shm = std::move(shm);
  b.impl_->id = id;
  return b;
}

}  // namespace ptstore
