// The registry of the message types of both protocols (core/messages.h,
// core/peer_messages.h): the name of each type (MsgTypeName, for logs and
// errors) and the decoder of its body (DecodeAny, which the fuzzer and the
// registry tests walk over 0..kLastMsgType). A type added to MsgType gets a
// line in both switches.
#include "core/messages.h"
#include "core/peer_messages.h"

namespace ptstore::core {

const char* MsgTypeName(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kError: return "Error";
    case MsgType::kHello: return "Hello";
    case MsgType::kHelloReply: return "HelloReply";
    case MsgType::kRegisterBuffer: return "RegisterBuffer";
    case MsgType::kRegisterBufferReply: return "RegisterBufferReply";
    case MsgType::kCreateNamespace: return "CreateNamespace";
    case MsgType::kCreateNamespaceReply: return "CreateNamespaceReply";
    case MsgType::kGetNamespace: return "GetNamespace";
    case MsgType::kGetNamespaceReply: return "GetNamespaceReply";
    case MsgType::kListNamespaces: return "ListNamespaces";
    case MsgType::kListNamespacesReply: return "ListNamespacesReply";
    case MsgType::kSave: return "Save";
    case MsgType::kSaveReply: return "SaveReply";
    case MsgType::kLookup: return "Lookup";
    case MsgType::kLookupReply: return "LookupReply";
    case MsgType::kPin: return "Pin";
    case MsgType::kPinReply: return "PinReply";
    case MsgType::kLoadCopy: return "LoadCopy";
    case MsgType::kLoadCopyReply: return "LoadCopyReply";
    case MsgType::kRelease: return "Release";
    case MsgType::kReleaseReply: return "ReleaseReply";
    case MsgType::kRemove: return "Remove";
    case MsgType::kRemoveReply: return "RemoveReply";
    case MsgType::kStats: return "Stats";
    case MsgType::kStatsReply: return "StatsReply";
    case MsgType::kListTree: return "ListTree";
    case MsgType::kListTreeReply: return "ListTreeReply";
    case MsgType::kDropNamespace: return "DropNamespace";
    case MsgType::kDropNamespaceReply: return "DropNamespaceReply";
    case MsgType::kUnregisterBuffer: return "UnregisterBuffer";
    case MsgType::kUnregisterBufferReply: return "UnregisterBufferReply";
    case MsgType::kIncrement: return "Increment";
    case MsgType::kIncrementReply: return "IncrementReply";
    case MsgType::kAuthHello: return "AuthHello";
    case MsgType::kAuthHelloReply: return "AuthHelloReply";
    case MsgType::kAuthProof: return "AuthProof";
    case MsgType::kAuthProofReply: return "AuthProofReply";
    case MsgType::kPeerPing: return "PeerPing";
    case MsgType::kPeerPingReply: return "PeerPingReply";
    case MsgType::kShardLookup: return "ShardLookup";
    case MsgType::kShardLookupReply: return "ShardLookupReply";
    case MsgType::kShardAnnounce: return "ShardAnnounce";
    case MsgType::kShardAnnounceReply: return "ShardAnnounceReply";
    case MsgType::kPeerFetch: return "PeerFetch";
    case MsgType::kPeerFetchReply: return "PeerFetchReply";
    case MsgType::kPeerRelease: return "PeerRelease";
    case MsgType::kPeerReleaseReply: return "PeerReleaseReply";
    case MsgType::kPeerRemove: return "PeerRemove";
    case MsgType::kPeerRemoveReply: return "PeerRemoveReply";
    case MsgType::kClusterStatus: return "ClusterStatus";
    case MsgType::kClusterStatusReply: return "ClusterStatusReply";
    case MsgType::kPeerHolds: return "PeerHolds";
    case MsgType::kPeerHoldsReply: return "PeerHoldsReply";
    case MsgType::kLocate: return "Locate";
    case MsgType::kLocateReply: return "LocateReply";
    case MsgType::kLocatePrefix: return "LocatePrefix";
    case MsgType::kLocatePrefixReply: return "LocatePrefixReply";
    case MsgType::kSetTimes: return "SetTimes";
    case MsgType::kSetTimesReply: return "SetTimesReply";
    case MsgType::kChanges: return "Changes";
    case MsgType::kChangesReply: return "ChangesReply";
    case MsgType::kPeerTiers: return "PeerTiers";
    case MsgType::kPeerTiersReply: return "PeerTiersReply";
    case MsgType::kSetQuota: return "SetQuota";
    case MsgType::kSetQuotaReply: return "SetQuotaReply";
    case MsgType::kQuotas: return "Quotas";
    case MsgType::kQuotasReply: return "QuotasReply";
  }
  return "Unknown";
}
namespace {
template <typename M>
Status DecodeAs(std::span<const uint8_t> body) {
  Decoder d(body);
  M m;
  return m.Decode(d);
}
}  // namespace

Status DecodeAny(uint16_t type, std::span<const uint8_t> body) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kError: return DecodeAs<ErrorReply>(body);
    case MsgType::kHello: return DecodeAs<HelloRequest>(body);
    case MsgType::kHelloReply: return DecodeAs<HelloReply>(body);
    case MsgType::kRegisterBuffer: return DecodeAs<RegisterBufferRequest>(body);
    case MsgType::kRegisterBufferReply: return DecodeAs<RegisterBufferReply>(body);
    case MsgType::kCreateNamespace: return DecodeAs<CreateNamespaceRequest>(body);
    case MsgType::kCreateNamespaceReply:
    case MsgType::kGetNamespaceReply: return DecodeAs<NamespaceReply>(body);
    case MsgType::kGetNamespace:
    case MsgType::kDropNamespace: return DecodeAs<NameRequest>(body);
    case MsgType::kListNamespaces:
    case MsgType::kStats: return DecodeAs<NameRequest>(body);
    case MsgType::kListNamespacesReply: return DecodeAs<ListNamespacesReply>(body);
    case MsgType::kSave: return DecodeAs<SaveRequest>(body);
    case MsgType::kSaveReply: return DecodeAs<SaveReply>(body);
    case MsgType::kLookup:
    case MsgType::kPin:
    case MsgType::kLoadCopy: return DecodeAs<PrefixRequest>(body);
    case MsgType::kLookupReply:
    case MsgType::kPinReply:
    case MsgType::kLoadCopyReply: return DecodeAs<PrefixReply>(body);
    case MsgType::kRelease: return DecodeAs<ReleaseRequest>(body);
    case MsgType::kReleaseReply: return DecodeAs<EmptyReply>(body);
    case MsgType::kRemove: return DecodeAs<RemoveRequest>(body);
    case MsgType::kRemoveReply:
    case MsgType::kDropNamespaceReply: return DecodeAs<RemoveReply>(body);
    case MsgType::kStatsReply: return DecodeAs<StatsReply>(body);
    case MsgType::kListTree: return DecodeAs<ListTreeRequest>(body);
    case MsgType::kListTreeReply: return DecodeAs<ListTreeReply>(body);
    case MsgType::kUnregisterBuffer: return DecodeAs<UnregisterBufferRequest>(body);
    case MsgType::kUnregisterBufferReply: return DecodeAs<EmptyReply>(body);
    case MsgType::kIncrement: return DecodeAs<IncrementRequest>(body);
    case MsgType::kIncrementReply: return DecodeAs<IncrementReply>(body);
    case MsgType::kAuthHello: return DecodeAs<AuthHello>(body);
    case MsgType::kAuthHelloReply: return DecodeAs<AuthHelloReply>(body);
    case MsgType::kAuthProof: return DecodeAs<AuthProof>(body);
    case MsgType::kAuthProofReply: return DecodeAs<AuthProofReply>(body);
    case MsgType::kPeerPing: return DecodeAs<PeerPing>(body);
    case MsgType::kPeerPingReply: return DecodeAs<PeerPingReply>(body);
    case MsgType::kShardLookup: return DecodeAs<ShardLookup>(body);
    case MsgType::kShardLookupReply: return DecodeAs<ShardLookupReply>(body);
    case MsgType::kShardAnnounce: return DecodeAs<ShardAnnounce>(body);
    case MsgType::kShardAnnounceReply:
    case MsgType::kPeerReleaseReply: return DecodeAs<EmptyReply>(body);
    case MsgType::kPeerFetch: return DecodeAs<PeerFetch>(body);
    case MsgType::kPeerFetchReply: return DecodeAs<PeerFetchReply>(body);
    case MsgType::kPeerRelease: return DecodeAs<PeerRelease>(body);
    case MsgType::kPeerRemove: return DecodeAs<PeerRemove>(body);
    case MsgType::kPeerRemoveReply: return DecodeAs<RemoveReply>(body);
    case MsgType::kClusterStatus: return DecodeAs<EmptyReply>(body);
    case MsgType::kClusterStatusReply: return DecodeAs<ClusterStatusReply>(body);
    case MsgType::kPeerHolds: return DecodeAs<PeerHolds>(body);
    case MsgType::kPeerHoldsReply: return DecodeAs<PeerHoldsReply>(body);
    case MsgType::kLocate: return DecodeAs<LocateRequest>(body);
    case MsgType::kLocateReply: return DecodeAs<LocateReply>(body);
    case MsgType::kLocatePrefix: return DecodeAs<LocatePrefixRequest>(body);
    case MsgType::kLocatePrefixReply: return DecodeAs<LocatePrefixReply>(body);
    case MsgType::kSetTimes: return DecodeAs<SetTimesRequest>(body);
    case MsgType::kSetTimesReply: return DecodeAs<SetTimesReply>(body);
    case MsgType::kChanges: return DecodeAs<ChangesRequest>(body);
    case MsgType::kChangesReply: return DecodeAs<ChangesReply>(body);
    case MsgType::kPeerTiers: return DecodeAs<PeerTiers>(body);
    case MsgType::kPeerTiersReply: return DecodeAs<PeerTiersReply>(body);
    case MsgType::kSetQuota: return DecodeAs<SetQuotaRequest>(body);
    case MsgType::kSetQuotaReply: return DecodeAs<SetQuotaReply>(body);
    case MsgType::kQuotas: return DecodeAs<QuotasRequest>(body);
    case MsgType::kQuotasReply: return DecodeAs<QuotasReply>(body);
  }
  return ProtocolError("unknown message type " + std::to_string(type));
}

}  // namespace ptstore::core
