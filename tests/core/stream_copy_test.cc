// core/stream_copy.h: the streaming copy puts every byte in its place for
// every alignment of source and destination and every length around its
// head (64-byte boundary) and step (128 bytes), writes nothing outside the
// destination, and CopyBytes copies right on both sides of its threshold.
#include "core/stream_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace ptstore::core {
namespace {

std::vector<uint8_t> Random(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Copies `n` bytes from src+so to dst+do_ and checks the copy and that the
// guard bytes on both sides are untouched.
void Check(const std::vector<uint8_t>& src, size_t so, size_t do_, size_t n, bool stream) {
  constexpr size_t kGuard = 256;
  std::vector<uint8_t> dst(kGuard + 64 + n + kGuard, 0xC3);
  uint8_t* d = dst.data() + kGuard + do_;
  if (stream) {
    StreamCopy(d, src.data() + so, n);
  } else {
    CopyBytes(d, src.data() + so, n, StreamCopyThreshold());
  }
  ASSERT_EQ(std::memcmp(d, src.data() + so, n), 0) << "src+" << so << " dst+" << do_ << " n=" << n;
  for (size_t i = 0; i < kGuard + do_; ++i) ASSERT_EQ(dst[i], 0xC3) << "before the destination, byte " << i;
  for (size_t i = kGuard + do_ + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xC3) << "after it, byte " << i;
}

TEST(StreamCopyTest, EveryAlignmentAndLengthAroundTheHeadAndTheStep) {
  const std::vector<uint8_t> src = Random(8192, 1);
  for (size_t so : {0, 1, 7, 16, 31, 32, 33, 63}) {
    for (size_t do_ = 0; do_ < 64; ++do_) {
      for (size_t n : {0, 1, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257, 1000, 4095, 4096, 4097, 7000}) {
        Check(src, so, do_, n, true);
      }
    }
  }
}

TEST(StreamCopyTest, LargeCopiesAndCopyBytesOnBothSidesOfItsThreshold) {
  EXPECT_GE(StreamCopyThreshold(), uint64_t{8} << 20);
  const size_t n = (16u << 20) + 4099;
  const std::vector<uint8_t> src = Random(n + 64, 2);
  Check(src, 3, 17, n, true);
  Check(src, 0, 0, n, false);  // CopyBytes with total at the threshold: streams
  std::vector<uint8_t> dst(n, 0);
  CopyBytes(dst.data(), src.data() + 5, n, 1);  // a small whole: memcpy
  EXPECT_EQ(std::memcmp(dst.data(), src.data() + 5, n), 0);
}

TEST(StreamCopyTest, ABufferStreamedByOneThreadIsSeenWholeByAnotherAfterAJoin) {
  const size_t n = 32u << 20;
  const std::vector<uint8_t> src = Random(n, 3);
  std::vector<uint8_t> dst(n, 0);
  std::thread t([&] { StreamCopy(dst.data() + n / 2, src.data() + n / 2, n / 2); });
  StreamCopy(dst.data(), src.data(), n / 2);
  t.join();
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), n), 0);
}

}  // namespace
}  // namespace ptstore::core
