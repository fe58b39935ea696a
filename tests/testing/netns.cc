#include "tests/testing/netns.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace ptstore::testing {

namespace {
constexpr char kIp[] = "/usr/sbin/ip";

// Runs `ip args...` quietly; the exit status.
int Ip(const std::vector<std::string>& args) {
  std::string cmd = kIp;
  for (const std::string& a : args) cmd += " " + a;
  cmd += " >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

Status Must(const std::vector<std::string>& args) {
  if (Ip(args) == 0) return Status::OK();
  std::string cmd = "ip";
  for (const std::string& a : args) cmd += " " + a;
  return Internal("'" + cmd + "' failed");
}
}  // namespace

NetnsLab::NetnsLab() {
  // Short names: interface names have at most 15 characters.
  const unsigned id = static_cast<unsigned>(getpid()) % 100000;
  tag_ = "pt" + std::to_string(id);
  bridge_ = "b" + tag_;
}

NetnsLab::~NetnsLab() {
  for (const std::string& n : namespaces_) Ip({"netns", "del", n});
  for (const std::string& l : links_) Ip({"link", "del", l});
  if (bridge_made_) Ip({"link", "del", bridge_});
}

std::string NetnsLab::WhyNot() {
  if (geteuid() != 0) return "network namespaces need root";
  if (access(kIp, X_OK) != 0) return std::string(kIp) + " is missing (iproute2)";
  const std::string probe = "ptprobe" + std::to_string(getpid() % 100000);
  if (Ip({"netns", "add", probe}) != 0) return "cannot create a network namespace here";
  Ip({"netns", "del", probe});
  return "";
}

Status NetnsLab::Create(size_t hosts) {
  // A subnet per lab, so that two labs at once (two test binaries) differ.
  const std::string net = "10.213." + std::to_string(getpid() % 250 + 1) + ".";
  net_ = net;
  PTS_RETURN_IF_ERROR(Must({"link", "add", bridge_, "type", "bridge"}));
  bridge_made_ = true;
  PTS_RETURN_IF_ERROR(Must({"link", "set", bridge_, "up"}));
  for (size_t i = 0; i < hosts; ++i) {
    const std::string ns = tag_ + "n" + std::to_string(i);
    const std::string outside = tag_ + "h" + std::to_string(i);
    const std::string inside = tag_ + "v" + std::to_string(i);
    PTS_RETURN_IF_ERROR(Must({"netns", "add", ns}));
    namespaces_.push_back(ns);
    PTS_RETURN_IF_ERROR(Must({"link", "add", outside, "type", "veth", "peer", "name", inside}));
    links_.push_back(outside);
    PTS_RETURN_IF_ERROR(Must({"link", "set", inside, "netns", ns}));
    PTS_RETURN_IF_ERROR(Must({"link", "set", outside, "master", bridge_}));
    PTS_RETURN_IF_ERROR(Must({"link", "set", outside, "up"}));
    const std::string addr = net + std::to_string(i + 1);
    PTS_RETURN_IF_ERROR(Must({"-n", ns, "addr", "add", addr + "/24", "dev", inside}));
    PTS_RETURN_IF_ERROR(Must({"-n", ns, "link", "set", inside, "up"}));
    PTS_RETURN_IF_ERROR(Must({"-n", ns, "link", "set", "lo", "up"}));
    addrs_.push_back(addr);
  }
  return Status::OK();
}

Result<std::string> NetnsLab::BridgeAddress() {
  if (!bridge_made_) return Internal("NetnsLab::BridgeAddress before Create");
  if (bridge_addr_.empty()) {
    PTS_RETURN_IF_ERROR(Must({"addr", "add", net_ + "254/24", "dev", bridge_}));
    bridge_addr_ = net_ + "254";
  }
  return bridge_addr_;
}

std::vector<std::string> NetnsLab::Wrapper(size_t i) const { return {kIp, "netns", "exec", namespaces_[i]}; }

Status NetnsLab::Cut(size_t i) { return Must({"link", "set", links_[i], "down"}); }
Status NetnsLab::Heal(size_t i) { return Must({"link", "set", links_[i], "up"}); }

}  // namespace ptstore::testing
