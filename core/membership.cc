#include "core/membership.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

namespace ptstore::core {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Result<uint16_t> ParsePort(std::string_view p, std::string_view what) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v == 0 || v > 65535) {
    return InvalidArgument(std::string(what) + ": bad port '" + std::string(p) + "' (want 1..65535)");
  }
  return static_cast<uint16_t>(v);
}

bool HostCharsOk(std::string_view h) {
  for (char c : h) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '[' || c == ']' || c == '#' || c == '/') return false;
  }
  return true;
}

// The first line that is neither blank nor a comment.
std::string_view FirstContentLine(std::string_view text) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.front() != '#') return line;
  }
  return {};
}

}  // namespace

std::string Member::Address() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<Member> ParseMemberAddress(std::string_view text, std::string_view what) {
  std::string_view t = Trim(text);
  Member m;
  std::string_view host;
  std::string_view port;
  bool has_port = false;
  if (!t.empty() && t.front() == '[') {
    size_t close = t.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgument(std::string(what) + ": unterminated '[' in address '" + std::string(t) + "'");
    }
    host = t.substr(1, close - 1);
    std::string_view rest = t.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return InvalidArgument(std::string(what) + ": expected ':port' after ']' in '" + std::string(t) + "'");
      }
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    size_t colon = t.find(':');
    if (colon != std::string_view::npos && t.find(':', colon + 1) != std::string_view::npos) {
      return InvalidArgument(std::string(what) + ": IPv6 address '" + std::string(t) +
                             "' must be written [addr]:port");
    }
    host = t.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = t.substr(colon + 1);
      has_port = true;
    }
  }
  if (host.empty()) return InvalidArgument(std::string(what) + ": missing host in address '" + std::string(t) + "'");
  if (!HostCharsOk(host)) {
    return InvalidArgument(std::string(what) + ": bad host '" + std::string(host) + "'");
  }
  m.host = std::string(host);
  if (has_port) {
    PTS_ASSIGN_OR_RETURN(m.port, ParsePort(port, what));
  }
  return m;
}

Result<Membership> Membership::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cluster file " + path, errno);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return ErrnoError("reading cluster file " + path, errno);
  return Parse(ss.str(), path);
}

Result<Membership> Membership::Parse(std::string_view text, std::string_view origin) {
  bool toml = origin.size() >= 5 && origin.substr(origin.size() - 5) == ".toml";
  if (!toml) {
    std::string_view first = FirstContentLine(text);
    // "[fe80::1]:7400" is a node-list line; "[[node]]" and "[table]" are TOML.
    toml = first.find('=') != std::string_view::npos || first.starts_with("[[") ||
           (first.starts_with("[") && first.find(':') == std::string_view::npos);
  }
  return toml ? ParseToml(text, origin) : ParseNodeList(text, origin);
}

Result<Membership> Membership::ParseNodeList(std::string_view text, std::string_view origin) {
  std::vector<Member> members;
  std::vector<std::string> where;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    std::string at = "cluster file " + std::string(origin) + " line " + std::to_string(line_no);
    if (line.find_first_of(" \t") != std::string_view::npos) {
      return InvalidArgument(at + ": one host[:port] per line, got '" + std::string(line) + "'");
    }
    PTS_ASSIGN_OR_RETURN(Member m, ParseMemberAddress(line, at));
    if (members.size() > kMaxNodeId) {
      return InvalidArgument(at + ": more than " + std::to_string(kMaxNodeId + 1) + " nodes");
    }
    m.node_id = static_cast<uint32_t>(members.size());
    members.push_back(std::move(m));
    where.push_back(std::move(at));
  }
  return Build(std::move(members), std::move(where), "", origin);
}

Result<Membership> Membership::ParseToml(std::string_view text, std::string_view origin) {
  std::string file = "cluster file " + std::string(origin);
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::string where = e.source().begin ? " line " + std::to_string(e.source().begin.line) : "";
    return InvalidArgument(file + where + ": " + std::string(e.description()));
  }
  std::string secret_file;
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (key == "node") continue;
    if (key == "secret_file") {
      auto s = v.value<std::string>();
      if (!s || s->empty()) return InvalidArgument(file + ": secret_file must be a non-empty string");
      secret_file = *s;
      continue;
    }
    return InvalidArgument(file + ": unknown key '" + key + "' at top level (want node, secret_file)");
  }
  const toml::node* nodes_node = root.get("node");
  if (!nodes_node) return InvalidArgument(file + ": no [[node]] entries");
  const toml::array* nodes = nodes_node->as_array();
  if (!nodes) return InvalidArgument(file + ": 'node' must be an array of tables ([[node]])");

  std::vector<Member> members;
  std::vector<std::string> where;
  for (size_t i = 0; i < nodes->size(); ++i) {
    const toml::node& n = *nodes->get(i);
    std::string at = file + " [[node]] #" + std::to_string(i + 1);
    if (n.source().begin) at += " (line " + std::to_string(n.source().begin.line) + ")";
    const toml::table* t = n.as_table();
    if (!t) return InvalidArgument(at + ": not a table");
    for (const auto& [k, v] : *t) {
      std::string key(k.str());
      if (key != "id" && key != "address") {
        return InvalidArgument(at + ": unknown key '" + key + "' (want id, address)");
      }
    }
    const toml::node* id = t->get("id");
    const toml::node* addr = t->get("address");
    if (!id) return InvalidArgument(at + ": missing 'id'");
    if (!addr) return InvalidArgument(at + ": missing 'address'");
    auto idv = id->value<int64_t>();
    if (!id->is_integer() || !idv) return InvalidArgument(at + ": 'id' must be an integer");
    if (*idv < 0 || *idv > kMaxNodeId) {
      return InvalidArgument(at + ": id " + std::to_string(*idv) + " out of range [0, " +
                             std::to_string(kMaxNodeId) + "]");
    }
    auto addrv = addr->value<std::string>();
    if (!addr->is_string() || !addrv) return InvalidArgument(at + ": 'address' must be a string");
    PTS_ASSIGN_OR_RETURN(Member m, ParseMemberAddress(*addrv, at));
    m.node_id = static_cast<uint32_t>(*idv);
    members.push_back(std::move(m));
    where.push_back(std::move(at));
  }
  return Build(std::move(members), std::move(where), std::move(secret_file), origin);
}

Result<Membership> Membership::Build(std::vector<Member> members, std::vector<std::string> where,
                                     std::string secret_file, std::string_view origin) {
  if (members.empty()) return InvalidArgument("cluster file " + std::string(origin) + ": no nodes");
  std::map<uint32_t, size_t> ids;
  std::map<std::pair<std::string, uint16_t>, size_t> addrs;
  for (size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    auto [it, fresh] = ids.emplace(m.node_id, i);
    if (!fresh) {
      return InvalidArgument(where[i] + ": duplicate node id " + std::to_string(m.node_id) + " (also " +
                             where[it->second] + ")");
    }
    auto [at, afresh] = addrs.emplace(std::make_pair(m.host, m.port), i);
    if (!afresh) {
      return InvalidArgument(where[i] + ": duplicate address " + m.Address() + " (also " + where[at->second] + ")");
    }
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.node_id < b.node_id; });
  Membership ms;
  ms.origin_ = std::string(origin);
  ms.members_ = std::move(members);
  ms.secret_file_ = std::move(secret_file);
  return ms;
}

Result<Membership> Membership::FromMembers(std::vector<Member> members, std::string_view origin) {
  std::vector<std::string> where;
  for (const Member& m : members) where.push_back(std::string(origin) + ": node " + std::to_string(m.node_id));
  return Build(std::move(members), std::move(where), "", origin);
}

std::vector<uint32_t> Membership::node_ids() const {
  std::vector<uint32_t> ids;
  ids.reserve(members_.size());
  for (const Member& m : members_) ids.push_back(m.node_id);
  return ids;
}

const Member* Membership::Find(uint32_t node_id) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), node_id,
                             [](const Member& m, uint32_t id) { return m.node_id < id; });
  return it != members_.end() && it->node_id == node_id ? &*it : nullptr;
}

Result<Member> Membership::Self(uint32_t node_id) const {
  const Member* m = Find(node_id);
  if (!m) {
    return NotFound("node id " + std::to_string(node_id) + " is not in cluster file " + origin_ + " (" +
                    std::to_string(members_.size()) + " nodes)");
  }
  return *m;
}

}  // namespace ptstore::core
