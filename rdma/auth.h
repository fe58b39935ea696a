// Node-to-node authentication with a shared cluster secret: mutual
// challenge/response with HMAC-SHA256 (docs/architecture.md, "Cluster
// foundations").
//
//   initiator -> AuthHello      {id_i, n_i}    n_i: 32 fresh random bytes
//   responder -> AuthHelloReply {id_r, n_r}    n_r: 32 fresh random bytes
//   initiator -> AuthProof      {mac_i}        mac_i = Mac(kInitiator)
//   responder -> AuthProofReply {mac_r}        only once mac_i checked out
//                (or ErrorReply{permission_denied} when it did not)
//
//   Mac(role) = HMAC-SHA256(secret, "ptstore-auth-v1" ‖ n_i ‖ n_r ‖
//                                   id_i u32 LE ‖ id_r u32 LE ‖ role u8
//                                   [‖ vi_min ‖ vi_max ‖ vr_min ‖ vr_max u16 LE])
//   role: 1 initiator, 2 responder
//
// Peer-protocol versions (docs/wire-format.md "Peer protocol versions"):
// AuthHello carries the initiator's range [vi_min, vi_max], AuthHelloReply
// the responder's; both use the highest version in both ranges, and the
// ranges are inside both MACs, so a man in the middle who rewrites one fails
// authentication instead of downgrading it. No common version: both sides
// refuse with PermissionDenied naming both ranges. A hello without a range
// (a node from before negotiation) is served as version 1 and answered
// without one, the MACs then without the ranges; a reply without a range is
// refused by the initiator (a new responder always sends one, so its absence
// means it was stripped).
//
// From version 2 (kPeerProtocolIntegrity) on, the frames that follow the
// exchange carry MACs under keys derived from the secret and both nonces
// (rdma/frame_mac.h); AuthenticateInitiator/AuthenticateResponder turn that
// on for their socket.
//
// Both nonces make every MAC unique to one connection (a recorded proof is
// worthless later), the role byte stops a peer from reflecting our own MAC
// back. MACs are compared with CRYPTO_memcmp. A wrong or missing secret
// fails mac_i at the responder, which refuses and tells the initiator, so
// both sides end with PermissionDenied("node N at ADDR failed
// authentication ...") and log it.
//
// AuthInitiator and AuthResponder are the protocol as pure state machines
// over messages (no I/O, unit-testable); AuthenticateInitiator and
// AuthenticateResponder run them over a connected local::FramedSocket.
//
// Thread safety: one state machine per connection, used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/messages.h"
#include "ptstore/status.h"
#include "rdma/frame_mac.h"
#include "local/framed_socket.h"

namespace ptstore::rdma {

inline constexpr size_t kMinClusterSecretBytes = 32;
// The peer-protocol versions this release speaks (docs/wire-format.md
// "Peer protocol versions"): 1, frames as they are; 2, every frame after
// authentication carries a MAC (rdma/frame_mac.h).
inline constexpr uint16_t kPeerProtocolMin = 1;
inline constexpr uint16_t kPeerProtocolMax = 2;
// The first version whose frames carry MACs; [cluster] require_integrity
// speaks only from this one on.
inline constexpr uint16_t kPeerProtocolIntegrity = 2;
// The range this binary speaks: {kPeerProtocolMin, kPeerProtocolMax},
// defined alone in rdma/peer_version.cc (its own archive member), so that a
// ptstored for a mixed-version test can link the same file compiled with
// -DPTSTORE_PEER_PROTOCOL_MAX=<older> and run every other line unchanged.
core::PeerVersionRange LocalPeerVersions();

// The highest version in both ranges; nullopt when they do not meet.
std::optional<uint16_t> HighestCommonVersion(core::PeerVersionRange a, core::PeerVersionRange b);
// "[min, max]"
std::string VersionRangeName(core::PeerVersionRange r);
inline constexpr std::string_view kAuthLabel = "ptstore-auth-v1";
enum class AuthRole : uint8_t { kInitiator = 1, kResponder = 2 };

// The cluster secret. Never logged, wiped when destroyed.
class ClusterSecret {
 public:
  // InvalidArgument when shorter than kMinClusterSecretBytes.
  static Result<ClusterSecret> FromBytes(std::string bytes);
  // Reads a regular file that its group and others cannot read (mode & 077 ==
  // 0) holding at least kMinClusterSecretBytes bytes, used as they are
  // (a trailing newline included).
  static Result<ClusterSecret> Load(const std::string& path);

  ClusterSecret(ClusterSecret&&) noexcept = default;
  ClusterSecret& operator=(ClusterSecret&&) noexcept = default;
  ~ClusterSecret();
  std::string_view bytes() const { return bytes_; }

 private:
  explicit ClusterSecret(std::string b) : bytes_(std::move(b)) {}
  std::string bytes_;
};

// Internal only when libcrypto fails.
Result<core::AuthMac> ComputeAuthMac(std::string_view secret, const core::AuthNonce& initiator_nonce,
                             const core::AuthNonce& responder_nonce, uint32_t initiator_id,
                             uint32_t responder_id, AuthRole role,
                             const core::PeerVersionRange* initiator_versions = nullptr,
                             const core::PeerVersionRange* responder_versions = nullptr);
// 32 bytes from RAND_bytes; Internal if the generator fails.
Result<core::AuthNonce> RandomNonce();

// The dialling side. `peer_addr` names the peer in errors; with
// `expected_peer`, a responder naming another id is refused.
class AuthInitiator {
 public:
  AuthInitiator(std::string_view secret, uint32_t self_id, std::string peer_addr,
                std::optional<uint32_t> expected_peer = std::nullopt,
                core::PeerVersionRange versions = LocalPeerVersions());
  Result<core::AuthHello> Start();
  Result<core::AuthProof> OnHelloReply(const core::AuthHelloReply& reply);
  // OK: the peer is authenticated as peer_id().
  Status OnProofReply(const core::AuthProofReply& reply);
  // Ends the exchange: logs and returns PermissionDenied("node N at ADDR
  // failed authentication: why"), e.g. when the responder refused us.
  Status Refuse(std::string why);
  uint32_t peer_id() const { return peer_id_; }
  // The agreed peer-protocol version, once OnHelloReply succeeded.
  uint16_t version() const { return version_; }
  // True when the exchange ended for want of a common version.
  bool version_refused() const { return version_refused_; }
  // The connection's frame keys (rdma/frame_mac.h), once OnProofReply
  // succeeded.
  Result<std::unique_ptr<FrameMac>> SessionMac() const;

 private:
  enum class Step { kStart, kHelloSent, kProofSent, kDone, kFailed };

  std::string secret_;
  uint32_t self_id_;
  std::string peer_addr_;
  std::optional<uint32_t> expected_peer_;
  core::PeerVersionRange versions_;
  core::PeerVersionRange peer_versions_;
  uint16_t version_ = 0;
  bool version_refused_ = false;
  Step step_ = Step::kStart;
  core::AuthNonce nonce_i_{};
  core::AuthNonce nonce_r_{};
  uint32_t peer_id_ = 0;
  bool peer_known_ = false;
};

// The accepting side.
class AuthResponder {
 public:
  AuthResponder(std::string_view secret, uint32_t self_id, std::string peer_addr,
                core::PeerVersionRange versions = LocalPeerVersions());
  Result<core::AuthHelloReply> OnHello(const core::AuthHello& hello);
  // The reply is sent only when the initiator's proof is good.
  Result<core::AuthProofReply> OnProof(const core::AuthProof& proof);
  // As AuthInitiator::Refuse.
  Status Refuse(std::string why);
  uint32_t peer_id() const { return peer_id_; }
  // The agreed peer-protocol version, once OnHello succeeded.
  uint16_t version() const { return version_; }
  bool version_refused() const { return version_refused_; }
  // The connection's frame keys, once OnProof succeeded.
  Result<std::unique_ptr<FrameMac>> SessionMac() const;

 private:
  enum class Step { kStart, kHelloDone, kDone, kFailed };

  std::string secret_;
  uint32_t self_id_;
  std::string peer_addr_;
  core::PeerVersionRange versions_;
  std::optional<core::PeerVersionRange> peer_versions_;  // nullopt: a hello without a range
  uint16_t version_ = 0;
  bool version_refused_ = false;
  Step step_ = Step::kStart;
  core::AuthNonce nonce_i_{};
  core::AuthNonce nonce_r_{};
  uint32_t peer_id_ = 0;
  bool peer_known_ = false;
};

// How a node authenticates its connections.
struct AuthOptions {
  // The versions offered ([kPeerProtocolIntegrity, max] under
  // require_integrity).
  core::PeerVersionRange versions = LocalPeerVersions();
  // Counts version refusals, and the socket's integrity failures later.
  WireCounters* counters = nullptr;
};

// Runs the initiator over `sock` (each receive waits at most timeout_ms) and
// returns the authenticated peer id. When the agreed version is
// kPeerProtocolIntegrity or later, integrity is on for `sock` from the
// next frame on (local::FramedSocket::EnableIntegrity). A peer that refuses us, or sends
// anything but the expected message, is refused (PermissionDenied); a frame
// that does not decode is kProtocol, a silent peer kDeadlineExceeded, a
// closed one kUnavailable. Every failure is logged (PTS_WARN). With
// `version`, the agreed peer-protocol version is stored there.
Result<uint32_t> AuthenticateInitiator(local::FramedSocket& sock, const ClusterSecret& secret, uint32_t self_id,
                                       const std::string& peer_addr, std::optional<uint32_t> expected_peer,
                                       int timeout_ms, uint16_t* version = nullptr,
                                       const AuthOptions& options = {});
// Runs the responder; whenever it returns PermissionDenied it first sends
// ErrorReply{permission_denied} (without the reason, which stays in its log,
// except for a version refusal, which names both ranges: nothing secret).
Result<uint32_t> AuthenticateResponder(local::FramedSocket& sock, const ClusterSecret& secret, uint32_t self_id,
                                       const std::string& peer_addr, int timeout_ms, uint16_t* version = nullptr,
                                       const AuthOptions& options = {});

}  // namespace ptstore::rdma
