// Shared pieces of the benchmarks: pre-faulted host buffers, timing
// summaries, a text table, and a ptstored child process owned by the
// benchmark (so that a run needs nobody else's server).
//
// Thread safety: none of these types are shared between threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ptstore/status.h"
#include "ptstore/types.h"

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

// Path of the ptstored of this build tree (set by CMake), else "ptstored".
std::string DefaultPtstoredPath();

// A ptstored child process on a private socket in a fresh temporary
// directory. Destroying it stops the server (SIGTERM, then SIGKILL after
// 20 s) and removes the directory. The child also gets SIGTERM if this
// process dies first (PR_SET_PDEATHSIG), so a killed benchmark leaves no
// server behind.
class LocalServer {
 public:
  struct Options {
    std::string binary;            // empty: DefaultPtstoredPath()
    std::string arena_size = "1GiB";
    std::string log_level = "warn";
    std::vector<std::string> extra_args;
  };
  // Starts the server and waits (up to 120 s: the arena is pre-faulted at
  // start) until its socket accepts connections.
  static Result<std::unique_ptr<LocalServer>> Start(const Options& options);
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  const std::string& socket_path() const { return socket_; }
  pid_t pid() const { return pid_; }
  // Seconds from fork to the first accepted connection.
  double startup_seconds() const { return startup_seconds_; }
  // SIGTERM and wait; the exit status, or -signal. Idempotent.
  int Stop();
  // The last `max_bytes` of the server's log.
  std::string LogTail(size_t max_bytes = 4096) const;

 private:
  LocalServer() = default;
  pid_t pid_ = -1;
  std::string dir_, socket_, log_;
  double startup_seconds_ = 0;
};

// Where a benchmark's server is: the socket given by the user, or a child
// server started for this run (kept alive by `owned`).
struct ServerHandle {
  std::string socket_path;
  std::unique_ptr<LocalServer> owned;
};
// socket non-empty: use it as is. Else start a LocalServer with the arena
// size (and binary, when non-empty, and more ptstored flags), saying so on
// stdout unless quiet.
Result<ServerHandle> ConnectOrStart(const std::string& socket, const std::string& arena_size,
                                    const std::string& ptstored_binary, bool quiet,
                                    const std::vector<std::string>& extra_args = {});

// ---------------------------------------------------------------- the mount

// Path of the ptstore-fuse of this build tree (set by CMake), else
// "ptstore-fuse".
std::string DefaultFuseBinary();
// Why a mount cannot be made here ("" when it can): no /dev/fuse, not
// root, no ptstore-fuse binary.
std::string WhyNoMount(const std::string& binary);

// A ptstore-fuse mount (a foreground child) for the length of a phase;
// unmounted (lazily if busy) on destruction.
class LocalMount {
 public:
  static Result<std::unique_ptr<LocalMount>> Start(const std::string& binary, const std::string& socket,
                                                   const std::string& mountpoint);
  ~LocalMount();
  LocalMount(const LocalMount&) = delete;
  LocalMount& operator=(const LocalMount&) = delete;
  const std::string& path() const { return mountpoint_; }

 private:
  LocalMount() = default;
  std::string mountpoint_;
  pid_t pid_ = -1;
};

}  // namespace ptstore::bench
