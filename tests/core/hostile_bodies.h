// Shared by the message tests: hostile bodies (a count far beyond the bytes
// that follow) and the checks every decoder must pass on them: a protocol
// error naming the field, and no allocation out of proportion to the body.
// The test binary links alloc_probe.cc (tests/core/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/wire.h"
#include "tests/core/alloc_probe.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core::testmsg {

struct Hostile {
  const char* what;  // the field the error must name
  uint16_t type;
  std::vector<uint8_t> body;
};

// A body made of `prefix`, then a u32 count, then `tail` bytes of 0x5a.
inline std::vector<uint8_t> WithCount(std::vector<uint8_t> prefix, uint32_t count, size_t tail) {
  Encoder e;
  e.PutRaw(prefix.data(), prefix.size());
  e.PutU32(count);
  std::vector<uint8_t> b = e.Take();
  b.resize(b.size() + tail, 0x5a);
  return b;
}

// DecodeAny of `body` as `type`, and the largest single allocation it made.
struct ProbedDecode {
  Status status;
  size_t max_alloc = 0;
};
inline ProbedDecode DecodeProbed(uint16_t type, std::span<const uint8_t> body) {
  ProbedDecode r;
  ptstore::testing::AllocProbe probe;
  r.status = DecodeAny(type, body);
  r.max_alloc = probe.max();
  return r;
}

// Every body is a protocol error naming its field, and allocates nothing
// larger than the error message and a few times the body.
inline void ExpectHostileBodiesRejected(const std::vector<Hostile>& bodies) {
  for (const Hostile& h : bodies) {
    SCOPED_TRACE(std::string(MsgTypeName(h.type)) + " " + h.what + " body " + std::to_string(h.body.size()));
    const ProbedDecode d = DecodeProbed(h.type, h.body);
    EXPECT_ERROR(d.status, Code::kProtocol);
    EXPECT_NE(d.status.message().find("'" + std::string(h.what) + "'"), std::string::npos) << d.status.message();
    EXPECT_LE(d.max_alloc, 4 * h.body.size() + 1024);
  }
}

}  // namespace ptstore::core::testmsg
