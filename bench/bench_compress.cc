// bench_compress: does compressing KV payloads for the SSD tier pay?
//
// For KV-like data (normally distributed bf16, fp16 and fp32 values, bf16
// with per-channel scales and outlier channels like a real K cache, and
// optionally real KV bytes from a file, e.g. from bench/kv_dump.py) it
// measures, with storage/ssd_format/codec.h:
//   the compression ratio (raw / compressed bytes),
//   compress and decompress speed (MB/s of raw bytes) on 1 and 2 threads,
// with and without the byte shuffle (element size 1 = no shuffle), at the
// zstd levels asked for (1 and 3). The baseline, measured in the same run, is
// a memcpy of the same bytes; speeds are also printed as a ratio to it. The
// last column says what a disk reading compressed bytes at --disk-gbps
// (1.2 GB/s: the O_DIRECT read speed of the SSD tier) delivers in raw bytes
// when the reads and decompression overlap: min(disk * ratio, decompress).
//
// Every buffer is pre-faulted and every configuration gets an untimed
// warm-up; each decompression goes into a poisoned buffer and is compared
// with the source byte for byte: a wrong byte fails the run. It never fails
// on speed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_util.h"
#include "storage/ssd_format/codec.h"

using namespace ptstore;
using namespace ptstore::bench;
using storage::CodecOptions;

namespace {

struct Options {
  uint64_t size_mib = 256;
  int reps = 3;
  std::vector<int> levels{1, 3};
  uint32_t chunk_kib = 1024;
  std::string kv_file, dtype = "bf16";
  bool synthetic = true;
  double disk_gbps = 1.2;
  uint64_t seed = 42;
  bool quick = false, json = false, inject = false;
};

// ------------------------------------------------------------- the data
//
// Our own generator (splitmix64 + Box-Muller), not std:: distributions, so
// every platform draws the same values. Two threads fill halves of the
// buffer from their own streams: 256 MiB of values take ~1 s.

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Two independent N(0, 1) samples.
std::pair<double, double> Normal2(uint64_t* state) {
  const uint64_t r = SplitMix(state);
  // 32 bits each; u1 in (0, 1] so that the log is finite.
  const double u1 = (static_cast<double>(r >> 32) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(r & 0xffffffffu) / 4294967296.0;
  const double m = std::sqrt(-2.0 * std::log(u1));
  return {m * std::cos(2 * M_PI * u2), m * std::sin(2 * M_PI * u2)};
}

// float -> bf16, rounded to nearest even, as frameworks do.
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// float -> IEEE fp16, rounded to nearest even, with subnormals; values
// beyond the range become infinity (they do not occur here).
uint16_t ToFp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;  // the implicit one, shifted into a subnormal
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    const uint32_t half = 1u << (shift - 1);
    uint32_t v = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    if (rest > half || (rest == half && (v & 1))) ++v;
    return static_cast<uint16_t>(sign | v);
  }
  uint32_t v = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (v & 1))) ++v;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | v);
}

enum class DType { kBf16, kFp16, kFp32 };

uint32_t ElementSize(DType t) { return t == DType::kFp32 ? 4 : 2; }
const char* DTypeName(DType t) { return t == DType::kBf16 ? "bf16" : t == DType::kFp16 ? "fp16" : "fp32"; }

// Fills out[0, bytes) with values of `dtype`; value i is scale(i) * N(0, 1).
void FillNormal(uint8_t* out, uint64_t bytes, DType dtype, uint64_t seed,
                const std::function<float(uint64_t)>& scale) {
  const uint32_t es = ElementSize(dtype);
  const uint64_t n = bytes / es;
  auto fill = [&](uint64_t first, uint64_t end, uint64_t state) {
    for (uint64_t i = first; i < end; i += 2) {
      const auto [a, b] = Normal2(&state);
      for (uint64_t k = i; k < std::min(end, i + 2); ++k) {
        const float x = static_cast<float>(k == i ? a : b) * scale(k);
        uint8_t* p = out + k * es;
        if (dtype == DType::kFp32) {
          std::memcpy(p, &x, 4);
        } else {
          const uint16_t h = dtype == DType::kBf16 ? ToBf16(x) : ToFp16(x);
          std::memcpy(p, &h, 2);
        }
      }
    }
  };
  const uint64_t half = n / 2 / 2 * 2;
  std::thread t(fill, half, n, seed * 2 + 1);
  fill(0, half, seed * 2);
  t.join();
  std::memset(out + n * es, 0, bytes - n * es);
}

// Per-channel standard deviations of a K cache: 8 KV heads x head_dim 128
// channels (Mistral-7B), log-uniform in [0.05, 2], and one channel in 32 an
// outlier at 8x that (what makes low-bit KV quantisation hard).
std::vector<float> ChannelScales(uint64_t seed) {
  std::vector<float> s(8 * 128);
  uint64_t state = seed ^ 0x5ca1e5;
  for (float& x : s) {
    const double u = static_cast<double>(SplitMix(&state) >> 11) / 9007199254740992.0;
    x = static_cast<float>(0.05 * std::pow(2.0 / 0.05, u));
    if (SplitMix(&state) % 32 == 0) x *= 8;
  }
  return s;
}

struct Kind {
  std::string name;
  uint32_t element_size;  // the natural one: what "shuffle" uses
  std::function<void(uint8_t*, uint64_t)> fill;  // empty: read from the file
};

Result<std::vector<uint8_t>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return NotFound("cannot open --kv-file " + path);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size == 0) return InvalidArgument("--kv-file " + path + " is empty");
  std::vector<uint8_t> v(size);
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(size))) {
    return IOError("cannot read --kv-file " + path);
  }
  return v;
}

// --------------------------------------------------------- measurement

struct Row {
  std::string data;
  uint32_t element_size = 1;
  int level = 1;
  uint64_t raw_bytes = 0, compressed_bytes = 0;
  // Index 0: one thread, 1: two threads.
  std::vector<double> compress_s[2], decompress_s[2];
};

Status CheckBytes(const std::string& what, const uint8_t* want, const uint8_t* got, uint64_t bytes) {
  if (std::memcmp(want, got, bytes) == 0) return Status::OK();
  uint64_t i = 0;
  while (want[i] == got[i]) ++i;
  return Corruption(Format("%s: byte %llu of %llu is 0x%02x, expected 0x%02x", what.c_str(),
                           static_cast<unsigned long long>(i), static_cast<unsigned long long>(bytes), got[i],
                           want[i]));
}

Status Measure(const Options& o, const uint8_t* src, uint8_t* dst, uint64_t bytes, std::vector<uint8_t>* packed,
               Row* row) {
  const std::span<const uint8_t> raw(src, bytes);
  std::vector<uint8_t> first;  // the one-thread stream, to compare the two-thread one with
  for (int t = 0; t < 2; ++t) {
    CodecOptions co;
    co.element_size = row->element_size;
    co.level = row->level;
    co.chunk_bytes = o.chunk_kib * 1024;
    co.threads = t + 1;
    const std::string what = Format("%s, element size %u, level %d, %d thread(s)", row->data.c_str(),
                                    row->element_size, row->level, t + 1);
    // Warm-up: grows the output vector and faults its pages in.
    PTS_RETURN_IF_ERROR(storage::Compress(raw, co, packed).WithContext(what));
    for (int r = 0; r < o.reps; ++r) {
      const auto s = Clock::now();
      PTS_RETURN_IF_ERROR(storage::Compress(raw, co, packed).WithContext(what));
      row->compress_s[t].push_back(SecondsSince(s));
    }
    if (t == 0) {
      first = *packed;
    } else if (*packed != first) {
      return Internal(what + ": the stream differs from the one-thread stream");
    }
    row->compressed_bytes = packed->size();
    PTS_ASSIGN_OR_RETURN(uint64_t size, storage::CompressedRawSize(*packed));
    if (size != bytes) return Corruption(Format("%s: the stream holds %llu bytes", what.c_str(), (unsigned long long)size));

    for (int r = -1; r < o.reps; ++r) {  // r = -1: warm-up
      std::memset(dst, 0x5a, bytes);  // poison: a decompression that writes nothing fails the check
      const auto s = Clock::now();
      PTS_RETURN_IF_ERROR(storage::Decompress(*packed, {dst, bytes}, co.threads).WithContext(what));
      if (r >= 0) row->decompress_s[t].push_back(SecondsSince(s));
      if (o.inject && r == o.reps - 1) dst[bytes / 2] ^= 0x01;  // test hook
      PTS_RETURN_IF_ERROR(CheckBytes(what + ": decompression", src, dst, bytes));
    }
  }
  return Status::OK();
}

double MBps(uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }

Status Run(Options o) {
  if (o.chunk_kib == 0 || o.chunk_kib > 1024 * 1024) return InvalidArgument("--chunk-kib must be in [1, 1048576]");
  std::vector<Kind> kinds;
  std::vector<uint8_t> file;
  DType file_type = DType::kBf16;
  if (!o.kv_file.empty()) {
    if (o.dtype == "bf16") file_type = DType::kBf16;
    else if (o.dtype == "fp16") file_type = DType::kFp16;
    else if (o.dtype == "fp32") file_type = DType::kFp32;
    else return InvalidArgument("--dtype must be bf16, fp16 or fp32, not " + o.dtype);
    PTS_ASSIGN_OR_RETURN(file, ReadFile(o.kv_file));
  }
  const uint64_t size = o.size_mib << 20;
  if (o.synthetic) {
    const uint64_t seed = o.seed;
    auto unit = [](uint64_t) { return 1.0f; };
    kinds.push_back({"bf16 N(0,1)", 2, [=](uint8_t* p, uint64_t b) { FillNormal(p, b, DType::kBf16, seed, unit); }});
    const std::vector<float> scales = ChannelScales(seed);
    kinds.push_back({"bf16 K-like (per-channel std 0.05-2, outliers x8)", 2, [=](uint8_t* p, uint64_t b) {
                       FillNormal(p, b, DType::kBf16, seed + 1,
                                  [&scales](uint64_t i) { return scales[i % scales.size()]; });
                     }});
    kinds.push_back({"fp16 N(0,1)", 2, [=](uint8_t* p, uint64_t b) { FillNormal(p, b, DType::kFp16, seed + 2, unit); }});
    kinds.push_back({"fp32 N(0,1)", 4, [=](uint8_t* p, uint64_t b) { FillNormal(p, b, DType::kFp32, seed + 3, unit); }});
  }
  if (!file.empty()) {
    kinds.push_back({Format("%s file %s", DTypeName(file_type), o.kv_file.c_str()), ElementSize(file_type), {}});
  }
  if (kinds.empty()) return InvalidArgument("nothing to measure: --no-synthetic without --kv-file");

  const uint64_t max_bytes = std::max<uint64_t>(o.synthetic ? size : 0, file.size());
  PTS_ASSIGN_OR_RETURN(HostBuffer src, HostBuffer::Allocate(max_bytes));
  PTS_ASSIGN_OR_RETURN(HostBuffer dst, HostBuffer::Allocate(max_bytes));
  std::vector<uint8_t> packed;

  if (!o.json) {
    std::printf("bench_compress: storage/ssd_format/codec.h (byte shuffle + zstd, %u KiB chunks) on %s of KV-like data "
                "per kind, %d repetitions\n",
                o.chunk_kib, HumanBytes(o.synthetic ? size : file.size()).c_str(), o.reps);
    std::printf("machine: %s\n", MachineDescription().c_str());
  }

  // memcpy baseline, on the first kind's bytes (memcpy does not care).
  std::vector<double> memcpy_s;
  uint64_t memcpy_bytes = 0;
  std::vector<Row> rows;
  double shuffle_gbps[2] = {0, 0}, unshuffle_gbps[2] = {0, 0};
  for (size_t k = 0; k < kinds.size(); ++k) {
    const Kind& kind = kinds[k];
    uint64_t bytes = size;
    const auto t_fill = Clock::now();
    if (kind.fill) {
      kind.fill(src.data(), bytes);
    } else {
      bytes = file.size();
      std::memcpy(src.data(), file.data(), bytes);
    }
    if (!o.json) {
      std::printf("%-52s generated in %.1f s\n", kind.name.c_str(), SecondsSince(t_fill));
      std::fflush(stdout);
    }
    if (k == 0) {
      memcpy_bytes = bytes;
      std::memcpy(dst.data(), src.data(), bytes);  // warm-up
      for (int r = 0; r < std::max(o.reps, 3); ++r) {
        const auto s = Clock::now();
        std::memcpy(dst.data(), src.data(), bytes);
        memcpy_s.push_back(SecondsSince(s));
      }
      PTS_RETURN_IF_ERROR(CheckBytes("memcpy", src.data(), dst.data(), bytes));
      // The shuffle alone (bf16/fp16 and fp32 element sizes), whole buffer.
      for (int e = 0; e < 2; ++e) {
        const uint32_t es = e == 0 ? 2 : 4;
        std::vector<double> sh, un;
        for (int r = -1; r < std::max(o.reps, 3); ++r) {
          auto s = Clock::now();
          storage::ByteShuffle({src.data(), bytes}, es, dst.data());
          if (r >= 0) sh.push_back(SecondsSince(s));
          std::vector<uint8_t>& back = packed;  // a free buffer of the right size
          back.resize(bytes);
          s = Clock::now();
          storage::ByteUnshuffle({dst.data(), bytes}, es, back.data());
          if (r >= 0) un.push_back(SecondsSince(s));
          PTS_RETURN_IF_ERROR(CheckBytes(Format("shuffle/unshuffle %u", es), src.data(), back.data(), bytes));
        }
        shuffle_gbps[e] = GBps(bytes, Summarize(sh).p50);
        unshuffle_gbps[e] = GBps(bytes, Summarize(un).p50);
      }
    }
    const std::vector<uint32_t> sizes = {1, kind.element_size};  // no shuffle, shuffle
    for (uint32_t es : sizes) {
      for (int level : o.levels) {
        Row row;
        row.data = kind.name;
        row.element_size = es;
        row.level = level;
        row.raw_bytes = bytes;
        PTS_RETURN_IF_ERROR(Measure(o, src.data(), dst.data(), bytes, &packed, &row));
        rows.push_back(std::move(row));
        if (!o.json) {
          std::printf(".");
          std::fflush(stdout);
        }
      }
    }
    if (!o.json) std::printf("\n");
  }

  // ---------------------------------------------------------- results
  const double memcpy_mbps = MBps(memcpy_bytes, Summarize(memcpy_s).p50);
  Table t({"data", "shuffle", "zstd", "ratio", "stored", "comp MB/s 1T", "2T", "decomp MB/s 1T", "2T",
           "comp/memcpy", "decomp/memcpy", "SSD read eq. GB/s"});
  nlohmann::json jr = nlohmann::json::array();
  std::string last;
  for (const Row& r : rows) {
    if (!last.empty() && r.data != last) t.Separator();
    last = r.data;
    const double ratio = static_cast<double>(r.raw_bytes) / static_cast<double>(r.compressed_bytes);
    double c[2], d[2];
    for (int i = 0; i < 2; ++i) {
      c[i] = MBps(r.raw_bytes, Summarize(r.compress_s[i]).p50);
      d[i] = MBps(r.raw_bytes, Summarize(r.decompress_s[i]).p50);
    }
    const double read_eq = std::min(o.disk_gbps * ratio, d[0] / 1e3);
    t.Row({r.data, r.element_size == 1 ? "no" : Format("yes (%u B)", r.element_size), Format("%d", r.level),
           Format("%.3f", ratio), Format("%.1f%%", 100.0 / ratio), Format("%.0f", c[0]), Format("%.0f", c[1]),
           Format("%.0f", d[0]), Format("%.0f", d[1]), Format("%.3f", c[0] / memcpy_mbps),
           Format("%.3f", d[0] / memcpy_mbps), Format("%.2f", read_eq)});
    jr.push_back({{"data", r.data},
                  {"element_size", r.element_size},
                  {"shuffle", r.element_size > 1},
                  {"level", r.level},
                  {"raw_bytes", r.raw_bytes},
                  {"compressed_bytes", r.compressed_bytes},
                  {"ratio", ratio},
                  {"compress_mb_per_s", {{"1", c[0]}, {"2", c[1]}}},
                  {"decompress_mb_per_s", {{"1", d[0]}, {"2", d[1]}}},
                  {"compress_vs_memcpy", c[0] / memcpy_mbps},
                  {"decompress_vs_memcpy", d[0] / memcpy_mbps},
                  {"ssd_read_equivalent_gb_per_s", read_eq},
                  {"compress_seconds", {{"1", r.compress_s[0]}, {"2", r.compress_s[1]}}},
                  {"decompress_seconds", {{"1", r.decompress_s[0]}, {"2", r.decompress_s[1]}}}});
  }

  if (o.json) {
    nlohmann::json j{{"bench", "bench_compress"},
                     {"machine", MachineDescription()},
                     {"bytes", o.synthetic ? size : file.size()},
                     {"chunk_bytes", o.chunk_kib * 1024},
                     {"reps", o.reps},
                     {"memcpy_mb_per_s", memcpy_mbps},
                     {"shuffle_gb_per_s", {{"2", shuffle_gbps[0]}, {"4", shuffle_gbps[1]}}},
                     {"unshuffle_gb_per_s", {{"2", unshuffle_gbps[0]}, {"4", unshuffle_gbps[1]}}},
                     {"disk_gb_per_s", o.disk_gbps},
                     {"results", jr}};
    std::cout << j.dump(2) << std::endl;
    return Status::OK();
  }
  std::printf("\nbaseline memcpy of the same bytes: %.0f MB/s (median of %zu); ByteShuffle %.1f / %.1f GB/s, "
              "ByteUnshuffle %.1f / %.1f GB/s (2 / 4-byte elements)\n",
              memcpy_mbps, memcpy_s.size(), shuffle_gbps[0], shuffle_gbps[1], unshuffle_gbps[0], unshuffle_gbps[1]);
  std::printf("ratio = raw / compressed bytes; stored = compressed / raw; MB/s of raw bytes, median; 1T/2T = "
              "threads;\nX/memcpy = one-thread speed / memcpy speed; SSD read eq. = raw GB/s a %.1f GB/s disk of "
              "compressed bytes delivers with one decompressing thread, min(disk x ratio, decompress 1T)\n\n",
              o.disk_gbps);
  std::printf("%s\n", t.ToString().c_str());
  std::printf("every decompression checked byte for byte; two-thread streams identical to one-thread ones\n");
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_compress: byte shuffle + zstd on KV-like data vs memcpy"};
  Options o;
  app.add_option("--size-mib", o.size_mib, "bytes of each synthetic data kind, in MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 16384));
  app.add_option("--reps", o.reps, "timed repetitions per configuration")->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--levels", o.levels, "zstd levels")->capture_default_str()->delimiter(',');
  app.add_option("--chunk-kib", o.chunk_kib, "raw KiB per independently compressed chunk")->capture_default_str();
  app.add_option("--kv-file", o.kv_file, "also measure real KV: raw bytes of --dtype values (bench/kv_dump.py)");
  app.add_option("--dtype", o.dtype, "type of the --kv-file values: bf16, fp16 or fp32")->capture_default_str();
  app.add_flag("!--no-synthetic", o.synthetic, "only the --kv-file data");
  app.add_option("--disk-gbps", o.disk_gbps, "read speed of the disk for the SSD read column")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the synthetic data")->capture_default_str();
  app.add_flag("--quick", o.quick, "8 MiB per kind, 1 repetition");
  app.add_flag("--json", o.json, "print the results as JSON");
  app.add_flag("--inject-corruption", o.inject, "test hook: flip a decompressed byte (the run must fail)")->group("");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    if (!app.count("--size-mib")) o.size_mib = 8;
    if (!app.count("--reps")) o.reps = 1;
  }
  for (int level : o.levels) {
    if (level < 1 || level > 22) {
      std::fprintf(stderr, "bench_compress: --levels: %d is not in [1, 22]\n", level);
      return 2;
    }
  }
  Status st = Run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "bench_compress: FAILED: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
