// Integrity of node-to-node frames after authentication (peer protocol
// version 2 and later; docs/wire-format.md "Frame integrity").
//
// Each direction of an authenticated connection has its own 32-byte key,
//
//   k_dir = HKDF-SHA256(ikm = cluster secret, salt = n_i ‖ n_r,
//                       info = "ptstore-frames-v2" ‖ id_i u32 LE ‖ id_r u32 LE ‖ dir u8)
//   dir: 1 initiator -> responder, 2 responder -> initiator
//
// and its own record counter `seq` (u64, from 0, one per record sent in that
// direction). A record is one frame (header ‖ body) or one run of bulk bytes
// (the arena bytes after a PeerFetchReply over TCP). Its 16-byte tag is
// AES-256-GCM's tag with key k_dir, nonce = seq u64 LE ‖ 0 u32 and the
// record as additional data (GMAC: authenticated, not encrypted), the data
// preceded by a kind byte (1 frame, 2 bulk) so that one kind's tag never
// passes for the other's. The sender appends the tag after the record; the
// receiver computes it with its own counter and compares (CRYPTO_memcmp).
// An altered record fails the tag, and so do a replayed, reordered, dropped
// or injected one, whose seq is not the receiver's. The counters never
// repeat within a connection (2^64 records), and both keys are new on every
// connection (fresh nonces), so no (key, nonce) pair is ever used twice.
//
// Thread safety: one FrameMac per connection; its sending half and its
// receiving half may each be used by one thread at a time (as
// local::FramedSocket's Send and Receive).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/messages.h"
#include "local/frame_integrity.h"
#include "ptstore/status.h"

namespace ptstore::rdma {

// The tag, the record kinds and the counters are the local framing's
// (local/frame_integrity.h): FrameMac is the implementation local::FramedSocket
// takes between nodes.
using local::FrameTag;
using local::kFrameTagBytes;
using local::RecordKind;
using local::WireCounters;
inline constexpr std::string_view kFrameKeyLabel = "ptstore-frames-v2";

class FrameMac final : public local::FrameIntegrity {
 public:
  // The keys of one connection, as the initiator (`initiator` true) or the
  // responder sees them. Internal when libcrypto fails.
  static Result<std::unique_ptr<FrameMac>> Derive(std::string_view secret, const core::AuthNonce& initiator_nonce,
                                                  const core::AuthNonce& responder_nonce, uint32_t initiator_id,
                                                  uint32_t responder_id, bool initiator);
  ~FrameMac() override;
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  // One direction's running record: Begin, Update any number of times, then
  // Finish (the sending half: the tag to send; the receiving half: compares
  // with `tag`, Corruption naming the record's seq when it differs). Every
  // Finish advances that direction's seq, matched or not.
  class Half final : public local::RecordSeal {
   public:
    Status Begin(RecordKind kind) override;
    Status Update(const uint8_t* p, size_t n) override;
    Result<FrameTag> Finish() override;
    Status Check(const FrameTag& tag) override;  // Finish, compared
    bool open() const override { return open_; }
    uint64_t seq() const { return seq_; }

   private:
    friend class FrameMac;
    void* ctx_ = nullptr;  // EVP_CIPHER_CTX, the key set
    uint64_t seq_ = 0;
    bool open_ = false;
  };
  Half& send() override { return send_; }
  Half& receive() override { return receive_; }

 private:
  FrameMac() = default;
  Half send_;
  Half receive_;
};

}  // namespace ptstore::rdma
