#include "fs/errors.h"

#include <cerrno>

namespace ptstore::fs {

int ErrnoOf(const Status& status) {
  if (status.ok()) return 0;
  if (status.code() == Code::kResourceExhausted) return ENOMEM;
  int err = ToErrno(status.code());
  return err != 0 ? err : EIO;
}

}  // namespace ptstore::fs
