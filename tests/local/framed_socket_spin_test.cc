// FramedSocket::SetSpin (local/framed_socket.h): a receiver that looks for
// the next frame awake before it sleeps still gets every frame whole, keeps
// its deadlines, and sees a closed peer.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>
#include <vector>

#include "local/framed_socket.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  std::unique_ptr<local::FramedSocket> a, b;
  Pair() {
    int p[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
    a = std::make_unique<local::FramedSocket>(p[0]);
    b = std::make_unique<local::FramedSocket>(p[1]);
  }
};

std::vector<uint8_t> Body(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// Frames that come at once (inside the spin), after the spin (the receiver
// sleeps) and in a stream again, of sizes up to several socket buffers.
TEST(FramedSocketSpin, EveryFrameArrivesWholeWhetherItFindsTheReceiverAwakeOrAsleep) {
  Pair p;
  p.b->SetSpin(200);
  const std::vector<int> gaps_us = {0, 0, 5000, 0, 10, 3000, 0, 0, 100, 0};
  std::thread sender([&] {
    for (size_t i = 0; i < gaps_us.size(); ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(gaps_us[i]));
      const std::vector<uint8_t> body = Body(i % 2 ? 64 : (1u << 20) + i, static_cast<uint8_t>(i));
      EXPECT_OK(p.a->Send(7, i, body));
    }
  });
  for (size_t i = 0; i < gaps_us.size(); ++i) {
    Result<local::Frame> f = i % 3 == 0 ? p.b->ReceiveWithin(10000) : p.b->Receive(10000);
    ASSERT_OK(f);
    EXPECT_EQ(f->request_id, i);
    EXPECT_EQ(f->body, Body(i % 2 ? 64 : (1u << 20) + i, static_cast<uint8_t>(i))) << "frame " << i;
  }
  sender.join();
}

// The spin never outlasts a receive's deadline: with a 50 ms spin, a
// receive of 2 ms on a silent socket fails in about 2 ms.
TEST(FramedSocketSpin, ADeadlineShorterThanTheSpinStillHolds) {
  Pair p;
  p.b->SetSpin(50000);
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    EXPECT_ERROR(p.b->Receive(2), Code::kDeadlineExceeded);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    EXPECT_LT(ms, 40.0) << "the receive waited for the spin, not its deadline";
  }
}

TEST(FramedSocketSpin, APeerThatClosesWhileTheReceiverSpinsIsUnavailable) {
  Pair p;
  p.b->SetSpin(10000);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    p.a.reset();
  });
  EXPECT_ERROR(p.b->Receive(5000), Code::kUnavailable);
  closer.join();
}

}  // namespace
}  // namespace ptstore
