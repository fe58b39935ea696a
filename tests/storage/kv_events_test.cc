// The KV-event codec (vLLM's msgspec encoding, docs/kv-events.md "Format")
// and the publisher's queue, drops, resync and replay over real ZMQ sockets
// on loopback.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <msgpack.hpp>
#include <thread>
#include <zmq.hpp>

#include "storage/events/kv_event_codec.h"
#include "storage/events/kv_event_publisher.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

KvEvent Stored(const std::string& ns, std::vector<uint32_t> tokens, bool salted = false) {
  KvEvent e;
  e.kind = KvEventKind::kStored;
  e.ns = ns;
  e.group = KvNamespaceGroup(ns);
  e.prev = RootKey(ns, salted ? "salt" : "");
  e.salted = salted;
  e.block_tokens = 4;
  e.tokens = std::move(tokens);
  return e;
}

msgpack::object_handle Decode(const std::string& payload) { return msgpack::unpack(payload.data(), payload.size()); }

TEST(KvEventCodecTest, BlockStoredIsVllmsArrayLikeTaggedStruct) {
  std::vector<uint32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8};
  KvEvent e = Stored("m", toks);
  const std::string payload = EncodeKvEventBatch(12.5, std::span(&e, 1), {});
  auto h = Decode(payload);
  const msgpack::object& b = h.get();
  ASSERT_EQ(b.type, msgpack::type::ARRAY);
  ASSERT_EQ(b.via.array.size, 3u);
  EXPECT_EQ(b.via.array.ptr[0].as<double>(), 12.5);
  EXPECT_EQ(b.via.array.ptr[2].as<int>(), 0);
  const msgpack::object& ev = b.via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(ev.via.array.size, 10u);
  EXPECT_EQ(ev.via.array.ptr[0].as<std::string>(), "BlockStored");
  const std::vector<ChainKey> keys = ChainKeys(RootKey("m", ""), toks, 4);
  auto hashes = ev.via.array.ptr[1].as<std::vector<uint64_t>>();
  ASSERT_EQ(hashes.size(), 2u);
  EXPECT_EQ(hashes[0], keys[0].lo);
  EXPECT_EQ(hashes[1], keys[1].lo);
  EXPECT_TRUE(ev.via.array.ptr[2].is_nil());  // parent of block 0
  EXPECT_EQ(ev.via.array.ptr[3].as<std::vector<uint32_t>>(), toks);
  EXPECT_EQ(ev.via.array.ptr[4].as<int>(), 4);
  EXPECT_TRUE(ev.via.array.ptr[5].is_nil());  // lora_id
  EXPECT_EQ(ev.via.array.ptr[6].as<std::string>(), "CPU");
  EXPECT_EQ(ev.via.array.ptr[7].as<std::string>(), "m");
  EXPECT_TRUE(ev.via.array.ptr[8].is_nil());  // extra_keys, before the set group_idx
  EXPECT_EQ(ev.via.array.ptr[9].as<uint32_t>(), KvNamespaceGroup("m"));
}

// kv_cache_spec_kind / kv_cache_spec_sliding_window: vLLM's KVCacheSpecKind
// of the layout (vllm/v1/kv_cache_interface.py get_kv_cache_spec_kind's rule
// for a group of several specs), written after group_idx, the window only
// when it is not None (omit_defaults).
TEST(KvEventCodecTest, CacheSpecFieldsFollowTheLayout) {
  const LayoutGroup full = LayoutGroup::Full(2, 2, 16, DType::kBF16);
  const LayoutGroup win = LayoutGroup::Window(2, 2, 16, DType::kBF16, 1024);
  const LayoutGroup win64 = LayoutGroup::Window(2, 2, 16, DType::kBF16, 64);
  const LayoutGroup latent = LayoutGroup::Latent(2, 32, DType::kBF16);
  const LayoutGroup state = LayoutGroup::State(2, 256);
  struct Case {
    Layout layout;
    std::string kind;
    uint32_t window;
  };
  Layout dense;
  dense.layers = 2;
  dense.kv_heads = 2;
  dense.head_dim = 16;
  dense.block_tokens = 4;
  for (const Case& c : {Case{dense, "full_attention", 0}, Case{Layout::FromGroups({win}, 4), "sliding_window", 1024},
                        Case{Layout::FromGroups({win64, win64}, 4), "sliding_window", 64},
                        Case{Layout::FromGroups({latent}, 4), "mla_attention", 0},
                        Case{Layout::FromGroups({state}, 4), "mamba", 0},
                        Case{Layout::FromGroups({full, win}, 4), "unknown", 0},
                        Case{Layout::FromGroups({win, win64}, 4), "sliding_window", 0},
                        Case{Layout::FromGroups({full, latent, state}, 4), "unknown", 0}}) {
    ASSERT_OK(c.layout.Validate()) << c.layout.ToString();
    const KvCacheSpec spec = KvCacheSpecOf(c.layout);
    ASSERT_NE(spec.kind, nullptr);
    EXPECT_EQ(std::string(spec.kind), c.kind) << c.layout.ToString();
    EXPECT_EQ(spec.sliding_window, c.window) << c.layout.ToString();
    KvEvent e = Stored("m", {1, 2, 3, 4});
    e.spec = spec;
    auto h = Decode(EncodeKvEventBatch(1, std::span(&e, 1), {}));
    const msgpack::object& ev = h.get().via.array.ptr[1].via.array.ptr[0];
    ASSERT_EQ(ev.via.array.size, c.window != 0 ? 12u : 11u) << c.layout.ToString();
    EXPECT_EQ(ev.via.array.ptr[9].as<uint32_t>(), KvNamespaceGroup("m"));
    EXPECT_EQ(ev.via.array.ptr[10].as<std::string>(), c.kind);
    if (c.window != 0) EXPECT_EQ(ev.via.array.ptr[11].as<uint32_t>(), c.window);
  }
  // Removals carry no spec (vLLM: "Remove events only need group_idx+hash").
  KvEvent r = Stored("m", {1, 2, 3, 4});
  r.kind = KvEventKind::kRemoved;
  r.spec = KvCacheSpecOf(Layout::FromGroups({win}, 4));
  auto h = Decode(EncodeKvEventBatch(1, std::span(&r, 1), {}));
  EXPECT_EQ(h.get().via.array.ptr[1].via.array.ptr[0].via.array.size, 4u);
}

// Token ids are written as msgpack-c's own packer writes them (the smallest
// form each), byte for byte, across every size class.
TEST(KvEventCodecTest, TokenIdsAreMsgpacksOwnEncoding) {
  std::vector<uint32_t> toks = {0, 1, 127, 128, 255, 256, 65535, 65536, 0xfffffffe, 0xffffffff, 31999, 7};
  for (int i = 0; i < 700; i++) toks.push_back(static_cast<uint32_t>(i * 2654435761u) >> (i % 32));
  toks.resize(toks.size() / 4 * 4);
  KvEvent e = Stored("m", toks);
  const std::string payload = EncodeKvEventBatch(1, std::span(&e, 1), {});
  auto h = Decode(payload);
  const msgpack::object& ev = h.get().via.array.ptr[1].via.array.ptr[0];
  EXPECT_EQ(ev.via.array.ptr[3].as<std::vector<uint32_t>>(), toks);
  msgpack::sbuffer want;
  msgpack::packer<msgpack::sbuffer> pk(want);
  pk.pack_array(static_cast<uint32_t>(toks.size()));
  for (uint32_t t : toks) pk.pack_uint32(t);
  EXPECT_NE(payload.find(std::string(want.data(), want.size())), std::string::npos);
}

TEST(KvEventCodecTest, RemovedClearedSaltedAndByteHashes) {
  KvEvent child = Stored("m", {9, 9, 9, 9}, /*salted=*/true);
  child.has_parent = true;
  child.prev = ChainKey{0x0102030405060708ull, 0x1112131415161718ull};
  KvEvent removed = child;
  removed.kind = KvEventKind::kRemoved;
  removed.medium = KvMedium::kStorage;
  KvEvent cleared;
  cleared.kind = KvEventKind::kCleared;
  KvCodecOptions o;
  o.hash = KvHashFormat::kBytes;
  std::vector<KvEvent> events = {child, removed, cleared};
  auto h = Decode(EncodeKvEventBatch(1, events, o));
  const msgpack::object* ev = h.get().via.array.ptr[1].via.array.ptr;
  // Salted: no token ids unless configured; the parent's 16 bytes big-endian.
  EXPECT_EQ(ev[0].via.array.ptr[3].via.array.size, 0u);
  const msgpack::object& parent = ev[0].via.array.ptr[2];
  ASSERT_EQ(parent.type, msgpack::type::BIN);
  ASSERT_EQ(parent.via.bin.size, 16u);
  EXPECT_EQ(static_cast<uint8_t>(parent.via.bin.ptr[0]), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(parent.via.bin.ptr[15]), 0x18);
  ASSERT_EQ(ev[1].via.array.size, 4u);
  EXPECT_EQ(ev[1].via.array.ptr[0].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(ev[1].via.array.ptr[2].as<std::string>(), "STORAGE");
  ASSERT_EQ(ev[2].via.array.size, 1u);
  EXPECT_EQ(ev[2].via.array.ptr[0].as<std::string>(), "AllBlocksCleared");
  o.salted_tokens = true;
  auto h2 = Decode(EncodeKvEventBatch(1, std::span(&child, 1), o));
  EXPECT_EQ(h2.get().via.array.ptr[1].via.array.ptr[0].via.array.ptr[3].via.array.size, 4u);
}

std::vector<zmq::message_t> RecvAll(zmq::socket_t& s, int timeout_ms) {
  std::vector<zmq::message_t> out;
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return out;
  do {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::none)) break;
    out.push_back(std::move(m));
  } while (out.back().more());
  return out;
}

uint64_t Be64(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; i++) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

TEST(KvEventPublisherTest, FullQueueDropsCountsAndResyncs) {
  KvEventsOptions o;
  o.queue_events = 4;
  o.incarnation = 7;
  o.node_id = 3;
  std::atomic<int> resyncs{0};
  KvEventPublisher* self = nullptr;
  auto p = KvEventPublisher::Start(o, [&] {
    resyncs++;
    KvEvent c;
    c.kind = KvEventKind::kCleared;
    self->Publish(std::move(c), true);
  });
  ASSERT_OK(p);
  self = p->get();
  (*p)->SetPausedForTest(true);
  for (int i = 0; i < 10; i++) (*p)->Publish(Stored("m", {1, 2, 3, 4}), false);
  KvEventStats s = (*p)->Stats();
  EXPECT_EQ(s.queued, 4u);
  EXPECT_EQ(s.dropped, 6u);
  (*p)->Publish(Stored("m", {1, 2, 3, 4}), /*force=*/true);  // a forced one is never dropped
  EXPECT_EQ((*p)->Stats().queued, 5u);
  (*p)->SetPausedForTest(false);
  (*p)->Flush();
  for (int i = 0; i < 400 && resyncs.load() == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(resyncs.load(), 1);
  (*p)->Flush();
  s = (*p)->Stats();
  EXPECT_EQ(s.resyncs, 1u);
  EXPECT_EQ(s.published, 6u);  // 5 events, then the resync's AllBlocksCleared
  EXPECT_EQ(KvSeqIncarnation(s.next_seq), 7u);

  // Replay: every batch from a seq on, then END_SEQ; a malformed request an error.
  zmq::context_t ctx;
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.connect((*p)->replay_endpoint());
  std::string start(8, '\0');
  d.send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
  d.send(zmq::buffer(start), zmq::send_flags::none);
  std::vector<uint64_t> seqs;
  for (;;) {
    auto f = RecvAll(d, 5000);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0].size(), 0u);
    if (Be64(f[1]) == ~0ull) {
      EXPECT_EQ(f[2].size(), 0u);
      break;
    }
    seqs.push_back(Be64(f[1]));
  }
  ASSERT_FALSE(seqs.empty());
  EXPECT_EQ(seqs.front(), KvSeq(7, 0));
  for (size_t i = 1; i < seqs.size(); i++) EXPECT_EQ(seqs[i], seqs[i - 1] + 1);
  d.send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
  d.send(zmq::buffer(std::string("abc")), zmq::send_flags::none);
  auto f = RecvAll(d, 5000);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(Be64(f[1]), ~0ull);
  EXPECT_EQ(f[2].to_string().rfind("error: ", 0), 0u) << f[2].to_string();
  EXPECT_EQ((*p)->Stats().replay_errors, 1u);
  EXPECT_EQ((*p)->Stats().batches, seqs.size());
}

TEST(KvEventPublisherTest, SubscriberSeesTopicSeqAndPayload) {
  KvEventsOptions o;
  o.node_id = 5;
  o.incarnation = 9;
  auto p = KvEventPublisher::Start(o, nullptr);
  ASSERT_OK(p);
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv@5@");
  sub.connect((*p)->endpoint());
  std::vector<zmq::message_t> f;
  for (int i = 0; i < 200 && f.empty(); i++) {  // until the subscription has reached the publisher
    (*p)->Publish(Stored("ns1", {1, 2, 3, 4}), false);
    f = RecvAll(sub, 20);
  }
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].to_string(), "kv@5@ns1");
  EXPECT_EQ(KvSeqIncarnation(Be64(f[1])), 9u);
  auto h = Decode(f[2].to_string());
  EXPECT_EQ(h.get().via.array.ptr[1].via.array.ptr[0].via.array.ptr[0].as<std::string>(), "BlockStored");
}

}  // namespace
}  // namespace ptstore::storage
