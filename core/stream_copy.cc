#include "core/stream_copy.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ptstore::core {

namespace {

#if defined(__x86_64__)

// Both loops: `d` aligned to the store width, `n` a multiple of 128 bytes.
__attribute__((target("avx2"))) void StreamAvx2(uint8_t* d, const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
}

void StreamSse2(uint8_t* d, const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
}

using StreamLoop = void (*)(uint8_t*, const uint8_t*, size_t);

StreamLoop ChooseLoop() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? StreamAvx2 : StreamSse2;
}

#endif

}  // namespace

void StreamCopy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  static const StreamLoop loop = ChooseLoop();
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  // The head up to a 64-byte boundary of the destination, and the tail
  // short of a 128-byte step, through the cache.
  const size_t head = std::min(n, static_cast<size_t>(-reinterpret_cast<uintptr_t>(d) & 63));
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  const size_t body = n & ~size_t{127};
  if (body > 0) {
    loop(d, s, body);
    _mm_sfence();  // streaming stores are weakly ordered
  }
  std::memcpy(d + body, s + body, n - body);
#else
  std::memcpy(dst, src, n);
#endif
}

uint64_t StreamCopyThreshold() {
  static const uint64_t threshold = [] {
    long llc = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    if (llc <= 0) return uint64_t{32} << 20;
    return std::max<uint64_t>(static_cast<uint64_t>(llc), uint64_t{8} << 20);
  }();
  return threshold;
}

void CopyBytes(void* dst, const void* src, size_t n, uint64_t total) {
  if (total >= StreamCopyThreshold()) {
    StreamCopy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

}  // namespace ptstore::core
