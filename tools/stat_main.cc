// ptstore-stat: the statistics of the local ptstored, of one namespace, and
// of one increment (see man/ptstore-stat.1).
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/commands.h"

int main(int argc, char** argv) {
  ptstore::tools::StatOptions o;
  std::string ns;
  std::string key;
  CLI::App app{"ptstore-stat: statistics of the local PTStore node server (ptstored)", "ptstore-stat"};
  app.set_version_flag("--version", "ptstore-stat " PTSTORE_VERSION);
  app.add_option("-s,--socket", o.socket, "ptstored's unix socket (default: $PTSTORE_SOCKET, else /run/ptstore/ptstored.sock)");
  app.add_flag("--json", o.json, "machine-readable JSON (exact sizes)");
  app.add_option("namespace", ns, "also show this namespace's layout, sizes and counters");
  app.add_option("-k,--key", key, "show one increment of the namespace instead: its chain key (32 hex digits)");
  std::string provider;
  std::string node;
  app.add_flag("--fabric", o.fabric,
               "show this machine's RDMA devices and libfabric providers instead (no ptstored needed)");
  app.add_option("--provider", provider, "with --fabric: the libfabric provider to check (default tcp)");
  app.add_option("--node", node, "with --fabric: the local address to bind (default 127.0.0.1)");
  if (auto rc = ptstore::tools::ParseCommandLine(app, "ptstore-stat", argc, argv, std::cout, std::cerr)) return *rc;
  if (app.count("namespace")) o.ns = ns;
  if (app.count("--key")) o.key = key;
  if (app.count("--provider")) o.fabric_provider = provider;
  if (app.count("--node")) o.fabric_node = node;
  return ptstore::tools::RunStat(o, std::cout, std::cerr);
}
