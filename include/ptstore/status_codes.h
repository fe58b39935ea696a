// The status-code registry: the one table every use of a code comes from.
//
//   X(enumerator, wire value, name, errno, HTTP status, Python class)
//
// - enumerator and value: `ptstore::Code` (include/ptstore/status.h), whose
//   values cross the wire in `Error` replies (docs/wire-format.md, "Error
//   reply and the code registry"): never renumber a row; only append.
// - name: `CodeName`, lower_snake, in logs and JSON.
// - errno: `ToErrno`, what the mount returns (fs/errors.h adjusts one).
// - HTTP status: `HttpStatusOf`, what the HTTP APIs answer a failure with.
// - Python class: the exception `ptstore` raises (python/ptstore/_errors.py;
//   the module's `code_table()` exports this table, and the Python tests
//   check every row against the classes and against docs/wire-format.md).
//
// Expanded only where <cerrno> is included (core/status.cc).
#pragma once

// clang-format off
#define PTSTORE_STATUS_CODES(X)                                                              \
  X(kOk,                0,  "ok",                 0,         200, "")                         \
  /* unknown namespace, path, lease, buffer */                                               \
  X(kNotFound,          1,  "not_found",          ENOENT,    404, "NotFound")                 \
  /* bad layout, wrong buffer size, bad name */                                              \
  X(kInvalidArgument,   2,  "invalid_argument",   EINVAL,    400, "InvalidArgument")          \
  /* namespace exists with another layout */                                                 \
  X(kAlreadyExists,     3,  "already_exists",     EEXIST,    409, "AlreadyExists")            \
  /* namespace mode or peer credentials deny it */                                           \
  X(kPermissionDenied,  4,  "permission_denied",  EACCES,    403, "PermissionDenied")         \
  /* arena full of pinned data, too many leases */                                           \
  X(kResourceExhausted, 5,  "resource_exhausted", ENOSPC,    429, "ResourceExhausted")        \
  /* server gone, connection lost */                                                         \
  X(kUnavailable,       6,  "unavailable",        ENOTCONN,  503, "Unavailable")              \
  /* an RPC ran past its deadline */                                                         \
  X(kDeadlineExceeded,  7,  "deadline_exceeded",  ETIMEDOUT, 504, "DeadlineExceeded")         \
  /* checksum mismatch in stored data */                                                     \
  X(kCorruption,        8,  "corruption",         EIO,       500, "Corruption")               \
  /* malformed, truncated or unknown wire message */                                         \
  X(kProtocol,          9,  "protocol_error",     EPROTO,    400, "ProtocolError")            \
  /* a system call on a file or socket failed */                                             \
  X(kIOError,           10, "io_error",           EIO,       500, "IOFailure")                \
  /* the operation lost a race and was undone */                                             \
  X(kAborted,           11, "aborted",            EAGAIN,    409, "Aborted")                  \
  /* an invariant broke: a bug */                                                            \
  X(kInternal,          12, "internal",           EIO,       500, "Internal")                 \
  /* a feature this build or node does not have */                                           \
  X(kUnimplemented,     13, "unimplemented",      ENOSYS,    501, "Unimplemented")
// clang-format on
