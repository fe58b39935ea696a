// The KV-event publisher of a node (docs/kv-events.md): vLLM's
// ZmqEventPublisher in C++. A ZMQ PUB socket sends every batch as the
// multipart message (topic, seq as 8 bytes big-endian, payload); a ROUTER
// socket answers a replay request (identity, "", start_seq 8 bytes BE) with
// (identity, "", seq, payload) for each buffered batch from start_seq on,
// then (identity, "", -1 as 8 bytes, ""). A malformed request is answered
// with the end marker and an error message as its payload ("error: ...") and
// changes nothing. A replay from before the oldest buffered batch, once the
// buffer has dropped the incarnation's first batches, also makes the stream
// announce everything again (as after drops, below): a late subscriber
// becomes exact.
//
// Off the save's path: Publish (called by the Store under its mutex) only
// appends to a bounded queue; one thread hashes, encodes, sends and serves
// replays. A full queue drops the event and counts it; once the queue has
// drained, the thread calls `resync` (the Store's AnnounceEvents: an
// AllBlocksCleared and everything held, forced past the bound), so a
// subscriber is exact again without ever slowing a save. A subscriber slower
// than the stream loses messages at the PUB socket's high-water mark (ZMQ
// never blocks a PUB) and sees the gap in the sequence numbers.
//
// The thread sleeps until there is work: a poll on the replay socket and an
// eventfd that Publish signals when an event lands in an empty queue while
// the thread waits for one (one write per burst, none per save). After a
// send it gathers events for batch_delay_us before the next (fewer, larger
// batches: one wake-up of it, of ZMQ and of every subscriber per batch), or
// less once batch_events are queued. A lone event after a quiet spell goes
// out at once.
//
// The publisher's thread, and ZMQ's I/O thread it starts, run kNiceIncrement
// nice levels below the thread that called Start (best effort): on a busy
// machine they take the cycles saves leave, not the saves' own.
//
// Thread safety: Publish and Stats from any thread; Start/destruction by
// one owner.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/prometheus.h"
#include "ptstore/status.h"
#include "storage/cache/kv_event.h"
#include "storage/events/kv_event_codec.h"

namespace ptstore::storage {

struct KvEventsOptions {
  bool enabled = false;
  std::string bind = "127.0.0.1";   // loopback unless configured
  uint16_t port = 0;                // PUB; 0: an ephemeral port (logged, endpoint())
  uint16_t replay_port = 0;         // ROUTER; 0: an ephemeral port
  uint64_t queue_events = 65536;    // the bounded queue between the Store and the thread
  uint64_t buffer_batches = 10000;  // batches kept for replay (vLLM's buffer_steps)
  uint64_t buffer_bytes = uint64_t{64} << 20;  // and at most these bytes of them (mapped and touched at start)
  uint64_t hwm = 100000;            // PUB high-water mark, messages per subscriber
  uint64_t batch_events = 256;      // at most this many events in one batch
  uint64_t batch_delay_us = 1000;   // after a send, gather events this long before the next (0: none)
  std::vector<std::string> exclude; // namespaces (fnmatch patterns of their names) that publish nothing
  KvCodecOptions codec;
  uint32_t node_id = 0;
  uint32_t incarnation = 0;         // 0: seconds since the Unix epoch now
};

struct KvEventStats {
  uint64_t queued = 0;         // events taken by Publish
  uint64_t dropped = 0;        // events dropped at a full queue
  uint64_t published = 0;      // events sent
  uint64_t batches = 0;        // batches sent
  uint64_t resyncs = 0;        // re-announcements after drops
  uint64_t replays = 0;        // replay requests answered
  uint64_t replay_errors = 0;  // malformed replay requests
  uint64_t queue_depth = 0;
  uint64_t next_seq = 0;
  uint32_t incarnation = 0;
};

class KvEventPublisher final : public KvEventSink {
 public:
  // Binds both sockets and starts the thread. `resync` is called by the
  // thread, never under a lock of the publisher's.
  static Result<std::unique_ptr<KvEventPublisher>> Start(const KvEventsOptions& options,
                                                         std::function<void()> resync);
  ~KvEventPublisher() override;  // publishes what is queued, then stops

  void Publish(KvEvent&& e, bool force) override EXCLUDES(mu_);
  // False for a namespace that one of options.exclude matches.
  bool Publishes(const std::string& ns) const override;
  // A token buffer of an event already sent, for the next (no allocation
  // per event on the save's path, none freed across threads).
  std::vector<uint32_t> RecycledTokens() override EXCLUDES(mu_);
  // Blocks until every event queued so far is sent (tests, shutdown).
  void Flush() EXCLUDES(mu_);

  // Test seam: while paused the thread takes nothing from the queue (so a
  // test can fill it); replays are still served.
  void SetPausedForTest(bool paused) EXCLUDES(mu_);

  KvEventStats Stats() const EXCLUDES(mu_);
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  uint32_t incarnation() const { return incarnation_; }

 private:
  struct Sockets;
  static constexpr int kNiceIncrement = 10;
  static constexpr size_t kSpareTokenBuffers = 4096;
  explicit KvEventPublisher(const KvEventsOptions& options);
  void Lower();   // the calling thread's nice value + kNiceIncrement
  Status Bind();  // makes sockets_ and binds them
  void Loop() EXCLUDES(mu_);
  void Signal();  // wakes the thread (the eventfd)
  // Until the eventfd or the replay socket is ready, or `until` (none: no
  // limit) has passed.
  void WaitForWork(std::optional<std::chrono::steady_clock::time_point> until);
  void ServeReplays() EXCLUDES(mu_);
  void Send(std::vector<KvEvent>& events) EXCLUDES(mu_);

  const KvEventsOptions options_;
  uint32_t incarnation_ = 0;
  std::string endpoint_, replay_endpoint_;
  std::unique_ptr<Sockets> sockets_;  // made and used by the thread only
  std::function<void()> resync_;
  int wake_fd_ = -1;  // eventfd: Publish, pauses and the destructor wake the thread

  mutable core::Mutex mu_;
  core::CondVar sent_cv_;
  std::vector<KvEvent> queue_ GUARDED_BY(mu_);  // swapped with the thread's, so both keep their capacity
  std::vector<std::vector<uint32_t>> spare_tokens_ GUARDED_BY(mu_);  // RecycledTokens
  bool stop_ GUARDED_BY(mu_) = false;
  bool overflowed_ GUARDED_BY(mu_) = false;
  bool paused_ GUARDED_BY(mu_) = false;
  bool idle_ GUARDED_BY(mu_) = false;   // the thread waits on an empty queue: Publish wakes it
  bool gathering_ GUARDED_BY(mu_) = false;  // it gathers a batch: Publish wakes it at batch_events
  uint64_t done_ GUARDED_BY(mu_) = 0;   // events sent
  KvEventStats stats_ GUARDED_BY(mu_);
  uint32_t counter_ = 0;   // thread only: the next seq's low half
  std::thread thread_;
};

// ptstore_kv_events_* (docs/kv-events.md "Metrics").
void AppendKvEventMetrics(core::PromWriter& w, const KvEventStats& s);

}  // namespace ptstore::storage
