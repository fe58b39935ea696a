#include "storage/ssd/fault_env.h"

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "core/mutex.h"

namespace ptstore::storage {
namespace {

// ErrnoError (core/status.cc, as env.cc) so that code under test sees an injected ENOSPC exactly
// as it would see a real one, marked as injected.
Status InjectedError(const std::string& what, int err) {
  const Status s = ErrnoError(what, err);
  return Status(s.code(), s.message() + " (injected by FaultEnv)");
}

std::string WriteWhat(size_t bytes, uint64_t offset, const std::string& path) {
  return "pwrite of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " to " + path;
}

}  // namespace

struct FaultEnv::State {
  // What a power loss would throw away from one file: everything past the
  // size it had at its last Sync, and every byte below that size overwritten
  // since. Keyed by path in `files`; the Files open on that path share it,
  // so a rename through the Env carries it along.
  struct Tracked {
    struct Undo {
      uint64_t offset;
      std::vector<uint8_t> old_bytes;  // what was there before; within synced_size
    };
    // Guarded by the State's mu (which the analysis cannot name from here).
    std::string path;
    uint64_t synced_size = 0;
    bool dirty = false;  // written or truncated since the last Sync
    std::vector<Undo> undo;
  };

  core::Mutex mu;

  // Faults.
  std::optional<uint64_t> writes_until_failure GUARDED_BY(mu);
  int failure_errno GUARDED_BY(mu) = 0;
  std::optional<uint64_t> capacity GUARDED_BY(mu);
  uint64_t capacity_used GUARDED_BY(mu) = 0;  // bytes written since construction or ClearFaults
  std::optional<uint64_t> tear_keep_bytes GUARDED_BY(mu);
  struct Flip {
    uint64_t offset;
    int bit;
  };
  std::map<std::string, std::vector<Flip>> flips GUARDED_BY(mu);
  bool hold_reads GUARDED_BY(mu) = false;
  uint64_t reads_held GUARDED_BY(mu) = 0;  // ReadAt calls waiting for release
  core::CondVar reads_released;
  bool hold_writes GUARDED_BY(mu) = false;
  uint64_t writes_held GUARDED_BY(mu) = 0;  // WriteAt calls waiting for release
  core::CondVar writes_released;

  // Counters for tests; never reset.
  uint64_t writes GUARDED_BY(mu) = 0;
  uint64_t bytes_written GUARDED_BY(mu) = 0;
  uint64_t syncs GUARDED_BY(mu) = 0;

  // Files written through the Env, by their current path.
  std::map<std::string, std::shared_ptr<Tracked>> files GUARDED_BY(mu);
  // Bumped by every Crash; a File opened in an earlier epoch is poisoned.
  uint64_t epoch GUARDED_BY(mu) = 0;
};

namespace {

using State = FaultEnv::State;
using TrackedFile = State::Tracked;

class FaultFile final : public File {
 public:
  // `plain` is a buffered handle on the same file when `base` is direct:
  // the bookkeeping reads and torn prefixes are neither aligned nor sized
  // for O_DIRECT. Null otherwise.
  FaultFile(std::shared_ptr<State> state, std::unique_ptr<File> base, std::unique_ptr<File> plain,
            std::shared_ptr<TrackedFile> tracked, uint64_t epoch)
      : state_(std::move(state)),
        base_(std::move(base)),
        plain_(std::move(plain)),
        tracked_(std::move(tracked)),
        epoch_(epoch) {}

  Result<size_t> ReadAt(uint64_t offset, std::span<uint8_t> out) override {
    PTS_RETURN_IF_ERROR(CheckNotPoisoned("pread"));
    {
      core::UniqueLock lk(state_->mu);
      if (state_->hold_reads) {
        state_->reads_held++;
        state_->reads_released.Wait(lk, [this]() REQUIRES(state_->mu) { return !state_->hold_reads; });
        state_->reads_held--;
      }
    }
    PTS_ASSIGN_OR_RETURN(size_t n, base_->ReadAt(offset, out));
    core::MutexLock lk(state_->mu);
    auto it = state_->flips.find(path());
    if (it == state_->flips.end()) return n;
    for (const State::Flip& f : it->second) {
      if (f.offset >= offset && f.offset - offset < n) out[f.offset - offset] ^= uint8_t(1u << f.bit);
    }
    return n;
  }

  Status WriteAt(uint64_t offset, std::span<const uint8_t> data) override {
    // One lock around the whole write: the old bytes read for the undo log
    // must be the ones this write replaces, not those of a racing write.
    // (A held write waits first, with the lock released by the wait.)
    core::UniqueLock lk(state_->mu);
    if (state_->hold_writes) {
      state_->writes_held++;
      state_->writes_released.Wait(lk, [this]() REQUIRES(state_->mu) { return !state_->hold_writes; });
      state_->writes_held--;
    }
    PTS_RETURN_IF_ERROR(CheckNotPoisonedLocked("pwrite"));
    const std::string what = WriteWhat(data.size(), offset, path());
    if (state_->writes_until_failure) {
      if (*state_->writes_until_failure == 0) return InjectedError(what, state_->failure_errno);
      --*state_->writes_until_failure;
    }
    if (state_->capacity && state_->capacity_used + data.size() > *state_->capacity) {
      return InjectedError(what, ENOSPC);
    }

    std::optional<uint64_t> tear = std::exchange(state_->tear_keep_bytes, std::nullopt);
    const size_t keep = tear ? static_cast<size_t>(std::min<uint64_t>(*tear, data.size())) : data.size();
    if (keep > 0) {
      PTS_RETURN_IF_ERROR(RecordUndoLocked(offset, keep));
      // A torn prefix is rarely aligned, so it goes through the buffered
      // handle; a whole write goes where the caller asked.
      File* target = (tear && plain_) ? plain_.get() : base_.get();
      PTS_RETURN_IF_ERROR(target->WriteAt(offset, data.first(keep)));
      state_->writes++;
      state_->bytes_written += keep;
      state_->capacity_used += keep;
    }
    if (tear) return InjectedError(what + " (torn after " + std::to_string(keep) + " bytes)", EIO);
    return Status::OK();
  }

  Status Sync() override {
    core::MutexLock lk(state_->mu);
    PTS_RETURN_IF_ERROR(CheckNotPoisonedLocked("fdatasync"));
    PTS_RETURN_IF_ERROR(base_->Sync());
    state_->syncs++;
    // fdatasync covers every write to the file, through any handle, so a
    // read-only handle's Sync makes the writable handles' writes durable too.
    TrackedFile* tracked = tracked_.get();
    if (tracked == nullptr) {
      auto it = state_->files.find(path());
      if (it != state_->files.end()) tracked = it->second.get();
    }
    if (tracked != nullptr) {
      PTS_ASSIGN_OR_RETURN(tracked->synced_size, base_->Size());
      tracked->undo.clear();
      tracked->dirty = false;
    }
    return Status::OK();
  }

  Result<uint64_t> Size() override {
    PTS_RETURN_IF_ERROR(CheckNotPoisoned("fstat"));
    return base_->Size();
  }

  Status Truncate(uint64_t size) override {
    core::MutexLock lk(state_->mu);
    PTS_RETURN_IF_ERROR(CheckNotPoisonedLocked("ftruncate"));
    if (tracked_) {
      // Cutting into synced bytes loses them: keep them for a crash.
      // Growing needs nothing, the crash truncates back to synced_size.
      PTS_ASSIGN_OR_RETURN(uint64_t current, base_->Size());
      if (size < current) PTS_RETURN_IF_ERROR(RecordUndoLocked(size, current - size));
      tracked_->dirty = true;
    }
    return base_->Truncate(size);
  }

  bool direct() const override { return base_->direct(); }
  const std::string& path() const override { return base_->path(); }

 private:
  Status CheckNotPoisoned(const char* call) EXCLUDES(state_->mu) {
    core::MutexLock lk(state_->mu);
    return CheckNotPoisonedLocked(call);
  }

  Status CheckNotPoisonedLocked(const char* call) REQUIRES(state_->mu) {
    if (epoch_ == state_->epoch) return Status::OK();
    return IOError(std::string(call) + " on " + path() + " after a simulated crash (the handle predates it)");
  }

  // Saves the bytes of [offset, offset + length) that lie below the synced
  // size, before a write or truncate replaces them. Bytes past the current
  // end of file read short: a logged truncate already holds them.
  Status RecordUndoLocked(uint64_t offset, uint64_t length) REQUIRES(state_->mu) {
    if (!tracked_) return Status::OK();
    tracked_->dirty = true;
    if (offset >= tracked_->synced_size) return Status::OK();
    TrackedFile::Undo undo{offset, std::vector<uint8_t>(std::min(length, tracked_->synced_size - offset))};
    File* reader = plain_ ? plain_.get() : base_.get();
    PTS_ASSIGN_OR_RETURN(size_t n, reader->ReadAt(offset, undo.old_bytes));
    undo.old_bytes.resize(n);
    if (n > 0) tracked_->undo.push_back(std::move(undo));
    return Status::OK();
  }

  const std::shared_ptr<State> state_;
  const std::unique_ptr<File> base_;
  const std::unique_ptr<File> plain_;
  const std::shared_ptr<TrackedFile> tracked_;  // null for read-only handles
  const uint64_t epoch_;
};

// Puts one file back to its last synced state: undo in reverse order (a
// later write's old bytes may be an earlier write's new ones), then cut off
// everything appended since.
Status RestoreSynced(Env* base, TrackedFile* file) {
  OpenOptions options;
  options.writable = true;
  Result<std::unique_ptr<File>> opened = base->Open(file->path, options);
  // Deleted or renamed behind the Env's back: nothing left to restore.
  if (opened.status().code() == Code::kNotFound) return Status::OK();
  if (!opened.ok()) return opened.status().WithContext("FaultEnv::Crash");
  File* f = opened->get();
  for (auto undo = file->undo.rbegin(); undo != file->undo.rend(); ++undo) {
    PTS_RETURN_IF_ERROR(f->WriteAt(undo->offset, undo->old_bytes).WithContext("FaultEnv::Crash"));
  }
  PTS_RETURN_IF_ERROR(f->Truncate(file->synced_size).WithContext("FaultEnv::Crash"));
  PTS_RETURN_IF_ERROR(f->Sync().WithContext("FaultEnv::Crash"));
  file->undo.clear();
  file->dirty = false;
  return Status::OK();
}

}  // namespace

FaultEnv::FaultEnv(Env* base) : base_(base), state_(std::make_shared<State>()) {}

FaultEnv::~FaultEnv() = default;

void FaultEnv::FailWritesAfter(uint64_t after, int err) {
  core::MutexLock lk(state_->mu);
  state_->writes_until_failure = after;
  state_->failure_errno = err;
}

void FaultEnv::SetDiskCapacity(uint64_t bytes) {
  core::MutexLock lk(state_->mu);
  state_->capacity = bytes;
}

void FaultEnv::TearNextWrite(uint64_t keep_bytes) {
  core::MutexLock lk(state_->mu);
  state_->tear_keep_bytes = keep_bytes;
}

void FaultEnv::FlipBitOnRead(const std::string& path, uint64_t offset, int bit) {
  core::MutexLock lk(state_->mu);
  state_->flips[path].push_back({offset, bit & 7});
}

void FaultEnv::HoldReads() {
  core::MutexLock lk(state_->mu);
  state_->hold_reads = true;
}

void FaultEnv::ReleaseReads() {
  core::MutexLock lk(state_->mu);
  state_->hold_reads = false;
  state_->reads_released.NotifyAll();
}

void FaultEnv::HoldWrites() {
  core::MutexLock lk(state_->mu);
  state_->hold_writes = true;
}

void FaultEnv::ReleaseWrites() {
  core::MutexLock lk(state_->mu);
  state_->hold_writes = false;
  state_->writes_released.NotifyAll();
}

void FaultEnv::ClearFaults() {
  core::MutexLock lk(state_->mu);
  state_->hold_reads = false;
  state_->reads_released.NotifyAll();
  state_->hold_writes = false;
  state_->writes_released.NotifyAll();
  state_->writes_until_failure.reset();
  state_->failure_errno = 0;
  state_->capacity.reset();
  state_->capacity_used = 0;
  state_->tear_keep_bytes.reset();
  state_->flips.clear();
}

Status FaultEnv::Crash() {
  core::MutexLock lk(state_->mu);
  // Poison first: even if a restore fails, no handle from before the crash
  // may keep writing as if nothing happened.
  state_->epoch++;
  Status first_error;
  for (auto& [path, file] : state_->files) {
    if (!file->dirty) continue;
    Status st = RestoreSynced(base_, file.get());
    if (first_error.ok()) first_error = st;
  }
  return first_error;
}

uint64_t FaultEnv::writes() const {
  core::MutexLock lk(state_->mu);
  return state_->writes;
}

uint64_t FaultEnv::bytes_written() const {
  core::MutexLock lk(state_->mu);
  return state_->bytes_written;
}

uint64_t FaultEnv::syncs() const {
  core::MutexLock lk(state_->mu);
  return state_->syncs;
}

uint64_t FaultEnv::reads_held() const {
  core::MutexLock lk(state_->mu);
  return state_->reads_held;
}

uint64_t FaultEnv::writes_held() const {
  core::MutexLock lk(state_->mu);
  return state_->writes_held;
}

Result<std::unique_ptr<File>> FaultEnv::Open(const std::string& path, const OpenOptions& options) {
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<File> base, base_->Open(path, options));
  std::unique_ptr<File> plain;
  if (base->direct()) {
    OpenOptions buffered;
    buffered.writable = options.writable;
    PTS_ASSIGN_OR_RETURN(plain, base_->Open(path, buffered));
  }
  core::MutexLock lk(state_->mu);
  std::shared_ptr<TrackedFile> tracked;
  if (options.writable) {
    std::shared_ptr<TrackedFile>& slot = state_->files[path];
    if (slot == nullptr) {
      // First writable open: what is on disk now counts as durable (a file
      // this open just created is empty, so it crashes back to empty).
      PTS_ASSIGN_OR_RETURN(uint64_t size, base->Size());
      slot = std::make_shared<TrackedFile>();
      slot->path = path;
      slot->synced_size = size;
    }
    tracked = slot;
  }
  return std::unique_ptr<File>(
      new FaultFile(state_, std::move(base), std::move(plain), std::move(tracked), state_->epoch));
}

Result<std::vector<std::string>> FaultEnv::ListDir(const std::string& dir) { return base_->ListDir(dir); }

Status FaultEnv::CreateDirs(const std::string& dir) { return base_->CreateDirs(dir); }

Status FaultEnv::DeleteFile(const std::string& path) {
  core::MutexLock lk(state_->mu);
  PTS_RETURN_IF_ERROR(base_->DeleteFile(path));
  // Directory changes count as durable at once; a crash cannot bring the
  // file back, so there is nothing left to restore.
  state_->files.erase(path);
  return Status::OK();
}

Status FaultEnv::RenameFile(const std::string& from, const std::string& to) {
  core::MutexLock lk(state_->mu);
  PTS_RETURN_IF_ERROR(base_->RenameFile(from, to));
  state_->files.erase(to);  // replaced; its unsynced state went with it
  auto node = state_->files.extract(from);
  if (!node.empty()) {
    node.key() = to;
    node.mapped()->path = to;
    state_->files.insert(std::move(node));
  }
  return Status::OK();
}

Status FaultEnv::SyncDir(const std::string& dir) { return base_->SyncDir(dir); }

bool FaultEnv::FileExists(const std::string& path) { return base_->FileExists(path); }

uint64_t FaultEnv::NowNanos() { return base_->NowNanos(); }

}  // namespace ptstore::storage
