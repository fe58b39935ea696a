#include "core/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <string>

namespace ptstore::core {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::string& ProgramName() {
  static std::string name = "ptstore";
  return name;
}
const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO ";
    case LogLevel::kWarn: return "WARN ";
    case LogLevel::kError: return "ERROR";
  }
  return "?    ";
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(std::string_view name, LogLevel* level) {
  if (name == "debug") *level = LogLevel::kDebug;
  else if (name == "info") *level = LogLevel::kInfo;
  else if (name == "warn" || name == "warning") *level = LogLevel::kWarn;
  else if (name == "error") *level = LogLevel::kError;
  else return false;
  return true;
}

void SetLogProgramName(std::string_view name) { ProgramName() = std::string(name); }

std::string LogTimestamp() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(tv.tv_usec / 1000));
  return stamp;
}

void LogLine(LogLevel level, std::string_view component, std::string_view message) {
  std::string line;
  line.reserve(64 + component.size() + message.size());
  line += LogTimestamp();
  line += ' ';
  line += ProgramName();
  line += '[' + std::to_string(getpid()) + "] ";
  line += LevelName(level);
  line += ' ';
  line += component;
  line += ": ";
  line += message;
  line += '\n';
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace ptstore::core
