"""Exceptions of the road-network layer; each subclasses the builtin it refines."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "InvalidLocationError",
    "NetworkFormatError",
    "UnsupportedNetworkFormatError",
    "describe_rows",
]


class NetworkFormatError(ValueError):
    """A network file is malformed or inconsistent."""


class UnsupportedNetworkFormatError(NetworkFormatError):
    """A network path has a suffix that no loader handles."""


class InvalidLocationError(ValueError):
    """Locations that cannot be placed on the network (rows are named in the message)."""


def describe_rows(labels: Sequence[object], *, limit: int = 10, total: int | None = None) -> str:
    """Render offending row labels as ``a, b, c (and N more)`` for error messages.

    ``total`` is the number of offending rows when ``labels`` holds only the first few.
    """
    shown = ", ".join(str(label) for label in list(labels)[:limit])
    extra = (len(labels) if total is None else total) - limit
    return f"{shown} (and {extra} more)" if extra > 0 else shown
