// Separate hosts on one machine for tests: network namespaces joined by
// veth pairs to a bridge in the test's own namespace, created by the test and
// removed when it ends. Traffic stays inside them.
//
//   NetnsLab lab;                  // root only; ok() false elsewhere
//   lab.Create(3);                 // hosts 10.213.N.1 .. .3
//   lab.Wrapper(i)                 // {"/usr/sbin/ip", "netns", "exec", name}
//   lab.Cut(2); lab.Heal(2);       // take host 2's link down / up
#pragma once

#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::testing {

class NetnsLab {
 public:
  NetnsLab();
  ~NetnsLab();  // removes everything it created
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  // Why the lab cannot run here (not root, no `ip`, namespaces refused);
  // empty when it can.
  static std::string WhyNot();
  Status Create(size_t hosts);
  const std::string& host(size_t i) const { return addrs_[i]; }
  std::vector<std::string> hosts() const { return addrs_; }
  std::vector<std::string> Wrapper(size_t i) const;
  // An address of the test's own namespace on the lab's bridge (made at
  // the first call): the hosts reach a server the test runs there (etcd),
  // and a host that is cut off does not.
  Result<std::string> BridgeAddress();
  // Partition host i from the others (its veth goes down), and back.
  Status Cut(size_t i);
  Status Heal(size_t i);

 private:
  std::string tag_;  // unique per lab: names of namespaces and links
  std::string bridge_;
  std::vector<std::string> namespaces_;
  std::vector<std::string> links_;  // the bridge-side veth ends
  std::vector<std::string> addrs_;
  std::string net_;  // "10.213.N."
  std::string bridge_addr_;
  bool bridge_made_ = false;
};

}  // namespace ptstore::testing
