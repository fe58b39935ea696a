#include "bench/workload.h"

#include <algorithm>

namespace ptstore::bench {

QaWorkload QaWorkload::Make(const QaWorkloadOptions& o) {
  QaWorkload w;
  w.options_ = o;
  SplitMix64 rng(o.seed);
  const std::vector<uint32_t> system = RandomTokens(rng.Next(), o.system_tokens, o.vocab);
  std::vector<std::vector<uint32_t>> docs;
  for (uint32_t d = 0; d < o.docs; ++d) {
    const auto len = static_cast<uint32_t>(rng.Range(o.min_doc_tokens, o.max_doc_tokens));
    w.doc_lengths_.push_back(len);
    docs.push_back(RandomTokens(rng.Next(), len, o.vocab));
  }
  for (uint32_t d = 0; d < o.docs; ++d) {
    for (uint32_t q = 0; q < o.questions; ++q) {
      const auto qlen = static_cast<uint32_t>(rng.Range(o.min_question_tokens, o.max_question_tokens));
      QaRequest r;
      r.doc = d;
      r.question = q;
      r.system_tokens = o.system_tokens;
      r.doc_tokens = w.doc_lengths_[d];
      r.tokens.reserve(system.size() + docs[d].size() + qlen);
      r.tokens.insert(r.tokens.end(), system.begin(), system.end());
      r.tokens.insert(r.tokens.end(), docs[d].begin(), docs[d].end());
      const std::vector<uint32_t> question = RandomTokens(rng.Next(), qlen, o.vocab);
      r.tokens.insert(r.tokens.end(), question.begin(), question.end());
      w.requests_.push_back(std::move(r));
    }
  }
  if (o.interleave) {
    // Fisher-Yates with our own generator: the same order on every platform.
    for (size_t i = w.requests_.size(); i > 1; --i) {
      std::swap(w.requests_[i - 1], w.requests_[rng.Range(0, i - 1)]);
    }
  }
  return w;
}

uint64_t QaWorkload::total_tokens() const {
  uint64_t n = 0;
  for (const auto& r : requests_) n += r.tokens.size();
  return n;
}

uint64_t QaWorkload::max_request_tokens() const {
  uint64_t n = 0;
  for (const auto& r : requests_) n = std::max<uint64_t>(n, r.tokens.size());
  return n;
}

}  // namespace ptstore::bench
