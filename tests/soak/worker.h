// A soak worker: a thread making random client calls (save, load into
// memory or a registered buffer, pin and hold, lookup, locate, remove,
// stats) on random nodes, checking every returned byte and sorting every
// error into the fault's (its node died under the call), a refusal
// (ResourceExhausted) or a violation.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ptstore/client.h"
#include "tests/soak/corpus.h"
#include "tests/soak/soak_state.h"

namespace ptstore::soak {

// The soak's namespaces: the fixture's small layout with two block sizes.
struct SoakNamespace {
  const char* name;
  uint32_t block_tokens;
};
inline constexpr SoakNamespace kSoakNamespaces[] = {{"soak", 4}, {"soak16", 16}};

// Checks `n` loaded tokens of `prompt` at `data` against the fixture's KV;
// "" when right, else what is wrong.
std::string CheckKv(std::span<const uint32_t> prompt, uint32_t block_tokens, uint64_t n, const uint8_t* data);

class Worker {
 public:
  Worker(uint32_t index, uint64_t seed, const Corpus& corpus, const NodeView& nodes, Violations& violations,
         const std::atomic<bool>& stop);
  void Run();  // until stop

  const WorkerTally& tally() const { return tally_; }
  const CallClock& clock() const { return clock_; }

 private:
  struct Conn {
    std::unique_ptr<Client> client;
    uint64_t epoch = 0;
  };
  struct Pick {
    uint32_t node = 0;
    const SoakNamespace* ns = nullptr;
    uint32_t doc = 0, question = 0, follow_ups = 0;
    std::vector<uint32_t> tokens;
    std::string Name() const;
  };

  Pick Choose();
  // A client of p.node in its current epoch (connecting, namespaces created),
  // or null: the node is down, or the connection failed (sorted by Failed).
  Client* ClientFor(const Pick& p, uint64_t* epoch);
  void Failed(const std::string& op, const Pick& p, uint64_t epoch, const Status& s);
  void Check(const std::string& op, const Pick& p, uint64_t n, const uint8_t* data);
  void Begin(const std::string& op, const Pick& p);
  void End();

  void Save(const Pick& p, Client& c, uint64_t epoch);
  void Load(const Pick& p, Client& c, uint64_t epoch);
  void PinAndHold(const Pick& p, Client& c, uint64_t epoch);
  void Lookup(const Pick& p, Client& c, uint64_t epoch);
  void Locate(const Pick& p, Client& c, uint64_t epoch);
  void Remove(const Pick& p, Client& c, uint64_t epoch);
  void Stats(const Pick& p, Client& c, uint64_t epoch);

  const uint32_t index_;
  const Corpus& corpus_;
  const NodeView& nodes_;
  Violations& violations_;
  const std::atomic<bool>& stop_;
  std::mt19937_64 rng_;
  std::vector<Conn> conns_;
  WorkerTally tally_;
  CallClock clock_;
};

}  // namespace ptstore::soak
