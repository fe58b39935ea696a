// What the cluster tests do with KV and nodes: save a prompt's checkable
// bytes (tests/storage/kv_fixture.h) through a node, load the longest stored
// prefix through a node checking every byte, connect to every node.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "ptstore/client.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/cluster.h"

namespace ptstore::testing {

inline constexpr char kNs[] = "kv";

// Loads the longest stored prefix of `prompt` through `c` and checks its
// bytes; returns the tokens loaded.
inline uint64_t LoadAndCheck(Client& c, const std::vector<uint32_t>& prompt) {
  using storage::testkv::kBpt;
  std::vector<uint8_t> out(prompt.size() * kBpt);
  auto n = c.Load(kNs, prompt, out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (!n.ok()) return 0;
  if (*n > 0) {
    const auto want = storage::testkv::Kv(prompt, 0, *n);
    EXPECT_EQ(0, std::memcmp(out.data(), want.data(), want.size())) << "bytes differ";
  }
  return *n;
}

inline void SaveKv(Client& c, const std::vector<uint32_t>& prompt) {
  auto kv = storage::testkv::Kv(prompt, 0, prompt.size());
  auto r = c.Save(kNs, prompt, kv.data(), kv.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

// A client of every node of `cluster`, each with namespace kNs created
// (the small test layout), appended to `clients`.
inline void ConnectEach(TestCluster& cluster, std::vector<std::unique_ptr<Client>>* clients) {
  for (size_t i = 0; i < cluster.size(); ++i) {
    auto c = cluster.Connect(i);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->CreateNamespace(kNs, storage::testkv::SmallLayout()).ok());
    clients->push_back(std::move(*c));
  }
}

// Every node's log on stderr (for a test that failed).
inline void PrintLogs(TestCluster& cluster) {
  for (size_t k = 0; k < cluster.size(); ++k) {
    std::cerr << "=== ptstored node " << k << " log\n" << cluster.node(k).ReadLog();
  }
}

}  // namespace ptstore::testing
