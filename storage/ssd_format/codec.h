// Payload compression for the SSD tier: a byte shuffle (all first bytes of
// each element, then all second bytes, ...) followed by zstd. KV caches in
// bf16/fp16 have high bytes (sign, exponent) that repeat a lot, so grouping
// them lets zstd find the redundancy that interleaved bytes hide.
//
// The compressed form is self-contained and chunked, so large payloads are
// compressed and decompressed in parallel and a corrupt chunk is found:
//
//   u32 magic 'PTZ1' | u32 element_size | u64 raw_bytes | u32 chunk_bytes |
//   u32 chunks | chunks * u32 compressed sizes | chunk data ...
//
// A chunk that zstd cannot shrink is stored raw (its size equals the raw
// chunk size). Decompress never trusts its input: every size is checked and
// a malformed stream is Corruption, never a crash or an overrun.
//
// Thread safety: the functions are reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::storage {

struct CodecOptions {
  uint32_t element_size = 2;       // bytes per value: 2 for bf16/fp16, 4 for fp32, 1 = no shuffle
  int level = 1;                   // zstd level (1 = fastest)
  uint32_t chunk_bytes = 1u << 20; // raw bytes per independently compressed chunk
  uint32_t threads = 1;            // chunks compressed/decompressed in parallel
};

// Appends the compressed form of `raw` to `out` (cleared first).
Status Compress(std::span<const uint8_t> raw, const CodecOptions& options, std::vector<uint8_t>* out);

// Size of the raw payload a compressed stream holds (from its header), or
// Corruption.
Result<uint64_t> CompressedRawSize(std::span<const uint8_t> compressed);

// Decompresses into `out`, which must be exactly the raw size long.
// `threads` as in CodecOptions.
Status Decompress(std::span<const uint8_t> compressed, std::span<uint8_t> out, uint32_t threads = 1);

// Decompresses a stream that sits at the end of its own output buffer
// (the last `compressed_bytes` of `buffer`, which is exactly the raw size
// long), so a payload is read and decompressed without a second buffer.
// `threads` decompress chunks in parallel; each writes its output only once
// the input it would overwrite has been read.
Status DecompressInPlace(std::span<uint8_t> buffer, uint64_t compressed_bytes, uint32_t threads = 1);

// The shuffle and its inverse (exposed for tests and benchmarks).
// `raw.size()` need not be a multiple of element_size: the tail is copied.
void ByteShuffle(std::span<const uint8_t> raw, uint32_t element_size, uint8_t* out);
void ByteUnshuffle(std::span<const uint8_t> shuffled, uint32_t element_size, uint8_t* out);

}  // namespace ptstore::storage
