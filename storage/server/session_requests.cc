#include "storage/server/session.h"

#include <algorithm>
#include <unordered_map>

#include "core/messages.h"
#include "storage/server/node.h"

// A session's requests for prefixes (saves, loads, removals, listings) and
// for where they are: each goes to the node (storage/server/node.h), which adds
// what the cluster needs around the store call.

namespace ptstore::storage {

using core::MsgType;

Status Session::OnSave(local::Frame& f) {
  core::SaveRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kWrite).status());
  PTS_ASSIGN_OR_RETURN(uint8_t * data, BufferRange(req.buffer_id, req.buffer_offset, req.length));
  PTS_ASSIGN_OR_RETURN(SaveResult r, node_->Save(req.ns, req.tokens, data, req.length, req.first_block));
  return Reply(f, core::SaveReply{r.matched_tokens, r.stored_tokens, r.new_bytes});
}

Status Session::OnLookup(local::Frame& f) {
  core::PrefixRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kRead).status());
  PTS_ASSIGN_OR_RETURN(PrefixResult r, node_->Lookup(req.ns, req.tokens));
  return Reply(f, core::PrefixReply{r.matched_tokens, 0, std::move(r.extents)});
}

Status Session::OnPin(local::Frame& f) {
  core::PrefixRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  if (!trusted_) {
    return PermissionDenied("this client does not map the arena (uid " + std::to_string(peer_.uid) +
                            " is not in the store group): load by copy instead");
  }
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kRead).status());
  PTS_ASSIGN_OR_RETURN(PrefixResult r, node_->Pin(req.ns, req.tokens, id_));
  core::PrefixReply rep{r.matched_tokens, r.lease_id, std::move(r.extents)};
  return Reply(f, rep);
}

Status Session::OnLoadCopy(local::Frame& f) {
  core::PrefixRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kRead).status());
  PTS_ASSIGN_OR_RETURN(uint8_t * dst, BufferRange(req.buffer_id, req.buffer_offset, req.capacity));
  PTS_ASSIGN_OR_RETURN(uint64_t tokens, node_->LoadCopy(req.ns, req.tokens, dst, req.capacity));
  core::PrefixReply rep{tokens, 0, {}};
  return Reply(f, rep);
}

Status Session::OnRelease(local::Frame& f) {
  core::ReleaseRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(store_->Release(req.lease_id, id_));
  return Reply(f, core::EmptyReply{});
}

Status Session::OnRemove(local::Frame& f) {
  core::RemoveRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kWrite).status());
  Result<RemoveResult> r = req.by_key ? node_->RemoveByKey(req.ns, req.key) : node_->Remove(req.ns, req.tokens);
  PTS_RETURN_IF_ERROR(r.status());
  return Reply(f, core::RemoveReply{r->nodes, r->bytes});
}

Status Session::OnStats(local::Frame& f) {
  return Reply(f, core::StatsReply{store_->Stats()});
}

Status Session::OnListTree(local::Frame& f) {
  core::ListTreeRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kRead).status());
  PTS_ASSIGN_OR_RETURN(auto nodes, store_->ListTree(req.ns, req.parent, req.recursive));
  return Reply(f, core::ListTreeReply{std::move(nodes)});
}

Status Session::OnIncrement(local::Frame& f) {
  core::IncrementRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  if (req.pin && !trusted_) {
    return PermissionDenied("this client does not map the arena (uid " + std::to_string(peer_.uid) +
                            " is not in the store group): it cannot pin extents");
  }
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kRead).status());
  PTS_ASSIGN_OR_RETURN(IncrementResult r, store_->Increment(req.ns, req.key, req.pin, req.whole_prefix, id_));
  core::IncrementReply rep{r.node, std::move(r.tokens), r.lease_id, std::move(r.extents)};
  return Reply(f, rep);
}

Status Session::OnSetTimes(local::Frame& f) {
  core::SetTimesRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kWrite).status());
  PTS_ASSIGN_OR_RETURN(PrefixNodeInfo node, store_->SetTimes(req.ns, req.key, req.atime_ns, req.mtime_ns));
  return Reply(f, core::SetTimesReply{node});
}

Status Session::OnChanges(local::Frame& f) {
  core::ChangesRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  constexpr uint32_t kMaxChanges = 4096;
  const uint32_t max = req.max == 0 ? kMaxChanges : std::min(req.max, kMaxChanges);
  core::ChangesReply rep{store_->Changes(req.epoch, req.since, max)};
  // Only what this peer may read: a namespace's keys are its contents.
  std::unordered_map<std::string, bool> readable;
  std::erase_if(rep.changes.changes, [&](const TreeChange& c) {
    if (c.kind == ChangeKind::kNamespace) return false;  // names are listed to everyone
    auto [it, fresh] = readable.try_emplace(c.ns, false);
    if (fresh) it->second = Authorize(c.ns, local::Access::kRead).ok();
    return !it->second;
  });
  return Reply(f, rep);
}

Status Session::OnLocate(local::Frame& f) {
  core::LocateRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kRead).status());
  core::LocateReply rep;
  PTS_ASSIGN_OR_RETURN(rep.locations, node_->Locate(req.ns, req.keys));
  return Reply(f, rep);
}

Status Session::OnLocatePrefix(local::Frame& f) {
  core::LocatePrefixRequest req;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
  PTS_RETURN_IF_ERROR(Authorize(req.ns, local::Access::kRead).status());
  core::LocatePrefixReply rep;
  PTS_ASSIGN_OR_RETURN(rep.location, node_->LocatePrefix(req.ns, req.tokens));
  return Reply(f, rep);
}

Status Session::OnClusterStatus(local::Frame& f) { return Reply(f, node_->ClusterStatus()); }

}  // namespace ptstore::storage
