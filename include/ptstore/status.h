// Status and Result<T>: the one error vocabulary of PTStore.
//
// A Status is either OK (which costs one null pointer) or a Code plus a
// human-readable message naming what was wrong. Codes are a registry, one
// table (ptstore/status_codes.h) that the enum, CodeName, ToErrno,
// HttpStatusOf, CodeFromWire and Python's exceptions all come from: their
// numeric values cross the wire (docs/wire-format.md). Never renumber a code;
// only append.
//
// Thread safety: Status and Result are values; distinct objects may be used
// from distinct threads without synchronisation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "ptstore/status_codes.h"

namespace ptstore {

// The codes, from the registry (include/ptstore/status_codes.h, which says
// what each means).
enum class Code : uint16_t {
#define PTSTORE_CODE_ENUMERATOR(e, value, name, err, http, py) e = value,
  PTSTORE_STATUS_CODES(PTSTORE_CODE_ENUMERATOR)
#undef PTSTORE_CODE_ENUMERATOR
};

// Stable lower_snake name of a code ("not_found"), used in logs and JSON.
std::string_view CodeName(Code code);
// errno equivalent of a code, for fs/ (ENOENT, EINVAL, EACCES, ...).
int ToErrno(Code code);
// Code from its wire value; values outside the registry become kProtocol.
Code CodeFromWire(uint16_t value);
// HTTP status for a failure of that code (200 for kOk), for the HTTP APIs.
int HttpStatusOf(Code code);

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;  // OK
  Status(Code code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  // Empty for OK.
  const std::string& message() const;
  // "not_found: namespace 'foo' does not exist" or "ok".
  std::string ToString() const;

  // Returns a copy whose message is "context: message". OK stays OK.
  Status WithContext(std::string_view context) const;

  // Marks a status as deliberately dropped.
  void IgnoreError() const {}

 private:
  struct State {
    Code code;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
inline Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
inline Status ProtocolError(std::string m) { return {Code::kProtocol, std::move(m)}; }
inline Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
inline Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }
// The one mapping from errno to Status, with the message
// "<what>: <strerror(err)>" (`what` names the call and its object:
// "fdatasync /data/seg-0000000000000001.pts"): a full disk, quota or memory
// (ENOSPC, EDQUOT, ENOMEM) is ResourceExhausted, a problem the caller can act
// on (evict, stop writing); ENOENT NotFound; EEXIST (O_EXCL losing)
// AlreadyExists; EACCES and EPERM PermissionDenied; a peer gone
// (ECONNREFUSED, ECONNRESET, EPIPE, ENOTCONN) Unavailable; ETIMEDOUT and
// EAGAIN DeadlineExceeded; everything else IOError.
Status ErrnoError(std::string_view what, int err);

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Internal("Result constructed from OK status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok()
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace ptstore

#define PTS_CONCAT_INNER(a, b) a##b
#define PTS_CONCAT(a, b) PTS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function unless it is OK.
#define PTS_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::ptstore::Status pts_status_ = (expr);       \
    if (!pts_status_.ok()) return pts_status_;    \
  } while (0)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define PTS_ASSIGN_OR_RETURN(lhs, expr) \
  PTS_ASSIGN_OR_RETURN_IMPL(PTS_CONCAT(pts_result_, __LINE__), lhs, expr)
#define PTS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
