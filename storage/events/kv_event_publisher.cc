#include "storage/events/kv_event_publisher.h"

#include <fnmatch.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <zmq.hpp>

#include "core/logging.h"
#include "storage/events/replay_ring.h"

namespace ptstore::storage {

struct KvEventPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t replay{ctx, zmq::socket_type::router};
  int replay_fd = -1;    // the replay socket's ZMQ_FD, for ppoll
  ReplayRing buffer;     // the last batches sent, for replay
  std::string payload;   // the batch being encoded (its capacity kept)
};

namespace {

std::string SeqBytes(int64_t seq) {
  std::string b(8, '\0');
  uint64_t u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; i++) b[i] = static_cast<char>(u >> (56 - 8 * i));
  return b;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Endpoint(const std::string& bind, uint16_t port) {
  return "tcp://" + bind + ":" + (port == 0 ? std::string("*") : std::to_string(port));
}

}  // namespace

KvEventPublisher::KvEventPublisher(const KvEventsOptions& options) : options_(options) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvEventsOptions& options,
                                                                  std::function<void()> resync) {
  if (options.queue_events == 0 || options.buffer_batches == 0 || options.buffer_bytes == 0 ||
      options.batch_events == 0) {
    return InvalidArgument("kv events: queue_events, buffer_batches, buffer_bytes and batch_events must be positive");
  }
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(options));
  p->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->wake_fd_ < 0) return ErrnoError("kv events: eventfd", errno);
  p->incarnation_ = options.incarnation != 0
                        ? options.incarnation
                        : static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                                    std::chrono::system_clock::now().time_since_epoch())
                                                    .count());
  {
    core::MutexLock lk(p->mu_);  // no thread yet: for the analysis
    p->stats_.incarnation = p->incarnation_;
    p->stats_.next_seq = KvSeq(p->incarnation_, 0);
  }
  p->resync_ = std::move(resync);
  // The thread makes the sockets (so ZMQ's I/O thread, started by the first
  // socket, inherits its lower priority) and says how binding went.
  std::promise<Status> bound;
  std::future<Status> bound_f = bound.get_future();
  p->thread_ = std::thread([raw = p.get(), &bound] {
    raw->Lower();
    Status st = raw->Bind();
    const bool ok = st.ok();
    bound.set_value(std::move(st));
    if (!ok) return;
    raw->sockets_->buffer.Prefault();  // events meanwhile wait in the queue
    raw->Loop();
  });
  Status st = bound_f.get();
  if (!st.ok()) {
    p->thread_.join();
    return st;
  }
  return p;
}

void KvEventPublisher::Lower() {
  // Below the save path: the publisher runs on the cycles saves leave
  // (kNiceIncrement). Best effort: a failure leaves it where it was.
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  if (errno == 0 && setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), std::min(19, now + kNiceIncrement)) != 0) {
    PTS_DEBUG("events", "cannot lower the publisher's priority: " << std::strerror(errno));
  }
}

Status KvEventPublisher::Bind() {
  sockets_ = std::make_unique<Sockets>();
  Sockets& s = *sockets_;
  if (Status st = s.buffer.Init(options_.buffer_batches, options_.buffer_bytes); !st.ok()) {
    sockets_.reset();
    return st;
  }
  try {
    s.pub.set(zmq::sockopt::sndhwm, static_cast<int>(std::min<uint64_t>(options_.hwm, INT32_MAX)));
    s.pub.set(zmq::sockopt::linger, 0);
    s.pub.bind(Endpoint(options_.bind, options_.port));
    endpoint_ = s.pub.get(zmq::sockopt::last_endpoint);
    // A replay of the whole buffer to one subscriber must not hit the
    // ROUTER's high-water mark (it would drop silently).
    s.replay.set(zmq::sockopt::sndhwm,
                 static_cast<int>(std::min<uint64_t>(2 * options_.buffer_batches + 16, INT32_MAX)));
    s.replay.set(zmq::sockopt::linger, 0);
    s.replay.bind(Endpoint(options_.bind, options_.replay_port));
    replay_endpoint_ = s.replay.get(zmq::sockopt::last_endpoint);
    s.replay_fd = s.replay.get(zmq::sockopt::fd);
  } catch (const zmq::error_t& e) {
    sockets_.reset();
    return Unavailable(std::string("kv events: cannot bind on ") + options_.bind + ": " + e.what());
  }
  return Status::OK();
}

KvEventPublisher::~KvEventPublisher() {
  {
    core::MutexLock lk(mu_);
    stop_ = true;
  }
  Signal();
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void KvEventPublisher::Signal() {
  const uint64_t one = 1;
  // Never blocks (EFD_NONBLOCK); a full counter is already a wake-up.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

bool KvEventPublisher::Publishes(const std::string& ns) const {
  for (const std::string& pattern : options_.exclude) {
    if (fnmatch(pattern.c_str(), ns.c_str(), 0) == 0) return false;
  }
  return true;
}

std::vector<uint32_t> KvEventPublisher::RecycledTokens() {
  core::MutexLock lk(mu_);
  if (spare_tokens_.empty()) return {};
  std::vector<uint32_t> v = std::move(spare_tokens_.back());
  spare_tokens_.pop_back();
  return v;
}

void KvEventPublisher::WaitForWork(std::optional<std::chrono::steady_clock::time_point> until) {
  // The replay socket's ZMQ_FD is readable when its state may have changed;
  // ServeReplays then takes every request (recv until EAGAIN), as ZMQ asks.
  pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {sockets_->replay_fd, POLLIN, 0}};
  timespec ts{}, *tsp = nullptr;
  if (until) {
    const auto left = std::max(std::chrono::nanoseconds(0), *until - std::chrono::steady_clock::now());
    ts.tv_sec = static_cast<time_t>(left.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(left.count() % 1000000000);
    tsp = &ts;
  }
  if (::ppoll(fds, 2, tsp, nullptr) > 0 && (fds[0].revents & POLLIN)) {
    uint64_t n;
    [[maybe_unused]] ssize_t r = ::read(wake_fd_, &n, sizeof n);
  }
}

void KvEventPublisher::Publish(KvEvent&& e, bool force) {
  bool wake = false;
  {
    core::MutexLock lk(mu_);
    if (!force && queue_.size() >= options_.queue_events) {
      stats_.dropped++;
      overflowed_ = true;
      return;
    }
    // Only a thread asleep on an empty queue, or gathering a batch that is
    // now full, is woken: in a stream of events a save costs a lock and a
    // push, never a wake-up.
    queue_.push_back(std::move(e));
    stats_.queued++;
    wake = (idle_ && queue_.size() == 1) || (gathering_ && queue_.size() == options_.batch_events);
    if (wake) idle_ = gathering_ = false;
  }
  if (wake) Signal();
}

void KvEventPublisher::Flush() {
  core::UniqueLock lk(mu_);
  const uint64_t target = stats_.queued;
  sent_cv_.Wait(lk, [&]() REQUIRES(mu_) { return done_ >= target || stop_; });
}

void KvEventPublisher::SetPausedForTest(bool paused) {
  {
    core::MutexLock lk(mu_);
    paused_ = paused;
  }
  Signal();
}

KvEventStats KvEventPublisher::Stats() const {
  core::MutexLock lk(mu_);
  KvEventStats s = stats_;
  s.queue_depth = queue_.size();
  return s;
}

void KvEventPublisher::Loop() {
  using Clock = std::chrono::steady_clock;
  const auto delay = std::chrono::microseconds(options_.batch_delay_us);
  Clock::time_point due = Clock::now();  // the next batch goes no sooner: batch_delay_us after the last
  std::vector<KvEvent> work;
  for (;;) {
    bool resync = false;
    std::optional<Clock::time_point> until;  // wait for work: none, no limit
    {
      core::MutexLock lk(mu_);
      idle_ = gathering_ = false;
      if (queue_.empty() && stop_) break;
      const Clock::time_point now = Clock::now();
      if (!queue_.empty() && (!paused_ || stop_)) {
        // A batch goes when due, or once batch_events are queued, or at once
        // to shut down.
        if (stop_ || queue_.size() >= options_.batch_events || now >= due) {
          work.swap(queue_);
        } else {
          gathering_ = true;
          until = due;
        }
      } else if (overflowed_ && !paused_) {
        overflowed_ = false;
        stats_.resyncs++;
        resync = true;
      } else if (!stop_ && !paused_ && now < due) {
        // Right after a send the thread is not idle: it looks again at the
        // due time whatever comes meanwhile, so a stream of saves never
        // signals it (one wake-up a batch, its timer's).
        until = due;
      } else {
        idle_ = true;
      }
    }
    if (work.empty() && !resync) {
      WaitForWork(until);
      ServeReplays();
      continue;
    }
    if (resync) {
      ServeReplays();
      if (resync_) {
        PTS_WARN("events", "the event queue overflowed: announcing everything this node holds again");
        resync_();
      }
      continue;
    }
    const uint64_t n = work.size();
    Send(work);
    // Replays after the send: a request that waited meanwhile (one sent
    // while the ring was being touched at start, right after a restart)
    // gets the batches already taken from the queue, never an empty answer.
    ServeReplays();
    due = Clock::now() + delay;
    core::MutexLock lk(mu_);
    done_ += n;
    sent_cv_.NotifyAll();
    // Their token buffers go back to the Store's next events.
    for (KvEvent& e : work) {
      if (spare_tokens_.size() >= kSpareTokenBuffers) break;
      e.tokens.clear();
      spare_tokens_.push_back(std::move(e.tokens));
    }
    work.clear();
  }
  core::MutexLock lk(mu_);
  sent_cv_.NotifyAll();
}

void KvEventPublisher::Send(std::vector<KvEvent>& events) {
  Sockets& s = *sockets_;
  uint64_t sent_batches = 0;
  auto send = [&](std::span<const KvEvent> batch) {
    const uint64_t seq = KvSeq(incarnation_, counter_++);
    EncodeKvEventBatch(NowSeconds(), batch, options_.codec, &s.payload);
    const std::string topic = KvEventTopic(options_.node_id, batch.front().ns);
    const std::string seq_bytes = SeqBytes(static_cast<int64_t>(seq));
    try {
      s.pub.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.pub.send(zmq::buffer(s.payload), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      PTS_WARN("events", "publishing batch " << seq << ": " << e.what());
    }
    s.buffer.Add(seq, s.payload);
    sent_batches++;
  };
  // One namespace per batch (its topic names it); AllBlocksCleared alone.
  size_t first = 0;
  for (size_t i = 1; i <= events.size(); i++) {
    const KvEvent& head = events[first];
    if (i == events.size() || events[i].ns != head.ns || i - first >= options_.batch_events ||
        events[i].kind == KvEventKind::kCleared || head.kind == KvEventKind::kCleared) {
      send(std::span<const KvEvent>(events.data() + first, i - first));
      first = i;
    }
  }
  core::MutexLock lk(mu_);
  stats_.published += events.size();
  stats_.batches += sent_batches;
  stats_.next_seq = KvSeq(incarnation_, counter_);
}

void KvEventPublisher::ServeReplays() {
  Sockets& s = *sockets_;
  for (;;) {
    std::vector<zmq::message_t> frames;
    try {
      zmq::message_t m;
      if (!s.replay.recv(m, zmq::recv_flags::dontwait)) return;
      frames.push_back(std::move(m));
      while (frames.back().more()) {
        zmq::message_t next;
        if (!s.replay.recv(next, zmq::recv_flags::none)) break;
        frames.push_back(std::move(next));
      }
    } catch (const zmq::error_t& e) {
      PTS_WARN("events", "replay socket: " << e.what());
      return;
    }
    const std::string id = frames[0].to_string();
    auto reply = [&](const std::string& seq, std::string_view payload) {
      try {
        s.replay.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        s.replay.send(zmq::const_buffer("", 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        s.replay.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        s.replay.send(zmq::const_buffer(payload.data(), payload.size()), zmq::send_flags::dontwait);
      } catch (const zmq::error_t& e) {
        PTS_WARN("events", "replay reply: " << e.what());
      }
    };
    const std::string end = SeqBytes(-1);
    if (frames.size() != 3 || frames[1].size() != 0 || frames[2].size() != 8) {
      std::string why = "error: a replay request is (empty delimiter, start seq as 8 bytes big-endian); got " +
                        std::to_string(frames.size() - 1) + " frame(s) after the identity";
      if (frames.size() == 3) {
        why += frames[1].size() != 0 ? ", a non-empty delimiter"
                                     : ", a start seq of " + std::to_string(frames[2].size()) + " bytes";
      }
      {
        core::MutexLock lk(mu_);
        stats_.replay_errors++;
      }
      PTS_DEBUG("events", "malformed replay request: " << why);
      reply(end, why);
      continue;
    }
    const auto* b = static_cast<const uint8_t*>(frames[2].data());
    uint64_t start = 0;
    for (int i = 0; i < 8; i++) start = (start << 8) | b[i];
    s.buffer.ForEachFrom(start, [&](uint64_t seq, std::string_view payload) {
      reply(SeqBytes(static_cast<int64_t>(seq)), payload);
    });
    reply(end, "");
    core::MutexLock lk(mu_);
    stats_.replays++;
    // Asked for batches the buffer no longer has (a subscriber joining a
    // long-running node, or one away for too long): the stream announces
    // everything again, AllBlocksCleared first, so that it becomes exact.
    if (!s.buffer.empty() && start < s.buffer.oldest_seq() && static_cast<uint32_t>(s.buffer.oldest_seq()) != 0) {
      overflowed_ = true;
    }
  }
}

void AppendKvEventMetrics(core::PromWriter& w, const KvEventStats& s) {
  w.Counter("ptstore_kv_events_total", "KV events taken for publishing.", s.queued);
  w.Counter("ptstore_kv_events_dropped_total", "KV events dropped at a full queue (a resync follows).", s.dropped);
  w.Counter("ptstore_kv_events_published_total", "KV events sent on the PUB socket.", s.published);
  w.Counter("ptstore_kv_event_batches_total", "KV event batches sent.", s.batches);
  w.Counter("ptstore_kv_event_resyncs_total", "Re-announcements of everything held, after drops.", s.resyncs);
  w.Counter("ptstore_kv_event_replays_total", "Replay requests answered.", s.replays);
  w.Counter("ptstore_kv_event_replay_errors_total", "Malformed replay requests.", s.replay_errors);
  w.Gauge("ptstore_kv_event_queue_depth", "KV events waiting for the publisher thread.", s.queue_depth);
  w.Gauge("ptstore_kv_event_incarnation", "The KV-event stream's incarnation (high 32 bits of its seqs).",
          s.incarnation);
}

}  // namespace ptstore::storage
