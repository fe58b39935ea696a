// ptstore-ls: lists namespaces and the increments of their prefix trees
// (see man/ptstore-ls.1).
#include <CLI/CLI.hpp>
#include <clocale>
#include <iostream>

#include "tools/commands.h"

int main(int argc, char** argv) {
  std::setlocale(LC_CTYPE, "");
  ptstore::tools::LsOptions o;
  std::string target;
  CLI::App app{"ptstore-ls: list PTStore namespaces, or the increments of a namespace's prefix tree", "ptstore-ls"};
  app.set_version_flag("--version", "ptstore-ls " PTSTORE_VERSION);
  app.add_option("-s,--socket", o.socket, "ptstored's unix socket (default: $PTSTORE_SOCKET, else /run/ptstore/ptstored.sock)");
  app.add_flag("-l,--long", o.long_format, "long format: one row per entry with its sizes and counters");
  app.add_flag("-R,--recursive", o.recursive, "the whole subtree, drawn as an indented tree");
  app.add_flag("--json", o.json, "machine-readable JSON (exact sizes)");
  app.add_flag("-w,--where", o.where,
               "with NAMESPACE: also the cluster nodes that hold each increment's bytes (owner first; implies -l)");
  app.add_option("path", target, "NAMESPACE or NAMESPACE/KEY (KEY: a chain key, 32 hex digits)");
  if (auto rc = ptstore::tools::ParseCommandLine(app, "ptstore-ls", argc, argv, std::cout, std::cerr)) return *rc;
  if (app.count("path")) o.target = target;
  o.style = ptstore::tools::TreeStyleFromLocale();
  return ptstore::tools::RunLs(o, std::cout, std::cerr);
}
