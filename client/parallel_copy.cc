#include "client/parallel_copy.h"

#include "core/mutex.h"
#include "core/stream_copy.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

namespace ptstore::client {

namespace {

struct Chunk {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t bytes;
};

// One CopyParallel call: chunks claimed by index, by the caller and by the
// workers that joined it.
struct Job {
  std::vector<Chunk> chunks;
  uint64_t total = 0;  // bytes of all chunks: chooses streaming stores or not
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  core::Mutex mu;  // guards nothing (the counts are atomic): what `finished` waits with
  core::CondVar finished;

  // Copies chunks until none is left to claim.
  void Work() {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < chunks.size();) {
      core::CopyBytes(chunks[i].dst, chunks[i].src, chunks[i].bytes, total);
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks.size()) {
        core::MutexLock lk(mu);
        finished.NotifyAll();
      }
    }
  }
};

// The process's copy workers, started on first use and kept (a thread per
// copy would cost more than the copy gains at these sizes).
class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool;  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  // Offers `job` to `helpers` workers (started if fewer exist).
  void Offer(const std::shared_ptr<Job>& job, int helpers) EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    while (static_cast<int>(workers_) < helpers) {
      std::thread([this] { Run(); }).detach();
      ++workers_;
    }
    for (int i = 0; i < helpers; ++i) queue_.push_back(job);
    wake_.NotifyAll();
  }

 private:
  void Run() EXCLUDES(mu_) {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        core::UniqueLock lk(mu_);
        wake_.Wait(lk, [&]() REQUIRES(mu_) { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->Work();  // nothing left when the caller and others finished it
    }
  }

  core::Mutex mu_;
  core::CondVar wake_;
  std::deque<std::shared_ptr<Job>> queue_ GUARDED_BY(mu_);
  size_t workers_ GUARDED_BY(mu_) = 0;
};

int AffinityCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

int DefaultCopyThreads() {
  if (const char* env = std::getenv("PTSTORE_COPY_THREADS")) {
    const long n = std::strtol(env, nullptr, 10);
    if (n > 0) return static_cast<int>(std::min<long>(n, 256));
  }
  return std::min(AffinityCpus(), kMaxCopyThreads);
}

int IdleCpus() {
  // "0.50 0.40 0.30 R/T PID": R runnable tasks now, the caller among them.
  // (/proc/loadavg: a few bytes, where /proc/stat grows with the CPUs.)
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return 0;
  double l1, l5, l15;
  long running = -1, total = 0;
  const int got = std::fscanf(f, "%lf %lf %lf %ld/%ld", &l1, &l5, &l15, &running, &total);
  std::fclose(f);
  if (got != 5 || running < 1) return 0;
  return std::max(0, AffinityCpus() - static_cast<int>(running - 1));  // less the caller itself
}

void CopyParallel(std::span<const CopySpan> spans, int max_threads) {
  uint64_t total = 0;
  for (const CopySpan& s : spans) total += s.bytes;
  int threads = max_threads <= 0 ? DefaultCopyThreads() : max_threads;
  threads = static_cast<int>(std::min<uint64_t>(threads, total / kMinBytesPerThread));
  if (threads > 1) threads = std::min(threads, 1 + IdleCpus());
  if (threads <= 1) {
    for (const CopySpan& s : spans) core::CopyBytes(s.dst, s.src, s.bytes, total);
    return;
  }
  // Four chunks per thread, 64-byte aligned: a thread slowed by another
  // task on its CPU takes fewer, the others more.
  auto job = std::make_shared<Job>();
  job->total = total;
  const uint64_t chunk = std::max<uint64_t>(64, (total / (4 * threads) + 63) / 64 * 64);
  for (const CopySpan& s : spans) {
    auto* dst = static_cast<uint8_t*>(s.dst);
    const auto* src = static_cast<const uint8_t*>(s.src);
    for (uint64_t at = 0; at < s.bytes; at += chunk) {
      job->chunks.push_back(Chunk{dst + at, src + at, std::min(chunk, s.bytes - at)});
    }
  }
  Pool::Get().Offer(job, threads - 1);
  job->Work();
  core::UniqueLock lk(job->mu);
  job->finished.Wait(lk, [&] { return job->done.load(std::memory_order_acquire) == job->chunks.size(); });
}

}  // namespace ptstore::client
