// ptstore-fsck: checks the segment files of an SSD-tier data directory,
// read-only (see man/ptstore-fsck.8).
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/commands.h"
#include "tools/fsck.h"

int main(int argc, char** argv) {
  ptstore::tools::FsckOptions o;
  CLI::App app{"ptstore-fsck: check the segment files of a PTStore SSD data directory (read-only)", "ptstore-fsck"};
  app.set_version_flag("--version", "ptstore-fsck " PTSTORE_VERSION);
  app.add_flag("-q,--quick", o.quick, "headers only: skip payload checksums and decompression");
  app.add_flag("-l,--list", o.list, "also list every record");
  app.add_flag("--json", o.json, "machine-readable JSON (exact sizes and offsets)");
  app.add_option("dir", o.dir, "the SSD data directory (ssd.dir of ptstored)")->required();
  if (auto rc = ptstore::tools::ParseCommandLine(app, "ptstore-fsck", argc, argv, std::cout, std::cerr)) return *rc;
  return ptstore::tools::RunFsck(o, std::cout, std::cerr);
}
