// Shared pieces of the benchmarks: pre-faulted host buffers, timing
// summaries, a text table, and the options of a ptstored owned by the
// benchmark (started with the test kit's harness, so that a run needs
// nobody else's server).
//
// Thread safety: none of these types are shared between threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ptstore/status.h"
#include "ptstore/types.h"
#include "tests/testing/daemon.h"

namespace ptstore::bench {

// ------------------------------------------------------------ host buffers

// An anonymous private mapping, 4 KiB aligned, every page faulted in at
// allocation (fresh pages cost ~0.3 GB/s on first touch on these VMs: never
// inside a timed region). Move-only; unmapped on destruction.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  // `huge`: ask for transparent huge pages (MADV_HUGEPAGE) before faulting.
  static Result<HostBuffer> Allocate(uint64_t bytes, bool huge = false);

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// ------------------------------------------------------------------ timing

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median, extremes and percentiles of a sample (seconds or anything else).
struct Summary {
  size_t n = 0;
  double min = 0, max = 0, mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
Summary Summarize(std::vector<double> samples);

// Accumulated time of one phase of a run.
struct PhaseTimer {
  double seconds = 0;
  uint64_t calls = 0;
  uint64_t bytes = 0;
};

// --------------------------------------------------------------- printing

// printf into a std::string.
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// "1.50 GiB", "384.0 MiB", "12.0 KiB", "17 B".
std::string HumanBytes(uint64_t bytes);
// Decimal GB/s of `bytes` moved in `seconds` (0 when seconds is 0).
double GBps(uint64_t bytes, double seconds);

// A column-aligned text table: first column left-aligned, the rest right.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void Separator() { rows_.push_back({}); }
  std::string ToString() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// One table of every StoreStats counter (what ptstore-stat would show).
std::string StatsTable(const StoreStats& s);

// One line about this machine: CPU model, cores, memory, kernel.
std::string MachineDescription();

// ------------------------------------------------------------- the server

// A benchmark's own ptstored runs under the test kit's harness
// (tests/testing/daemon.h: testing::Daemon, StartDaemon, ConnectOrStart;
// its mounts: tests/testing/mount.h). These are the options of such a
// server: `arena_size`, `binary` (empty: testing::PtstoredPath()) and more
// ptstored flags; warnings and errors only in its log, and up to 120 s for
// the arena's pre-faulting at start.
testing::Daemon::Options ServerOptions(const std::string& arena_size = "1GiB", const std::string& binary = "",
                                       std::vector<std::string> extra_args = {});

}  // namespace ptstore::bench
