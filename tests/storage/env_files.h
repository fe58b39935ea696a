// Shared by the Env tests (env_test, fault_env_test): strings as bytes to
// write, and whole files read back.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <gtest/gtest.h>

#include "storage/ssd_format/env.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage::testenv {

inline std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Create if missing, writable.
inline OpenOptions Create() {
  OpenOptions o;
  o.create = true;
  o.writable = true;
  return o;
}

// The whole file. When it cannot be read the test fails and the result is
// "<error>", which no expected content (an empty file included) matches.
inline std::string ReadAll(File* f) {
  Result<uint64_t> size = f->Size();
  EXPECT_OK(size);
  if (!size.ok()) return "<error>";
  std::string out(*size, '\0');
  Result<size_t> n = f->ReadAt(0, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  EXPECT_OK(n);
  if (!n.ok()) return "<error>";
  out.resize(*n);
  return out;
}

// The file as a fresh process would find it: through the real Env (not a
// FaultEnv that wrote it).
inline std::string OnDisk(const std::string& path) {
  auto f = Env::Default()->Open(path, OpenOptions{});
  EXPECT_OK(f);
  return f.ok() ? ReadAll(f->get()) : "<error>";
}

}  // namespace ptstore::storage::testenv
