// Workload and KV generators of the benchmarks and of ptstore-demo.
//
// QaWorkload: a long-document question-answering workload (WikiQA-like):
// D documents of min_doc..max_doc tokens, Q questions on each. A request is
//   [system prompt (optional, shared by all requests)] [document] [question]
// so every question on a document shares the document's prefix. Everything
// is a pure function of the options (seed included): two processes that make
// a workload with the same options get the same token ids, in the same order.
//
// KV generator: the "KV cache" of token i of a prompt is bytes_per_token
// pseudo-random bytes that depend only on (token id, position). A prefix
// shared by two prompts therefore has the same KV bytes in both (as a real
// model's would), and any load can be checked byte-exactly without keeping
// the saved bytes around. The generator is counter-based (any token can be
// made on its own) and runs at several GB/s per core.
//
// Thread safety: everything here is a value or a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ptstore::bench {

// splitmix64: a fast, well-mixed 64-bit PRNG (Steele et al.).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [lo, hi] (inclusive); lo <= hi. Deterministic on every
  // platform (unlike std::uniform_int_distribution).
  uint64_t Range(uint64_t lo, uint64_t hi);

 private:
  uint64_t state_;
};

struct QaWorkloadOptions {
  uint32_t docs = 5;
  uint32_t questions = 4;          // per document
  uint32_t min_doc_tokens = 1024;
  uint32_t max_doc_tokens = 4096;
  uint32_t min_question_tokens = 32;
  uint32_t max_question_tokens = 96;
  uint32_t system_tokens = 64;     // 0: no shared system prompt
  uint32_t vocab = 32000;          // token ids are in [0, vocab)
  uint64_t seed = 42;
  // true: the questions of all documents arrive shuffled (users asking about
  // several documents at once); false: document by document.
  bool interleave = true;
};

struct QaRequest {
  uint32_t doc = 0;
  uint32_t question = 0;
  uint32_t system_tokens = 0;      // tokens [0, system_tokens) are the system prompt
  uint32_t doc_tokens = 0;         // then the document's tokens
  std::vector<uint32_t> tokens;    // the whole prompt
};

class QaWorkload {
 public:
  // REQUIRES: min <= max for documents and questions, vocab > 0.
  static QaWorkload Make(const QaWorkloadOptions& options);

  const QaWorkloadOptions& options() const { return options_; }
  // Requests in arrival order.
  const std::vector<QaRequest>& requests() const { return requests_; }
  const std::vector<uint32_t>& doc_lengths() const { return doc_lengths_; }
  uint64_t total_tokens() const;     // sum of prompt lengths
  uint64_t max_request_tokens() const;

 private:
  QaWorkloadOptions options_;
  std::vector<uint32_t> doc_lengths_;
  std::vector<QaRequest> requests_;
};

// `n` token ids in [0, vocab), deterministic from seed.
std::vector<uint32_t> RandomTokens(uint64_t seed, size_t n, uint32_t vocab = 32000);

// Fills out[0, tokens.size() * bytes_per_token) with the KV bytes of
// `tokens`, token k sitting at position first_position + k of its prompt.
void FillKv(std::span<const uint32_t> tokens, uint64_t first_position, uint64_t bytes_per_token, uint8_t* out);

struct KvMismatch {
  uint64_t token_index = 0;  // index into the checked span
  uint64_t byte_offset = 0;  // offset into `data` of the first wrong byte
  uint8_t expected = 0;
  uint8_t actual = 0;
  std::string ToString() const;
};

// Checks data[0, tokens.size() * bytes_per_token) against FillKv's bytes;
// the first mismatch, or nullopt when every byte is right.
std::optional<KvMismatch> VerifyKv(std::span<const uint32_t> tokens, uint64_t first_position,
                                   uint64_t bytes_per_token, const uint8_t* data);

}  // namespace ptstore::bench
