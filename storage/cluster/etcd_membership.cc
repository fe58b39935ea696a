#include "storage/cluster/etcd_membership.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "core/logging.h"

namespace ptstore::storage {

using nlohmann::json;

namespace {

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string EntryValue(const EtcdMembershipOptions& o) {
  return json{{"id", o.self.node_id}, {"address", o.self.Address()}, {"incarnation", Hex64(o.incarnation)}}.dump();
}

// The address an entry names, empty when it is not an entry's JSON.
std::string AddressOf(const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("address") || !j["address"].is_string()) return "";
  return j["address"].get<std::string>();
}

// One entry: its member, or why it is skipped.
Result<core::Member> ParseEntry(const std::string& key_suffix, const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("the value is not JSON");
  if (!j.contains("id") || !j["id"].is_number_unsigned()) return InvalidArgument("no unsigned \"id\"");
  const uint64_t id = j["id"].get<uint64_t>();
  if (id > core::kMaxNodeId) return InvalidArgument("id " + std::to_string(id) + " is past the largest node id");
  if (key_suffix != std::to_string(id)) {
    return InvalidArgument("id " + std::to_string(id) + " is not the key's (" + key_suffix + ")");
  }
  if (!j.contains("address") || !j["address"].is_string()) return InvalidArgument("no string \"address\"");
  PTS_ASSIGN_OR_RETURN(core::Member m, core::ParseMemberAddress(j["address"].get<std::string>(), "its address"));
  if (m.port == 0) return InvalidArgument("its address has port 0");
  m.node_id = static_cast<uint32_t>(id);
  return m;
}

}  // namespace

EtcdMembership::EtcdMembership(const EtcdMembershipOptions& options, EtcdUrl url)
    : options_(options),
      members_prefix_(url.prefix + "members/"),
      own_key_(members_prefix_ + std::to_string(options.self.node_id)),
      own_value_(EntryValue(options)),
      client_(std::make_unique<EtcdClient>(std::move(url), options.timeout_ms)) {}

Result<std::unique_ptr<EtcdMembership>> EtcdMembership::Join(const EtcdMembershipOptions& options,
                                                             core::Membership* initial) {
  PTS_ASSIGN_OR_RETURN(EtcdUrl url, EtcdUrl::Parse(options.url));
  if (options.self.port == 0) {
    return InvalidArgument("etcd membership: this node's address " + options.self.Address() +
                           " has no port (set [cluster] advertise or --advertise HOST:PORT)");
  }
  if (options.lease_ttl_s < 2) {
    return InvalidArgument("etcd membership: lease_ttl_s " + std::to_string(options.lease_ttl_s) + " is below 2");
  }
  std::unique_ptr<EtcdMembership> m(new EtcdMembership(options, std::move(url)));
  // An etcd electing a leader (one of its members just died) answers
  // nothing for a second or two: keep trying for a while before giving up.
  const int patience_ms = 2 * options.lease_ttl_s * 1000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(patience_ms);
  Status st;
  Result<EtcdRange> range = Unavailable("not asked");
  for (int attempt = 0;; ++attempt) {
    st = m->Register();
    if (st.ok()) {
      range = m->client_->RangePrefix(m->members_prefix_);
      st = range.status();
    }
    if (st.ok() || st.code() != Code::kUnavailable || std::chrono::steady_clock::now() >= deadline) break;
    if (attempt == 0) {
      PTS_WARN("cluster", m->url() << " does not answer yet (" << st.message() << "): trying for up to "
                                   << patience_ms / 1000 << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!st.ok()) return st.WithContext("joining " + m->url());
  *initial = m->ToMembership(*range);
  m->last_ = initial->members();
  PTS_INFO("cluster", "registered in " << m->url() << " as node " << options.self.node_id << " at "
                                        << options.self.Address() << " (lease " << options.lease_ttl_s << " s); "
                                        << initial->size() << " members");
  return m;
}

EtcdMembership::~EtcdMembership() { Stop(); }

Status EtcdMembership::Register() {
  PTS_ASSIGN_OR_RETURN(int64_t lease, client_->GrantLease(options_.lease_ttl_s));
  const std::string mine = options_.self.Address();
  Status st = client_->PutIfAbsentOrSame(own_key_, own_value_, lease,
                                         [&](const std::string& held) { return AddressOf(held) == mine; });
  if (!st.ok()) {
    (void)client_->RevokeLease(lease);
    if (st.code() == Code::kAlreadyExists) {
      return AlreadyExists("node id " + std::to_string(options_.self.node_id) + " is registered by another node (" +
                           st.message() + "); this one is at " + mine + ": give each node its own id");
    }
    return st;
  }
  {
    core::MutexLock lk(mu_);
    lease_ = lease;
  }
  counters_.registrations++;
  return Status::OK();
}

core::Membership EtcdMembership::ToMembership(const EtcdRange& range) {
  std::map<uint32_t, core::Member> by_id;
  std::map<std::string, uint32_t> by_address;
  auto skip = [&](const EtcdKeyValue& kv, const std::string& why) {
    counters_.bad_entries++;
    if (warned_.emplace(kv.key, kv.mod_revision).second) {
      PTS_WARN("cluster", url() << ": entry " << kv.key << " skipped: " << why);
    }
  };
  by_id[options_.self.node_id] = options_.self;
  by_address[options_.self.Address()] = options_.self.node_id;
  for (const EtcdKeyValue& kv : range.kvs) {
    Result<core::Member> m = ParseEntry(kv.key.substr(members_prefix_.size()), kv.value);
    if (!m.ok()) {
      skip(kv, m.status().message());
      continue;
    }
    if (m->node_id == options_.self.node_id) {
      if (m->Address() != options_.self.Address()) skip(kv, "it names this node's id at another address");
      continue;
    }
    auto [it, fresh] = by_address.emplace(m->Address(), m->node_id);
    if (!fresh) {
      skip(kv, "address " + m->Address() + " is node " + std::to_string(it->second) + "'s");
      continue;
    }
    by_id[m->node_id] = *m;
  }
  std::vector<core::Member> members;
  for (auto& [id, m] : by_id) members.push_back(m);
  // Ids and addresses are unique by construction: this cannot fail.
  Result<core::Membership> ms = core::Membership::FromMembers(std::move(members), url());
  if (!ms.ok()) {
    PTS_ERROR("cluster", ms.status().ToString());
    return *core::Membership::FromMembers({options_.self}, url());
  }
  return std::move(*ms);
}

void EtcdMembership::Run(std::function<void(const core::Membership&)> on_change) {
  on_change_ = std::move(on_change);
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
  watch_ = std::thread([this] { WatchLoop(); });
}

bool EtcdMembership::SleepFor(int ms) {
  core::UniqueLock lk(mu_);
  cv_.WaitFor(lk, std::chrono::milliseconds(ms), [this]() REQUIRES(mu_) { return stopping_; });
  return !stopping_;
}

void EtcdMembership::KeepAliveLoop() {
  const int period_ms = options_.lease_ttl_s * 1000 / 3;
  while (SleepFor(period_ms)) {
    int64_t lease;
    {
      core::MutexLock lk(mu_);
      lease = lease_;
    }
    Result<int64_t> ttl = client_->KeepAlive(lease);
    if (!ttl.ok()) {
      counters_.failures++;
      if (counters_.reachable.exchange(false)) {
        PTS_WARN("cluster", "etcd unreachable (" << ttl.status().message()
                                                 << "): the last member list stays in force");
      }
      continue;
    }
    if (!counters_.reachable.exchange(true)) {
      PTS_INFO("cluster", url() << " reachable again");
      client_->CancelWatches();  // a watch stuck on the dead connection: read the members again
    }
    if (*ttl > 0) continue;
    // The lease is gone (etcd lost it, or this node was cut off for longer
    // than its TTL): the others dropped this node. Register again.
    PTS_WARN("cluster", "lease " << lease << " in " << url() << " expired: registering again");
    if (Status st = Register(); !st.ok()) {
      counters_.failures++;
      PTS_ERROR("cluster", "registering again in " << url() << ": " << st.ToString());
    }
  }
}

void EtcdMembership::WatchLoop() {
  const int backoff_ms = std::min(500, options_.lease_ttl_s * 1000 / 3);
  for (;;) {
    const uint64_t generation = client_->WatchGeneration();  // before the check: Stop cancels after setting it
    {
      core::MutexLock lk(mu_);
      if (stopping_) return;
    }
    Result<EtcdRange> range = client_->RangePrefix(members_prefix_);
    if (!range.ok()) {
      counters_.failures++;
      PTS_DEBUG("cluster", "reading the members: " << range.status().ToString());
      if (!SleepFor(backoff_ms)) return;
      continue;
    }
    core::Membership next = ToMembership(*range);
    if (next.members() != last_) {
      last_ = next.members();
      counters_.updates++;
      on_change_(next);
    }
    // Until something under the prefix changes: then read it whole again.
    Status st = client_->Watch(members_prefix_, range->revision + 1,
                               [](const EtcdWatchEvent& ev) { return ev.events == 0 && !ev.canceled; }, generation);
    if (!st.ok() && st.code() != Code::kAborted) {
      counters_.failures++;
      PTS_DEBUG("cluster", "watching the members: " << st.ToString());
      if (!SleepFor(backoff_ms)) return;
    }
  }
}

void EtcdMembership::Stop() {
  {
    core::MutexLock lk(mu_);
    if (stopping_ && !keepalive_.joinable() && !watch_.joinable()) return;
    stopping_ = true;
  }
  cv_.NotifyAll();
  client_->CancelWatches();
  if (keepalive_.joinable()) keepalive_.join();
  if (watch_.joinable()) watch_.join();
}

void EtcdMembership::Leave() {
  Stop();
  int64_t lease;
  {
    core::MutexLock lk(mu_);
    lease = lease_;
  }
  if (Status st = client_->RevokeLease(lease); !st.ok()) {
    PTS_WARN("cluster", "leaving " << url() << ": " << st.ToString() << " (the lease expires in at most "
                                    << options_.lease_ttl_s << " s)");
  } else {
    PTS_INFO("cluster", "left " << url() << " (lease revoked)");
  }
}

}  // namespace ptstore::storage
