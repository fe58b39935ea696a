// The commands behind ptstore-ls and ptstore-stat (ptstore-put and
// ptstore-get: tools/transfer.h). The executables are thin mains
// (tools/*_main.cc) that parse the command line with CLI11 and call RunLs /
// RunStat / RunPut / RunGet.
//
// Exit status of every tool: 0 success; 1 a failure reported by the server
// or the connection (unknown namespace, permission denied, no server), or a
// file that cannot be read or written; 2 a usage error (bad option,
// malformed namespace name or chain key, an input file whose contents do
// not fit: see tools/transfer.h).
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "ptstore/status.h"
#include "tools/format.h"

namespace CLI {
class App;
}

namespace ptstore::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// What ptstore-ls lists: "NAMESPACE", "NAMESPACE/" or "NAMESPACE/KEY" (KEY:
// 32 hex digits). InvalidArgument naming the bad part otherwise.
struct LsTarget {
  std::string ns;
  ChainKey key;  // zero: the namespace root
  bool has_key = false;
};
Result<LsTarget> ParseLsTarget(std::string_view arg);

struct LsOptions {
  std::string socket;  // empty: $PTSTORE_SOCKET, else the default
  bool long_format = false;
  bool recursive = false;
  bool json = false;
  bool where = false;  // with a namespace: the nodes holding each increment (asks every node)
  bool sort_time = false;             // -t: newest `time` first (siblings, in a tree)
  TimeField time = TimeField::kMtime;  // the time shown in long listings and sorted by
  // --unused-for: only what no one used (atime) for this long: namespaces,
  // or increments, and with -R only the top of each such subtree (what lies
  // below an increment is never used later than it).
  std::optional<uint64_t> unused_for_ns;
  std::optional<std::string> target;  // none: list the namespaces
  TreeStyle style = TreeStyle::kAscii;
};
int RunLs(const LsOptions& options, std::ostream& out, std::ostream& err);
// "90", "90s", "15m", "1.5h", "2d" -> nanoseconds. InvalidArgument naming
// the text otherwise.
Result<uint64_t> ParseDuration(std::string_view text);

struct StatOptions {
  std::string socket;
  bool json = false;
  std::optional<std::string> ns;
  // With ns: one increment of it, by chain key (32 hex digits), instead of
  // the node's and the namespace's figures.
  std::optional<std::string> key;
  // --fabric: this machine's RDMA devices and libfabric providers, and the
  // one ptstored would use with this provider and node
  // (rdma/fabric_report.h); no ptstored needed. Not with ns or key.
  bool fabric = false;
  std::optional<std::string> fabric_provider;  // default: FabricOptions'
  std::optional<std::string> fabric_node;
};
int RunStat(const StatOptions& options, std::ostream& out, std::ostream& err);

// ------------------------------------------------ shared by every tool

// "prog: code: message" on err (a failure: the caller returns kExitFailure).
void Report(std::ostream& err, const char* prog, const Status& st);
// "prog: message (see --help)" on err; returns kExitUsage.
int Usage(std::ostream& err, const char* prog, const std::string& message);
// A client for a tool: `socket` (empty: $PTSTORE_SOCKET, else the default),
// one connection, no arena mapping (loads are copied).
Result<std::unique_ptr<Client>> ConnectTool(const std::string& socket, const char* prog);
// The JSON, indented, and a newline.
void Emit(std::ostream& out, const Json& j);

// Parses argv into `app`. Returns nullopt to go on, or the exit status to
// return now: 0 after --help/--version (printed to out), kExitUsage after a
// one-line "prog: message (see --help)" on err.
std::optional<int> ParseCommandLine(CLI::App& app, const char* prog, int argc, char** argv, std::ostream& out,
                                    std::ostream& err);

// Box-drawing glyphs when the locale's character set is UTF-8 (call after
// setlocale), ASCII otherwise.
TreeStyle TreeStyleFromLocale();

}  // namespace ptstore::tools
