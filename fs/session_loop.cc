#include "fs/session_loop.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>
#include <thread>
#include <vector>

#include "core/blocking_hint.h"
#include "core/mutex.h"
#include "core/spin_wait.h"

namespace ptstore::fs {
namespace {

// Requests answered off the reader's thread from the start: their work is
// long whatever the cache holds (a READ copies up to max_read bytes).
bool MayBlock(const fuse_buf& buf) {
  if ((buf.flags & FUSE_BUF_IS_FD) != 0 || buf.mem == nullptr || buf.size < sizeof(fuse_in_header)) return true;
  const auto* in = static_cast<const fuse_in_header*>(buf.mem);
  return in->opcode == FUSE_READ || in->opcode == FUSE_WRITE;
}

class Loop {
 public:
  Loop(fuse_session* se, const SessionLoopOptions& o)
      : se_(se), fd_(fuse_session_fd(se)), max_threads_(o.max_threads == 0 ? 1 : o.max_threads),
        spin_(o.spin_us, /*first_spins=*/false) {}

  int Run() EXCLUDES(mu_) {
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    done_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int flags = fcntl(fd_, F_GETFL);
    if (wake_fd_ < 0 || done_fd_ < 0 || flags < 0 || fcntl(fd_, F_SETFL, flags | O_NONBLOCK) != 0) {
      const int err = errno;
      CloseFds();
      return -err;
    }
    // The exit signals stay blocked on this thread except inside ppoll, so
    // that one arriving between the check and the wait is not lost.
    const sigset_t exit_signals = ExitSignals();  // blocked in the caller's other threads (session_loop.h)
    sigset_t before;
    pthread_sigmask(SIG_BLOCK, &exit_signals, &before);
    sigset_t waiting = before;
    for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGQUIT}) sigdelset(&waiting, sig);
    bool started = false;
    {
      core::MutexLock lk(mu_);
      SpawnLocked();
      started = !threads_.empty();
    }
    if (!started) {
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
      fcntl(fd_, F_SETFL, flags);
      CloseFds();
      return -EAGAIN;  // not one thread to read with
    }
    pollfd done{done_fd_, POLLIN, 0};
    while (!fuse_session_exited(se_) && !Finished()) ppoll(&done, 1, nullptr, &waiting);
    {
      core::MutexLock lk(mu_);
      exiting_ = true;
    }
    idle_cv_.NotifyAll();
    Signal(wake_fd_);  // a reader asleep in poll
    std::vector<std::thread> threads;
    {
      core::MutexLock lk(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    // Nothing reads the device after this: a failure to restore changes nothing.
    [[maybe_unused]] const int restored = fcntl(fd_, F_SETFL, flags);
    CloseFds();
    core::MutexLock lk(mu_);
    return error_;
  }

 private:
  struct Hint {
    Loop* loop;
    bool* reader;
  };

  static void Signal(int fd) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
  }

  void CloseFds() {
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (done_fd_ >= 0) ::close(done_fd_);
    wake_fd_ = done_fd_ = -1;
  }

  bool Finished() EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    return exiting_;
  }

  // A new worker, its signals blocked (they are for the calling thread).
  void SpawnLocked() REQUIRES(mu_) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    try {
      threads_.emplace_back([this] { Work(); });
    } catch (const std::system_error&) {
      // No thread to be had: the first thread to finish reads next.
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  // Gives up the reader role: an idle thread takes it, or a new one.
  void HandOff() EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    reading_ = false;
    if (exiting_) return;
    if (idle_ > 0) {
      idle_cv_.NotifyOne();
    } else if (threads_.size() < max_threads_) {
      SpawnLocked();
    }
    // Else every thread is busy: the first to finish reads next.
  }

  static void HandOffHint(void* arg) {
    auto* h = static_cast<Hint*>(arg);
    h->loop->HandOff();
    *h->reader = false;
  }

  // The session ended (res 0) or reading failed (res < 0).
  void End(int res) EXCLUDES(mu_) {
    if (res < 0) fuse_session_exit(se_);  // as libfuse's loop: a read error ends the session
    {
      core::MutexLock lk(mu_);
      if (res < 0 && error_ == 0) error_ = res;
      exiting_ = true;
      reading_ = false;
    }
    idle_cv_.NotifyAll();
    Signal(done_fd_);
  }

  void Work() EXCLUDES(mu_) {
    fuse_buf buf{};
    bool reader = false;
    for (;;) {
      if (!reader) {
        core::UniqueLock lk(mu_);
        idle_++;
        idle_cv_.Wait(lk, [&]() REQUIRES(mu_) { return exiting_ || !reading_; });
        idle_--;
        if (exiting_) break;
        reading_ = true;
        reader = true;
      }
      const int res = Receive(&buf);
      if (res <= 0) {
        End(res);
        break;
      }
      if (MayBlock(buf)) {
        HandOff();
        reader = false;
        fuse_session_process_buf(se_, &buf);
      } else {
        Hint hint{this, &reader};
        core::SetBlockingHint(&Loop::HandOffHint, &hint);
        fuse_session_process_buf(se_, &buf);
        core::SetBlockingHint(nullptr, nullptr);
      }
    }
    std::free(buf.mem);
  }

  // The next request (> 0: its length), or 0 when the session has ended,
  // or a negative errno. Only the reader calls it.
  int Receive(fuse_buf* buf) {
    // Look again before sleeping only while requests come in a stream
    // (core/spin_wait.h).
    const core::SpinWait::Window w = spin_.Begin();
    for (;;) {
      if (fuse_session_exited(se_)) return 0;
      const int res = fuse_session_receive_buf(se_, buf);
      if (res > 0) {
        spin_.Came(w);
        return res;
      }
      if (res == 0) return 0;  // the kernel ended the connection
      if (res == -EINTR) continue;
      if (res != -EAGAIN) return res;
      if (spin_.Again(w)) continue;
      pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) return -errno;
      if (fds[1].revents != 0) return 0;  // the loop is ending
      // POLLIN, or POLLERR once unmounted: the next read says which.
    }
  }

  fuse_session* const se_;
  const int fd_;
  const size_t max_threads_;
  int wake_fd_ = -1;  // wakes the reader from poll at the end
  int done_fd_ = -1;  // a worker saw the session end: wakes Run
  // The reader's own (one reader at a time; the role passes under mu_). The
  // first wait sleeps: a lone request after a quiet spell makes no stream.
  core::SpinWait spin_;

  core::Mutex mu_;
  core::CondVar idle_cv_;  // idle threads wait for the reader role
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
  size_t idle_ GUARDED_BY(mu_) = 0;
  bool reading_ GUARDED_BY(mu_) = false;  // a thread holds the reader role
  bool exiting_ GUARDED_BY(mu_) = false;
  int error_ GUARDED_BY(mu_) = 0;
};

}  // namespace

sigset_t ExitSignals() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGQUIT}) sigaddset(&s, sig);
  return s;
}

int RunSessionLoop(fuse_session* se, const SessionLoopOptions& options) {
  Loop loop(se, options);
  return loop.Run();
}

}  // namespace ptstore::fs
