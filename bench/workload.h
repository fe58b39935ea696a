// The workload of the benchmarks and of ptstore-demo.
//
// QaWorkload: a long-document question-answering workload (WikiQA-like):
// D documents of min_doc..max_doc tokens, Q questions on each. A request is
//   [system prompt (optional, shared by all requests)] [document] [question]
// so every question on a document shares the document's prefix. Everything
// is a pure function of the options (seed included): two processes that make
// a workload with the same options get the same token ids, in the same order.
//
// Token ids and KV bytes come from the test kit's generators
// (tests/testing/generators.h: RandomTokens, and FillKv / VerifyKv, whose
// bytes depend only on (token id, position), so a shared prefix has the
// same KV bytes in every prompt and any load is checked byte-exactly).
//
// Thread safety: everything here is a value or a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/testing/generators.h"

namespace ptstore::bench {

// The kit's generators (tests/testing/generators.h), by the names the
// benchmarks use.
using testing::FillKv;
using testing::KvMismatch;
using testing::RandomTokens;
using testing::SplitMix64;
using testing::VerifyKv;

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

}  // namespace ptstore::bench
