"""The exceptions chorus raises: one class per chorus::StatusCode.

Every error carries the code's name (``code``), its number in chorus/status.h (``code_value``),
the message, and ``usable``: whether the communicator the call ran on can still be used. That
follows from the code alone: after an :class:`InvalidArgumentError` from a collective every rank
abandoned the call and the communicator is usable (one refused because another thread's call
runs leaves that call running); after any other error it is failed and every later call raises
the same error (recreate it).

:class:`InvalidArgumentError` is also a :class:`ValueError`, so code that catches bad arguments
the Python way keeps working.
"""

from __future__ import annotations


class Error(Exception):
    """A chorus call failed. Subclasses name the chorus::StatusCode."""

    code: str = "UNKNOWN"
    code_value: int = -1

    def __init__(self, message: str, usable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.usable = usable

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self):  # picklable, for multiprocessing and concurrent.futures
        return (type(self), (self.message, self.usable))


class InvalidArgumentError(Error, ValueError):
    """The call's arguments are wrong (on this rank or on the rank the message names).

    Nothing was sent; every rank abandoned the call; the communicator stays usable."""

    code = "INVALID_ARGUMENT"
    code_value = 1


class DeadlineExceededError(Error, TimeoutError):
    """A wait ran past its deadline; the message names the rank that is behind."""

    code = "DEADLINE_EXCEEDED"
    code_value = 2


class UnavailableError(Error):
    """A peer is gone (exited, crashed, unreachable)."""

    code = "UNAVAILABLE"
    code_value = 3


class AbortedError(Error):
    """abort() was called on this rank or another."""

    code = "ABORTED"
    code_value = 4


class FailedPreconditionError(Error):
    """The ranks disagree: on a call (kind, count, type, op, root, order) or on the job."""

    code = "FAILED_PRECONDITION"
    code_value = 5


class UnimplementedError(Error):
    """Valid, but this build or transport does not support it."""

    code = "UNIMPLEMENTED"
    code_value = 6


class InternalError(Error):
    """A bug in chorus: please report it with the message."""

    code = "INTERNAL"
    code_value = 7


BY_CODE = {
    cls.code_value: cls
    for cls in (InvalidArgumentError, DeadlineExceededError, UnavailableError, AbortedError,
                FailedPreconditionError, UnimplementedError, InternalError)
}
