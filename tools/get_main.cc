// ptstore-get: writes the KV of a stored prefix to a file: the longest
// stored prefix of some token ids, or an increment by chain key (see
// man/ptstore-get.1).
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/commands.h"
#include "tools/transfer.h"

int main(int argc, char** argv) {
  namespace t = ptstore::tools;
  t::GetOptions o;
  std::string format = "raw", tokens, key, tokens_out;
  CLI::App app{"ptstore-get: write the KV bytes of a prefix stored in a PTStore namespace to a file", "ptstore-get"};
  app.set_version_flag("--version", "ptstore-get " PTSTORE_VERSION);
  app.add_option("-s,--socket", o.socket, "ptstored's unix socket (default: $PTSTORE_SOCKET, else /run/ptstore/ptstored.sock)");
  app.add_option("namespace", o.ns, "the namespace to read from")->required();
  app.add_option("-t,--tokens", tokens, "export the longest stored prefix of these token ids (see --tokens-format)");
  app.add_option("-k,--key", key, "export this increment instead: its chain key (32 hex digits)");
  app.add_flag("-w,--whole-prefix", o.whole_prefix, "with --key: the whole prefix that ends with the increment");
  app.add_option("-o,--output", o.output, "the file to write the KV bytes to (created or truncated)")->required();
  app.add_option("--tokens-out", tokens_out, "also write the token ids exported to this file");
  app.add_option("--tokens-format", format, "of --tokens and --tokens-out: raw (little-endian uint32, the default) or text");
  app.add_flag("--json", o.json, "machine-readable JSON");
  if (auto rc = t::ParseCommandLine(app, "ptstore-get", argc, argv, std::cout, std::cerr)) return *rc;
  auto f = t::ParseTokensFormat(format);
  if (!f.ok()) return t::Usage(std::cerr, "ptstore-get", "--tokens-format: " + f.status().message());
  o.tokens_format = *f;
  if (app.count("--tokens")) o.tokens_file = tokens;
  if (app.count("--key")) o.key = key;
  if (app.count("--tokens-out")) o.tokens_output = tokens_out;
  return t::RunGet(o, std::cout, std::cerr);
}
