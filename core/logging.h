// Readable log lines on stderr:
//   2026-11-29T11:50:00.123Z ptstored[4242] INFO  server: listening on /run/ptstore.sock
// Thread safe: each line is written with one write(2).
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace ptstore::core {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// "debug", "info", "warn", "error"; false when the name is unknown.
bool ParseLogLevel(std::string_view name, LogLevel* level);
void SetLogProgramName(std::string_view name);
void LogLine(LogLevel level, std::string_view component, std::string_view message);
// The time as log lines show it: "2026-11-29T11:50:00.123Z" (UTC, milliseconds).
std::string LogTimestamp();

}  // namespace ptstore::core

#define PTS_LOG(level, component, expr)                                                   \
  do {                                                                                    \
    if (::ptstore::core::LogLevel::level >= ::ptstore::core::GetLogLevel()) {             \
      std::ostringstream pts_log_os_;                                                     \
      pts_log_os_ << expr;                                                                \
      ::ptstore::core::LogLine(::ptstore::core::LogLevel::level, component, pts_log_os_.str()); \
    }                                                                                     \
  } while (0)
#define PTS_DEBUG(component, expr) PTS_LOG(kDebug, component, expr)
#define PTS_INFO(component, expr) PTS_LOG(kInfo, component, expr)
#define PTS_WARN(component, expr) PTS_LOG(kWarn, component, expr)
#define PTS_ERROR(component, expr) PTS_LOG(kError, component, expr)
