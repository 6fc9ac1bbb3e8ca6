"""The project's exceptions: one base, :class:`RoadPubSubError`, carrying a ``hint``.

Every error a user can fix subclasses :class:`RoadPubSubError` *and* the builtin it refines
(``ValueError`` for bad input, ``RuntimeError`` for a missing runtime), so callers may
catch either. Command lines print such errors as one line with :func:`format_error`; any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "InputError",
    "InvalidLocationError",
    "MissingDataError",
    "NetworkFormatError",
    "RoadPubSubError",
    "UnsupportedNetworkFormatError",
    "describe_rows",
    "format_error",
]


class RoadPubSubError(Exception):
    """Base of every roadpubsub error.

    Parameters
    ----------
    message
        What went wrong, naming the file, rows or field.
    hint
        Optional: what the user can do about it. Subclasses may set a class-level default.
    """

    hint: str = ""

    def __init__(self, message: str = "", *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class InputError(RoadPubSubError, ValueError):
    """Bad input a user can fix: a file, a row or an argument (the message names it)."""


class NetworkFormatError(InputError):
    """A network file is malformed or inconsistent."""


class UnsupportedNetworkFormatError(NetworkFormatError):
    """A network path has a suffix that no loader handles."""


class MissingDataError(RoadPubSubError, FileNotFoundError):
    """A data file a default needs is absent (the message says where it was looked for)."""


class InvalidLocationError(InputError):
    """Locations that cannot be placed on the network (rows are named in the message)."""


def describe_rows(labels: Sequence[object], *, limit: int = 10, total: int | None = None) -> str:
    """Render offending row labels as ``a, b, c (and N more)`` for error messages.

    ``total`` is the number of offending rows when ``labels`` holds only the first few.
    """
    shown = ", ".join(str(label) for label in list(labels)[:limit])
    extra = (len(labels) if total is None else total) - limit
    return f"{shown} (and {extra} more)" if extra > 0 else shown


def format_error(exc: BaseException) -> str:
    """One line for a user: the message (an OS error as "reason: path"), then the hint.

    The one printer of the command line, the Spark jobs and the benchmarks.
    """
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        paths = str(exc.filename) + (f" -> {exc.filename2}" if exc.filename2 else "")
        text = f"{exc.strerror}: {paths}"
    else:
        text = str(exc) or type(exc).__name__
    hint = getattr(exc, "hint", "")
    return text + (f" (hint: {hint})" if hint else "")
