// The Env seam: every file and clock access of the storage layer goes
// through it, so tests can inject failures (storage/ssd/fault_env.h) that a real
// disk produces rarely: failed writes, a full disk, torn writes, bit flips,
// and a crash that drops whatever was not synced.
//
// Paths are plain strings; errors are Status values that name the path and
// the failing call (IOError, or ResourceExhausted for ENOSPC/EDQUOT,
// NotFound for ENOENT).
//
// Thread safety: an Env and its Files are safe to use from many threads;
// ReadAt/WriteAt on one File at different offsets may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::storage {

// The alignment O_DIRECT needs for buffers, offsets and lengths.
inline constexpr uint64_t kDirectIoAlignment = 4096;

struct OpenOptions {
  bool create = false;     // create if missing (never truncates)
  bool exclusive = false;  // with create: fail with AlreadyExists if it exists
  bool writable = false;
  // O_DIRECT when the file system supports it (tmpfs does not: the file is
  // then opened without it and File::direct() says so). Callers of a direct
  // File pass 4 KiB-aligned buffers, offsets and lengths.
  bool direct = false;
};

class File {
 public:
  virtual ~File() = default;
  // Reads up to out.size() bytes at `offset`; returns the count, short only
  // at end of file.
  virtual Result<size_t> ReadAt(uint64_t offset, std::span<uint8_t> out) = 0;
  // Writes all of `data` at `offset` (retrying short writes), or fails.
  virtual Status WriteAt(uint64_t offset, std::span<const uint8_t> data) = 0;
  // Makes every write so far durable (fdatasync).
  virtual Status Sync() = 0;
  virtual Result<uint64_t> Size() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual bool direct() const = 0;
  virtual const std::string& path() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX implementation.
  static Env* Default();

  virtual Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) = 0;
  // Names (not paths) of the entries of `dir`, without "." and "..".
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // Creates `dir` and missing parents; OK if it exists.
  virtual Status CreateDirs(const std::string& dir) = 0;
  virtual Status DeleteFile(const std::string& path) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Makes a directory's entries (creations, renames, deletions) durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Wall-clock nanoseconds since the epoch (for record timestamps).
  virtual uint64_t NowNanos() = 0;
};

// Every Env reports a failed call with ErrnoError (ptstore/status.h), the
// one errno-to-Status mapping, so that code under test sees an injected
// ENOSPC exactly as a real one.

// Reads exactly out.size() bytes or fails (Corruption when the file ends
// early: a truncated record).
Status ReadFully(File* file, uint64_t offset, std::span<uint8_t> out);

}  // namespace ptstore::storage
