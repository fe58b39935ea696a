// libFuzzer target for the wire format (core/wire.h, core/messages.h).
//
// The input is read two ways:
//   1. as a frame: 24-byte header, then the body it announces; the header is
//      decoded, the checksum verified, and the body decoded as the header's
//      type (whether or not the checksum matched, so the fuzzer does not have
//      to forge XXH32 to reach the decoders);
//   2. as a bare body, decoded as every message type and some unknown ones.
//
// Properties checked beyond "no crash, no sanitizer report":
//   - every failure is kProtocol with a message (never another code, never
//     an empty message);
//   - DecodeAny agrees with the typed decoder of the same message;
//   - a body that decodes re-encodes to exactly the same bytes (the encoding
//     is canonical), except ErrorReply codes outside the registry, which
//     decode as kProtocol by design, and layouts of one full group written
//     in the grouped form, which decode as the dense layout of that group
//     (30 bytes shorter each; the shorter body must then be canonical);
//   - a header that decodes with a matching checksum is re-encoded by
//     EncodeFrameHeader byte for byte.
//
// The same checks run without libFuzzer in tests/core/wire_fuzz_replay_test.cc
// through CheckWireInput().
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "core/messages.h"
#include "core/peer_messages.h"
#include "core/wire.h"
#include "core/wire_types.h"

namespace ptstore::fuzz {

using core::DecodeAny;
using core::Decoder;
using core::Encoder;
using core::MsgType;

namespace {

std::string Hex(std::span<const uint8_t> b, size_t max = 64) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < b.size() && i < max; ++i) {
    s += kDigits[b[i] >> 4];
    s += kDigits[b[i] & 15];
  }
  if (b.size() > max) s += "...";
  return s;
}

// A failed decode must be a protocol error that says something.
std::string CheckFailure(const char* what, uint16_t type, const Status& s) {
  if (s.ok()) return "";
  if (s.code() != Code::kProtocol || s.message().empty()) {
    return std::string(what) + " of type " + std::to_string(type) + " failed with " + s.ToString() +
           " (want protocol_error with a message)";
  }
  return "";
}

template <typename M>
std::string CheckTyped(uint16_t type, std::span<const uint8_t> body, const Status& any) {
  M m;
  Decoder d(body);
  Status s = m.Decode(d);
  if (s.ok() != any.ok()) {
    return std::string("DecodeAny and ") + core::MsgTypeName(type) + "::Decode disagree: " + any.ToString() +
           " vs " + s.ToString();
  }
  if (!s.ok()) return "";
  Encoder e;
  m.Encode(e);
  if (e.buffer().size() != body.size() || !std::equal(body.begin(), body.end(), e.buffer().begin())) {
    if constexpr (std::is_same_v<M, core::ErrorReply>) {
      uint16_t raw;
      std::memcpy(&raw, body.data(), 2);
      if (raw > static_cast<uint16_t>(Code::kUnimplemented)) return "";  // unknown code -> kProtocol
    }
    // A one-full-group layout in the grouped form (u32 count + one 26-byte
    // group) comes back as the 17-byte dense form: the normalized body must
    // be a fixed point.
    constexpr size_t kGroupedOneFull = 4 + core::kLayoutGroupBytes;
    const size_t shrunk = body.size() - std::min(body.size(), e.buffer().size());
    if (e.buffer().size() < body.size() && shrunk % kGroupedOneFull == 0) {
      M again;
      Decoder d2(e.buffer());
      Encoder e2;
      if (again.Decode(d2).ok() && (again.Encode(e2), e2.buffer() == e.buffer())) return "";
    }
    return std::string(core::MsgTypeName(type)) + " re-encodes differently: " + Hex(body) + " -> " +
           Hex(e.buffer());
  }
  return "";
}

std::string CheckBody(uint16_t type, std::span<const uint8_t> body) {
  Status any = DecodeAny(type, body);
  std::string err = CheckFailure("DecodeAny", type, any);
  if (!err.empty()) return err;
  switch (static_cast<MsgType>(type)) {
    case MsgType::kError: return CheckTyped<core::ErrorReply>(type, body, any);
    case MsgType::kHello: return CheckTyped<core::HelloRequest>(type, body, any);
    case MsgType::kHelloReply: return CheckTyped<core::HelloReply>(type, body, any);
    case MsgType::kRegisterBuffer: return CheckTyped<core::RegisterBufferRequest>(type, body, any);
    case MsgType::kRegisterBufferReply: return CheckTyped<core::RegisterBufferReply>(type, body, any);
    case MsgType::kCreateNamespace: return CheckTyped<core::CreateNamespaceRequest>(type, body, any);
    case MsgType::kCreateNamespaceReply:
    case MsgType::kGetNamespaceReply: return CheckTyped<core::NamespaceReply>(type, body, any);
    case MsgType::kGetNamespace:
    case MsgType::kDropNamespace:
    case MsgType::kListNamespaces:
    case MsgType::kStats: return CheckTyped<core::NameRequest>(type, body, any);
    case MsgType::kListNamespacesReply: return CheckTyped<core::ListNamespacesReply>(type, body, any);
    case MsgType::kSave: return CheckTyped<core::SaveRequest>(type, body, any);
    case MsgType::kSaveReply: return CheckTyped<core::SaveReply>(type, body, any);
    case MsgType::kLookup:
    case MsgType::kPin:
    case MsgType::kLoadCopy: return CheckTyped<core::PrefixRequest>(type, body, any);
    case MsgType::kLookupReply:
    case MsgType::kPinReply:
    case MsgType::kLoadCopyReply: return CheckTyped<core::PrefixReply>(type, body, any);
    case MsgType::kRelease: return CheckTyped<core::ReleaseRequest>(type, body, any);
    case MsgType::kReleaseReply: return CheckTyped<core::EmptyReply>(type, body, any);
    case MsgType::kRemove: return CheckTyped<core::RemoveRequest>(type, body, any);
    case MsgType::kRemoveReply:
    case MsgType::kDropNamespaceReply: return CheckTyped<core::RemoveReply>(type, body, any);
    case MsgType::kStatsReply: return CheckTyped<core::StatsReply>(type, body, any);
    case MsgType::kListTree: return CheckTyped<core::ListTreeRequest>(type, body, any);
    case MsgType::kListTreeReply: return CheckTyped<core::ListTreeReply>(type, body, any);
    case MsgType::kUnregisterBuffer: return CheckTyped<core::UnregisterBufferRequest>(type, body, any);
    case MsgType::kUnregisterBufferReply: return CheckTyped<core::EmptyReply>(type, body, any);
    case MsgType::kIncrement: return CheckTyped<core::IncrementRequest>(type, body, any);
    case MsgType::kIncrementReply: return CheckTyped<core::IncrementReply>(type, body, any);
    case MsgType::kAuthHello: return CheckTyped<core::AuthHello>(type, body, any);
    case MsgType::kAuthHelloReply: return CheckTyped<core::AuthHelloReply>(type, body, any);
    case MsgType::kAuthProof: return CheckTyped<core::AuthProof>(type, body, any);
    case MsgType::kAuthProofReply: return CheckTyped<core::AuthProofReply>(type, body, any);
    case MsgType::kPeerPing: return CheckTyped<core::PeerPing>(type, body, any);
    case MsgType::kPeerPingReply: return CheckTyped<core::PeerPingReply>(type, body, any);
    case MsgType::kShardLookup: return CheckTyped<core::ShardLookup>(type, body, any);
    case MsgType::kShardLookupReply: return CheckTyped<core::ShardLookupReply>(type, body, any);
    case MsgType::kShardAnnounce: return CheckTyped<core::ShardAnnounce>(type, body, any);
    case MsgType::kShardAnnounceReply:
    case MsgType::kPeerReleaseReply:
    case MsgType::kClusterStatus: return CheckTyped<core::EmptyReply>(type, body, any);
    case MsgType::kPeerFetch: return CheckTyped<core::PeerFetch>(type, body, any);
    case MsgType::kPeerFetchReply: return CheckTyped<core::PeerFetchReply>(type, body, any);
    case MsgType::kPeerRelease: return CheckTyped<core::PeerRelease>(type, body, any);
    case MsgType::kPeerRemove: return CheckTyped<core::PeerRemove>(type, body, any);
    case MsgType::kPeerRemoveReply: return CheckTyped<core::RemoveReply>(type, body, any);
    case MsgType::kClusterStatusReply: return CheckTyped<core::ClusterStatusReply>(type, body, any);
    case MsgType::kPeerHolds: return CheckTyped<core::PeerHolds>(type, body, any);
    case MsgType::kPeerHoldsReply: return CheckTyped<core::PeerHoldsReply>(type, body, any);
    case MsgType::kLocate: return CheckTyped<core::LocateRequest>(type, body, any);
    case MsgType::kLocateReply: return CheckTyped<core::LocateReply>(type, body, any);
    case MsgType::kLocatePrefix: return CheckTyped<core::LocatePrefixRequest>(type, body, any);
    case MsgType::kLocatePrefixReply: return CheckTyped<core::LocatePrefixReply>(type, body, any);
    case MsgType::kSetTimes: return CheckTyped<core::SetTimesRequest>(type, body, any);
    case MsgType::kSetTimesReply: return CheckTyped<core::SetTimesReply>(type, body, any);
    case MsgType::kChanges: return CheckTyped<core::ChangesRequest>(type, body, any);
    case MsgType::kChangesReply: return CheckTyped<core::ChangesReply>(type, body, any);
    case MsgType::kPeerTiers: return CheckTyped<core::PeerTiers>(type, body, any);
    case MsgType::kPeerTiersReply: return CheckTyped<core::PeerTiersReply>(type, body, any);
    case MsgType::kSetQuota: return CheckTyped<core::SetQuotaRequest>(type, body, any);
    case MsgType::kSetQuotaReply: return CheckTyped<core::SetQuotaReply>(type, body, any);
    case MsgType::kQuotas: return CheckTyped<core::QuotasRequest>(type, body, any);
    case MsgType::kQuotasReply: return CheckTyped<core::QuotasReply>(type, body, any);
  }
  if (any.ok()) return "unknown type " + std::to_string(type) + " decoded OK";
  return "";
}

std::string CheckFrame(std::span<const uint8_t> in) {
  Result<core::FrameHeader> h = core::DecodeFrameHeader(in);
  if (!h.ok()) return CheckFailure("DecodeFrameHeader", 0, h.status());
  if (h->version != core::kWireVersion || h->body_len > core::kMaxBodyBytes) {
    return "DecodeFrameHeader accepted version " + std::to_string(h->version) + " body_len " +
           std::to_string(h->body_len);
  }
  std::span<const uint8_t> rest = in.subspan(core::kFrameHeaderBytes);
  if (rest.size() < h->body_len) return "";  // the body has not arrived yet
  std::span<const uint8_t> body = rest.first(h->body_len);
  Status sum = core::VerifyFrameChecksum(in.data(), body);
  std::string err = CheckFailure("VerifyFrameChecksum", h->type, sum);
  if (!err.empty()) return err;
  if (sum.ok()) {
    uint8_t again[core::kFrameHeaderBytes];
    core::EncodeFrameHeader(h->type, h->request_id, body, again);
    if (std::memcmp(again, in.data(), core::kFrameHeaderBytes) != 0) {
      return "header " + Hex(in.first(core::kFrameHeaderBytes)) + " re-encodes as " +
             Hex(std::span<const uint8_t>(again, core::kFrameHeaderBytes));
    }
  }
  return CheckBody(h->type, body);
}

}  // namespace

// Runs every check on one input; returns "" or a description of the first
// property that failed.
std::string CheckWireInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  std::string err = CheckFrame(in);
  if (!err.empty()) return "as frame: " + err;
  for (uint16_t type = 0; type <= static_cast<uint16_t>(core::kLastMsgType); ++type) {
    err = CheckBody(type, in);
    if (!err.empty()) return "as body: " + err;
  }
  err = CheckBody(0xffff, in);
  if (!err.empty()) return "as body: " + err;
  return "";
}

}  // namespace ptstore::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string err = ptstore::fuzz::CheckWireInput(data, size);
  if (!err.empty()) {
    std::fprintf(stderr, "wire_fuzz: property violated: %s\n", err.c_str());
    std::abort();
  }
  return 0;
}
