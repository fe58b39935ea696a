// Runs one of this build's command-line tools (ptstore-ls, ptstore-stat,
// ptstore-fsck) as a child process and captures what it printed.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ptstore::testing {

struct ToolRun {
  int rc = -1;      // exit status; 128 + the signal if killed; 127 if exec failed
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `binary` with `args` and waits for it. Its environment: this
// process's, with LC_ALL=C (ASCII tree glyphs) and PTSTORE_SOCKET unset (a
// tool reaches only the server it is told of), then the variables of `env`.
ToolRun RunTool(const std::string& binary, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {});

// The lines of `s`, without their '\n'.
std::vector<std::string> Lines(const std::string& s);

}  // namespace ptstore::testing
