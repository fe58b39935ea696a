#include "storage/cluster/etcd_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

namespace ptstore::storage {

using nlohmann::json;

namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// int64 fields come as JSON strings from the gateway ("revision": "12").
int64_t Int64(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
  }
  return 0;
}

int64_t HeaderRevision(const json& j) {
  auto h = j.find("header");
  return h == j.end() || !h->is_object() ? 0 : Int64(*h, "revision");
}

Result<json> ParseAnswer(const std::string& body, const std::string& what) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return ProtocolError("etcd " + what + ": the answer is not JSON: " + body.substr(0, 200));
  }
  if (auto e = j.find("error"); e != j.end()) {
    std::string msg = j.value("message", e->is_string() ? e->get<std::string>() : e->dump());
    if (msg.find("no leader") != std::string::npos || msg.find("timed out") != std::string::npos) {
      return Unavailable("etcd " + what + ": " + msg);
    }
    return Internal("etcd " + what + ": " + msg);
  }
  return j;
}

Result<EtcdKeyValue> DecodeKv(const json& kv) {
  EtcdKeyValue out;
  PTS_ASSIGN_OR_RETURN(out.key, Base64Decode(kv.value("key", "")));
  PTS_ASSIGN_OR_RETURN(out.value, Base64Decode(kv.value("value", "")));
  out.mod_revision = Int64(kv, "mod_revision");
  out.lease = Int64(kv, "lease");
  return out;
}

// A watch's callbacks: the stream split at newlines, its socket registered.
struct WatchCall {
  EtcdWatchSockets* sockets;
  uint64_t generation;
  const std::function<bool(const EtcdWatchEvent&)>* on_message;
  std::string pending;
  Status failure;
  bool stop = false;
};

size_t WatchBody(char* data, size_t size, size_t n, void* user) {
  auto* w = static_cast<WatchCall*>(user);
  w->pending.append(data, size * n);
  size_t start = 0;
  for (size_t nl; (nl = w->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(w->pending.data() + start, nl - start);
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      w->failure = ProtocolError("etcd watch: a message that is not JSON: " + std::string(line.substr(0, 200)));
      return 0;  // ends the transfer
    }
    if (j.contains("error")) {
      w->failure = Unavailable("etcd watch: " + j["error"].dump());
      return 0;
    }
    const json& r = j.contains("result") ? j["result"] : j;
    EtcdWatchEvent ev;
    ev.revision = HeaderRevision(r);
    auto evs = r.find("events");
    ev.events = evs != r.end() && evs->is_array() ? evs->size() : 0;
    ev.canceled = r.value("canceled", false);
    ev.compact_revision = Int64(r, "compact_revision");
    if (!(*w->on_message)(ev)) {
      w->stop = true;
      return 0;
    }
  }
  w->pending.erase(0, start);
  return size * n;
}

int WatchSockopt(void* user, curl_socket_t fd, curlsocktype) {
  auto* w = static_cast<WatchCall*>(user);
  core::MutexLock lk(w->sockets->mu);
  if (w->sockets->generation != w->generation) return CURL_SOCKOPT_ERROR;  // canceled before it connected
  w->sockets->fds.insert(fd);
  return CURL_SOCKOPT_OK;
}

int WatchCloseSocket(void* user, curl_socket_t fd) {
  auto* w = static_cast<WatchCall*>(user);
  {
    core::MutexLock lk(w->sockets->mu);
    w->sockets->fds.erase(fd);
  }
  return ::close(fd);
}

int WatchProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* w = static_cast<WatchCall*>(user);
  core::MutexLock lk(w->sockets->mu);
  return w->sockets->generation != w->generation ? 1 : 0;
}

}  // namespace

// ------------------------------------------------------------------ the URL

Result<EtcdUrl> EtcdUrl::Parse(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("etcd URL '" + std::string(url) + "': " + why +
                           " (the form is etcd://HOST:PORT[,HOST:PORT...]/PREFIX)");
  };
  constexpr std::string_view kScheme = "etcd://";
  if (url.substr(0, kScheme.size()) != kScheme) return bad("it does not start with etcd://");
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad("no /PREFIX after the endpoints");
  std::string_view hosts = rest.substr(0, slash);
  std::string_view prefix = rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (prefix.empty()) return bad("the key prefix is empty");
  EtcdUrl out;
  out.prefix = "/" + std::string(prefix) + "/";
  size_t pos = 0;
  while (pos <= hosts.size()) {
    size_t comma = hosts.find(',', pos);
    std::string_view ep = hosts.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const size_t colon = ep.rfind(':');
    if (ep.empty()) return bad("an empty endpoint");
    if (colon == std::string_view::npos || colon == 0) return bad("endpoint '" + std::string(ep) + "' has no HOST:PORT");
    std::string_view port = ep.substr(colon + 1);
    unsigned v = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535) {
      return bad("endpoint '" + std::string(ep) + "' has a bad port");
    }
    out.endpoints.emplace_back(ep);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string EtcdUrl::ToString() const {
  std::string s = "etcd://";
  for (size_t i = 0; i < endpoints.size(); ++i) s += (i ? "," : "") + endpoints[i];
  return s + prefix.substr(0, prefix.size() - 1);
}

// ---------------------------------------------------------------- base64

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return ProtocolError("etcd: base64 of " + std::to_string(text.size()) + " characters");
  std::string out(3 * text.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return ProtocolError("etcd: bad base64 '" + std::string(text.substr(0, 64)) + "'");
  size_t len = static_cast<size_t>(n);
  // EVP_DecodeBlock counts the padding's bytes as zeros.
  if (!text.empty() && text.back() == '=') --len;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --len;
  out.resize(len);
  return out;
}

std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char c = static_cast<unsigned char>(prefix.back());
    if (c < 0xff) {
      prefix.back() = static_cast<char>(c + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// ---------------------------------------------------------------- calls

EtcdClient::EtcdClient(EtcdUrl url, int timeout_ms) : url_(std::move(url)), timeout_ms_(timeout_ms) { GlobalInit(); }

EtcdClient::~EtcdClient() { CancelWatches(); }

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  std::string failures;
  const size_t n = url_.endpoints.size();
  const size_t first = preferred_.load() % n;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
    if (!c) return Internal("etcd: curl_easy_init failed");
    std::unique_ptr<curl_slist, SlistDeleter> headers(curl_slist_append(nullptr, "Content-Type: application/json"));
    const std::string target = "http://" + url_.endpoints[i] + path;
    std::string answer;
    curl_easy_setopt(c.get(), CURLOPT_URL, target.c_str());
    curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms_));
    curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_ms_));
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, AppendBody);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &answer);
    CURLcode rc = curl_easy_perform(c.get());
    if (rc != CURLE_OK) {
      failures += (failures.empty() ? "" : "; ") + url_.endpoints[i] + ": " + curl_easy_strerror(rc);
      continue;
    }
    long http = 0;
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &http);
    if (http >= 500 && answer.find("no leader") != std::string::npos) {
      failures += (failures.empty() ? "" : "; ") + url_.endpoints[i] + ": no leader";
      continue;  // another member may have one
    }
    preferred_.store(i);
    if (http != 200 && answer.find("\"error\"") == std::string::npos) {
      return ProtocolError("etcd " + path + ": HTTP " + std::to_string(http) + ": " + answer.substr(0, 200));
    }
    return answer;
  }
  return Unavailable("etcd " + url_.ToString() + " " + path + ": no endpoint answered (" + failures + ")");
}

Result<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  PTS_ASSIGN_OR_RETURN(std::string body, Post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump()));
  PTS_ASSIGN_OR_RETURN(json j, ParseAnswer(body, "lease grant"));
  const int64_t id = Int64(j, "ID");
  if (id == 0) return ProtocolError("etcd lease grant: no lease ID in " + body.substr(0, 200));
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  PTS_ASSIGN_OR_RETURN(std::string body, Post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  PTS_ASSIGN_OR_RETURN(json j, ParseAnswer(body, "lease keepalive"));
  const json& r = j.contains("result") ? j["result"] : j;
  if (r.contains("error")) return Internal("etcd lease keepalive: " + r["error"].dump());
  return Int64(r, "TTL");  // absent: the lease is gone
}

Status EtcdClient::RevokeLease(int64_t lease) {
  PTS_ASSIGN_OR_RETURN(std::string body, Post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()));
  Result<json> j = ParseAnswer(body, "lease revoke");
  if (!j.ok() && j.status().message().find("lease not found") != std::string::npos) return Status::OK();
  return j.status();
}

Status EtcdClient::PutIfAbsentOrSame(const std::string& key, const std::string& value, int64_t lease,
                                     const std::function<bool(const std::string&)>& same) {
  const std::string k = Base64Encode(key);
  json put = {{"request_put", {{"key", k}, {"value", Base64Encode(value)}, {"lease", std::to_string(lease)}}}};
  // Twice at most: absent -> put; present -> read it, and put over it if same.
  for (int round = 0; round < 2; ++round) {
    json txn = {{"compare", json::array({{{"key", k}, {"result", "EQUAL"}, {"target", "CREATE"},
                                           {"create_revision", "0"}}})},
                {"success", json::array({put})},
                {"failure", json::array({{{"request_range", {{"key", k}}}}})}};
    PTS_ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/txn", txn.dump()));
    PTS_ASSIGN_OR_RETURN(json j, ParseAnswer(body, "txn"));
    if (j.value("succeeded", false)) return Status::OK();
    // The key exists: who holds it?
    std::string held;
    for (const json& r : j.value("responses", json::array())) {
      for (const json& kv : r.value("response_range", json::object()).value("kvs", json::array())) {
        PTS_ASSIGN_OR_RETURN(EtcdKeyValue d, DecodeKv(kv));
        held = d.value;
      }
    }
    if (!same(held)) return AlreadyExists("etcd key " + key + " is held: " + held);
    // Ours (an earlier start of this node): replace it, unconditionally.
    json plain = {{"key", k}, {"value", Base64Encode(value)}, {"lease", std::to_string(lease)}};
    PTS_ASSIGN_OR_RETURN(std::string pbody, Post("/v3/kv/put", plain.dump()));
    Result<json> pj = ParseAnswer(pbody, "put");
    if (pj.ok()) return Status::OK();
    if (round == 1) return pj.status();
  }
  return Internal("etcd put of " + key + ": unreachable");
}

Result<EtcdRange> EtcdClient::RangePrefix(const std::string& prefix) {
  json req = {{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}};
  PTS_ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/range", req.dump()));
  PTS_ASSIGN_OR_RETURN(json j, ParseAnswer(body, "range"));
  EtcdRange out;
  out.revision = HeaderRevision(j);
  for (const json& kv : j.value("kvs", json::array())) {
    PTS_ASSIGN_OR_RETURN(EtcdKeyValue d, DecodeKv(kv));
    out.kvs.push_back(std::move(d));
  }
  return out;
}

Status EtcdClient::Delete(const std::string& key) {
  PTS_ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/deleterange", json{{"key", Base64Encode(key)}}.dump()));
  return ParseAnswer(body, "delete").status();
}

Status EtcdClient::Watch(const std::string& prefix, int64_t start_revision,
                         const std::function<bool(const EtcdWatchEvent&)>& on_message, uint64_t generation) {
  WatchCall w;
  w.sockets = &watches_;
  w.on_message = &on_message;
  w.generation = generation;
  {
    core::MutexLock lk(watches_.mu);
    if (watches_.generation != generation) return Aborted("etcd watch canceled");
  }
  json req = {{"create_request",
               {{"key", Base64Encode(prefix)},
                {"range_end", Base64Encode(PrefixEnd(prefix))},
                {"start_revision", std::to_string(start_revision)}}}};
  const std::string body = req.dump();
  const size_t i = preferred_.load() % url_.endpoints.size();
  std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
  if (!c) return Internal("etcd: curl_easy_init failed");
  std::unique_ptr<curl_slist, SlistDeleter> headers(curl_slist_append(nullptr, "Content-Type: application/json"));
  const std::string target = "http://" + url_.endpoints[i] + "/v3/watch";
  curl_easy_setopt(c.get(), CURLOPT_URL, target.c_str());
  curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_ms_));
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, WatchBody);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &w);
  curl_easy_setopt(c.get(), CURLOPT_SOCKOPTFUNCTION, WatchSockopt);
  curl_easy_setopt(c.get(), CURLOPT_SOCKOPTDATA, &w);
  curl_easy_setopt(c.get(), CURLOPT_CLOSESOCKETFUNCTION, WatchCloseSocket);
  curl_easy_setopt(c.get(), CURLOPT_CLOSESOCKETDATA, &w);
  curl_easy_setopt(c.get(), CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c.get(), CURLOPT_XFERINFOFUNCTION, WatchProgress);
  curl_easy_setopt(c.get(), CURLOPT_XFERINFODATA, &w);
  curl_easy_setopt(c.get(), CURLOPT_FORBID_REUSE, 1L);
  const CURLcode rc = curl_easy_perform(c.get());
  c.reset();  // closes the socket (WatchCloseSocket)
  if (w.stop) return Status::OK();
  if (!w.failure.ok()) return w.failure;
  {
    core::MutexLock lk(watches_.mu);
    if (watches_.generation != w.generation) return Aborted("etcd watch canceled");
  }
  if (rc != CURLE_OK) {
    preferred_.store(i + 1);  // try another endpoint next time
    return Unavailable("etcd watch at " + url_.endpoints[i] + ": " + curl_easy_strerror(rc));
  }
  // etcd closed the stream: retry another endpoint next time.
  preferred_.store(i + 1);
  return Unavailable("etcd watch at " + url_.endpoints[i] + ": the stream ended");
}

uint64_t EtcdClient::WatchGeneration() {
  core::MutexLock lk(watches_.mu);
  return watches_.generation;
}

void EtcdClient::CancelWatches() {
  core::MutexLock lk(watches_.mu);
  watches_.generation++;
  for (int fd : watches_.fds) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace ptstore::storage
