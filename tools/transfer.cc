#include "tools/transfer.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "tools/commands.h"
#include "tools/format.h"

namespace ptstore::tools {

// ------------------------------------------------------------------ files

Result<TokensFormat> ParseTokensFormat(std::string_view name) {
  if (name == "raw") return TokensFormat::kRaw;
  if (name == "text") return TokensFormat::kText;
  return InvalidArgument("token file format '" + std::string(name) + "' is not raw or text");
}

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

Result<std::vector<uint32_t>> ParseTokens(std::string_view contents, TokensFormat format) {
  std::vector<uint32_t> tokens;
  if (format == TokensFormat::kRaw) {
    if (contents.size() % 4 != 0) {
      return InvalidArgument("holds " + std::to_string(contents.size()) +
                             " bytes, not a whole number of 4-byte token ids (raw: little-endian uint32; text "
                             "files need --tokens-format text)");
    }
    tokens.resize(contents.size() / 4);
    for (size_t i = 0; i < tokens.size(); ++i) {
      uint32_t le;
      std::memcpy(&le, contents.data() + 4 * i, 4);
      tokens[i] = le32toh(le);
    }
    return tokens;
  }
  size_t line = 1;
  size_t pos = 0;
  while (pos < contents.size()) {
    if (IsSpace(contents[pos])) {
      if (contents[pos] == '\n') ++line;
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < contents.size() && !IsSpace(contents[end])) ++end;
    std::string_view word = contents.substr(pos, end - pos);
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), v, 10);
    if (ec != std::errc() || p != word.data() + word.size()) {
      std::string shown(word.substr(0, 40));
      if (word.size() > 40) shown += "...";
      return InvalidArgument("line " + std::to_string(line) + ": '" + shown +
                             "' is not a token id (a decimal integer from 0 to 4294967295)");
    }
    tokens.push_back(v);
    pos = end;
  }
  return tokens;
}

std::string FormatTokens(std::span<const uint32_t> tokens, TokensFormat format) {
  std::string out;
  if (format == TokensFormat::kRaw) {
    out.resize(tokens.size() * 4);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const uint32_t le = htole32(tokens[i]);
      std::memcpy(out.data() + 4 * i, &le, 4);
    }
    return out;
  }
  for (uint32_t t : tokens) {
    out += std::to_string(t);
    out += '\n';
  }
  return out;
}

Result<std::string> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open '" + path + "'", errno);
  std::string data;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return ErrnoError("cannot read '" + path + "'", e);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

Status WriteWholeFile(const std::string& path, const void* data, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return ErrnoError("cannot create '" + path + "'", errno);
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t done = 0;
  while (done < bytes) {
    ssize_t n = ::write(fd, p + done, std::min<uint64_t>(bytes - done, 1u << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return ErrnoError("cannot write '" + path + "'", e);
    }
    done += static_cast<uint64_t>(n);
  }
  if (::close(fd) != 0) return ErrnoError("cannot write '" + path + "'", errno);
  return Status::OK();
}

// ------------------------------------------------------------------ shared

namespace {

// An input file whose contents are wrong: "prog: message", exit 2.
int BadInput(std::ostream& err, const char* prog, const std::string& message) {
  err << prog << ": " << message << "\n";
  return kExitUsage;
}

// Reads and parses a token file: 1 if it cannot be read, 2 if it is not
// token ids.
std::optional<int> LoadTokens(const char* prog, const std::string& path, TokensFormat format,
                              std::vector<uint32_t>* tokens, std::ostream& err) {
  auto contents = ReadWholeFile(path);
  if (!contents.ok()) {
    Report(err, prog, contents.status());
    return kExitFailure;
  }
  auto parsed = ParseTokens(*contents, format);
  if (!parsed.ok()) return BadInput(err, prog, "tokens file '" + path + "': " + parsed.status().message());
  *tokens = std::move(*parsed);
  return std::nullopt;
}

Result<uint32_t> ParseMode(const std::string& text) {
  uint32_t mode = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), mode, 8);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || mode > 0777) {
    return InvalidArgument("--mode '" + text + "' is not an octal mode from 0 to 0777");
  }
  return mode;
}

std::string Plural(uint64_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

// ------------------------------------------------------------------ put

int RunPut(const PutOptions& opt, std::ostream& out, std::ostream& err) {
  constexpr const char* kProg = "ptstore-put";
  if (Status st = ValidateNamespaceName(opt.ns); !st.ok()) return Usage(err, kProg, st.message());
  std::optional<Layout> create;
  uint32_t mode = 0755;
  if (opt.create_layout) {
    auto l = Layout::Parse(*opt.create_layout);
    if (!l.ok()) return Usage(err, kProg, "--create: " + l.status().message());
    if (Status st = l->Validate(); !st.ok()) return Usage(err, kProg, "--create: " + st.message());
    create = *l;
  }
  if (opt.mode) {
    if (!create) return Usage(err, kProg, "--mode goes with --create");
    auto m = ParseMode(*opt.mode);
    if (!m.ok()) return Usage(err, kProg, m.status().message());
    mode = *m;
  }

  // The files before the server: a missing or malformed file is reported
  // without touching the store.
  std::vector<uint32_t> tokens;
  if (auto rc = LoadTokens(kProg, opt.tokens_file, opt.tokens_format, &tokens, err)) return *rc;
  auto kv = ReadWholeFile(opt.kv_file);
  if (!kv.ok()) {
    Report(err, kProg, kv.status());
    return kExitFailure;
  }

  auto client = ConnectTool(opt.socket, kProg);
  if (!client.ok()) {
    Report(err, kProg, client.status());
    return kExitFailure;
  }
  Client& c = **client;
  auto info = create ? c.CreateNamespace(opt.ns, *create, "", mode, /*exist_ok=*/true) : c.GetNamespace(opt.ns);
  if (!info.ok()) {
    Report(err, kProg, info.status());
    return kExitFailure;
  }
  const Layout& layout = info->layout;
  const uint64_t bpt = layout.BytesPerToken();
  const uint64_t n = tokens.size();
  const uint64_t whole = layout.FullBlocks(n) * layout.block_tokens;
  // The KV of every token, or of the whole blocks only (what the store
  // keeps; what ptstore-get writes).
  if (kv->size() != n * bpt && kv->size() != whole * bpt) {
    std::string m = "kv file '" + opt.kv_file + "' holds " + std::to_string(kv->size()) + " bytes, but the " +
                    Plural(n, "token") + " of '" + opt.tokens_file + "' need " + std::to_string(n * bpt) + " bytes";
    if (whole != n) m += " (or " + std::to_string(whole * bpt) + " for the " + Plural(whole, "token") + " in whole blocks)";
    m += " at " + std::to_string(bpt) + " bytes per token (layout " + layout.ToString() + ")";
    return BadInput(err, kProg, m);
  }
  auto saved = c.Save(opt.ns, tokens, kv->data(), whole * bpt);
  if (!saved.ok()) {
    Report(err, kProg, saved.status());
    return kExitFailure;
  }
  if (opt.json) {
    Emit(out, {{"namespace", opt.ns},
               {"tokens", n},
               {"whole_block_tokens", whole},
               {"ignored_tokens", n - whole},
               {"matched_tokens", saved->matched_tokens},
               {"stored_tokens", saved->stored_tokens},
               {"new_bytes", saved->new_bytes}});
  } else {
    out << opt.ns << ": matched " << Plural(saved->matched_tokens, "token") << ", stored "
        << Plural(saved->stored_tokens, "token") << " (" << HumanBytes(saved->new_bytes) << " new)";
    if (whole != n) out << "; " << Plural(n - whole, "token") << " past the last whole block ignored";
    out << "\n";
  }
  return kExitOk;
}

// ------------------------------------------------------------------ get

namespace {

struct Exported {
  std::vector<uint32_t> tokens;  // of the whole prefix ending at the key
  std::unique_ptr<uint8_t[]> kv;  // its bytes
  PrefixNodeInfo node;
};

// The prefix that ends at `key`: the token ids of the increment and of its
// ancestors (GetIncrement up to the root), then a load of those tokens. No
// arena mapping needed. Aborted when the tree changed under the walk (an
// ancestor evicted or removed, the load short) three times in a row.
Result<Exported> ExportPrefix(Client& c, const std::string& ns, const Layout& layout, const ChainKey& key) {
  const uint64_t bpt = layout.BytesPerToken();
  std::string why;
  for (int attempt = 0; attempt < 3; ++attempt) {
    PTS_ASSIGN_OR_RETURN(IncrementInfo inc, c.GetIncrement(ns, key));
    const uint64_t end = inc.node.start_token + inc.node.tokens;
    if (inc.tokens.size() != inc.node.tokens) {
      return ProtocolError("increment " + key.ToHex() + " lists " + std::to_string(inc.node.tokens) +
                           " tokens but came with " + std::to_string(inc.tokens.size()) + " token ids");
    }
    // Walk up: each ancestor ends where its child starts.
    std::vector<std::vector<uint32_t>> parts = {std::move(inc.tokens)};
    PrefixNodeInfo child = inc.node;
    bool changed = false;
    while (child.parent != ChainKey{}) {
      auto up = c.GetIncrement(ns, child.parent);
      if (!up.ok() && up.status().code() != Code::kNotFound) return up.status();
      if (!up.ok() || up->node.start_token + up->node.tokens != child.start_token ||
          up->tokens.size() != up->node.tokens || up->node.tokens == 0) {
        changed = true;
        why = !up.ok() ? "ancestor " + child.parent.ToHex() + " is gone" : "ancestor " + child.parent.ToHex() + " moved";
        break;
      }
      child = up->node;
      parts.push_back(std::move(up->tokens));
    }
    if (!changed && child.start_token != 0) {
      changed = true;
      why = "its top increment does not start at token 0";
    }
    if (changed) continue;
    Exported e;
    e.node = inc.node;
    e.tokens.reserve(end);
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) e.tokens.insert(e.tokens.end(), it->begin(), it->end());
    if (e.tokens.size() != end) {
      why = "its increments hold " + std::to_string(e.tokens.size()) + " tokens, not " + std::to_string(end);
      continue;
    }
    e.kv.reset(new uint8_t[std::max<uint64_t>(end * bpt, 1)]);
    PTS_ASSIGN_OR_RETURN(uint64_t got, c.Load(ns, e.tokens, e.kv.get(), end * bpt));
    if (got != end) {
      why = "loaded " + std::to_string(got) + " of its " + std::to_string(end) + " tokens";
      continue;
    }
    return e;
  }
  return Aborted("the prefix ending at " + key.ToHex() + " changed while it was read (" + why +
                 "; evicted or removed meanwhile?): try again");
}

}  // namespace

int RunGet(const GetOptions& opt, std::ostream& out, std::ostream& err) {
  constexpr const char* kProg = "ptstore-get";
  if (Status st = ValidateNamespaceName(opt.ns); !st.ok()) return Usage(err, kProg, st.message());
  if (opt.tokens_file && opt.key) return Usage(err, kProg, "--tokens and --key exclude each other");
  if (!opt.tokens_file && !opt.key) return Usage(err, kProg, "what to export: --tokens FILE or --key KEY");
  if (opt.whole_prefix && !opt.key) return Usage(err, kProg, "--whole-prefix goes with --key");
  if (opt.output.empty()) return Usage(err, kProg, "-o OUT: the file to write the KV bytes to");
  std::optional<ChainKey> key;
  if (opt.key) {
    auto k = ChainKey::FromHex(*opt.key);
    if (!k.ok()) return Usage(err, kProg, "--key: " + k.status().message());
    key = *k;
  }
  std::vector<uint32_t> tokens;
  if (opt.tokens_file) {
    if (auto rc = LoadTokens(kProg, *opt.tokens_file, opt.tokens_format, &tokens, err)) return *rc;
  }

  auto client = ConnectTool(opt.socket, kProg);
  if (!client.ok()) {
    Report(err, kProg, client.status());
    return kExitFailure;
  }
  Client& c = **client;
  auto info = c.GetNamespace(opt.ns);
  if (!info.ok()) {
    Report(err, kProg, info.status());
    return kExitFailure;
  }
  const uint64_t bpt = info->layout.BytesPerToken();

  // What to write: tokens [start, end) of `all`, bytes from `kv`.
  std::vector<uint32_t> all;
  std::unique_ptr<uint8_t[]> kv;
  uint64_t start = 0, end = 0;
  if (key) {
    auto e = ExportPrefix(c, opt.ns, info->layout, *key);
    if (!e.ok()) {
      Report(err, kProg, e.status());
      return kExitFailure;
    }
    all = std::move(e->tokens);
    kv = std::move(e->kv);
    end = all.size();
    start = opt.whole_prefix ? 0 : e->node.start_token;
  } else {
    // Lookup first, so that the buffer is the size of what is stored rather
    // than of the prompt; the load then takes at most that much.
    auto look = c.Lookup(opt.ns, tokens);
    if (!look.ok()) {
      Report(err, kProg, look.status());
      return kExitFailure;
    }
    const uint64_t want = look->matched_tokens;
    kv.reset(new uint8_t[std::max<uint64_t>(want * bpt, 1)]);
    if (want > 0) {
      auto got = c.Load(opt.ns, tokens, kv.get(), want * bpt);
      if (!got.ok()) {
        Report(err, kProg, got.status());
        return kExitFailure;
      }
      end = *got;  // fewer than `want` if evicted meanwhile: still a prefix
    }
    all = std::move(tokens);
  }

  const uint64_t bytes = (end - start) * bpt;
  if (Status st = WriteWholeFile(opt.output, kv.get() + start * bpt, bytes); !st.ok()) {
    Report(err, kProg, st);
    return kExitFailure;
  }
  if (opt.tokens_output) {
    std::string t = FormatTokens(std::span<const uint32_t>(all).subspan(start, end - start), opt.tokens_format);
    if (Status st = WriteWholeFile(*opt.tokens_output, t.data(), t.size()); !st.ok()) {
      Report(err, kProg, st);
      return kExitFailure;
    }
  }

  if (opt.json) {
    Emit(out, {{"namespace", opt.ns},
               {"key", key ? Json(key->ToHex()) : Json(nullptr)},
               {"whole_prefix", opt.whole_prefix},
               {"requested_tokens", key ? Json(nullptr) : Json(all.size())},
               {"start_token", start},
               {"tokens", end - start},
               {"bytes", bytes},
               {"output", opt.output},
               {"tokens_output", opt.tokens_output ? Json(*opt.tokens_output) : Json(nullptr)}});
    return kExitOk;
  }
  if (!key) {
    out << Plural(end, "token") << " matched of " << all.size();
  } else {
    out << Plural(end - start, "token") << " (" << start << ".." << (end == 0 ? 0 : end - 1) << ") of "
        << (opt.whole_prefix ? "the prefix ending at " : "increment ") << key->ToHex();
  }
  out << ": " << HumanBytes(bytes) << " written to " << opt.output;
  if (opt.tokens_output) out << ", token ids to " << *opt.tokens_output;
  out << "\n";
  return kExitOk;
}

}  // namespace ptstore::tools
