#include "ptstore/status.h"

#include <cerrno>
#include <cstring>
#include <iterator>

namespace ptstore {

std::string_view CodeName(Code code) {
  switch (code) {
#define PTSTORE_CODE_NAME(e, value, name, err, http, py) \
  case Code::e:                                          \
    return name;
    PTSTORE_STATUS_CODES(PTSTORE_CODE_NAME)
#undef PTSTORE_CODE_NAME
  }
  return "unknown";
}

int ToErrno(Code code) {
  switch (code) {
#define PTSTORE_CODE_ERRNO(e, value, name, err, http, py) \
  case Code::e:                                           \
    return err;
    PTSTORE_STATUS_CODES(PTSTORE_CODE_ERRNO)
#undef PTSTORE_CODE_ERRNO
  }
  return EIO;
}

int HttpStatusOf(Code code) {
  switch (code) {
#define PTSTORE_CODE_HTTP(e, value, name, err, http, py) \
  case Code::e:                                          \
    return http;
    PTSTORE_STATUS_CODES(PTSTORE_CODE_HTTP)
#undef PTSTORE_CODE_HTTP
  }
  return 500;
}

namespace {
// The registry's wire values, in its order: dense from 0, so the last is
// the largest and every value up to it is a code.
constexpr uint16_t kValues[] = {
#define PTSTORE_CODE_VALUE(e, value, name, err, http, py) value,
    PTSTORE_STATUS_CODES(PTSTORE_CODE_VALUE)
#undef PTSTORE_CODE_VALUE
};
constexpr bool Dense() {
  for (size_t i = 0; i < std::size(kValues); ++i) {
    if (kValues[i] != i) return false;
  }
  return true;
}
static_assert(Dense(), "ptstore/status_codes.h: values must be 0, 1, 2, ... in the table's order");
constexpr uint16_t kLastCode = kValues[std::size(kValues) - 1];
}  // namespace

Code CodeFromWire(uint16_t value) {
  if (value > kLastCode) return Code::kProtocol;
  return static_cast<Code>(value);
}

Status::Status(Code code, std::string message) {
  if (code != Code::kOk) state_ = std::make_unique<State>(State{code, std::move(message)});
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(CodeName(state_->code));
  out += ": ";
  out += state_->message;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string m(context);
  m += ": ";
  m += state_->message;
  return Status(state_->code, std::move(m));
}

Status ErrnoError(std::string_view what, int err) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  Code code = Code::kIOError;
  if (err == ENOENT) code = Code::kNotFound;
  if (err == EACCES || err == EPERM) code = Code::kPermissionDenied;
  if (err == ENOSPC || err == EDQUOT || err == ENOMEM) code = Code::kResourceExhausted;
  if (err == EEXIST) code = Code::kAlreadyExists;
  if (err == ECONNREFUSED || err == ECONNRESET || err == EPIPE || err == ENOTCONN) code = Code::kUnavailable;
  if (err == ETIMEDOUT || err == EAGAIN) code = Code::kDeadlineExceeded;
  return Status(code, std::move(m));
}

}  // namespace ptstore
