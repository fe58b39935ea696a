// The wire format: framed, versioned, length-checked messages.
//
// Every message is a 24-byte frame header followed by `body_len` bytes of
// body (docs/wire-format.md):
//
//   u32 magic      'P','T','S','1' (0x31535450 little-endian)
//   u16 version    kWireVersion; a peer with another version is refused
//   u16 type       MsgType
//   u64 request_id echoed in the reply
//   u32 body_len   <= kMaxBodyBytes
//   u32 checksum   XXH32 of the first 20 header bytes and the body
//
// Bodies are little-endian fields written by Encoder and read by Decoder. A
// Decoder never reads past its end: every getter returns a Status naming the
// field that did not fit. Thread safety: none; use one per message.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::core {

inline constexpr uint32_t kWireMagic = 0x31535450;  // "PTS1"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 24;
inline constexpr uint32_t kMaxBodyBytes = 64u << 20;

struct FrameHeader {
  uint16_t version = kWireVersion;
  uint16_t type = 0;
  uint64_t request_id = 0;
  uint32_t body_len = 0;
  uint32_t checksum = 0;
};

// Writes the header for `body` (computing its checksum) into `out`.
void EncodeFrameHeader(uint16_t type, uint64_t request_id, std::span<const uint8_t> body,
                       uint8_t out[kFrameHeaderBytes]);
// Parses and checks magic, version and length. The checksum needs the body:
// call VerifyFrameChecksum once the body has arrived.
Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t> bytes);
Status VerifyFrameChecksum(const uint8_t header[kFrameHeaderBytes], std::span<const uint8_t> body);

class Encoder {
 public:
  void PutU8(uint8_t v) { buf_.push_back(v); }
  void PutU16(uint16_t v) { PutRaw(&v, 2); }
  void PutU32(uint32_t v) { PutRaw(&v, 4); }
  void PutU64(uint64_t v) { PutRaw(&v, 8); }
  void PutBool(bool v) { PutU8(v ? 1 : 0); }
  // u32 length then bytes.
  void PutString(std::string_view s);
  // u32 count then count * u32.
  void PutU32Array(std::span<const uint32_t> v);
  void PutRaw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  std::vector<uint8_t>& buffer() { return buf_; }
  std::vector<uint8_t> Take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

class Decoder {
 public:
  explicit Decoder(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  Status GetU8(const char* field, uint8_t* v) { return GetRaw(field, v, 1); }
  Status GetU16(const char* field, uint16_t* v) { return GetRaw(field, v, 2); }
  Status GetU32(const char* field, uint32_t* v) { return GetRaw(field, v, 4); }
  Status GetU64(const char* field, uint64_t* v) { return GetRaw(field, v, 8); }
  Status GetBool(const char* field, bool* v);
  // Rejects strings longer than max_len.
  Status GetString(const char* field, std::string* v, uint32_t max_len = 1u << 20);
  // Rejects arrays longer than max_count.
  Status GetU32Array(const char* field, std::vector<uint32_t>* v, uint32_t max_count = 1u << 22);
  Status GetRaw(const char* field, void* out, size_t n);
  // OK when every byte was consumed; trailing bytes are a protocol error.
  Status Finish(const char* message_name) const;
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

}  // namespace ptstore::core
