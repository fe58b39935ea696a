#include "sched/event_index.h"

#include <msgpack.hpp>
#include <zmq.hpp>

#include "core/logging.h"
#include "ptstore/keys.h"
#include "sched/store_index.h"

namespace ptstore::sched {

namespace {

uint64_t Be64(const void* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | static_cast<const uint8_t*>(p)[i];
  return v;
}

std::string SeqBytes(uint64_t seq) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; i++) b[i] = static_cast<char>(seq >> (56 - 8 * i));
  return b;
}

// A block hash in either form (int, or bytes whose low 8 are the int form).
bool HashOf(const msgpack::object& o, uint64_t* out) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    *out = o.via.u64;
    return true;
  }
  if (o.type == msgpack::type::BIN && o.via.bin.size >= 8) {
    *out = Be64(o.via.bin.ptr + o.via.bin.size - 8);
    return true;
  }
  return false;
}

std::string Str(const msgpack::object& o) {
  return o.type == msgpack::type::STR ? std::string(o.via.str.ptr, o.via.str.size) : std::string();
}

}  // namespace

// `known`, `blocks` and `groups` are guarded by the index's mu_ (written
// under it, by the index's thread; that thread alone also reads `known`
// without it). Not GUARDED_BY: from a nested struct the attribute cannot
// name the index's mutex (clang resolves it against the NodeState), so the
// analysis does not check them.
struct EventIndex::NodeState {
  Source source;
  zmq::socket_t sub;
  bool known = false;         // a replay has answered since the stream became unknown
  std::chrono::steady_clock::time_point heard;  // the last message or replay (thread only)
  uint64_t next_seq = 0;      // valid when known (thread only)
  // namespace -> block hash -> media bits (1 CPU, 2 STORAGE).
  std::unordered_map<std::string, std::unordered_map<uint64_t, uint8_t>> blocks;
  std::unordered_map<uint32_t, std::string> groups;  // group_idx -> namespace
};

Result<EventIndex::Source> EventIndex::ParseSource(const std::string& text) {
  const size_t eq = text.find('='), comma = text.find(',');
  if (eq == std::string::npos || comma == std::string::npos || comma < eq) {
    return InvalidArgument("events source '" + text + "' is not NODE=PUB,REPLAY (e.g. 0=tcp://h:5557,tcp://h:5558)");
  }
  Source s;
  try {
    s.node = static_cast<uint32_t>(std::stoul(text.substr(0, eq)));
  } catch (...) {
    return InvalidArgument("events source '" + text + "': the node is not a number");
  }
  s.pub = text.substr(eq + 1, comma - eq - 1);
  s.replay = text.substr(comma + 1);
  if (s.pub.rfind("tcp://", 0) != 0 || s.replay.rfind("tcp://", 0) != 0) {
    return InvalidArgument("events source '" + text + "': endpoints must be tcp://HOST:PORT");
  }
  return s;
}

namespace {
zmq::context_t& Context() {
  static zmq::context_t ctx{1};
  return ctx;
}
}  // namespace

EventIndex::EventIndex(std::vector<Source> sources, PrefixIndex* fallback) : fallback_(fallback) {
  for (Source& s : sources) {
    auto n = std::make_unique<NodeState>();
    n->source = std::move(s);
    n->sub = zmq::socket_t(Context(), zmq::socket_type::sub);
    n->sub.set(zmq::sockopt::subscribe, "kv@" + std::to_string(n->source.node) + "@");
    n->sub.set(zmq::sockopt::linger, 0);
    n->sub.set(zmq::sockopt::rcvhwm, 1000000);
    n->sub.connect(n->source.pub);
    nodes_.push_back(std::move(n));
  }
  thread_ = std::thread([this] { Loop(); });
}

EventIndex::~EventIndex() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool EventIndex::AllKnown() const {
  core::ReaderLock lk(mu_);
  for (const auto& n : nodes_) {
    if (!n->known) return false;
  }
  return true;
}

EventIndex::Stats EventIndex::stats() const {
  Stats s;
  s.from_events = from_events_;
  s.from_fallback = from_fallback_;
  s.batches = batches_;
  s.gaps = gaps_;
  s.restarts = restarts_;
  s.replays = replays_;
  s.replay_failures = replay_failures_;
  return s;
}

void EventIndex::Apply(NodeState& n, uint64_t seq, const std::string& payload, const std::string* topic_ns) {
  msgpack::object_handle h;
  try {
    h = msgpack::unpack(payload.data(), payload.size());
  } catch (const std::exception& e) {
    PTS_WARN("events", "node " << n.source.node << ": undecodable batch " << seq << ": " << e.what());
    n.next_seq = seq + 1;
    return;
  }
  const msgpack::object& b = h.get();
  n.next_seq = seq + 1;
  batches_++;
  if (b.type != msgpack::type::ARRAY || b.via.array.size < 2 || b.via.array.ptr[1].type != msgpack::type::ARRAY) return;
  const msgpack::object_array& events = b.via.array.ptr[1].via.array;
  core::WriterLock lk(mu_);
  for (uint32_t i = 0; i < events.size; i++) {
    const msgpack::object& e = events.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size == 0) continue;
    const msgpack::object* f = e.via.array.ptr;
    const std::string tag = Str(f[0]);
    if (tag == "AllBlocksCleared") {
      n.blocks.clear();
      continue;
    }
    if (tag == "BlockStored" && e.via.array.size >= 8) {
      const std::string ns = Str(f[7]);
      const uint8_t medium = Str(f[6]) == "CPU" ? 1 : 2;
      if (e.via.array.size >= 10 && f[9].type == msgpack::type::POSITIVE_INTEGER) {
        n.groups[static_cast<uint32_t>(f[9].via.u64)] = ns;
      }
      if (f[4].type == msgpack::type::POSITIVE_INTEGER) block_size_[ns] = static_cast<uint32_t>(f[4].via.u64);
      if (f[1].type != msgpack::type::ARRAY) continue;
      if (f[3].type == msgpack::type::ARRAY && f[3].via.array.size == 0 && f[1].via.array.size > 0) salted_.insert(ns);
      auto& held = n.blocks[ns];
      for (uint32_t k = 0; k < f[1].via.array.size; k++) {
        uint64_t hash;
        if (HashOf(f[1].via.array.ptr[k], &hash)) held[hash] |= medium;
      }
    } else if (tag == "BlockRemoved" && e.via.array.size >= 3) {
      std::string ns;
      if (topic_ns != nullptr) {
        ns = *topic_ns;
      } else if (e.via.array.size >= 4 && f[3].type == msgpack::type::POSITIVE_INTEGER) {
        auto g = n.groups.find(static_cast<uint32_t>(f[3].via.u64));
        if (g != n.groups.end()) ns = g->second;
      }
      const uint8_t medium = Str(f[2]) == "CPU" ? 1 : 2;
      auto it = n.blocks.find(ns);
      if (it == n.blocks.end() || f[1].type != msgpack::type::ARRAY) continue;
      for (uint32_t k = 0; k < f[1].via.array.size; k++) {
        uint64_t hash;
        if (!HashOf(f[1].via.array.ptr[k], &hash)) continue;
        auto b2 = it->second.find(hash);
        if (b2 == it->second.end()) continue;
        b2->second &= static_cast<uint8_t>(~medium);
        if (b2->second == 0) it->second.erase(b2);
      }
    }
  }
}

bool EventIndex::Replay(NodeState& n, uint64_t start) {
  replays_++;
  zmq::socket_t d(Context(), zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  d.connect(n.source.replay);
  const std::string seq = SeqBytes(start);
  d.send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
  d.send(zmq::buffer(seq), zmq::send_flags::none);
  for (;;) {
    zmq::pollitem_t item{d.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(2000)) <= 0 || stop_) {
      replay_failures_++;
      core::WriterLock lk(mu_);
      n.known = false;
      return false;
    }
    std::vector<zmq::message_t> frames;
    do {
      zmq::message_t m;
      if (!d.recv(m, zmq::recv_flags::none)) break;
      frames.push_back(std::move(m));
    } while (frames.back().more());
    if (frames.size() != 3 || frames[1].size() != 8) continue;
    const uint64_t s = Be64(frames[1].data());
    if (s == ~0ull) break;
    const bool same = n.known && (s >> 32) == (n.next_seq >> 32);
    if (n.known && !same) restarts_++;  // found by an idle check (below) rather than a live message
    if (!n.known || !same || s >= n.next_seq) Apply(n, s, frames[2].to_string(), nullptr);
    core::WriterLock lk(mu_);
    n.known = true;
  }
  core::WriterLock lk(mu_);
  n.known = true;
  return true;
}

void EventIndex::Loop() {
  std::vector<zmq::pollitem_t> items;
  for (auto& n : nodes_) items.push_back({n->sub.handle(), 0, ZMQ_POLLIN, 0});
  auto last_try = std::chrono::steady_clock::now() - std::chrono::seconds(10);
  while (!stop_) {
    // Streams not known yet (or lost): a replay from 0 gives the whole buffer,
    // which starts with the incarnation's AllBlocksCleared.
    if (std::chrono::steady_clock::now() - last_try > std::chrono::milliseconds(200)) {
      for (auto& n : nodes_) {
        bool known;
        {
          core::ReaderLock lk(mu_);
          known = n->known;
        }
        if (!known) {
          Replay(*n, 0);
          n->heard = std::chrono::steady_clock::now();
        } else if (std::chrono::steady_clock::now() - n->heard > std::chrono::seconds(1)) {
          // Quiet for a second: a replay from next_seq shows what a restarted
          // node announced before this subscriber's SUB reconnected (nothing
          // new otherwise). One small request per idle node per second.
          Replay(*n, n->next_seq);
          n->heard = std::chrono::steady_clock::now();
        }
      }
      last_try = std::chrono::steady_clock::now();
    }
    if (zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50)) <= 0) continue;
    for (size_t i = 0; i < nodes_.size(); i++) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      NodeState& n = *nodes_[i];
      for (int budget = 0; budget < 1024; budget++) {
        std::vector<zmq::message_t> frames;
        zmq::message_t m;
        if (!n.sub.recv(m, zmq::recv_flags::dontwait)) break;
        frames.push_back(std::move(m));
        while (frames.back().more()) {
          zmq::message_t next;
          if (!n.sub.recv(next, zmq::recv_flags::none)) break;
          frames.push_back(std::move(next));
        }
        if (frames.size() != 3 || frames[1].size() != 8) continue;
        n.heard = std::chrono::steady_clock::now();
        const uint64_t seq = Be64(frames[1].data());
        const std::string topic = frames[0].to_string();
        const size_t at = topic.find('@', 3);
        const std::string ns = at == std::string::npos ? std::string() : topic.substr(at + 1);
        if (!n.known) continue;  // the replay loop above brings it in
        if (seq != n.next_seq) {
          if ((seq >> 32) != (n.next_seq >> 32)) {
            if (!Replay(n, n.next_seq)) continue;  // the new incarnation's batches are all past next_seq
          } else if (seq > n.next_seq) {
            gaps_++;
            if (!Replay(n, n.next_seq)) continue;
          }
          if (seq < n.next_seq) continue;  // the replay brought it
        }
        Apply(n, seq, frames[2].to_string(), ns.empty() ? nullptr : &ns);
      }
    }
  }
}

Result<PrefixLocation> EventIndex::Locate(const std::string& ns, std::span<const uint32_t> tokens) {
  uint32_t bt = 0;
  {
    core::ReaderLock lk(mu_);
    bool known = true;
    for (const auto& n : nodes_) known = known && n->known;
    auto b = block_size_.find(ns);
    if (known && b != block_size_.end() && !salted_.count(ns)) bt = b->second;
  }
  if (bt == 0) {
    from_fallback_++;
    if (fallback_ == nullptr) return PrefixLocation{};
    return fallback_->Locate(ns, tokens);
  }
  const std::vector<ChainKey> keys = ChainKeys(RootKey(ns, ""), tokens, bt);
  std::vector<std::pair<uint32_t, uint64_t>> held;
  {
    core::ReaderLock lk(mu_);
    for (const auto& n : nodes_) {
      auto it = n->blocks.find(ns);
      if (it == n->blocks.end()) continue;
      size_t b = 0;
      while (b < keys.size() && it->second.count(keys[b].lo)) b++;
      if (b > 0) held.emplace_back(n->source.node, b * bt);
    }
  }
  from_events_++;
  return MergeIndependent(held);
}

}  // namespace ptstore::sched
