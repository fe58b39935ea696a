// What a FramedSocket needs of a record MAC, without the MAC itself: the
// tag's shape, the kinds of record, the counters, and the two interfaces an
// implementation provides (rdma/frame_mac.h's FrameMac, keyed with
// libcrypto between nodes). The local protocol runs without one, so the
// client, the mount and the Python module link no crypto library.
//
// Thread safety: a FrameIntegrity belongs to the one FramedSocket it is
// enabled on; its send half is used by the sending thread, its receive
// half by the receiving thread. WireCounters are atomics, safe anywhere.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ptstore/status.h"

namespace ptstore::local {

inline constexpr size_t kFrameTagBytes = 16;
using FrameTag = std::array<uint8_t, kFrameTagBytes>;

// A frame (header and body), or a run of raw bulk bytes after one.
enum class RecordKind : uint8_t { kFrame = 1, kBulk = 2 };

// What both ends count about peer-protocol security (the cluster's metrics).
struct WireCounters {
  static constexpr size_t kVersions = 8;
  std::atomic<uint64_t> version_refusals{0};    // no common peer-protocol version
  std::atomic<uint64_t> integrity_failures{0};  // records whose tag did not match
  // Connections authenticated, in and out, by agreed version (index; the
  // last one counts that version and all above).
  std::array<std::atomic<uint64_t>, kVersions> sessions{};
};

// One direction's running record: Begin, Update any number of times, then
// Finish (the sending half: the tag to send) or Check (the receiving half:
// Corruption, naming the record, when the tag differs). Every Finish or
// Check ends the record, matched or not.
class RecordSeal {
 public:
  virtual ~RecordSeal() = default;
  virtual Status Begin(RecordKind kind) = 0;
  virtual Status Update(const uint8_t* p, size_t n) = 0;
  virtual Result<FrameTag> Finish() = 0;
  virtual Status Check(const FrameTag& tag) = 0;
  virtual bool open() const = 0;  // between Begin and Finish/Check
};

// The two directions of one connection.
class FrameIntegrity {
 public:
  virtual ~FrameIntegrity() = default;
  virtual RecordSeal& send() = 0;
  virtual RecordSeal& receive() = 0;
};

}  // namespace ptstore::local
