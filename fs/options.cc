#include "fs/options.h"

#include <climits>
#include <cstdlib>
#include <memory>
#include <fstream>
#include <sstream>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

#include "ptstore/options.h"

namespace ptstore::fs {

namespace {

struct RawOptions {
  char* socket = nullptr;
  char* layout = nullptr;
  double entry_timeout = -1;  // not given
  double attr_timeout = -1;
  int change_poll_ms = 100;
  long long prefetch_limit = 262144;
  int readahead_kb = 4096;
  int spin_us = 50;
};

#define PTS_OPT(t, p) {t, offsetof(RawOptions, p), 1}
const fuse_opt kOptions[] = {
    PTS_OPT("socket=%s", socket),
    PTS_OPT("layout=%s", layout),
    PTS_OPT("entry_timeout=%lf", entry_timeout),
    PTS_OPT("attr_timeout=%lf", attr_timeout),
    PTS_OPT("readahead_kb=%d", readahead_kb),
    PTS_OPT("change_poll_ms=%d", change_poll_ms),
    PTS_OPT("prefetch_limit=%lld", prefetch_limit),
    PTS_OPT("spin_us=%d", spin_us),
    FUSE_OPT_END,
};
#undef PTS_OPT

}  // namespace

const char* MountOptionsHelp() {
  return "PTStore options:\n"
         "    -o socket=PATH         ptstored socket (default $PTSTORE_SOCKET or /run/ptstore/ptstored.sock)\n"
         "    -o layout=TEXT         layout of namespaces made by mkdir (default Mistral-7B;\n"
         "                           'layers=32:kv_heads=8:head_dim=128:dtype=bf16:block_tokens=16', or groups:\n"
         "                           'block_tokens=16:group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16:\n"
         "                           group=state:layers=8:bytes=65536')\n"
         "    -o entry_timeout=SECS  name cache time (default 3600; 1 with change_poll_ms=0)\n"
         "    -o attr_timeout=SECS   attribute cache time (default 3600; 1 with change_poll_ms=0)\n"
         "    -o change_poll_ms=MS   poll the store's changes this often and invalidate the kernel's cache\n"
         "                           (default 100; 0: never, then the timeouts alone bound staleness)\n"
         "    -o prefetch_limit=N    list whole subtrees in one round trip in namespaces of at most N\n"
         "                           increments (default 262144; 0: one directory at a time)\n"
         "    -o readahead_kb=KIB    kernel readahead of the mount (default 4096; 0: leave the kernel's)\n"
         "    -o spin_us=US          while requests come in a stream, look for the next this long before\n"
         "                           sleeping (default 50; 0: sleep at once)\n";
}

Result<MountOptions> ParseMountOptions(fuse_args* args) {
  RawOptions raw;
  if (fuse_opt_parse(args, &raw, kOptions, nullptr) != 0) return InvalidArgument("cannot parse the mount options");
  // fuse_opt_parse strdup()s string options: freed on every return.
  const std::unique_ptr<char, decltype(&free)> socket(raw.socket, &free), layout_text(raw.layout, &free);
  MountOptions o;
  if (raw.socket != nullptr && *raw.socket != '\0') {
    o.socket_path = raw.socket;
  } else if (const char* env = std::getenv("PTSTORE_SOCKET"); env != nullptr && *env != '\0') {
    o.socket_path = env;
  } else {
    o.socket_path = kDefaultSocketPath;
  }
  if (raw.layout != nullptr) {
    std::string text = raw.layout;
    auto layout = Layout::Parse(text);
    if (!layout.ok()) return InvalidArgument("layout=" + std::string(raw.layout) + ": " + layout.status().message());
    PTS_RETURN_IF_ERROR(layout->Validate());
    o.layout = *layout;
  }
  if (raw.change_poll_ms < 0 || raw.change_poll_ms > 60000) {
    return InvalidArgument("change_poll_ms must be between 0 and 60000");
  }
  if (raw.prefetch_limit < 0 || raw.prefetch_limit > (1ll << 32)) {
    return InvalidArgument("prefetch_limit must be between 0 and 4294967296");
  }
  // Long kernel timeouts are safe only while the mount pushes changes.
  const double default_timeout = raw.change_poll_ms > 0 ? 3600.0 : 1.0;
  if (raw.entry_timeout == -1) raw.entry_timeout = default_timeout;
  if (raw.attr_timeout == -1) raw.attr_timeout = default_timeout;
  if (!(raw.entry_timeout >= 0 && raw.entry_timeout <= 86400)) {
    return InvalidArgument("entry_timeout must be between 0 and 86400 seconds");
  }
  if (!(raw.attr_timeout >= 0 && raw.attr_timeout <= 86400)) {
    return InvalidArgument("attr_timeout must be between 0 and 86400 seconds");
  }
  o.change_poll_ms = static_cast<uint32_t>(raw.change_poll_ms);
  o.prefetch_limit = static_cast<uint64_t>(raw.prefetch_limit);
  if (raw.readahead_kb < 0 || raw.readahead_kb > (1 << 20)) {
    return InvalidArgument("readahead_kb must be between 0 and 1048576");
  }
  if (raw.spin_us < 0 || raw.spin_us > 10000) return InvalidArgument("spin_us must be between 0 and 10000");
  o.spin_us = static_cast<uint32_t>(raw.spin_us);
  o.entry_timeout = raw.entry_timeout;
  o.attr_timeout = raw.attr_timeout;
  o.readahead_kb = static_cast<uint32_t>(raw.readahead_kb);
  return o;
}

Status SetMountReadahead(const std::string& mountpoint, uint32_t kib) {
  // The device comes from /proc/self/mountinfo, never from stat(2) of the
  // mountpoint: before the session loop runs, nobody would answer it.
  char resolved[PATH_MAX];
  const std::string mp = ::realpath(mountpoint.c_str(), resolved) != nullptr ? resolved : mountpoint;
  std::ifstream in("/proc/self/mountinfo");
  std::string line, dev;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint ...
    std::istringstream f(line);
    std::string id, parent, majmin, root, point;
    if (f >> id >> parent >> majmin >> root >> point && point == mp) dev = majmin;  // the last one wins
  }
  if (dev.empty()) return NotFound(mp + " is not in /proc/self/mountinfo");
  const std::string path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return IOError("open " + path + ": " + std::strerror(errno));
  const bool ok = std::fprintf(file, "%u\n", kib) > 0;
  const bool closed = std::fclose(file) == 0;
  if (!ok || !closed) return IOError("write " + path + ": " + std::strerror(errno));
  return Status::OK();
}

}  // namespace ptstore::fs
