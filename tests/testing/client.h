// Small pieces shared by the tests that talk to a real ptstored through
// libptstore (tests/testing/daemon.h starts it; prompts and KV bytes:
// tests/testing/generators.h).
#pragma once

#include <cstdint>
#include <memory>
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

}  // namespace ptstore::testing
