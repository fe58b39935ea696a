#include "tests/soak/worker.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "tests/testing/client.h"

namespace ptstore::soak {

namespace {

using storage::testkv::kBpt;

uint64_t WholeTokens(size_t tokens, uint32_t block_tokens) { return tokens / block_tokens * block_tokens; }

}  // namespace

std::string CheckKv(std::span<const uint32_t> prompt, uint32_t block_tokens, uint64_t n, const uint8_t* data) {
  const uint64_t whole = WholeTokens(prompt.size(), block_tokens);
  if (n > whole) return "returned " + std::to_string(n) + " tokens, more than the prompt's " + std::to_string(whole);
  if (n % block_tokens != 0) return "returned " + std::to_string(n) + " tokens, not whole blocks";
  if (n == 0) return "";
  const std::vector<uint8_t> want = storage::testkv::Kv(prompt, 0, n);
  if (std::memcmp(want.data(), data, want.size()) == 0) return "";
  uint64_t t = 0;
  while (std::memcmp(want.data() + t * kBpt, data + t * kBpt, kBpt) == 0) ++t;
  return "WRONG BYTES: token " + std::to_string(t) + " of " + std::to_string(n) + " differs";
}

std::string Worker::Pick::Name() const {
  return std::string(ns->name) + " doc " + std::to_string(doc) + " q " + std::to_string(question) + " f " +
         std::to_string(follow_ups) + " (" + std::to_string(tokens.size()) + " tokens) on node " + std::to_string(node);
}

Worker::Worker(uint32_t index, uint64_t seed, const Corpus& corpus, const NodeView& nodes, Violations& violations,
               const std::atomic<bool>& stop)
    : index_(index),
      corpus_(corpus),
      nodes_(nodes),
      violations_(violations),
      stop_(stop),
      rng_(storage::testkv::Mix(seed * 7919 + index)),
      conns_(nodes.size()) {}

void Worker::Begin(const std::string& op, const Pick& p) { clock_.Begin(op, p.Name(), tally_); }

void Worker::End() { clock_.End(tally_); }

Worker::Pick Worker::Choose() {
  Pick p;
  p.node = static_cast<uint32_t>(rng_() % nodes_.size());
  p.ns = &kSoakNamespaces[rng_() % 5 == 0 ? 1 : 0];
  // Skewed: a few documents are hot, most are cold.
  const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
  p.doc = std::min(corpus_.docs() - 1, static_cast<uint32_t>(u * u * corpus_.docs()));
  // The last question is the final check's: the workers never save it.
  p.question = static_cast<uint32_t>(rng_() % (Corpus::kQuestions - 1));
  p.follow_ups = rng_() % 10 < 7 ? 0 : 1 + static_cast<uint32_t>(rng_() % Corpus::kMaxFollowUps);
  p.tokens = corpus_.Prompt(p.doc, p.question, p.follow_ups);
  return p;
}

Client* Worker::ClientFor(const Pick& p, uint64_t* epoch) {
  Conn& c = conns_[p.node];
  const NodeView::Node n = nodes_.Get(p.node);
  if (!n.up) {
    c.client.reset();
    ++tally_.skipped_down;
    return nullptr;
  }
  *epoch = n.epoch;
  if (c.client && c.epoch == n.epoch) return c.client.get();
  c.client.reset();
  Begin("connect", p);
  auto client = testing::ConnectTo(n.socket);
  End();
  if (!client.ok()) {
    Failed("connect", p, n.epoch, client.status());
    return nullptr;
  }
  for (const SoakNamespace& ns : kSoakNamespaces) {
    Begin("create_namespace", p);
    auto created = (*client)->CreateNamespace(ns.name, storage::testkv::SmallLayout(ns.block_tokens));
    End();
    if (!created.ok()) {
      Failed("create_namespace", p, n.epoch, created.status());
      return nullptr;
    }
  }
  c.client = std::move(*client);
  c.epoch = n.epoch;
  return c.client.get();
}

void Worker::Failed(const std::string& op, const Pick& p, uint64_t epoch, const Status& s) {
  if (nodes_.ChangedSince(p.node, epoch)) {
    // The node went down or restarted under the call: the fault's error.
    ++tally_.allowed_errors[op + " " + std::string(CodeName(s.code()))];
    conns_[p.node].client.reset();
    return;
  }
  if (s.code() == Code::kResourceExhausted && op != "connect") {
    ++tally_.refused;  // an arena full of pinned data: a refusal, said as such
    return;
  }
  violations_.Add(op + " of " + p.Name() + " failed while that node stayed up: " + s.ToString());
  conns_[p.node].client.reset();
}

void Worker::Check(const std::string& op, const Pick& p, uint64_t n, const uint8_t* data) {
  const std::string wrong = CheckKv(p.tokens, p.ns->block_tokens, n, data);
  if (!wrong.empty()) {
    violations_.Add(op + " of " + p.Name() + ": " + wrong);
    return;
  }
  tally_.Verified(n, kBpt);
}

void Worker::Save(const Pick& p, Client& c, uint64_t epoch) {
  const uint64_t whole = WholeTokens(p.tokens.size(), p.ns->block_tokens);
  const std::vector<uint8_t> kv = storage::testkv::Kv(p.tokens, 0, whole);
  Result<SaveResult> r = SaveResult{};
  if (rng_() % 2 == 0) {
    Begin("save", p);
    r = c.Save(p.ns->name, p.tokens, kv.data(), kv.size());
    End();
  } else {
    // Through a registered buffer (the zero-copy save).
    Begin("save_buffer", p);
    auto buf = c.AllocateBuffer(kv.size());
    if (buf.ok()) {
      std::memcpy(buf->data(), kv.data(), kv.size());
      r = c.Save(p.ns->name, p.tokens, *buf, 0, kv.size());
    } else {
      r = buf.status();
    }
    End();
  }
  if (!r.ok()) return Failed("save", p, epoch, r.status());
  if (r->matched_tokens > whole || r->stored_tokens > whole) {
    violations_.Add("save of " + p.Name() + " says it matched " + std::to_string(r->matched_tokens) + " and stored " +
                    std::to_string(r->stored_tokens) + " of " + std::to_string(whole) + " tokens");
  }
}

void Worker::Load(const Pick& p, Client& c, uint64_t epoch) {
  const uint64_t capacity = p.tokens.size() * kBpt;
  if (rng_() % 3 != 0) {
    std::vector<uint8_t> out(capacity);
    Begin("load", p);
    auto n = c.Load(p.ns->name, p.tokens, out.data(), out.size());
    End();
    if (!n.ok()) return Failed("load", p, epoch, n.status());
    return Check("load", p, *n, out.data());
  }
  Begin("load_buffer", p);
  auto buf = c.AllocateBuffer(capacity);
  Result<uint64_t> n = buf.ok() ? c.Load(p.ns->name, p.tokens, *buf, 0, capacity) : Result<uint64_t>(buf.status());
  End();
  if (!n.ok()) return Failed("load_buffer", p, epoch, n.status());
  Check("load_buffer", p, *n, buf->data());
}

void Worker::PinAndHold(const Pick& p, Client& c, uint64_t epoch) {
  Begin("pin", p);
  auto pin = c.Pin(p.ns->name, p.tokens);
  End();
  if (!pin.ok()) return Failed("pin", p, epoch, pin.status());
  const uint64_t n = pin->tokens();
  std::vector<uint8_t> out(n * kBpt);
  if (Status s = pin->CopyTo(out.data(), out.size()); !s.ok()) return Failed("pin_copy", p, epoch, s);
  Check("pin", p, n, out.data());
  // Held a while: a pinned prefix is not evicted, moved or overwritten.
  std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 4000));
  if (n > 0 && !nodes_.ChangedSince(p.node, epoch)) {
    if (Status s = pin->CopyTo(out.data(), out.size()); !s.ok()) return Failed("pin_copy", p, epoch, s);
    const std::string wrong = CheckKv(p.tokens, p.ns->block_tokens, n, out.data());
    if (!wrong.empty() && !nodes_.ChangedSince(p.node, epoch)) {
      violations_.Add("pinned " + p.Name() + " changed while pinned: " + wrong);
    }
  }
  Begin("release", p);
  Status s = pin->Release();
  End();
  if (!s.ok()) Failed("release", p, epoch, s);
}

void Worker::Lookup(const Pick& p, Client& c, uint64_t epoch) {
  Begin("lookup", p);
  auto r = c.Lookup(p.ns->name, p.tokens);
  End();
  if (!r.ok()) return Failed("lookup", p, epoch, r.status());
  const uint64_t whole = WholeTokens(p.tokens.size(), p.ns->block_tokens);
  if (r->matched_tokens > whole || r->matched_tokens % p.ns->block_tokens != 0) {
    violations_.Add("lookup of " + p.Name() + " matched " + std::to_string(r->matched_tokens) + " tokens");
  }
}

void Worker::Locate(const Pick& p, Client& c, uint64_t epoch) {
  Begin("locate", p);
  auto r = c.LocatePrefix(p.ns->name, p.tokens);
  End();
  if (!r.ok()) return Failed("locate", p, epoch, r.status());
  uint64_t end = 0;
  for (const PrefixSpan& s : r->spans) {
    if (s.end_token <= end) {
      violations_.Add("locate of " + p.Name() + ": spans out of order");
      return;
    }
    end = s.end_token;
  }
  if (end != r->matched_tokens || end > WholeTokens(p.tokens.size(), p.ns->block_tokens)) {
    violations_.Add("locate of " + p.Name() + ": spans end at " + std::to_string(end) + ", matched " +
                    std::to_string(r->matched_tokens));
  }
}

void Worker::Remove(const Pick& p, Client& c, uint64_t epoch) {
  // Mostly a question's subtree; now and then a whole document's.
  std::vector<uint32_t> prefix = rng_() % 10 == 0 ? corpus_.Doc(p.doc) : p.tokens;
  Begin("remove", p);
  auto r = c.Remove(p.ns->name, prefix);
  End();
  // Removing what is not stored (any more) is NotFound, as rm says ENOENT.
  if (r.status().code() == Code::kNotFound && r.status().message().find("is not stored") != std::string::npos) {
    ++tally_.ops["remove_not_stored"];
    return;
  }
  if (!r.ok()) Failed("remove", p, epoch, r.status());
}

void Worker::Stats(const Pick& p, Client& c, uint64_t epoch) {
  Begin("stats", p);
  auto s = c.Stats();
  End();
  if (!s.ok()) return Failed("stats", p, epoch, s.status());
  if (s->used_bytes > s->arena_bytes) {
    violations_.Add("node " + std::to_string(p.node) + " uses " + std::to_string(s->used_bytes) + " bytes of an arena of " +
                    std::to_string(s->arena_bytes));
  }
}

void Worker::Run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    const Pick p = Choose();
    uint64_t epoch = 0;
    Client* c = ClientFor(p, &epoch);
    if (c == nullptr) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const uint32_t r = static_cast<uint32_t>(rng_() % 100);
    if (r < 30) {
      Save(p, *c, epoch);
    } else if (r < 70) {
      Load(p, *c, epoch);
    } else if (r < 80) {
      PinAndHold(p, *c, epoch);
    } else if (r < 90) {
      Lookup(p, *c, epoch);
    } else if (r < 95) {
      Locate(p, *c, epoch);
    } else if (r < 98) {
      Remove(p, *c, epoch);
    } else {
      Stats(p, *c, epoch);
    }
  }
  conns_.clear();
}

}  // namespace ptstore::soak
