// Extended attributes of a mount (ptstore(7)): read-only facts about
// increments and namespaces for tools (`getfattr -d -m user.ptstore`).
//
// On increment directories and their kv files:
//   user.ptstore.tokens       tokens in the increment
//   user.ptstore.bytes        its bytes (= size of kv)
//   user.ptstore.start_token  depth of its first token in the prefix
//   user.ptstore.owner        node id of its tensor's owner (TensorId::owner)
//   user.ptstore.tier         dram | ssd | dram+ssd
//   user.ptstore.hits         lookups/loads that used it
//   user.ptstore.replicas     nodes other than its owner holding its bytes (what
//                             ptstore-ls -w lists, less the owner)
//   user.ptstore.chain_key    its chain key (the directory's name)
//   user.ptstore.cache_class  owned | replica
// On namespace directories:
//   user.ptstore.layout       the layout (settable while nothing is stored)
//   user.ptstore.bytes        bytes stored in the namespace on this node
//   user.ptstore.prefixes     increments stored in it
//   user.ptstore.quota.dram   its DRAM quota on this node, in bytes (0: none);
//                             settable by its owner or root: a size such as
//                             4GiB (ptstore/quota.h); removing it is 0
//   user.ptstore.quota.ssd    its SSD quota, the same way
//   user.ptstore.used.dram    the bytes counted against its DRAM quota
//   user.ptstore.used.ssd     the bytes counted against its SSD quota
// On the root of the mount:
//   user.ptstore.fuse_requests  requests the daemon has served since the mount
//   user.ptstore.socket         the ptstored socket it is a client of
// Values are text without a trailing newline.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ptstore/quota.h"
#include "ptstore/types.h"

namespace ptstore::fs {

inline constexpr const char* kXattrPrefix = "user.ptstore.";
inline constexpr const char* kLayoutXattr = "user.ptstore.layout";
inline constexpr const char* kQuotaXattrPrefix = "user.ptstore.quota.";  // + "dram" / "ssd"

// Names and values of an increment's attributes, in listing order.
// `where` (Client::Locate of its key) gives user.ptstore.replicas; without
// it that value is empty (listings need the names only).
std::vector<std::pair<std::string, std::string>> IncrementXattrs(const PrefixNodeInfo& node,
                                                                 const IncrementLocation* where);
// Copies of an increment on nodes other than its owner.
uint64_t ReplicaCount(const IncrementLocation& where);
// Names and values of a namespace's attributes.
// With `quota` (Client::Quotas of it), also its quotas and use.
std::vector<std::pair<std::string, std::string>> NamespaceXattrs(const NamespaceInfo& ns,
                                                                 const NamespaceQuota* quota = nullptr);
// The tier a user.ptstore.quota.TIER name sets, if it is one.
std::optional<QuotaTier> QuotaXattrTier(const std::string& name);

// The value of `name` in `attrs`, if there.
std::optional<std::string> FindXattr(const std::vector<std::pair<std::string, std::string>>& attrs,
                                     const std::string& name);
// The NUL-separated list listxattr returns.
std::string XattrList(const std::vector<std::pair<std::string, std::string>>& attrs);

}  // namespace ptstore::fs
