#include "rdma/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/logging.h"

namespace ptstore::rdma {

namespace {

constexpr const char* kLog = "auth";

std::string NodeName(bool known, uint32_t id, const std::string& addr) {
  return (known ? "node " + std::to_string(id) : std::string("node ?")) + " at " + addr;
}

void AppendU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void AppendU16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xff));
  s->push_back(static_cast<char>(v >> 8));
}

}  // namespace

// ---- secret -------------------------------------------------------------

ClusterSecret::~ClusterSecret() {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

Result<ClusterSecret> ClusterSecret::FromBytes(std::string bytes) {
  if (bytes.size() < kMinClusterSecretBytes) {
    size_t n = bytes.size();
    OPENSSL_cleanse(bytes.data(), bytes.size());
    return InvalidArgument("cluster secret has " + std::to_string(n) + " bytes, needs at least " +
                           std::to_string(kMinClusterSecretBytes));
  }
  return ClusterSecret(std::move(bytes));
}

Result<ClusterSecret> ClusterSecret::Load(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoError("cluster secret file " + path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("cluster secret file " + path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("cluster secret file " + path + " is not a regular file");
  }
  if (st.st_mode & 077) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDenied("cluster secret file " + path + " has mode " + mode +
                            ": its group and others must not have any access (chmod 600)");
  }
  if (st.st_size > (1 << 16)) {
    ::close(fd);
    return InvalidArgument("cluster secret file " + path + " is larger than 64 KiB");
  }
  std::string bytes;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      OPENSSL_cleanse(buf, sizeof(buf));
      return ErrnoError("reading cluster secret file " + path, err);
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > (1 << 16)) break;
  }
  ::close(fd);
  OPENSSL_cleanse(buf, sizeof(buf));
  Result<ClusterSecret> s = FromBytes(std::move(bytes));
  if (!s.ok()) return s.status().WithContext("cluster secret file " + path);
  return s;
}

// ---- versions --------------------------------------------------------------

std::optional<uint16_t> HighestCommonVersion(core::PeerVersionRange a, core::PeerVersionRange b) {
  uint16_t lo = std::max(a.min, b.min);
  uint16_t hi = std::min(a.max, b.max);
  if (lo > hi) return std::nullopt;
  return hi;
}

std::string VersionRangeName(core::PeerVersionRange r) {
  return "[" + std::to_string(r.min) + ", " + std::to_string(r.max) + "]";
}

// ---- primitives -----------------------------------------------------------

Result<core::AuthMac> ComputeAuthMac(std::string_view secret, const core::AuthNonce& initiator_nonce,
                             const core::AuthNonce& responder_nonce, uint32_t initiator_id,
                             uint32_t responder_id, AuthRole role,
                             const core::PeerVersionRange* initiator_versions,
                             const core::PeerVersionRange* responder_versions) {
  std::string msg(kAuthLabel);
  msg.append(reinterpret_cast<const char*>(initiator_nonce.data()), initiator_nonce.size());
  msg.append(reinterpret_cast<const char*>(responder_nonce.data()), responder_nonce.size());
  AppendU32(&msg, initiator_id);
  AppendU32(&msg, responder_id);
  msg.push_back(static_cast<char>(role));
  if (initiator_versions != nullptr && responder_versions != nullptr) {
    AppendU16(&msg, initiator_versions->min);
    AppendU16(&msg, initiator_versions->max);
    AppendU16(&msg, responder_versions->min);
    AppendU16(&msg, responder_versions->max);
  }
  core::AuthMac mac{};
  unsigned int len = 0;
  // An empty key is legal for HMAC; secrets are checked to be >= 32 bytes
  // where they are loaded.
  static const unsigned char kEmpty = 0;
  const void* key = secret.empty() ? static_cast<const void*>(&kEmpty) : secret.data();
  if (HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
           msg.size(), mac.data(), &len) == nullptr ||
      len != mac.size()) {
    return Internal("HMAC-SHA256 failed in libcrypto");
  }
  return mac;
}

Result<core::AuthNonce> RandomNonce() {
  core::AuthNonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) return Internal("RAND_bytes failed");
  return n;
}

namespace {
bool MacEqual(const core::AuthMac& a, const core::AuthMac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }
}  // namespace

// ---- initiator ------------------------------------------------------------

AuthInitiator::AuthInitiator(std::string_view secret, uint32_t self_id, std::string peer_addr,
                             std::optional<uint32_t> expected_peer, core::PeerVersionRange versions)
    : secret_(secret),
      self_id_(self_id),
      peer_addr_(std::move(peer_addr)),
      expected_peer_(expected_peer),
      versions_(versions) {}

Status AuthInitiator::Refuse(std::string why) {
  step_ = Step::kFailed;
  bool known = expected_peer_.has_value() || peer_known_;
  uint32_t id = expected_peer_.value_or(peer_id_);
  std::string msg = NodeName(known, id, peer_addr_) + " failed authentication: " + why;
  PTS_WARN(kLog, msg);
  return PermissionDenied(std::move(msg));
}

Result<core::AuthHello> AuthInitiator::Start() {
  if (step_ != Step::kStart) return Internal("AuthInitiator::Start called twice");
  if (secret_.size() < kMinClusterSecretBytes) return Refuse("this node has no usable cluster secret");
  PTS_ASSIGN_OR_RETURN(nonce_i_, RandomNonce());
  step_ = Step::kHelloSent;
  return core::AuthHello{.node_id = self_id_, .nonce = nonce_i_, .versions = versions_};
}

Result<core::AuthProof> AuthInitiator::OnHelloReply(const core::AuthHelloReply& reply) {
  if (step_ != Step::kHelloSent) return Refuse("AuthHelloReply out of order");
  peer_id_ = reply.node_id;
  peer_known_ = true;
  if (expected_peer_ && *expected_peer_ != reply.node_id) {
    return Refuse("it says it is node " + std::to_string(reply.node_id) + ", expected " +
                std::to_string(*expected_peer_));
  }
  if (reply.nonce == nonce_i_) return Refuse("it echoed our nonce");
  if (!reply.versions) {
    return Refuse("its AuthHelloReply names no peer-protocol versions (we speak " + VersionRangeName(versions_) +
                  "; a responder that read our range always answers with its own)");
  }
  peer_versions_ = *reply.versions;
  std::optional<uint16_t> v = HighestCommonVersion(versions_, peer_versions_);
  if (!v) {
    version_refused_ = true;
    return Refuse("no common peer-protocol version: we speak " + VersionRangeName(versions_) + ", it speaks " +
                  VersionRangeName(peer_versions_));
  }
  version_ = *v;
  nonce_r_ = reply.nonce;
  PTS_ASSIGN_OR_RETURN(core::AuthMac mac, ComputeAuthMac(secret_, nonce_i_, nonce_r_, self_id_, peer_id_,
                                                         AuthRole::kInitiator, &versions_, &peer_versions_));
  step_ = Step::kProofSent;
  return core::AuthProof{.mac = mac};
}

Status AuthInitiator::OnProofReply(const core::AuthProofReply& reply) {
  if (step_ != Step::kProofSent) return Refuse("AuthProofReply out of order");
  PTS_ASSIGN_OR_RETURN(core::AuthMac want,
                       ComputeAuthMac(secret_, nonce_i_, nonce_r_, self_id_, peer_id_, AuthRole::kResponder,
                                      &versions_, &peer_versions_));
  if (!MacEqual(want, reply.mac)) {
    return Refuse("its proof does not match the cluster secret (or the version ranges were altered on the way)");
  }
  step_ = Step::kDone;
  return Status::OK();
}

Result<std::unique_ptr<FrameMac>> AuthInitiator::SessionMac() const {
  if (step_ != Step::kDone) return Internal("frame keys asked for before authentication completed");
  return FrameMac::Derive(secret_, nonce_i_, nonce_r_, self_id_, peer_id_, /*initiator=*/true);
}

// ---- responder ------------------------------------------------------------

AuthResponder::AuthResponder(std::string_view secret, uint32_t self_id, std::string peer_addr,
                             core::PeerVersionRange versions)
    : secret_(secret), self_id_(self_id), peer_addr_(std::move(peer_addr)), versions_(versions) {}

Status AuthResponder::Refuse(std::string why) {
  step_ = Step::kFailed;
  std::string msg = NodeName(peer_known_, peer_id_, peer_addr_) + " failed authentication: " + why;
  PTS_WARN(kLog, msg);
  return PermissionDenied(std::move(msg));
}

Result<core::AuthHelloReply> AuthResponder::OnHello(const core::AuthHello& hello) {
  if (step_ != Step::kStart) return Refuse("AuthHello out of order");
  peer_id_ = hello.node_id;
  peer_known_ = true;
  if (secret_.size() < kMinClusterSecretBytes) return Refuse("this node has no usable cluster secret");
  PTS_ASSIGN_OR_RETURN(nonce_r_, RandomNonce());
  if (hello.nonce == nonce_r_) return Refuse("its nonce equals ours");
  // A hello without a range comes from a node from before negotiation,
  // which speaks version 1 only.
  peer_versions_ = hello.versions;
  core::PeerVersionRange theirs = hello.versions.value_or(core::PeerVersionRange{1, 1});
  std::optional<uint16_t> v = HighestCommonVersion(versions_, theirs);
  if (!v) {
    version_refused_ = true;
    return Refuse("no common peer-protocol version: we speak " + VersionRangeName(versions_) + ", it speaks " +
                  VersionRangeName(theirs) + (hello.versions ? "" : " (its hello names no range)"));
  }
  version_ = *v;
  nonce_i_ = hello.nonce;
  step_ = Step::kHelloDone;
  core::AuthHelloReply reply{.node_id = self_id_, .nonce = nonce_r_};
  if (hello.versions) reply.versions = versions_;
  return reply;
}

Result<core::AuthProofReply> AuthResponder::OnProof(const core::AuthProof& proof) {
  if (step_ != Step::kHelloDone) return Refuse("AuthProof out of order");
  const core::PeerVersionRange* vi = peer_versions_ ? &*peer_versions_ : nullptr;
  const core::PeerVersionRange* vr = peer_versions_ ? &versions_ : nullptr;
  PTS_ASSIGN_OR_RETURN(core::AuthMac want, ComputeAuthMac(secret_, nonce_i_, nonce_r_, peer_id_, self_id_,
                                                          AuthRole::kInitiator, vi, vr));
  if (!MacEqual(want, proof.mac)) {
    return Refuse("its proof does not match the cluster secret (or the version ranges were altered on the way)");
  }
  PTS_ASSIGN_OR_RETURN(core::AuthMac mine, ComputeAuthMac(secret_, nonce_i_, nonce_r_, peer_id_, self_id_,
                                                          AuthRole::kResponder, vi, vr));
  step_ = Step::kDone;
  return core::AuthProofReply{.mac = mine};
}

Result<std::unique_ptr<FrameMac>> AuthResponder::SessionMac() const {
  if (step_ != Step::kDone) return Internal("frame keys asked for before authentication completed");
  return FrameMac::Derive(secret_, nonce_i_, nonce_r_, peer_id_, self_id_, /*initiator=*/false);
}

// ---- over a local::FramedSocket ----------------------------------------------------

namespace {

// Receives the next frame as M. A refusal (ErrorReply) or another type ends
// the exchange through `refuse` (PermissionDenied); transport and decoding
// errors keep their code, with the peer named, and are logged.
template <typename M, typename Machine>
Status ReceiveAs(local::FramedSocket& sock, int timeout_ms, Machine& machine, const std::string& peer_addr, M* m) {
  const char* want = core::MsgTypeName(static_cast<uint16_t>(M::kType));
  Status st;
  Result<local::Frame> f = sock.Receive(timeout_ms);
  if (f.ok() && f->type == static_cast<uint16_t>(core::MsgType::kError)) {
    core::ErrorReply err;
    st = local::DecodeBody(*f, &err);
    if (st.ok()) return machine.Refuse("it refused us (" + err.ToStatus().ToString() + ")");
  } else if (f.ok() && f->type != static_cast<uint16_t>(M::kType)) {
    return machine.Refuse(std::string("expected ") + want + ", got " + core::MsgTypeName(f->type) + " (type " +
                          std::to_string(f->type) + ")");
  } else if (f.ok()) {
    st = local::DecodeBody(*f, m);
    if (st.ok()) return st;
  } else {
    st = f.status();
  }
  st = st.WithContext("authentication with " + peer_addr + ", waiting for " + want);
  PTS_WARN(kLog, st.ToString());
  return st;
}

// `version_reason`: the ranges that did not meet, told to the other side
// (the hellos carried them in clear anyway); any other reason stays in our
// log.
void SendRefusal(local::FramedSocket& sock, const Status& st, const std::string& version_reason = "") {
  if (st.code() != Code::kPermissionDenied) return;
  core::ErrorReply err;
  err.code = Code::kPermissionDenied;
  err.message = version_reason.empty() ? "authentication refused" : "authentication refused: " + version_reason;
  sock.SendMessage(0, err).IgnoreError();
}

std::string VersionReason(uint32_t self_id, core::PeerVersionRange ours, core::PeerVersionRange theirs) {
  return "no common peer-protocol version (node " + std::to_string(self_id) + " speaks " + VersionRangeName(ours) +
         ", you speak " + VersionRangeName(theirs) + ")";
}

// Turns integrity on when the agreed version has it.
template <typename Machine>
Status StartSession(local::FramedSocket& sock, const Machine& m, const std::string& peer_addr, const AuthOptions& o) {
  if (o.counters != nullptr) o.counters->sessions[std::min<size_t>(m.version(), WireCounters::kVersions - 1)]++;
  if (m.version() < kPeerProtocolIntegrity) return Status::OK();
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<FrameMac> mac, m.SessionMac());
  sock.EnableIntegrity(std::move(mac), "node " + std::to_string(m.peer_id()) + " at " + peer_addr, o.counters);
  return Status::OK();
}

}  // namespace

Result<uint32_t> AuthenticateInitiator(local::FramedSocket& sock, const ClusterSecret& secret, uint32_t self_id,
                                       const std::string& peer_addr, std::optional<uint32_t> expected_peer,
                                       int timeout_ms, uint16_t* version, const AuthOptions& options) {
  AuthInitiator a(secret.bytes(), self_id, peer_addr, expected_peer, options.versions);
  PTS_ASSIGN_OR_RETURN(core::AuthHello hello, a.Start());
  PTS_RETURN_IF_ERROR(sock.SendMessage(0, hello));

  core::AuthHelloReply hr;
  PTS_RETURN_IF_ERROR(ReceiveAs(sock, timeout_ms, a, peer_addr, &hr));
  Result<core::AuthProof> proof = a.OnHelloReply(hr);
  if (!proof.ok()) {
    if (a.version_refused() && options.counters != nullptr) options.counters->version_refusals++;
    SendRefusal(sock, proof.status(),
                a.version_refused() ? VersionReason(self_id, options.versions, *hr.versions) : "");
    return proof.status();
  }
  PTS_RETURN_IF_ERROR(sock.SendMessage(0, *proof));

  core::AuthProofReply pr;
  PTS_RETURN_IF_ERROR(ReceiveAs(sock, timeout_ms, a, peer_addr, &pr));
  PTS_RETURN_IF_ERROR(a.OnProofReply(pr));
  PTS_RETURN_IF_ERROR(StartSession(sock, a, peer_addr, options));
  if (version != nullptr) *version = a.version();
  return a.peer_id();
}

Result<uint32_t> AuthenticateResponder(local::FramedSocket& sock, const ClusterSecret& secret, uint32_t self_id,
                                       const std::string& peer_addr, int timeout_ms, uint16_t* version,
                                       const AuthOptions& options) {
  AuthResponder r(secret.bytes(), self_id, peer_addr, options.versions);
  auto fail = [&](Status st) -> Status {
    SendRefusal(sock, st);
    return st;
  };

  core::AuthHello hello;
  Status st = ReceiveAs(sock, timeout_ms, r, peer_addr, &hello);
  if (!st.ok()) return fail(std::move(st));
  Result<core::AuthHelloReply> hr = r.OnHello(hello);
  if (!hr.ok()) {
    if (!r.version_refused()) return fail(hr.status());
    if (options.counters != nullptr) options.counters->version_refusals++;
    SendRefusal(sock, hr.status(),
                VersionReason(self_id, options.versions, hello.versions.value_or(core::PeerVersionRange{1, 1})));
    return hr.status();
  }
  PTS_RETURN_IF_ERROR(sock.SendMessage(0, *hr));

  core::AuthProof proof;
  st = ReceiveAs(sock, timeout_ms, r, peer_addr, &proof);
  if (!st.ok()) return fail(std::move(st));
  Result<core::AuthProofReply> pr = r.OnProof(proof);
  if (!pr.ok()) return fail(pr.status());
  PTS_RETURN_IF_ERROR(sock.SendMessage(0, *pr));
  PTS_RETURN_IF_ERROR(StartSession(sock, r, peer_addr, options));
  if (version != nullptr) *version = r.version();
  return r.peer_id();
}

}  // namespace ptstore::rdma
