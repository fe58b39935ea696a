#include "core/wire.h"

#define XXH_STATIC_LINKING_ONLY  // XXH32_state_t on the stack
#include <xxhash.h>

namespace ptstore::core {

namespace {
uint32_t Checksum(const uint8_t* header20, std::span<const uint8_t> body) {
  XXH32_state_t st;
  XXH32_reset(&st, 0);
  XXH32_update(&st, header20, 20);
  if (!body.empty()) XXH32_update(&st, body.data(), body.size());
  return XXH32_digest(&st);
}
}  // namespace

void EncodeFrameHeader(uint16_t type, uint64_t request_id, std::span<const uint8_t> body,
                       uint8_t out[kFrameHeaderBytes]) {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint32_t len = static_cast<uint32_t>(body.size());
  std::memcpy(out + 0, &magic, 4);
  std::memcpy(out + 4, &version, 2);
  std::memcpy(out + 6, &type, 2);
  std::memcpy(out + 8, &request_id, 8);
  std::memcpy(out + 16, &len, 4);
  uint32_t sum = Checksum(out, body);
  std::memcpy(out + 20, &sum, 4);
}

Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kFrameHeaderBytes) {
    return ProtocolError("truncated frame header: " + std::to_string(bytes.size()) + " of " +
                         std::to_string(kFrameHeaderBytes) + " bytes");
  }
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), 4);
  if (magic != kWireMagic) return ProtocolError("bad frame magic (not a PTStore peer?)");
  FrameHeader h;
  std::memcpy(&h.version, bytes.data() + 4, 2);
  std::memcpy(&h.type, bytes.data() + 6, 2);
  std::memcpy(&h.request_id, bytes.data() + 8, 8);
  std::memcpy(&h.body_len, bytes.data() + 16, 4);
  std::memcpy(&h.checksum, bytes.data() + 20, 4);
  if (h.version != kWireVersion) {
    return ProtocolError("wire version " + std::to_string(h.version) + " is not supported (this side speaks " +
                         std::to_string(kWireVersion) + ")");
  }
  if (h.body_len > kMaxBodyBytes) {
    return ProtocolError("frame body of " + std::to_string(h.body_len) + " bytes exceeds the limit of " +
                         std::to_string(kMaxBodyBytes));
  }
  return h;
}

Status VerifyFrameChecksum(const uint8_t header[kFrameHeaderBytes], std::span<const uint8_t> body) {
  uint32_t want;
  std::memcpy(&want, header + 20, 4);
  if (Checksum(header, body) != want) return ProtocolError("frame checksum mismatch");
  return Status::OK();
}

void Encoder::PutString(std::string_view s) {
  PutU32(static_cast<uint32_t>(s.size()));
  PutRaw(s.data(), s.size());
}

void Encoder::PutU32Array(std::span<const uint32_t> v) {
  PutU32(static_cast<uint32_t>(v.size()));
  PutRaw(v.data(), v.size_bytes());
}

Status Decoder::GetRaw(const char* field, void* out, size_t n) {
  if (remaining() < n) {
    return ProtocolError(std::string("truncated message: field '") + field + "' needs " + std::to_string(n) +
                         " bytes, " + std::to_string(remaining()) + " remain");
  }
  if (n) std::memcpy(out, bytes_.data() + pos_, n);
  pos_ += n;
  return Status::OK();
}

Status Decoder::GetBool(const char* field, bool* v) {
  uint8_t b;
  PTS_RETURN_IF_ERROR(GetU8(field, &b));
  if (b > 1) return ProtocolError(std::string("field '") + field + "' is not a boolean");
  *v = b == 1;
  return Status::OK();
}

Status Decoder::GetString(const char* field, std::string* v, uint32_t max_len) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetU32(field, &n));
  if (n > max_len) {
    return ProtocolError(std::string("field '") + field + "' length " + std::to_string(n) + " exceeds " +
                         std::to_string(max_len));
  }
  if (remaining() < n) {
    return ProtocolError(std::string("truncated message: field '") + field + "' needs " + std::to_string(n) +
                         " bytes, " + std::to_string(remaining()) + " remain");
  }
  v->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
  pos_ += n;
  return Status::OK();
}

Status Decoder::GetU32Array(const char* field, std::vector<uint32_t>* v, uint32_t max_count) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetU32(field, &n));
  if (n > max_count) {
    return ProtocolError(std::string("field '") + field + "' count " + std::to_string(n) + " exceeds " +
                         std::to_string(max_count));
  }
  if (remaining() / 4 < n) {
    return ProtocolError(std::string("truncated message: field '") + field + "' needs " +
                         std::to_string(uint64_t{n} * 4) + " bytes, " + std::to_string(remaining()) + " remain");
  }
  v->resize(n);
  if (n) std::memcpy(v->data(), bytes_.data() + pos_, size_t{n} * 4);
  pos_ += size_t{n} * 4;
  return Status::OK();
}

Status Decoder::Finish(const char* message_name) const {
  if (remaining() != 0) {
    return ProtocolError(std::string(message_name) + " has " + std::to_string(remaining()) + " trailing bytes");
  }
  return Status::OK();
}

}  // namespace ptstore::core
