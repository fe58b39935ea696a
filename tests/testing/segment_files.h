// Helpers for tests that build real SSD-tier segment files (with SsdTier)
// and then damage them: record headers to append, payloads, and raw file
// edits (a flipped byte, a truncation, bytes written over a range).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptstore/layout.h"
#include "storage/ssd_format/record.h"

namespace ptstore::testing {

// 2 layers, 2 KV heads, head_dim 64, bf16, 16-token blocks: 1 KiB per
// token, 16 KiB per block.
inline Layout SegmentTestLayout() {
  Layout l;
  l.layers = 2;
  l.kv_heads = 2;
  l.head_dim = 64;
  l.dtype = DType::kBF16;
  l.block_tokens = 16;
  return l;
}

inline storage::RecordHeader NamespaceRecord(const std::string& ns, uint64_t seq) {
  storage::RecordHeader h;
  h.kind = storage::RecordKind::kNamespace;
  h.seq = seq;
  h.live_tokens = 1;
  h.ns_name = ns;
  h.ns_incarnation = seq;
  h.layout = SegmentTestLayout();
  h.uid = 1000;
  h.gid = 100;
  h.mode = 0750;
  return h;
}

// A tensor record of `tokens` tokens (whole blocks) starting at `start`.
inline storage::RecordHeader TensorRecord(const std::string& ns, uint64_t incarnation, uint64_t seq, uint64_t start,
                                          uint64_t tokens) {
  storage::RecordHeader h;
  h.kind = storage::RecordKind::kTensor;
  h.seq = seq;
  h.ns_name = ns;
  h.ns_incarnation = incarnation;
  h.layout = SegmentTestLayout();
  h.parent_key = start == 0 ? ChainKey{} : ChainKey{seq, start};
  h.start_token = start;
  for (uint64_t i = 0; i < tokens; ++i) h.tokens.push_back(static_cast<uint32_t>(seq * 100000 + start + i));
  h.live_tokens = tokens;
  return h;
}

// Expects the fields a record's writer chooses to be equal: all but flags,
// payload_bytes, stored_bytes, payload_checksum and live_tokens, which the
// SSD tier sets or changes.
inline void ExpectSameRecord(const storage::RecordHeader& got, const storage::RecordHeader& want) {
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.seq, want.seq);
  EXPECT_EQ(got.owner_node, want.owner_node);
  EXPECT_EQ(got.ns_name, want.ns_name);
  EXPECT_EQ(got.ns_incarnation, want.ns_incarnation);
  EXPECT_EQ(got.layout, want.layout);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.parent_key, want.parent_key);
  EXPECT_EQ(got.start_token, want.start_token);
  EXPECT_EQ(got.hits, want.hits);
  EXPECT_EQ(got.salt, want.salt);
  EXPECT_EQ(got.uid, want.uid);
  EXPECT_EQ(got.gid, want.gid);
  EXPECT_EQ(got.mode, want.mode);
}

// A payload without all-zero 4 KiB blocks. `compressible`: bf16-like values
// with repeating high bytes (compresses well); otherwise pseudo-random
// (does not compress).
inline std::vector<uint8_t> TestPayload(uint64_t bytes, uint32_t salt, bool compressible) {
  std::vector<uint8_t> p(bytes);
  uint64_t x = 0x9e3779b97f4a7c15ull * (salt + 1);
  for (uint64_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    if (compressible) {
      p[i] = (i % 2 == 1) ? 0x3f : static_cast<uint8_t>(x & 0x0f);
    } else {
      p[i] = static_cast<uint8_t>(x >> 32);
    }
  }
  return p;
}

inline void WriteAt(const std::string& path, uint64_t offset, const std::vector<uint8_t>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) throw std::runtime_error("open " + path);
  ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
  ::close(fd);
  if (n != static_cast<ssize_t>(bytes.size())) throw std::runtime_error("pwrite " + path);
}

inline std::vector<uint8_t> ReadAt(const std::string& path, uint64_t offset, uint64_t length) {
  std::vector<uint8_t> out(length);
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("open " + path);
  ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
  ::close(fd);
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

inline void FlipBit(const std::string& path, uint64_t offset, uint8_t mask = 0x10) {
  std::vector<uint8_t> b = ReadAt(path, offset, 1);
  if (b.size() != 1) throw std::runtime_error("flip past the end of " + path);
  b[0] ^= mask;
  WriteAt(path, offset, b);
}

inline void TruncateTo(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) throw std::runtime_error("truncate " + path);
}

inline uint64_t SizeOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace ptstore::testing
