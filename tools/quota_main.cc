// ptstore-quota: namespace quotas on the local ptstored (man/ptstore-quota.1).
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/commands.h"
#include "tools/quota.h"

int main(int argc, char** argv) {
  ptstore::tools::QuotaOptions o;
  std::string ns, dram, ssd;
  CLI::App app{"ptstore-quota: DRAM and SSD byte quotas of namespaces on the local ptstored", "ptstore-quota"};
  app.set_version_flag("--version", "ptstore-quota " PTSTORE_VERSION);
  app.add_option("-s,--socket", o.socket, "ptstored's unix socket (default: $PTSTORE_SOCKET, else /run/ptstore/ptstored.sock)");
  app.add_flag("--json", o.json, "machine-readable JSON (exact sizes)");
  app.add_option("namespace", ns, "the namespace (default: list every namespace)");
  app.add_option("--dram", dram, "set its DRAM quota: a size such as 4GiB, 512MiB, 10GB; 0 or none: no limit");
  app.add_option("--ssd", ssd, "set its SSD quota (a node with an SSD tier), as --dram");
  if (auto rc = ptstore::tools::ParseCommandLine(app, "ptstore-quota", argc, argv, std::cout, std::cerr)) return *rc;
  if (app.count("namespace")) o.ns = ns;
  if (app.count("--dram")) o.dram = dram;
  if (app.count("--ssd")) o.ssd = ssd;
  return ptstore::tools::RunQuota(o, std::cout, std::cerr);
}
