#include "tests/core/alloc_probe.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_track{false};
std::atomic<size_t> g_max_alloc{0};
}  // namespace

void* operator new(size_t n) {
  if (g_track.load(std::memory_order_relaxed)) {
    size_t cur = g_max_alloc.load(std::memory_order_relaxed);
    while (n > cur && !g_max_alloc.compare_exchange_weak(cur, n)) {
    }
  }
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
// Out of line, or gcc inlines free() at delete sites and warns that the
// pointer came from operator new (-Wmismatched-new-delete).
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace ptstore::testing {

AllocProbe::AllocProbe() {
  g_max_alloc = 0;
  g_track = true;
}
AllocProbe::~AllocProbe() { g_track = false; }
size_t AllocProbe::max() const { return g_max_alloc.load(); }

}  // namespace ptstore::testing
