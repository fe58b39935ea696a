#include "storage/ssd_format/codec.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>

#include "core/mutex.h"

namespace ptstore::storage {
namespace {

// ---------------------------------------------------------------- format

// The header is written in host order with memcpy; every machine PTStore
// runs on is little-endian, and a big-endian build should fail here rather
// than write streams nobody else can read.
static_assert(std::endian::native == std::endian::little, "the codec format is little-endian");

constexpr uint8_t kMagic[4] = {'P', 'T', 'Z', '1'};
// magic | element_size | raw_bytes | chunk_bytes | chunks
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 4 + 4;
constexpr size_t kSizeBytes = 4;  // one entry of the size table

// More threads than this only cost stacks and contexts: the chunks of one
// payload are what bounds the parallelism, and the machines have far fewer
// cores.
constexpr uint32_t kMaxThreads = 64;
// A thread keeps its shuffle scratch between calls (the default 1 MiB chunk
// would otherwise be reallocated and faulted in on every call), but not a
// huge one that an unusual chunk size asked for once.
constexpr size_t kMaxKeptScratch = 8u << 20;

struct Header {
  uint32_t element_size = 0;
  uint64_t raw_bytes = 0;
  uint32_t chunk_bytes = 0;
  uint32_t chunks = 0;
};

void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void PutU64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t GetU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

bool ValidElementSize(uint32_t e) { return e == 1 || e == 2 || e == 4 || e == 8; }

uint64_t ChunkCount(uint64_t raw_bytes, uint32_t chunk_bytes) {
  return raw_bytes / chunk_bytes + (raw_bytes % chunk_bytes != 0 ? 1 : 0);
}

std::string Str(uint64_t v) { return std::to_string(v); }

// Reads and checks the fixed header and that the size table after it is
// present. Only what the header alone can prove is checked here; the chunk
// sizes are Decompress's business.
Result<Header> ParseHeader(std::span<const uint8_t> in) {
  if (in.size() < kHeaderBytes) {
    return Corruption("compressed payload: " + Str(in.size()) + " bytes, shorter than the " + Str(kHeaderBytes) +
                      "-byte header");
  }
  if (std::memcmp(in.data(), kMagic, 4) != 0) return Corruption("compressed payload: bad magic (not a PTZ1 stream)");
  Header h;
  h.element_size = GetU32(in.data() + 4);
  h.raw_bytes = GetU64(in.data() + 8);
  h.chunk_bytes = GetU32(in.data() + 16);
  h.chunks = GetU32(in.data() + 20);
  if (!ValidElementSize(h.element_size)) {
    return Corruption("compressed payload: element size " + Str(h.element_size) + " is not 1, 2, 4 or 8");
  }
  // Compress only writes chunks that hold whole elements (see Compress);
  // anything else was not written by it.
  if (h.chunk_bytes == 0 || h.chunk_bytes % h.element_size != 0) {
    return Corruption("compressed payload: chunk size " + Str(h.chunk_bytes) + " is not a positive multiple of the " +
                      Str(h.element_size) + "-byte element");
  }
  const uint64_t want_chunks = ChunkCount(h.raw_bytes, h.chunk_bytes);
  if (h.chunks != want_chunks) {
    return Corruption("compressed payload: " + Str(h.chunks) + " chunks, but " + Str(h.raw_bytes) + " raw bytes in " +
                      Str(h.chunk_bytes) + "-byte chunks make " + Str(want_chunks));
  }
  const uint64_t table_end = kHeaderBytes + uint64_t{h.chunks} * kSizeBytes;
  if (in.size() < table_end) {
    return Corruption("compressed payload: truncated: " + Str(in.size()) + " bytes cannot hold the size table of " +
                      Str(h.chunks) + " chunks");
  }
  return h;
}

// ------------------------------------------------------------ per thread

struct ZstdDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// What one thread reuses from chunk to chunk and, for the calling thread,
// from call to call: zstd contexts keep their tables (allocating them per
// chunk would cost more than compressing a small chunk), and the scratch
// holds the shuffled form of one chunk.
struct ThreadState {
  std::unique_ptr<ZSTD_CCtx, ZstdDeleter> cctx;
  std::unique_ptr<ZSTD_DCtx, ZstdDeleter> dctx;
  std::vector<uint8_t> scratch;

  uint8_t* Scratch(size_t bytes) {
    if (scratch.size() < bytes) scratch.resize(bytes);
    return scratch.data();
  }
  void Trim() {
    if (scratch.capacity() > kMaxKeptScratch) std::vector<uint8_t>().swap(scratch);
  }
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

// Number of ranges ForEachRange splits `chunks` chunks into.
uint32_t RangeCount(uint32_t chunks, uint32_t threads) {
  return std::clamp<uint32_t>(threads, 1, std::max<uint32_t>(1, std::min(chunks, kMaxThreads)));
}
// First chunk of range r of `ranges`.
uint32_t RangeFirst(uint32_t chunks, uint32_t ranges, uint32_t r) {
  return static_cast<uint32_t>(uint64_t{chunks} * r / ranges);
}

// Runs work(r, first, end) for RangeCount(chunks, threads) contiguous,
// nearly equal ranges [first, end) of [0, chunks): range 0 on the calling
// thread, the others on new threads.
// Contiguous ranges are what lets Compress pack each range's output in
// place. Returns the error of the lowest range that failed, so the message
// does not depend on scheduling.
template <typename Work>
Status ForEachRange(uint32_t chunks, uint32_t threads, Work&& work) {
  if (chunks == 0) return Status::OK();
  threads = RangeCount(chunks, threads);
  if (threads == 1) return work(0u, 0u, chunks);

  auto first_of = [&](uint32_t r) { return RangeFirst(chunks, threads, r); };
  std::vector<Status> results(threads);
  std::vector<std::thread> workers;
  std::vector<uint32_t> inline_ranges;
  workers.reserve(threads - 1);
  for (uint32_t r = 1; r < threads; ++r) {
    try {
      workers.emplace_back([&, r] { results[r] = work(r, first_of(r), first_of(r + 1)); });
    } catch (const std::system_error&) {
      // No thread to be had (limits, memory): the range still gets done,
      // on this thread, after its own.
      inline_ranges.push_back(r);
    }
  }
  results[0] = work(0u, 0u, first_of(1));
  for (uint32_t r : inline_ranges) results[r] = work(r, first_of(r), first_of(r + 1));
  for (std::thread& w : workers) w.join();
  for (Status& s : results) {
    if (!s.ok()) return std::move(s);
  }
  return Status::OK();
}

// ------------------------------------------------------- shuffle kernels
//
// Each kernel moves a block of kBlock elements with a loop of constant trip
// count over __restrict pointers: that is the shape GCC's -O2 vectoriser
// (the "very cheap" cost model) accepts, and it turns the strided byte
// accesses into 16-byte loads and permutes. The per-byte generic loop runs
// 5-10x slower. The remainder of the elements and the bytes of an
// incomplete element go through the scalar loops.

constexpr size_t kBlock = 64;

#define PTS_R __restrict

inline void ShuffleBlock2(const uint8_t* PTS_R p, uint8_t* PTS_R q0, uint8_t* PTS_R q1) {
  for (size_t j = 0; j < kBlock; ++j) {
    q0[j] = p[2 * j];
    q1[j] = p[2 * j + 1];
  }
}
inline void UnshuffleBlock2(const uint8_t* PTS_R q0, const uint8_t* PTS_R q1, uint8_t* PTS_R p) {
  for (size_t j = 0; j < kBlock; ++j) {
    p[2 * j] = q0[j];
    p[2 * j + 1] = q1[j];
  }
}
inline void ShuffleBlock4(const uint8_t* PTS_R p, uint8_t* PTS_R q0, uint8_t* PTS_R q1, uint8_t* PTS_R q2,
                          uint8_t* PTS_R q3) {
  for (size_t j = 0; j < kBlock; ++j) {
    q0[j] = p[4 * j];
    q1[j] = p[4 * j + 1];
    q2[j] = p[4 * j + 2];
    q3[j] = p[4 * j + 3];
  }
}
inline void UnshuffleBlock4(const uint8_t* PTS_R q0, const uint8_t* PTS_R q1, const uint8_t* PTS_R q2,
                            const uint8_t* PTS_R q3, uint8_t* PTS_R p) {
  for (size_t j = 0; j < kBlock; ++j) {
    p[4 * j] = q0[j];
    p[4 * j + 1] = q1[j];
    p[4 * j + 2] = q2[j];
    p[4 * j + 3] = q3[j];
  }
}
inline void ShuffleBlock8(const uint8_t* PTS_R p, uint8_t* PTS_R q0, uint8_t* PTS_R q1, uint8_t* PTS_R q2,
                          uint8_t* PTS_R q3, uint8_t* PTS_R q4, uint8_t* PTS_R q5, uint8_t* PTS_R q6,
                          uint8_t* PTS_R q7) {
  for (size_t j = 0; j < kBlock; ++j) {
    q0[j] = p[8 * j];
    q1[j] = p[8 * j + 1];
    q2[j] = p[8 * j + 2];
    q3[j] = p[8 * j + 3];
    q4[j] = p[8 * j + 4];
    q5[j] = p[8 * j + 5];
    q6[j] = p[8 * j + 6];
    q7[j] = p[8 * j + 7];
  }
}
inline void UnshuffleBlock8(const uint8_t* PTS_R q0, const uint8_t* PTS_R q1, const uint8_t* PTS_R q2,
                            const uint8_t* PTS_R q3, const uint8_t* PTS_R q4, const uint8_t* PTS_R q5,
                            const uint8_t* PTS_R q6, const uint8_t* PTS_R q7, uint8_t* PTS_R p) {
  for (size_t j = 0; j < kBlock; ++j) {
    p[8 * j] = q0[j];
    p[8 * j + 1] = q1[j];
    p[8 * j + 2] = q2[j];
    p[8 * j + 3] = q3[j];
    p[8 * j + 4] = q4[j];
    p[8 * j + 5] = q5[j];
    p[8 * j + 6] = q6[j];
    p[8 * j + 7] = q7[j];
  }
}

#undef PTS_R

// `n` whole elements of `es` bytes; returns how many the block kernels did.
size_t ShuffleBlocks(const uint8_t* in, size_t n, uint32_t es, uint8_t* out) {
  const size_t blocks_end = n / kBlock * kBlock;
  for (size_t i = 0; i < blocks_end; i += kBlock) {
    const uint8_t* p = in + es * i;
    uint8_t* q = out + i;
    switch (es) {
      case 2: ShuffleBlock2(p, q, q + n); break;
      case 4: ShuffleBlock4(p, q, q + n, q + 2 * n, q + 3 * n); break;
      case 8: ShuffleBlock8(p, q, q + n, q + 2 * n, q + 3 * n, q + 4 * n, q + 5 * n, q + 6 * n, q + 7 * n); break;
      default: return i;
    }
  }
  return blocks_end;
}

size_t UnshuffleBlocks(const uint8_t* in, size_t n, uint32_t es, uint8_t* out) {
  const size_t blocks_end = n / kBlock * kBlock;
  for (size_t i = 0; i < blocks_end; i += kBlock) {
    const uint8_t* q = in + i;
    uint8_t* p = out + es * i;
    switch (es) {
      case 2: UnshuffleBlock2(q, q + n, p); break;
      case 4: UnshuffleBlock4(q, q + n, q + 2 * n, q + 3 * n, p); break;
      case 8: UnshuffleBlock8(q, q + n, q + 2 * n, q + 3 * n, q + 4 * n, q + 5 * n, q + 6 * n, q + 7 * n, p); break;
      default: return i;
    }
  }
  return blocks_end;
}

}  // namespace

void ByteShuffle(std::span<const uint8_t> raw, uint32_t element_size, uint8_t* out) {
  if (raw.empty()) return;
  if (element_size <= 1) {
    std::memcpy(out, raw.data(), raw.size());
    return;
  }
  const size_t es = element_size;
  const size_t n = raw.size() / es;
  const uint8_t* in = raw.data();
  for (size_t i = ShuffleBlocks(in, n, element_size, out); i < n; ++i) {
    for (size_t b = 0; b < es; ++b) out[b * n + i] = in[es * i + b];
  }
  const size_t whole = n * es;
  std::memcpy(out + whole, in + whole, raw.size() - whole);
}

void ByteUnshuffle(std::span<const uint8_t> shuffled, uint32_t element_size, uint8_t* out) {
  if (shuffled.empty()) return;
  if (element_size <= 1) {
    std::memcpy(out, shuffled.data(), shuffled.size());
    return;
  }
  const size_t es = element_size;
  const size_t n = shuffled.size() / es;
  const uint8_t* in = shuffled.data();
  for (size_t i = UnshuffleBlocks(in, n, element_size, out); i < n; ++i) {
    for (size_t b = 0; b < es; ++b) out[es * i + b] = in[b * n + i];
  }
  const size_t whole = n * es;
  std::memcpy(out + whole, in + whole, shuffled.size() - whole);
}

Status Compress(std::span<const uint8_t> raw, const CodecOptions& options, std::vector<uint8_t>* out) {
  const uint32_t es = options.element_size;
  const uint32_t chunk_bytes = options.chunk_bytes;
  if (!ValidElementSize(es)) return InvalidArgument("codec: element size " + Str(es) + " is not 1, 2, 4 or 8");
  // Whole elements per chunk keep every chunk's bytes aligned to element
  // boundaries, so the shuffle groups the same byte of each value in every
  // chunk, not just the first.
  if (chunk_bytes == 0 || chunk_bytes % es != 0) {
    return InvalidArgument("codec: chunk size " + Str(chunk_bytes) + " is not a positive multiple of the " + Str(es) +
                           "-byte element");
  }
  if (options.level < ZSTD_minCLevel() || options.level > ZSTD_maxCLevel()) {
    return InvalidArgument("codec: zstd level " + std::to_string(options.level) + " is outside [" +
                           std::to_string(ZSTD_minCLevel()) + ", " + std::to_string(ZSTD_maxCLevel()) + "]");
  }
  const uint64_t chunks64 = ChunkCount(raw.size(), chunk_bytes);
  if (chunks64 > UINT32_MAX) {
    return InvalidArgument("codec: " + Str(raw.size()) + " bytes in " + Str(chunk_bytes) +
                           "-byte chunks exceed the format's 2^32 chunks");
  }
  const auto chunks = static_cast<uint32_t>(chunks64);

  // Every chunk is stored in at most its raw size (raw when zstd cannot
  // shrink it), so header + table + raw size is the worst case and nothing
  // is ever reallocated. Each chunk is written at or before its raw offset
  // in the data area, so the ranges of ForEachRange cannot overrun each
  // other.
  const size_t table_end = kHeaderBytes + size_t{chunks} * kSizeBytes;
  out->clear();
  out->resize(table_end + raw.size());
  uint8_t* const base = out->data();
  std::memcpy(base, kMagic, 4);
  PutU32(base + 4, es);
  PutU64(base + 8, raw.size());
  PutU32(base + 16, chunk_bytes);
  PutU32(base + 20, chunks);
  uint8_t* const data = base + table_end;

  // Packed bytes of each range, which starts at its first chunk's raw offset.
  const uint32_t ranges = RangeCount(chunks, options.threads);
  std::vector<uint64_t> range_start(ranges), range_bytes(ranges);
  for (uint32_t r = 0; r < ranges; ++r) range_start[r] = uint64_t{RangeFirst(chunks, ranges, r)} * chunk_bytes;

  auto work = [&](uint32_t r, uint32_t first, uint32_t end) -> Status {
    ThreadState& st = State();
    if (!st.cctx) st.cctx.reset(ZSTD_createCCtx());
    if (!st.cctx) return ResourceExhausted("codec: cannot allocate a zstd compression context");
    uint64_t cursor = range_start[r];
    Status status;
    for (uint32_t c = first; c < end; ++c) {
      const uint64_t offset = uint64_t{c} * chunk_bytes;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk_bytes, raw.size() - offset));
      const uint8_t* src = raw.data() + offset;
      if (es > 1) {
        uint8_t* shuffled = st.Scratch(len);
        ByteShuffle({src, len}, es, shuffled);
        src = shuffled;
      }
      // Capacity len - 1: a frame that does not save at least one byte is
      // not worth decoding, and a stored size equal to len means "raw".
      size_t stored = ZSTD_compressCCtx(st.cctx.get(), data + cursor, len - 1, src, len, options.level);
      if (ZSTD_isError(stored)) {
        if (ZSTD_getErrorCode(stored) != ZSTD_error_dstSize_tooSmall) {
          status = Internal("codec: zstd compression of chunk " + Str(c) + " failed: " + ZSTD_getErrorName(stored));
          break;
        }
        // Raw chunks keep the original byte order: reading them back is
        // then one memcpy, with no unshuffle.
        std::memcpy(data + cursor, raw.data() + offset, len);
        stored = len;
      }
      PutU32(base + kHeaderBytes + size_t{c} * kSizeBytes, static_cast<uint32_t>(stored));
      cursor += stored;
    }
    range_bytes[r] = cursor - range_start[r];
    st.Trim();
    return status;
  };
  PTS_RETURN_IF_ERROR(ForEachRange(chunks, ranges, work));

  // Close the gaps between ranges, in order: each range moves down to where
  // the previous one ends, never onto bytes not yet moved.
  uint64_t packed = range_bytes[0];
  for (uint32_t r = 1; r < ranges; ++r) {
    if (range_start[r] != packed) std::memmove(data + packed, data + range_start[r], range_bytes[r]);
    packed += range_bytes[r];
  }
  out->resize(table_end + packed);
  return Status::OK();
}

Result<uint64_t> CompressedRawSize(std::span<const uint8_t> compressed) {
  PTS_ASSIGN_OR_RETURN(Header h, ParseHeader(compressed));
  return h.raw_bytes;
}

Status Decompress(std::span<const uint8_t> compressed, std::span<uint8_t> out, uint32_t threads) {
  PTS_ASSIGN_OR_RETURN(const Header h, ParseHeader(compressed));
  if (out.size() != h.raw_bytes) {
    return InvalidArgument("codec: output buffer of " + Str(out.size()) + " bytes for a payload of " +
                           Str(h.raw_bytes) + " bytes");
  }

  // Where each chunk's bytes start. Every size is checked before any chunk
  // is decoded: at most the raw chunk size (raw chunks are stored as is),
  // never zero, all of them within the input. Bytes after the last chunk
  // are ignored: a reader may hand over a block-padded buffer.
  const size_t table_end = kHeaderBytes + size_t{h.chunks} * kSizeBytes;
  std::vector<uint64_t> starts(h.chunks);
  uint64_t pos = table_end;
  for (uint32_t c = 0; c < h.chunks; ++c) {
    const uint64_t stored = GetU32(compressed.data() + kHeaderBytes + size_t{c} * kSizeBytes);
    const uint64_t len = std::min<uint64_t>(h.chunk_bytes, h.raw_bytes - uint64_t{c} * h.chunk_bytes);
    if (stored == 0 || stored > len) {
      return Corruption("compressed payload: chunk " + Str(c) + " of " + Str(h.chunks) + " claims " + Str(stored) +
                        " stored bytes for " + Str(len) + " raw bytes");
    }
    starts[c] = pos;
    pos += stored;  // cannot overflow: at most 2^32 chunks of < 2^32 bytes
  }
  if (pos > compressed.size()) {
    return Corruption("compressed payload: truncated: the chunks need " + Str(pos) + " bytes, the input has " +
                      Str(compressed.size()));
  }

  auto work = [&](uint32_t /*range*/, uint32_t first, uint32_t end) -> Status {
    ThreadState& st = State();
    Status status;
    for (uint32_t c = first; c < end; ++c) {
      const uint64_t offset = uint64_t{c} * h.chunk_bytes;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(h.chunk_bytes, h.raw_bytes - offset));
      const size_t stored = static_cast<size_t>((c + 1 < h.chunks ? starts[c + 1] : pos) - starts[c]);
      const uint8_t* src = compressed.data() + starts[c];
      uint8_t* dst = out.data() + offset;
      if (stored == len) {
        std::memcpy(dst, src, len);
        continue;
      }
      if (!st.dctx) st.dctx.reset(ZSTD_createDCtx());
      if (!st.dctx) {
        status = ResourceExhausted("codec: cannot allocate a zstd decompression context");
        break;
      }
      // zstd never writes past the capacity it is given, and the frame must
      // fill it exactly: a frame that decodes to more or less is corrupt.
      uint8_t* target = h.element_size > 1 ? st.Scratch(len) : dst;
      const size_t got = ZSTD_decompressDCtx(st.dctx.get(), target, len, src, stored);
      if (ZSTD_isError(got)) {
        status = Corruption("compressed payload: chunk " + Str(c) + " of " + Str(h.chunks) + ": zstd: " +
                            ZSTD_getErrorName(got));
        break;
      }
      if (got != len) {
        status = Corruption("compressed payload: chunk " + Str(c) + " of " + Str(h.chunks) + " decodes to " +
                            Str(got) + " bytes, expected " + Str(len));
        break;
      }
      if (h.element_size > 1) ByteUnshuffle({target, len}, h.element_size, dst);
    }
    st.Trim();
    return status;
  };
  return ForEachRange(h.chunks, threads, work);
}

Status DecompressInPlace(std::span<uint8_t> buffer, uint64_t compressed_bytes, uint32_t threads) {
  if (compressed_bytes > buffer.size()) {
    return InvalidArgument("codec: a stream of " + Str(compressed_bytes) + " bytes does not fit its " +
                           Str(buffer.size()) + "-byte buffer");
  }
  const uint64_t base = buffer.size() - compressed_bytes;
  std::span<const uint8_t> compressed = buffer.subspan(base);
  PTS_ASSIGN_OR_RETURN(const Header h, ParseHeader(compressed));
  if (buffer.size() != h.raw_bytes) {
    return InvalidArgument("codec: buffer of " + Str(buffer.size()) + " bytes for a payload of " + Str(h.raw_bytes) +
                           " bytes");
  }
  // The table is read once, before any output can overwrite it.
  const size_t table_end = kHeaderBytes + size_t{h.chunks} * kSizeBytes;
  std::vector<uint64_t> starts(h.chunks + 1);
  uint64_t pos = table_end;
  for (uint32_t c = 0; c < h.chunks; ++c) {
    const uint64_t stored = GetU32(compressed.data() + kHeaderBytes + size_t{c} * kSizeBytes);
    const uint64_t len = std::min<uint64_t>(h.chunk_bytes, h.raw_bytes - uint64_t{c} * h.chunk_bytes);
    if (stored == 0 || stored > len) {
      return Corruption("compressed payload: chunk " + Str(c) + " of " + Str(h.chunks) + " claims " + Str(stored) +
                        " stored bytes for " + Str(len) + " raw bytes");
    }
    starts[c] = pos;
    pos += stored;
  }
  starts[h.chunks] = pos;
  if (pos > compressed.size()) {
    return Corruption("compressed payload: truncated: the chunks need " + Str(pos) + " bytes, the input has " +
                      Str(compressed.size()));
  }
  // Chunk c's output ends at or before where chunk c + 1's input starts (no
  // chunk is stored larger than it is raw), so it can only overwrite the
  // input of chunks up to c. Threads take chunks in order, read each one's
  // input into their scratch buffer (decompressing it), then write its
  // output once every earlier chunk's input has been read.
  core::Mutex mu;  // guards consumed, prefix and status (locals: not GUARDED_BY)
  core::CondVar cv;
  std::vector<char> consumed(h.chunks, 0);
  uint32_t prefix = 0;  // chunks [0, prefix) are all consumed
  std::atomic<uint32_t> next{0};
  std::atomic<bool> failed{false};
  Status status;
  auto work = [&] {
    ThreadState& st = State();
    for (uint32_t c = next++; c < h.chunks && !failed; c = next++) {
      const uint64_t offset = uint64_t{c} * h.chunk_bytes;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(h.chunk_bytes, h.raw_bytes - offset));
      const size_t stored = static_cast<size_t>(starts[c + 1] - starts[c]);
      const uint8_t* src = buffer.data() + base + starts[c];
      uint8_t* target = st.Scratch(len);
      Status cs;
      if (stored == len) {
        std::memcpy(target, src, len);
      } else {
        if (!st.dctx) st.dctx.reset(ZSTD_createDCtx());
        const size_t got = st.dctx ? ZSTD_decompressDCtx(st.dctx.get(), target, len, src, stored) : 0;
        if (!st.dctx) {
          cs = ResourceExhausted("codec: cannot allocate a zstd decompression context");
        } else if (ZSTD_isError(got)) {
          cs = Corruption("compressed payload: chunk " + Str(c) + " of " + Str(h.chunks) + ": zstd: " +
                          ZSTD_getErrorName(got));
        } else if (got != len) {
          cs = Corruption("compressed payload: chunk " + Str(c) + " of " + Str(h.chunks) + " decodes to " +
                          Str(got) + " bytes, expected " + Str(len));
        }
      }
      core::UniqueLock lk(mu);
      consumed[c] = 1;
      while (prefix < h.chunks && consumed[prefix]) ++prefix;
      cv.NotifyAll();
      if (!cs.ok()) {
        if (status.ok()) status = cs;
        failed = true;
        cv.NotifyAll();
        break;
      }
      cv.Wait(lk, [&] { return prefix >= c || failed; });
      if (failed) break;
      lk.Unlock();
      uint8_t* dst = buffer.data() + offset;
      if (stored != len && h.element_size > 1) {
        ByteUnshuffle({target, len}, h.element_size, dst);
      } else {
        std::memcpy(dst, target, len);
      }
    }
    st.Trim();
  };
  threads = std::clamp<uint32_t>(threads, 1, std::min<uint32_t>(h.chunks ? h.chunks : 1, 64));
  std::vector<std::thread> helpers;
  for (uint32_t i = 1; i < threads; ++i) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
  return status;
}

}  // namespace ptstore::storage
