// A client of etcd's v3 API through its JSON gateway (HTTP/1.1 POSTs of
// JSON to /v3/..., keys and values base64), over libcurl. Only what the
// cluster's membership needs (storage/cluster/etcd_membership.h): leases, a
// create-or-same put, a prefix range, a delete, and a watch stream.
//
// An etcd URL names one or more endpoints and a key prefix:
//
//     etcd://HOST:PORT[,HOST:PORT...]/PREFIX
//
// Each call tries the endpoints in turn, starting with the last one that
// answered, and fails Unavailable (naming every endpoint and why) when none
// answers within the call's timeout. Answers that are not the JSON etcd
// sends are ProtocolError; etcd's own errors ({"error": ...}) are
// Unavailable when etcd says it has no leader, otherwise Internal with
// etcd's message.
//
// Thread safety: one EtcdClient may be used by several threads at once
// (each call uses its own curl handle); Watch blocks its caller until the
// stream ends or CancelWatches() is called from another thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "ptstore/status.h"

namespace ptstore::storage {

// Whether `cluster` (--cluster, [cluster] file) names etcd, not a file.
inline bool IsEtcdUrl(std::string_view cluster) { return cluster.substr(0, 7) == "etcd://"; }

struct EtcdUrl {
  std::vector<std::string> endpoints;  // "host:port"
  std::string prefix;                  // "/PREFIX/" (leading and trailing '/')

  // InvalidArgument naming the URL and what is wrong: another scheme, no
  // endpoint, a bad port, an empty prefix.
  static Result<EtcdUrl> Parse(std::string_view url);
  std::string ToString() const;
};

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  int64_t revision = 0;  // the store's revision the answer is at
};

// One message of a watch stream.
struct EtcdWatchEvent {
  int64_t revision = 0;   // header revision of the message
  size_t events = 0;      // changes it reports (0: a created/progress message)
  bool canceled = false;  // etcd ended the watch (e.g. its revision was compacted)
  int64_t compact_revision = 0;
};

// The sockets of the watches in progress, so that CancelWatches can end them.
struct EtcdWatchSockets {
  core::Mutex mu;
  uint64_t generation GUARDED_BY(mu) = 0;  // CancelWatches calls so far
  std::set<int> fds GUARDED_BY(mu);
};

class EtcdClient {
 public:
  // `timeout_ms` bounds each unary call (connect included).
  EtcdClient(EtcdUrl url, int timeout_ms);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const EtcdUrl& url() const { return url_; }

  // A lease of `ttl_s` seconds: its id.
  Result<int64_t> GrantLease(int64_t ttl_s);
  // Renews a lease: the TTL left, 0 when etcd no longer knows it (expired).
  Result<int64_t> KeepAlive(int64_t lease);
  // Revokes a lease: every key attached to it is deleted.
  Status RevokeLease(int64_t lease);

  // Puts key=value under `lease` unless the key exists with a value for
  // which `same(value)` is false: then AlreadyExists with that value in the
  // message (so that a caller can name who holds it).
  Status PutIfAbsentOrSame(const std::string& key, const std::string& value, int64_t lease,
                           const std::function<bool(const std::string&)>& same);
  // Every key starting with `prefix`, sorted by key.
  Result<EtcdRange> RangePrefix(const std::string& prefix);
  Status Delete(const std::string& key);

  // Watches every key starting with `prefix` from `start_revision` on,
  // calling `on_message` for each message etcd streams; returns when the
  // stream ends (etcd stopped, the connection broke: Unavailable), when
  // on_message returns false, or after CancelWatches (Aborted). An etcd
  // that stops answering without closing (SIGSTOP, a partition) keeps a
  // watch open: whoever sees unary calls fail calls CancelWatches.
  // `generation` is WatchGeneration() as read before the caller last
  // checked whether to stop: a CancelWatches since then ends this watch too.
  Status Watch(const std::string& prefix, int64_t start_revision,
               const std::function<bool(const EtcdWatchEvent&)>& on_message, uint64_t generation) EXCLUDES(watches_.mu);
  // Ends every Watch in progress or begun with an older generation.
  void CancelWatches() EXCLUDES(watches_.mu);
  uint64_t WatchGeneration() EXCLUDES(watches_.mu);

 private:
  Result<std::string> Post(const std::string& path, const std::string& body);

  const EtcdUrl url_;
  const int timeout_ms_;
  std::atomic<size_t> preferred_{0};  // the endpoint that answered last
  EtcdWatchSockets watches_;
};

// Base64 (RFC 4648, with padding), as etcd's gateway wants bytes.
std::string Base64Encode(std::string_view bytes);
Result<std::string> Base64Decode(std::string_view text);
// The key just past every key starting with `prefix` (etcd's range_end).
std::string PrefixEnd(std::string prefix);

}  // namespace ptstore::storage
