// Runs the wire fuzzer's checks (tests/fuzz/wire_fuzz.cc) over 200,000
// deterministic inputs, so the "every decoder is total" property is also
// checked in builds without libFuzzer (gcc). Inputs are mutations of the seed
// frames of tests/fuzz/make_corpus.cc: bit flips, byte sets, truncations,
// extensions, u32 length/count fields overwritten with boundary values,
// header fields rewritten, frames re-sealed with a valid checksum so the
// mutated body is what gets decoded; plus purely random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/messages.h"
#include "core/wire.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::fuzz {
// tests/fuzz/wire_fuzz.cc
std::string CheckWireInput(const uint8_t* data, size_t size);
// tests/fuzz/make_corpus.cc
std::vector<std::pair<uint16_t, std::vector<uint8_t>>> SampleFrames();
}  // namespace ptstore::fuzz

namespace ptstore::core {
namespace {

constexpr int kInputs = 200000;

const uint32_t kInteresting32[] = {0,          1,          2,          3,          4,          7,
                                   8,          16,         31,         32,         40,         64,
                                   81,         255,        256,        4096,       4097,       65535,
                                   65536,      65537,      1u << 20,   (1u << 20) + 1,       1u << 22,
                                   (1u << 22) + 1,         0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t Below(size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng_) : 0; }
  bool OneIn(size_t n) { return Below(n) == 0; }
  uint8_t Byte() { return static_cast<uint8_t>(rng_()); }

  void Mutate(std::vector<uint8_t>& b) {
    switch (Below(9)) {
      case 0:  // flip one bit
        if (!b.empty()) b[Below(b.size())] ^= static_cast<uint8_t>(1u << Below(8));
        break;
      case 1:  // set one byte
        if (!b.empty()) b[Below(b.size())] = Byte();
        break;
      case 2:  // truncate
        b.resize(Below(b.size() + 1));
        break;
      case 3: {  // extend with random bytes
        size_t n = 1 + Below(16);
        for (size_t i = 0; i < n; ++i) b.push_back(Byte());
        break;
      }
      case 4:    // overwrite a u32 (a length or count, wherever it is) with a boundary value
      case 5: {
        if (b.size() < 4) break;
        uint32_t v = kInteresting32[Below(std::size(kInteresting32))];
        if (OneIn(4)) v = static_cast<uint32_t>(b.size() - Below(b.size() + 1));  // near the real size
        std::memcpy(b.data() + Below(b.size() - 3), &v, 4);
        break;
      }
      case 6: {  // header body_len
        if (b.size() < kFrameHeaderBytes) break;
        uint32_t v = OneIn(2) ? kInteresting32[Below(std::size(kInteresting32))]
                              : static_cast<uint32_t>(b.size() - kFrameHeaderBytes + Below(9) - 4);
        std::memcpy(b.data() + 16, &v, 4);
        break;
      }
      case 7: {  // header type: another message's body under this type
        if (b.size() < kFrameHeaderBytes) break;
        uint16_t t = static_cast<uint16_t>(OneIn(8) ? rng_() : Below(static_cast<size_t>(kLastMsgType) + 1));
        std::memcpy(b.data() + 6, &t, 2);
        break;
      }
      case 8: {  // delete or duplicate a run of bytes
        if (b.empty()) break;
        size_t at = Below(b.size());
        size_t n = 1 + Below(std::min<size_t>(8, b.size() - at));
        if (OneIn(2)) {
          b.erase(b.begin() + at, b.begin() + at + n);
        } else {
          std::vector<uint8_t> run(b.begin() + at, b.begin() + at + n);
          b.insert(b.begin() + at, run.begin(), run.end());
        }
        break;
      }
    }
  }

  // Rewrites the header so the frame is valid again (length and checksum)
  // around whatever the body now is.
  static void Reseal(std::vector<uint8_t>& b) {
    if (b.size() < kFrameHeaderBytes) return;
    uint16_t type;
    uint64_t rid;
    std::memcpy(&type, b.data() + 6, 2);
    std::memcpy(&rid, b.data() + 8, 8);
    EncodeFrameHeader(type, rid, std::span(b).subspan(kFrameHeaderBytes), b.data());
  }

 private:
  std::mt19937_64 rng_;
};

TEST(WireFuzzReplayTest, SeedsAreValidFramesOfEveryType) {
  auto seeds = fuzz::SampleFrames();
  std::vector<bool> seen(static_cast<uint16_t>(kLastMsgType) + 1, false);
  for (const auto& [type, frame] : seeds) {
    SCOPED_TRACE(MsgTypeName(type));
    Result<FrameHeader> h = DecodeFrameHeader(frame);
    ASSERT_OK(h);
    ASSERT_EQ(h->type, type);
    ASSERT_EQ(frame.size(), kFrameHeaderBytes + h->body_len);
    auto body = std::span(frame).subspan(kFrameHeaderBytes);
    EXPECT_OK(VerifyFrameChecksum(frame.data(), body));
    EXPECT_OK(DecodeAny(type, body));
    EXPECT_EQ(fuzz::CheckWireInput(frame.data(), frame.size()), "");
    ASSERT_LT(type, seen.size());
    seen[type] = true;
  }
  for (uint16_t t = static_cast<uint16_t>(MsgType::kError); t <= static_cast<uint16_t>(kLastMsgType);
       ++t) {
    EXPECT_TRUE(seen[t]) << "no seed for " << MsgTypeName(t);
  }
}

TEST(WireFuzzReplayTest, DegenerateInputs) {
  std::vector<uint8_t> b;
  EXPECT_EQ(fuzz::CheckWireInput(nullptr, 0), "");
  for (size_t n : {1, 23, 24, 25, 4096}) {
    for (uint8_t fill : {0x00, 0x01, 0xff}) {
      b.assign(n, fill);
      EXPECT_EQ(fuzz::CheckWireInput(b.data(), b.size()), "") << n << " x " << int(fill);
    }
  }
}

TEST(WireFuzzReplayTest, MutatedAndRandomInputsNeverBreakTheDecoders) {
  const auto seeds = fuzz::SampleFrames();
  Mutator m(0x5054533157495245ULL);  // fixed: failures reproduce
  int failures = 0;
  int decoded_frames = 0;  // mutated frames whose body still decoded
  int rejected_frames = 0;
  for (int i = 0; i < kInputs && failures < 10; ++i) {
    std::vector<uint8_t> in;
    if (m.OneIn(10)) {
      in.resize(m.Below(300));
      for (auto& x : in) x = m.Byte();
    } else {
      in = seeds[m.Below(seeds.size())].second;
      size_t rounds = 1 + m.Below(4);
      for (size_t r = 0; r < rounds; ++r) m.Mutate(in);
      if (m.OneIn(2)) Mutator::Reseal(in);
      if (m.OneIn(8)) m.Mutate(in);  // sometimes break it after the seal
    }
    std::string err = fuzz::CheckWireInput(in.data(), in.size());
    if (!err.empty()) {
      ++failures;
      std::string hex;
      for (uint8_t x : in) {
        char buf[3];
        std::snprintf(buf, sizeof(buf), "%02x", x);
        hex += buf;
      }
      ADD_FAILURE() << "input " << i << " (" << in.size() << " bytes): " << err << "\n  hex: " << hex;
    }
    // Tally what the frames did, so the test proves it reached the decoders.
    Result<FrameHeader> h = DecodeFrameHeader(in);
    if (h.ok() && in.size() >= kFrameHeaderBytes + h->body_len) {
      auto body = std::span(in).subspan(kFrameHeaderBytes, h->body_len);
      if (VerifyFrameChecksum(in.data(), body).ok()) {
        (DecodeAny(h->type, body).ok() ? decoded_frames : rejected_frames)++;
      }
    }
  }
  EXPECT_EQ(failures, 0);
  // Both outcomes must be well represented, or the mutations are too weak
  // (everything rejected early) or too timid (nothing changed).
  EXPECT_GT(decoded_frames, kInputs / 50) << "decoded " << decoded_frames << " rejected " << rejected_frames;
  EXPECT_GT(rejected_frames, kInputs / 50) << "decoded " << decoded_frames << " rejected " << rejected_frames;
  RecordProperty("decoded_frames", decoded_frames);
  RecordProperty("rejected_frames", rejected_frames);
}

}  // namespace
}  // namespace ptstore::core
