#include "bench/bench_cluster_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "bench/bench_util.h"
#include "bench/workload.h"

namespace ptstore::bench::cluster_bench {

Status CheckKv(const char* what, std::span<const uint32_t> tokens, uint64_t bpt, const uint8_t* data) {
  if (auto bad = VerifyKv(tokens, 0, bpt, data)) return Corruption(std::string(what) + ": " + bad->ToString());
  return Status::OK();
}

double SelfCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}
double ProcCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');  // the command may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream f(line.substr(close + 2));
  std::string field;
  double ticks = 0;
  // Fields 3.. after the command; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && f >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double P50(const std::vector<double>& v) { return Summarize(v).p50; }

std::string Ratio(double r) { return Format("%.2f", r); }

}  // namespace ptstore::bench::cluster_bench
