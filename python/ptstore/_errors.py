"""Exceptions of ptstore: one class per status code of libptstore.

Every failure of a call into the store raises a subclass of :class:`Error`
named after its code (``include/ptstore/status.h``), carrying the server's or
the library's message. Where a builtin exception means the same thing it is a
second base, so ``except LookupError`` catches :class:`NotFound` and
``except ValueError`` catches :class:`InvalidArgument`. A cache miss is never
an exception: ``load`` returns 0 and ``lookup`` a result with 0 tokens.
"""

from __future__ import annotations

import enum
from typing import Dict, Optional, Type, Union

__all__ = [
    "Code", "Error", "NotFound", "InvalidArgument", "AlreadyExists", "PermissionDenied", "ResourceExhausted",
    "Unavailable", "DeadlineExceeded", "Corruption", "ProtocolError", "IOFailure", "Aborted", "Internal",
    "Unimplemented", "error_for",
]


class Code(enum.IntEnum):
    """Status codes of libptstore (their values cross the wire; never renumbered)."""

    OK = 0
    NOT_FOUND = 1
    INVALID_ARGUMENT = 2
    ALREADY_EXISTS = 3
    PERMISSION_DENIED = 4
    RESOURCE_EXHAUSTED = 5
    UNAVAILABLE = 6
    DEADLINE_EXCEEDED = 7
    CORRUPTION = 8
    PROTOCOL_ERROR = 9
    IO_ERROR = 10
    ABORTED = 11
    INTERNAL = 12
    UNIMPLEMENTED = 13


class Error(Exception):
    """Base of every ptstore exception.

    Attributes:
        code: the :class:`Code` of the failure (an int for a code this version
            does not know).
        message: what was wrong, as the library or the server said it.
    """

    code: Union[Code, int, None] = None

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class NotFound(Error, LookupError):
    """Unknown namespace, path, increment, lease or buffer."""

    code = Code.NOT_FOUND


class InvalidArgument(Error, ValueError):
    """Bad input: a layout out of range, a buffer of the wrong size or shape, a bad name."""

    code = Code.INVALID_ARGUMENT


class AlreadyExists(Error):
    """The namespace exists with another layout or salt (or exist_ok=False)."""

    code = Code.ALREADY_EXISTS


class PermissionDenied(Error, PermissionError):
    """The namespace's mode or the peer's credentials deny it (or the client has no arena mapping)."""

    code = Code.PERMISSION_DENIED


class ResourceExhausted(Error):
    """The arena is full of pinned data, or too many leases."""

    code = Code.RESOURCE_EXHAUSTED


class Unavailable(Error, ConnectionError):
    """No server listens on the socket, or the connection was lost."""

    code = Code.UNAVAILABLE


class DeadlineExceeded(Error, TimeoutError):
    """A request ran past its deadline (rpc_timeout_ms)."""

    code = Code.DEADLINE_EXCEEDED


class Corruption(Error):
    """Stored data failed its checksum."""

    code = Code.CORRUPTION


class ProtocolError(Error):
    """A malformed, truncated or unknown wire message."""

    code = Code.PROTOCOL_ERROR


class IOFailure(Error, OSError):
    """A system call on a file or socket failed (code io_error)."""

    code = Code.IO_ERROR


class Aborted(Error):
    """The operation lost a race and was undone; it may be retried."""

    code = Code.ABORTED


class Internal(Error):
    """An invariant broke: a bug in PTStore."""

    code = Code.INTERNAL


class Unimplemented(Error, NotImplementedError):
    """A feature this build or node does not have."""

    code = Code.UNIMPLEMENTED


_BY_CODE: Dict[int, Type[Error]] = {
    cls.code: cls  # type: ignore[misc]
    for cls in (NotFound, InvalidArgument, AlreadyExists, PermissionDenied, ResourceExhausted, Unavailable,
                DeadlineExceeded, Corruption, ProtocolError, IOFailure, Aborted, Internal, Unimplemented)
}


def error_for(code: int, message: str) -> Error:
    """The exception for a status `code` and its `message` (``Error`` for a code this version does not know)."""
    cls: Type[Error] = _BY_CODE.get(code, Error)
    exc = cls(message)
    known: Optional[Code] = Code(code) if code in Code._value2member_map_ else None
    exc.code = known if known is not None else code
    return exc
