#include "storage/events/kv_event_codec.h"

#include <msgpack.hpp>
#include <string_view>

namespace ptstore::storage {

std::vector<ChainKey> KvEventBlockKeys(const KvEvent& e) {
  if (e.block_tokens == 0) return {};
  return ChainKeys(e.prev, e.tokens, e.block_tokens);
}

std::string KvEventTopic(uint32_t node_id, const std::string& ns) { return "kv@" + std::to_string(node_id) + "@" + ns; }

namespace {

// msgpack's output straight into the payload string (no sbuffer, no copy).
struct StringSink {
  std::string* out;
  void write(const char* p, size_t n) { out->append(p, n); }
};
using Packer = msgpack::packer<StringSink>;

void PackHash(Packer& p, const ChainKey& k, KvHashFormat f) {
  if (f == KvHashFormat::kInt) {
    p.pack_uint64(KvBlockHashInt(k));
    return;
  }
  char b[16];
  for (int i = 0; i < 8; i++) {
    b[i] = static_cast<char>(k.hi >> (56 - 8 * i));
    b[8 + i] = static_cast<char>(k.lo >> (56 - 8 * i));
  }
  p.pack_bin(16);
  p.pack_bin_body(b, 16);
}

void PackStr(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// The elements of a uint array as msgpack-c's pack_uint32 writes each (the
// smallest form: fixint, uint8, uint16, uint32), in bulk: a token array is
// most of a BlockStored's bytes.
void PackUints(StringSink& out, std::span<const uint32_t> v) {
  char chunk[5 * 256];
  size_t n = 0;
  for (uint32_t t : v) {
    if (n > sizeof(chunk) - 5) {
      out.write(chunk, n);
      n = 0;
    }
    if (t < 0x80) {
      chunk[n++] = static_cast<char>(t);
    } else if (t < 0x100) {
      chunk[n++] = static_cast<char>(0xcc);
      chunk[n++] = static_cast<char>(t);
    } else if (t < 0x10000) {
      chunk[n++] = static_cast<char>(0xcd);
      chunk[n++] = static_cast<char>(t >> 8);
      chunk[n++] = static_cast<char>(t);
    } else {
      chunk[n++] = static_cast<char>(0xce);
      chunk[n++] = static_cast<char>(t >> 24);
      chunk[n++] = static_cast<char>(t >> 16);
      chunk[n++] = static_cast<char>(t >> 8);
      chunk[n++] = static_cast<char>(t);
    }
  }
  out.write(chunk, n);
}

void PackEvent(Packer& p, StringSink& out, const KvEvent& e, const KvCodecOptions& o) {
  if (e.kind == KvEventKind::kCleared) {
    p.pack_array(1);
    PackStr(p, "AllBlocksCleared");
    return;
  }
  const std::vector<ChainKey> keys = KvEventBlockKeys(e);
  const std::string medium = KvMediumName(e.medium);
  if (e.kind == KvEventKind::kRemoved) {
    p.pack_array(4);
    PackStr(p, "BlockRemoved");
    p.pack_array(static_cast<uint32_t>(keys.size()));
    for (const ChainKey& k : keys) PackHash(p, k, o.hash);
    PackStr(p, medium);
    p.pack_uint32(e.group);
    return;
  }
  // Trailing fields equal to their defaults (None) are left out.
  const uint32_t fields = e.spec.sliding_window != 0 ? 12 : e.spec.kind != nullptr ? 11 : 10;
  p.pack_array(fields);
  PackStr(p, "BlockStored");
  p.pack_array(static_cast<uint32_t>(keys.size()));
  for (const ChainKey& k : keys) PackHash(p, k, o.hash);
  if (e.has_parent) PackHash(p, e.prev, o.hash);
  else p.pack_nil();
  const bool tokens = !e.salted || o.salted_tokens;
  p.pack_array(tokens ? static_cast<uint32_t>(e.tokens.size()) : 0);
  if (tokens) PackUints(out, e.tokens);
  p.pack_uint32(e.block_tokens);
  p.pack_nil();  // lora_id
  PackStr(p, medium);
  PackStr(p, e.ns);  // lora_name: the namespace (docs/kv-events.md "Namespaces")
  p.pack_nil();      // extra_keys
  p.pack_uint32(e.group);
  if (fields > 10) {
    if (e.spec.kind != nullptr) PackStr(p, e.spec.kind);
    else p.pack_nil();
  }
  if (fields > 11) p.pack_uint32(e.spec.sliding_window);
}

}  // namespace

std::string EncodeKvEventBatch(double ts, std::span<const KvEvent> events, const KvCodecOptions& o) {
  std::string out;
  EncodeKvEventBatch(ts, events, o, &out);
  return out;
}

void EncodeKvEventBatch(double ts, std::span<const KvEvent> events, const KvCodecOptions& o, std::string* out) {
  out->clear();
  size_t need = 16;
  for (const KvEvent& e : events) {  // at most: 17 bytes a hash, 5 a token, the strings, 64 the rest
    need += 64 + e.ns.size() + 5 * e.tokens.size() + (e.block_tokens ? 17 * (e.tokens.size() / e.block_tokens + 1) : 0);
  }
  out->reserve(need);
  StringSink buf{out};
  Packer p(buf);
  p.pack_array(3);
  p.pack_double(ts);
  p.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvEvent& e : events) PackEvent(p, buf, e, o);
  p.pack_int(o.data_parallel_rank);
}

}  // namespace ptstore::storage
