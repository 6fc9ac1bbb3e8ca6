"""Fault points of the write path: a test hook that kills the service at a chosen step.

``ROADPUBSUB_FAULT=<point>:<n>`` (read once, at import, and only when set) makes the
process leave with ``os._exit(FAULT_EXIT)`` the n-th time (1-based) it passes ``point``,
at once, without flushing or answering anything: what a crash or a power cut at that step
leaves behind. The points, in the order a request passes them:

``after-write``   the log record is written (in the page cache), not fsynced
``before-fsync``  an fsync covering written records is about to start
``after-fsync``   that fsync returned, nothing answered yet
``before-answer`` the request is durable and about to be answered

The crash tests (tests/service/test_fault_points.py) drive requests, note which were
answered, restart without the variable and check that every answered event was recovered.

``ROADPUBSUB_FAIL_OUTBOX=<file>`` (read once, at import) makes every write of the webhook
outbox fail with EIO while that file exists, before anything is written: a disk failing
under the outbox alone (tests/service/test_webhook_recovery.py).

Test hooks only: never set them on a service that matters.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["FAIL_OUTBOX_ENV", "FAULT_ENV", "FAULT_EXIT", "FAULT_POINTS", "armed", "fault",
           "outbox_fails"]

FAULT_ENV = "ROADPUBSUB_FAULT"
#: The exit status of a process stopped at a fault point.
FAULT_EXIT = 86
FAULT_POINTS = ("after-write", "before-fsync", "after-fsync", "before-answer")

_point: str | None = None
_left = 0
_lock = threading.Lock()


def _parse(spec: str) -> tuple[str, int]:
    point, _, n = spec.partition(":")
    if point not in FAULT_POINTS or not n.isdigit() or int(n) < 1:
        msg = (f"{FAULT_ENV}={spec!r}: expected <point>:<n> with a point among "
               f"{', '.join(FAULT_POINTS)} and n >= 1")
        raise ValueError(msg)
    return point, int(n)


_spec = os.environ.get(FAULT_ENV)
if _spec:
    _point, _left = _parse(_spec)

FAIL_OUTBOX_ENV = "ROADPUBSUB_FAIL_OUTBOX"
_outbox_flag = os.environ.get(FAIL_OUTBOX_ENV) or None


def outbox_fails() -> bool:
    """Whether the outbox's writes are made to fail now (the flag file exists)."""
    return _outbox_flag is not None and os.path.exists(_outbox_flag)


#: Whether a fault point is armed (callers test it first: no call on the hot path).
armed = _point is not None


def fault(point: str) -> None:
    """Pass ``point``: exit the process if it is the armed point's n-th passage."""
    global _left
    if point != _point:
        return
    with _lock:
        _left -= 1
        if _left:
            return
    sys.stderr.write(f"roadpubsub: fault point {point} reached: exiting\n")
    sys.stderr.flush()
    os._exit(FAULT_EXIT)
