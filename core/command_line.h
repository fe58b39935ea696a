// How PTStore's daemons (ptstored, ptstore-sched) and benchmarks end on
// their command line: CLI11 parses it; --help (or --version) prints and
// exits 0, a usage error prints CLI11's message and exits 2 (as ptstored(8)
// and ptstore-sched(8) document).
//
//   CLI::App app{"..."};
//   ... add the options ...
//   if (std::optional<int> rc = core::ParseCommandLine(app, argc, argv)) return *rc;
//
// Header-only over CLI11: a target that includes it links
// ptstore_command_line (core/CMakeLists.txt), which brings CLI11::CLI11;
// ptstore_core itself does not depend on CLI11. The tools (tools/
// commands.cc) print their own usage line instead.
//
// Thread safety: as CLI::App::parse (call it from main, before threads).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>

namespace ptstore::core {

// Parses argc/argv into `app`. Returns std::nullopt when the program goes
// on; otherwise the status main returns now (CLI11 has printed the help or
// the error): 0 for --help, 2 for a usage error.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace ptstore::core
