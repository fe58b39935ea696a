// The commands behind ptstore-put and ptstore-get: KV prefixes in and out
// of a namespace through plain files, for scripts. The executables are thin
// mains (tools/put_main.cc, tools/get_main.cc).
//
// Files:
//   - token ids: "raw", little-endian uint32 one after the other (a size
//     that is not a multiple of 4 is an error), or "text", decimal integers
//     from 0 to 4294967295 separated by white space (written one per line);
//   - KV bytes: raw, in the namespace's token-major layout
//     (Layout::BytesPerToken() bytes per token, in token order; for a
//     grouped layout, whole blocks of its groups' slices and padding).
//
// Exit status (commands.h): a file that cannot be opened, read or written is
// 1, like a failure of the server; a file whose contents are wrong (a token
// that is not a number, a raw token file of an odd size, a KV file whose
// size does not match the tokens) is 2, a usage error, reported as one line
// "prog: what is wrong" naming the file and both sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::tools {

enum class TokensFormat { kRaw, kText };

// "raw" or "text"; InvalidArgument otherwise.
Result<TokensFormat> ParseTokensFormat(std::string_view name);

// Token ids from a file's contents; InvalidArgument naming the problem
// (the byte count of a raw file, the line and word of a text file).
Result<std::vector<uint32_t>> ParseTokens(std::string_view contents, TokensFormat format);
// The file contents of `tokens` (text: one id per line).
std::string FormatTokens(std::span<const uint32_t> tokens, TokensFormat format);

// The whole contents of a file (NotFound, PermissionDenied, IOError...
// naming the path otherwise). Pipes and devices are read to their end.
Result<std::string> ReadWholeFile(const std::string& path);
// Creates or truncates `path` (mode 0666 before the umask) and writes
// `bytes` bytes of `data` to it.
Status WriteWholeFile(const std::string& path, const void* data, uint64_t bytes);

struct PutOptions {
  std::string socket;  // empty: $PTSTORE_SOCKET, else the default
  std::string ns;
  std::string tokens_file;
  TokensFormat tokens_format = TokensFormat::kRaw;
  std::string kv_file;
  std::optional<std::string> create_layout;  // --create: create the namespace first
  std::optional<std::string> mode;           // --mode (octal), with --create only
  bool json = false;
};
int RunPut(const PutOptions& options, std::ostream& out, std::ostream& err);

struct GetOptions {
  std::string socket;
  std::string ns;
  std::optional<std::string> tokens_file;  // the prompt to look up, or
  std::optional<std::string> key;          // one increment by chain key
  TokensFormat tokens_format = TokensFormat::kRaw;  // of --tokens and --tokens-out
  bool whole_prefix = false;                // with key: the prefix ending there
  std::string output;                       // -o: the KV bytes
  std::optional<std::string> tokens_output; // --tokens-out: the token ids exported
  bool json = false;
};
int RunGet(const GetOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ptstore::tools
