#include "ptstore/status.h"

#include <cerrno>
#include <cstring>

namespace ptstore {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kNotFound: return "not_found";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kAlreadyExists: return "already_exists";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kUnavailable: return "unavailable";
    case Code::kDeadlineExceeded: return "deadline_exceeded";
    case Code::kCorruption: return "corruption";
    case Code::kProtocol: return "protocol_error";
    case Code::kIOError: return "io_error";
    case Code::kAborted: return "aborted";
    case Code::kInternal: return "internal";
    case Code::kUnimplemented: return "unimplemented";
  }
  return "unknown";
}

int ToErrno(Code code) {
  switch (code) {
    case Code::kOk: return 0;
    case Code::kNotFound: return ENOENT;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kAlreadyExists: return EEXIST;
    case Code::kPermissionDenied: return EACCES;
    case Code::kResourceExhausted: return ENOSPC;
    case Code::kUnavailable: return ENOTCONN;
    case Code::kDeadlineExceeded: return ETIMEDOUT;
    case Code::kCorruption: return EIO;
    case Code::kProtocol: return EPROTO;
    case Code::kIOError: return EIO;
    case Code::kAborted: return EAGAIN;
    case Code::kInternal: return EIO;
    case Code::kUnimplemented: return ENOSYS;
  }
  return EIO;
}

Code CodeFromWire(uint16_t value) {
  if (value > static_cast<uint16_t>(Code::kUnimplemented)) return Code::kProtocol;
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
