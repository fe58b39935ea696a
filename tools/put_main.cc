// ptstore-put: stores the KV of a prefix, read from files, in a namespace
// (see man/ptstore-put.1).
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/commands.h"
#include "tools/transfer.h"

int main(int argc, char** argv) {
  namespace t = ptstore::tools;
  t::PutOptions o;
  std::string format = "raw", layout, mode;
  CLI::App app{"ptstore-put: store the KV bytes of a prefix of token ids, read from files, in a PTStore namespace",
               "ptstore-put"};
  app.set_version_flag("--version", "ptstore-put " PTSTORE_VERSION);
  app.add_option("-s,--socket", o.socket, "ptstored's unix socket (default: $PTSTORE_SOCKET, else /run/ptstore/ptstored.sock)");
  app.add_option("namespace", o.ns, "the namespace to store into")->required();
  app.add_option("-t,--tokens", o.tokens_file, "the token ids of the prefix (see --tokens-format)")->required();
  app.add_option("--tokens-format", format, "raw (little-endian uint32, the default) or text (decimal, white space between)");
  app.add_option("--kv", o.kv_file, "its KV bytes, token-major in the namespace's layout")->required();
  app.add_option("-c,--create", layout,
                 "create the namespace first (if missing) with this layout: "
                 "\"layers=L kv_heads=H head_dim=D dtype=T block_tokens=B\", or a hybrid model's groups: "
                 "\"block_tokens=B group=full:layers=L:kv_heads=H:head_dim=D:dtype=T "
                 "group=window:...:window=W group=latent:layers=L:head_dim=D:dtype=T group=state:layers=L:bytes=N\" "
                 "(ptstore(7), LAYOUTS)");
  app.add_option("-m,--mode", mode, "with --create: the namespace's mode, in octal (default 0755)");
  app.add_flag("--json", o.json, "machine-readable JSON");
  if (auto rc = t::ParseCommandLine(app, "ptstore-put", argc, argv, std::cout, std::cerr)) return *rc;
  auto f = t::ParseTokensFormat(format);
  if (!f.ok()) return t::Usage(std::cerr, "ptstore-put", "--tokens-format: " + f.status().message());
  o.tokens_format = *f;
  if (app.count("--create")) o.create_layout = layout;
  if (app.count("--mode")) o.mode = mode;
  return t::RunPut(o, std::cout, std::cerr);
}
