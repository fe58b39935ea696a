// Cluster membership: which ptstored nodes exist and where they listen.
//
// Every ptstored of a cluster reads the same cluster file. Two forms:
//
//  * TOML (the file name ends in ".toml", or its first line that is neither
//    blank nor a '#' comment contains '=', starts with "[[", or starts with
//    '[' and has no ':' -- "[fe80::1]:7400" is a node-list line):
//
//        secret_file = "/etc/ptstore/secret"   # optional
//        [[node]]
//        id = 0
//        address = "10.0.0.1:7400"
//
//    Only the keys shown are allowed; unknown keys are errors.
//
//  * A plain node list (anything else): one "host[:port]" per line, ids 0, 1,
//    2, ... in line order, port 7400 when absent; '#' starts a comment, blank
//    lines are skipped. The output of `scontrol show hostnames
//    "$SLURM_JOB_NODELIST"` is such a list.
//
// Addresses are "host:port", "host" (port 7400), or "[v6addr]:port". Errors
// name the file and the line (node list) or the [[node]] entry (TOML):
// duplicate ids or addresses, a bad or missing port, a missing id/address, ids
// >= 2^24 (node ids are the top 24 bits of a TensorId), no nodes at all.
//
// Thread safety: a Membership is an immutable value once loaded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::core {

inline constexpr uint16_t kDefaultClusterPort = 7400;
inline constexpr uint32_t kMaxNodeId = (1u << 24) - 1;

struct Member {
  uint32_t node_id = 0;
  std::string host;
  uint16_t port = kDefaultClusterPort;

  // "host:port", or "[host]:port" when the host contains ':'.
  std::string Address() const;
  bool operator==(const Member&) const = default;
};

// Parses "host", "host:port" or "[v6]:port". `what` names the address in errors.
Result<Member> ParseMemberAddress(std::string_view text, std::string_view what);

class Membership {
 public:
  // Reads `path` and parses it in the form its name or content selects.
  static Result<Membership> Load(const std::string& path);
  // Form chosen from `origin`'s extension (".toml") or the content; `origin`
  // names the text in errors.
  static Result<Membership> Parse(std::string_view text, std::string_view origin);
  static Result<Membership> ParseToml(std::string_view text, std::string_view origin);
  static Result<Membership> ParseNodeList(std::string_view text, std::string_view origin);
  // A member list from elsewhere (etcd: storage/cluster/etcd_membership.h), checked
  // as a file's is; `origin` names where it came from in errors.
  static Result<Membership> FromMembers(std::vector<Member> members, std::string_view origin);

  // Sorted by node id; never empty.
  const std::vector<Member>& members() const { return members_; }
  std::vector<uint32_t> node_ids() const;
  size_t size() const { return members_.size(); }
  // nullptr when no member has that id.
  const Member* Find(uint32_t node_id) const;
  // This node's entry: NotFound naming the file when `node_id` is not a member.
  Result<Member> Self(uint32_t node_id) const;
  // TOML `secret_file`, empty when absent (and always for a node list).
  const std::string& secret_file() const { return secret_file_; }

 private:
  // Sorts, then checks ids and addresses are unique and there is a member.
  static Result<Membership> Build(std::vector<Member> members, std::vector<std::string> where,
                                  std::string secret_file, std::string_view origin);

  std::string origin_;
  std::vector<Member> members_;
  std::string secret_file_;
};

}  // namespace ptstore::core
