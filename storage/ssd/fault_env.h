// A fault-injecting Env for tests. It wraps a real Env (files live on the
// real file system, so what it leaves behind can be reopened by a fresh
// PosixEnv or a restarted ptstored) and can:
//   - fail writes (after a number of further writes, with an errno),
//   - act as a full disk (ENOSPC once the bytes written through it pass a
//     capacity),
//   - tear the next write (only a prefix of it reaches the file, then the
//     write fails),
//   - flip bits on reads of a file (the file itself is unchanged),
//   - hold reads or writes (a disk that stalls: each read, or write, waits
//     until released, so a test can act while the I/O is in flight; a held
//     write meets the faults set when it is released, so a test can time a
//     failure to land after what it did meanwhile),
//   - crash: every file goes back to the state of its last Sync (appended
//     bytes are cut off, overwritten bytes get their old contents back), and
//     every File opened before the crash fails from then on.
//
// Thread safety: like Env.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/ssd_format/env.h"

namespace ptstore::storage {

class FaultEnv : public Env {
 public:
  explicit FaultEnv(Env* base);
  ~FaultEnv() override;

  // The next `after` writes succeed, then every write fails with `err`
  // (EIO, ENOSPC, ...) until ClearFaults.
  void FailWritesAfter(uint64_t after, int err);
  // Writes that would take the bytes written through this Env (since
  // construction or ClearFaults) past `bytes` fail with ENOSPC.
  void SetDiskCapacity(uint64_t bytes);
  // The next write stores only its first `keep_bytes` bytes, then fails
  // with EIO.
  void TearNextWrite(uint64_t keep_bytes);
  // Reads of `path` see bit `bit` (0..7) of byte `offset` flipped.
  void FlipBitOnRead(const std::string& path, uint64_t offset, int bit);
  // From now on every ReadAt waits (before it reads) until ReleaseReads or
  // ClearFaults. Release them before the Files or the Env go away.
  void HoldReads();
  void ReleaseReads();
  // The same for WriteAt: each write waits (before any fault is applied or
  // a byte is written) until ReleaseWrites or ClearFaults.
  void HoldWrites();
  void ReleaseWrites();
  void ClearFaults();

  // Drops every unsynced change of every file written through this Env, as
  // a power loss would, and poisons the Files opened so far.
  Status Crash();

  uint64_t writes() const;          // WriteAt calls that reached the file
  uint64_t bytes_written() const;
  uint64_t syncs() const;
  uint64_t reads_held() const;      // ReadAt calls waiting now (HoldReads)
  uint64_t writes_held() const;     // WriteAt calls waiting now (HoldWrites)

  // Env
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  Status CreateDirs(const std::string& dir) override;
  Status DeleteFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  bool FileExists(const std::string& path) override;
  uint64_t NowNanos() override;

  struct State;  // shared with the Files it opens

 private:
  Env* base_;
  std::shared_ptr<State> state_;
};

}  // namespace ptstore::storage
