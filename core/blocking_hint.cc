#include "core/blocking_hint.h"

namespace ptstore::core {
namespace {
thread_local BlockingHint tls_hint = nullptr;
thread_local void* tls_arg = nullptr;
}  // namespace

void SetBlockingHint(BlockingHint hint, void* arg) {
  tls_hint = hint;
  tls_arg = arg;
}

void WillBlock() {
  BlockingHint hint = tls_hint;
  if (hint == nullptr) return;
  void* arg = tls_arg;
  tls_hint = nullptr;
  tls_arg = nullptr;
  hint(arg);
}

}  // namespace ptstore::core
