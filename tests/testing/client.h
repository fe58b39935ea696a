// Small pieces shared by the tests that talk to a real ptstored through
// libptstore (tests/testing/daemon.h starts it).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ptstore/client.h"

namespace ptstore::testing {

// A client of the server listening on `socket`.
inline Result<std::unique_ptr<Client>> ConnectTo(const std::string& socket) {
  ClientOptions o;
  o.socket_path = socket;
  return Client::Connect(o);
}

// `n` token ids in [0, 32000), a function of `seed`.
inline std::vector<uint32_t> Tokens(size_t n, uint32_t seed) {
  std::vector<uint32_t> t(n);
  std::mt19937 rng(seed);
  for (auto& x : t) x = rng() % 32000;
  return t;
}

}  // namespace ptstore::testing
