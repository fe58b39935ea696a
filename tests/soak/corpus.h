// The soak's prompts: documents under one shared system prompt, questions on
// each document and follow-ups below each question, so that saves share
// prefixes, split increments and build chains several levels deep. Every
// prompt is a function of (seed, doc, question, follow-ups); its KV bytes are
// tests/storage/kv_fixture.h's Kv(), which checks every loaded byte.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/storage/kv_fixture.h"

namespace ptstore::soak {

class Corpus {
 public:
  static constexpr uint32_t kSystemTokens = 64;
  static constexpr uint32_t kMinDocTokens = 64;
  static constexpr uint32_t kMaxDocTokens = 1536;
  static constexpr uint32_t kQuestions = 8;
  static constexpr uint32_t kMaxFollowUps = 2;

  Corpus(uint64_t seed, uint32_t docs) : seed_(seed), docs_(docs) {}
  uint32_t docs() const { return docs_; }

  // The system prompt and document `d`.
  std::vector<uint32_t> Doc(uint32_t d) const {
    const uint32_t n = kMinDocTokens + static_cast<uint32_t>(Draw(d, 0, 0, 1) % (kMaxDocTokens - kMinDocTokens + 1));
    return storage::testkv::Cat(storage::testkv::RandomTokens(seed_, kSystemTokens),
                                storage::testkv::RandomTokens(Draw(d, 0, 0, 2), n));
  }

  // Question q on document d, then `follow_ups` turns of answer + question.
  std::vector<uint32_t> Prompt(uint32_t d, uint32_t q, uint32_t follow_ups) const {
    std::vector<uint32_t> p = Doc(d);
    const uint32_t question = 8 + static_cast<uint32_t>(Draw(d, q, 0, 3) % 57);
    p = storage::testkv::Cat(std::move(p), storage::testkv::RandomTokens(Draw(d, q, 0, 4), question));
    for (uint32_t f = 1; f <= follow_ups; ++f) {
      p = storage::testkv::Cat(std::move(p), storage::testkv::RandomTokens(Draw(d, q, f, 5), 32));
    }
    return p;
  }

 private:
  uint64_t Draw(uint64_t d, uint64_t q, uint64_t f, uint64_t what) const {
    using storage::testkv::Mix;
    return Mix(Mix(Mix(Mix(seed_) ^ d) ^ (q << 8)) ^ (f << 16) ^ (what << 24));
  }

  uint64_t seed_;
  uint32_t docs_;
};

}  // namespace ptstore::soak
