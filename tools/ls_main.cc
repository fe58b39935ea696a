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
  app.add_flag("-t", o.sort_time, "sort by time, newest first (mtime; with -u atime, with -c ctime)");
  bool atime = false, ctime = false;
  std::string time_word;
  app.add_flag("-u", atime, "show and sort by atime: the last use (lookup, pin, load, read, a peer's fetch)");
  app.add_flag("-c", ctime, "show and sort by ctime: the last metadata change (a split, times set)");
  app.add_option("--time", time_word, "the time shown and sorted by: mtime (stored, the default), atime or ctime")
      ->check(CLI::IsMember({"mtime", "atime", "ctime", "access", "use", "status"}));
  std::string unused_for;
  app.add_option("--unused-for", unused_for,
                 "only what no one used for DURATION (90s, 15m, 1h, 2d); with -R the top of each such subtree");
  app.add_option("path", target, "NAMESPACE or NAMESPACE/KEY (KEY: a chain key, 32 hex digits)");
  if (auto rc = ptstore::tools::ParseCommandLine(app, "ptstore-ls", argc, argv, std::cout, std::cerr)) return *rc;
  if (app.count("path")) o.target = target;
  using ptstore::tools::TimeField;
  if (atime || time_word == "atime" || time_word == "access" || time_word == "use") o.time = TimeField::kAtime;
  if (ctime || time_word == "ctime" || time_word == "status") o.time = TimeField::kCtime;
  if (app.count("--unused-for")) {
    auto d = ptstore::tools::ParseDuration(unused_for);
    if (!d.ok()) return ptstore::tools::Usage(std::cerr, "ptstore-ls", "--unused-for: " + d.status().message());
    o.unused_for_ns = *d;
  }
  o.style = ptstore::tools::TreeStyleFromLocale();
  return ptstore::tools::RunLs(o, std::cout, std::cerr);
}
