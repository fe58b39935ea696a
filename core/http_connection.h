// One client connection of core/http_server.h: its state, buffers and
// deadline, and the non-blocking steps that move it along: read the request
// (headers, then Content-Length body bytes), write the response, then
// half-close and drain the peer's remaining bytes until its FIN.
//
//   kReading --whole request--> kHandling (a worker runs the handler)
//      |                            |
//      +--handler on the poll thread or an error--+--> kWriting --> kDraining
//
// Thread safety: none; only the server's poll thread touches a connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/http_message.h"

namespace ptstore::core {

struct HttpConnection {
  using Clock = std::chrono::steady_clock;
  enum class State { kReading, kHandling, kWriting, kDraining };
  // What a read step found.
  enum class ReadStep {
    kWaiting,   // no whole request yet: poll on
    kWhole,     // the request is in: TakeRequest
    kRejected,  // the server answers *error itself
    kClosed,    // EOF or an error before a whole request: close it
  };

  uint64_t id = 0;
  int fd = -1;
  State state = State::kReading;
  std::string in;
  std::string out;
  size_t sent = 0;
  Clock::time_point deadline;
  Clock::time_point accepted_at;
  // Once the headers are in: where they end and what they ask.
  size_t header_end = 0;
  std::optional<HttpHead> head;

  // Reads what the request needs (the headers' cap, then the body) with
  // `buf` as scratch; pipelined extras are ignored. Parses the headers
  // once they are in and answers "Expect: 100-continue". kRejected sets
  // *error (400, 413, 431, 501, 505). REQUIRES: state kReading.
  ReadStep Read(size_t max_request_bytes, size_t max_body_bytes, char* buf, size_t buf_size, HttpError* error);
  // The whole request, its body cut from `in` (which is cleared).
  // REQUIRES: Read returned kWhole.
  HttpRequest TakeRequest();
  // Starts writing `r` (without its body for HEAD), to be sent within
  // write_timeout_ms.
  void Respond(const HttpResponse& r, int write_timeout_ms);
  // Sends what the socket takes; once all is sent, half-closes and goes to
  // kDraining. False: the connection failed (close it). REQUIRES: kWriting.
  bool Write();
  // Reads and drops the peer's bytes. False: EOF or an error (close it).
  // REQUIRES: kDraining.
  bool Drain(char* buf, size_t buf_size);
};

}  // namespace ptstore::core
