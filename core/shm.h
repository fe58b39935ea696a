// SharedMemory: an RAII shared-memory region backed by a memfd.
//
// The node's DRAM arena is one such region (DESIGN.md §4): the server creates
// it once at start (Create), writes into it, and passes its fd to local
// clients, which map it read-only (Map). The region owns its fd and its
// mapping; the destructor unmaps and closes both.
//
// Sizes: size() is the length of the mapping, which is at least the number of
// bytes asked for: Create and Map round it up to the huge page size when the
// memfd is hugetlb-backed (2 MiB here), and leave it as asked otherwise.
//
// Write protection: by default Create seals the memfd with F_SEAL_FUTURE_WRITE
// once its own writable mapping exists. The creator keeps writing through
// data(); every later mapping of the fd, in any process, must be read-only
// (a writable Map fails with PermissionDenied, mprotect to PROT_WRITE fails).
// A read-only fd alone would not protect the arena: whoever holds one can
// reopen /proc/self/fd/N with O_RDWR.
//
// Thread safety: the accessors are const and may be called from any thread.
// Reads and writes of the bytes are not synchronised by this class.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ptstore/status.h"

namespace ptstore::core {

class SharedMemory {
 public:
  struct CreateOptions {
    // Name shown in /proc/<pid>/fd and /proc/<pid>/maps ("memfd:<name>").
    std::string name = "ptstore";
    // Pre-fault every page once, at creation (MADV_POPULATE_WRITE; a write
    // to each page on kernels older than 5.14). Fresh pages cost 0.3-2 GB/s
    // on this class of VM: slow for a big arena, so it happens here, never
    // per request. Without it the first touch of each page pays the fault.
    bool prefault = true;
    // Try MFD_HUGETLB when /proc/sys/vm/nr_hugepages > 0 (size rounded up to
    // 2 MiB); falls back to a plain memfd when the memfd or the mapping
    // cannot be made (no free huge pages). A plain memfd is always advised
    // MADV_HUGEPAGE, which takes effect only when THP is enabled for shmem.
    bool try_huge_pages = true;
    // Seal with F_SEAL_FUTURE_WRITE after the creator's mapping is made, so
    // that no one can map the region writable afterwards (see above).
    bool seal_future_writes = true;
  };

  // Creates a region of at least `bytes` (> 0) bytes, mapped read-write and
  // shared, zero-filled, its size sealed (F_SEAL_SHRINK | F_SEAL_GROW |
  // F_SEAL_SEAL, plus F_SEAL_FUTURE_WRITE when asked). Fails with
  // InvalidArgument for 0 bytes, IOError naming the system call otherwise
  // (ENOMEM from mmap or the prefault when memory is short).
  static Result<std::unique_ptr<SharedMemory>> Create(uint64_t bytes, const CreateOptions& opts);

  // Maps `bytes` (> 0) bytes of an fd received from another process, shared.
  // read_only maps PROT_READ (writes through it fault with SIGSEGV), else
  // PROT_READ | PROT_WRITE. populate passes MAP_POPULATE: the page tables are
  // filled up front, so the first copy out of the region runs at memcpy speed.
  // Takes ownership of fd: it is closed by the destructor, and also when Map
  // fails. Fails with InvalidArgument when fd < 0, bytes == 0 or the fd is
  // smaller than `bytes` (naming both sizes); PermissionDenied when a writable
  // mapping is asked of a sealed or read-only fd; IOError otherwise.
  static Result<std::unique_ptr<SharedMemory>> Map(int fd, uint64_t bytes, bool read_only,
                                                   bool populate);

  ~SharedMemory();  // munmap + close
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  // First byte of the mapping; valid until destruction. 4 KiB aligned
  // (2 MiB when huge_pages()).
  uint8_t* data() const { return data_; }
  // Length of the mapping in bytes (see "Sizes" above).
  uint64_t size() const { return size_; }
  // The memfd, owned by this object: dup it to pass it on.
  int fd() const { return fd_; }
  // True when the region is backed by hugetlb pages.
  bool huge_pages() const { return huge_pages_; }
  bool read_only() const { return read_only_; }

 private:
  SharedMemory(int fd, uint8_t* data, uint64_t size, bool huge_pages, bool read_only)
      : fd_(fd), data_(data), size_(size), huge_pages_(huge_pages), read_only_(read_only) {}

  int fd_;
  uint8_t* data_;
  uint64_t size_;
  bool huge_pages_;
  bool read_only_;
};

}  // namespace ptstore::core
