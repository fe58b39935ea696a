// What bench_cluster's sections share: the check of loaded bytes against
// their source, CPU times of this process and of its servers, and the small
// formatting helpers of its tables.
//
// Thread safety: every function is safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::bench::cluster_bench {

using json = nlohmann::json;

// OK when `data` holds the KV generator's bytes (bench/workload.h) of
// `tokens` from position 0; else Corruption naming `what` and the first
// wrong byte.
Status CheckKv(const char* what, std::span<const uint32_t> tokens, uint64_t bpt, const uint8_t* data);

// CPU time (user + system, all threads, exited ones included) of this
// process, and of another process (/proc/<pid>/stat: clock ticks).
double SelfCpuSeconds();
double ProcCpuSeconds(pid_t pid);

// Median of a sample, or 0.
double P50(const std::vector<double>& v);

// "1.23": a ratio in the tables.
std::string Ratio(double r);

}  // namespace ptstore::bench::cluster_bench
