// The soak's small configuration in the suite (the long one: scripts/soak).
// Each run is a real cluster under random calls and node faults; it passes
// only when no promise broke (tests/soak/soak.h) and the run did what a soak
// must: faults made, every faulted node back, loads checked, hits.
#include <gtest/gtest.h>

#include <iostream>

#include "tests/soak/soak.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::soak {
namespace {

void ExpectASoakWithoutViolations(SoakOptions o) {
  o.progress = [](const std::string& line) { std::cerr << line << std::endl; };
  auto r = RunSoak(o);
  ASSERT_OK(r);
  std::cerr << r->Summary();
  EXPECT_TRUE(r->ok()) << r->Summary();
  // A soak that did nothing proves nothing: its faults were made (it goes
  // on until they were), and every faulted node came back.
  const uint64_t faults = r->faults["kill"] + r->faults["term"] + r->faults["pause"];
  EXPECT_GE(faults, o.min_faults);
  EXPECT_EQ(r->faults["restart"] + r->faults["resume"], faults);
  EXPECT_GT(r->loads_verified, 200u);
  EXPECT_GT(r->hits, 50u);
  EXPECT_EQ(r->final_prompts_checked, uint64_t{o.nodes} * 6);
}

// The suite's configuration: 3 nodes, 12 s of calls, a fault every 0.8 s on
// average, at least 6 faults.
SoakOptions Small(const std::string& data_path, uint64_t seed) {
  SoakOptions o;
  o.seconds = 12;
  o.data_path = data_path;
  o.fault_every_ms = 800;
  o.min_faults = 6;
  o.seed = seed;
  return o;
}

TEST(SoakTest, TcpClusterUnderFaultsBreaksNoPromise) { ExpectASoakWithoutViolations(Small("tcp", 11)); }

TEST(SoakTest, RmaClusterUnderFaultsBreaksNoPromise) { ExpectASoakWithoutViolations(Small("rma", 12)); }

TEST(SoakTest, BadOptionsAreRefusedByName) {
  SoakOptions o;
  o.nodes = 1;
  EXPECT_NE(RunSoak(o).status().message().find("at least 2 nodes"), std::string::npos);
  o.nodes = 3;
  o.data_path = "udp";
  EXPECT_NE(RunSoak(o).status().message().find("udp"), std::string::npos);
}

}  // namespace
}  // namespace ptstore::soak
