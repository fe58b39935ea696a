#include "storage/ssd_format/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ptstore::storage {
namespace {

std::string At(const char* call, size_t bytes, uint64_t offset, const char* preposition, const std::string& path) {
  return std::string(call) + " of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " " +
         preposition + " " + path;
}

// open(2) is interruptible on some file systems (NFS, FUSE).
int OpenRetryingEintr(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, bool direct) : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixFile() override { ::close(fd_); }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  Result<size_t> ReadAt(uint64_t offset, std::span<uint8_t> out) override {
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(At("pread", out.size(), offset, "from", path_), errno);
      }
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
      // Direct I/O moves whole blocks, so a count that is not a multiple of
      // the block means the file ended; asking again from that unaligned
      // offset would only fail with EINVAL.
      if (direct_ && done < out.size() && done % kDirectIoAlignment != 0) break;
    }
    return done;
  }

  Status WriteAt(uint64_t offset, std::span<const uint8_t> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(At("pwrite", data.size(), offset, "to", path_), errno);
      }
      // pwrite returns 0 only for a zero count; retrying would spin forever.
      if (n == 0) {
        return IOError(At("pwrite", data.size(), offset, "to", path_) + ": wrote nothing after " +
                       std::to_string(done) + " bytes");
      }
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }

  Status Sync() override {
    // fdatasync skips metadata such as mtime but does flush a size change,
    // which is all a reader after a crash needs.
    if (::fdatasync(fd_) != 0) return ErrnoError("fdatasync " + path_, errno);
    return Status::OK();
  }

  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoError("fstat " + path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return ErrnoError("ftruncate " + path_ + " to " + std::to_string(size) + " bytes", errno);
    }
    return Status::OK();
  }

  bool direct() const override { return direct_; }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
  const bool direct_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) override {
    int flags = O_CLOEXEC | (options.writable ? O_RDWR : O_RDONLY);
    if (options.create) flags |= O_CREAT;
    if (options.create && options.exclusive) flags |= O_EXCL;
    bool direct = options.direct;
    int fd = OpenRetryingEintr(path, flags | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && direct && errno == EINVAL) {
      // The file system has no O_DIRECT (older tmpfs, procfs, some FUSE).
      // The kernel rejects the flag after O_CREAT|O_EXCL has made the file,
      // so the retry drops O_EXCL: the file it finds is the one just made.
      direct = false;
      fd = OpenRetryingEintr(path, flags & ~O_EXCL, 0600);
    }
    if (fd < 0) {
      return ErrnoError(std::string("open ") + path + (options.writable ? " for writing" : " for reading"), errno);
    }
    return std::unique_ptr<File>(new PosixFile(path, fd, direct));
  }

  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), &::closedir);
    if (d == nullptr) return ErrnoError("opendir " + dir, errno);
    std::vector<std::string> names;
    for (;;) {
      // readdir returns NULL both at the end and on error; only errno tells.
      errno = 0;
      const dirent* entry = ::readdir(d.get());
      if (entry == nullptr) {
        if (errno != 0) return ErrnoError("readdir " + dir, errno);
        break;
      }
      if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
      names.emplace_back(entry->d_name);
    }
    return names;
  }

  Status CreateDirs(const std::string& dir) override {
    if (dir.empty()) return InvalidArgument("CreateDirs of an empty path");
    // Every prefix ending before a '/', then the whole path; "a//b" and a
    // trailing '/' make empty or repeated prefixes, which mkdir takes as
    // already existing.
    for (size_t slash = dir.find('/', 1); ; slash = dir.find('/', slash + 1)) {
      const std::string prefix = dir.substr(0, slash);
      if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + prefix, errno);
      if (slash == std::string::npos) break;
    }
    // EEXIST also covers a regular file in the way of the last component.
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return ErrnoError("stat " + dir, errno);
    if (!S_ISDIR(st.st_mode)) return ErrnoError("mkdir " + dir, ENOTDIR);
    return Status::OK();
  }

  Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoError("unlink " + path, errno);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoError("rename " + from + " to " + to, errno);
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    int fd = OpenRetryingEintr(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) return ErrnoError("open directory " + dir, errno);
    Status st;
    if (::fsync(fd) != 0) st = ErrnoError("fsync directory " + dir, errno);
    ::close(fd);
    return st;
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  uint64_t NowNanos() override {
    timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  }
};

}  // namespace


Env* Env::Default() {
  // Never destroyed: Files and background threads may still use it while
  // static destructors run at exit.
  static Env* const env = new PosixEnv;
  return env;
}

Status ReadFully(File* file, uint64_t offset, std::span<uint8_t> out) {
  PTS_ASSIGN_OR_RETURN(size_t n, file->ReadAt(offset, out));
  if (n < out.size()) {
    // A record that runs past the end of its file was cut short (a crash
    // mid-append): the data is damaged, not the disk.
    return Corruption(file->path() + ": expected " + std::to_string(out.size()) + " bytes at offset " +
                      std::to_string(offset) + ", the file ends after " + std::to_string(n));
  }
  return Status::OK();
}

}  // namespace ptstore::storage
