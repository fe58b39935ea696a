// The baselines bench_cluster measures a remote load against, in the same
// run and on the same bytes: raw loopback TCP in this process, and a
// redis-server of its own read through hiredis (built with it only:
// PTSTORE_BENCH_HIREDIS).
//
// Thread safety: one thread drives a baseline (its own threads send and
// receive inside Transfer and GetAll).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ptstore/status.h"

#ifdef PTSTORE_BENCH_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace ptstore::bench::cluster_bench {

// `n` loopback TCP connections in this process. The far end of connection
// k sends slice k of `src` (4 KiB-aligned slices) each time it reads a
// 1-byte request; Transfer() asks on every connection at once and receives
// the slices into dst, like a remote load asks its owner and receives.
// `src` must outlive the baseline.
class TcpBaseline {
 public:
  static Result<std::unique_ptr<TcpBaseline>> Open(int n, const uint8_t* src, uint64_t bytes);
  ~TcpBaseline();
  // Seconds from the requests to the last byte received.
  Result<double> Transfer(uint8_t* dst);

 private:
  struct Conn {
    int rx = -1, tx = -1;
    uint64_t off = 0, len = 0;
    std::thread sender;
  };
  TcpBaseline() = default;
  std::vector<Conn> conns_;
};

// The first executable `name` on PATH (or name itself when it has a '/');
// "" when there is none.
std::string FindInPath(const std::string& name);

#ifdef PTSTORE_BENCH_HIREDIS
// A redis-server of this benchmark: a free loopback port, no persistence
// (--save "" --appendonly no), a temporary directory; SIGTERM and removed
// when destroyed (and SIGTERM if this process dies: PR_SET_PDEATHSIG).
class RedisBaseline {
 public:
  static Result<std::unique_ptr<RedisBaseline>> Start(const std::string& binary);
  ~RedisBaseline();
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // SETs src as values of `value` bytes (keys kv:0, kv:1, ...), pipelined.
  Result<double> SetAll(const uint8_t* src, uint64_t bytes, uint64_t value);

  // GETs every value into dst with `clients` connections (each a contiguous
  // run of keys) keeping `depth` requests in flight on each (1: one at a
  // time, redisCommand). Seconds.
  Result<double> GetAll(uint8_t* dst, uint64_t bytes, uint64_t value, int depth, int clients);

 private:
  RedisBaseline() = default;
  redisContext* ConnectOne() const;
  std::string dir_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  std::vector<redisContext*> clients_;
};
#endif  // PTSTORE_BENCH_HIREDIS

}  // namespace ptstore::bench::cluster_bench
