#include "fs/options.h"

#include <cstddef>
#include <cstdlib>
#include <string>

#include "ptstore/options.h"

namespace ptstore::fs {

namespace {

struct RawOptions {
  char* socket = nullptr;
  char* layout = nullptr;
  double entry_timeout = 1.0;
  double attr_timeout = 1.0;
};

#define PTS_OPT(t, p) {t, offsetof(RawOptions, p), 1}
const fuse_opt kOptions[] = {
    PTS_OPT("socket=%s", socket),
    PTS_OPT("layout=%s", layout),
    PTS_OPT("entry_timeout=%lf", entry_timeout),
    PTS_OPT("attr_timeout=%lf", attr_timeout),
    FUSE_OPT_END,
};
#undef PTS_OPT

}  // namespace

const char* MountOptionsHelp() {
  return "PTStore options:\n"
         "    -o socket=PATH         ptstored socket (default $PTSTORE_SOCKET or /run/ptstore/ptstored.sock)\n"
         "    -o layout=TEXT         layout of namespaces made by mkdir (default Mistral-7B;\n"
         "                           'layers=32:kv_heads=8:head_dim=128:dtype=bf16:block_tokens=16')\n"
         "    -o entry_timeout=SECS  name cache time (default 1)\n"
         "    -o attr_timeout=SECS   attribute cache time (default 1)\n";
}

Result<MountOptions> ParseMountOptions(fuse_args* args) {
  RawOptions raw;
  if (fuse_opt_parse(args, &raw, kOptions, nullptr) != 0) return InvalidArgument("cannot parse the mount options");
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
    for (char& c : text) {
      if (c == ':') c = ' ';
    }
    auto layout = Layout::Parse(text);
    if (!layout.ok()) return InvalidArgument("layout=" + std::string(raw.layout) + ": " + layout.status().message());
    PTS_RETURN_IF_ERROR(layout->Validate());
    o.layout = *layout;
  }
  free(raw.socket);
  free(raw.layout);
  if (!(raw.entry_timeout >= 0 && raw.entry_timeout <= 86400)) {
    return InvalidArgument("entry_timeout must be between 0 and 86400 seconds");
  }
  if (!(raw.attr_timeout >= 0 && raw.attr_timeout <= 86400)) {
    return InvalidArgument("attr_timeout must be between 0 and 86400 seconds");
  }
  o.entry_timeout = raw.entry_timeout;
  o.attr_timeout = raw.attr_timeout;
  return o;
}

}  // namespace ptstore::fs
