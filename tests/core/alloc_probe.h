// Replaces the global operator new (in alloc_probe.cc, linked into a test
// binary) so that a test can see the largest single allocation made while
// decoding a hostile message.
#pragma once

#include <cstddef>

namespace ptstore::testing {

// Records the largest allocation made while it lives.
class AllocProbe {
 public:
  AllocProbe();
  ~AllocProbe();
  size_t max() const;
};

}  // namespace ptstore::testing
