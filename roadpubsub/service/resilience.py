"""The live service's watchman: it notices when a failed disk accepts writes again, and
retries snapshots that failed.

When a log write or fsync fails the service refuses events (503; nothing unsafe is
acknowledged) and its memory may be ahead of its log (an event is applied before its
record is written). This thread then probes the disk every ``interval`` seconds by writing
and fsyncing a small file in the state folder; the first probe that succeeds hands
:meth:`~roadpubsub.service.state.ServiceState.recover` to the apply thread, which reloads
the state from the folder (as a restart would) and resumes. While the service is healthy
it hands :meth:`~roadpubsub.service.state.ServiceState.maintain` over instead, which
retries a failed snapshot when its backoff has passed (also with no traffic).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

from roadpubsub.roadnet.errors import format_error
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.applier import Applier
from roadpubsub.service.state import ServiceState

__all__ = ["PROBE_BYTES", "Watchman", "probe_disk"]

#: Size of the probe file: a little more than a log record, so that a disk with room for
#: the probe has room for a few events.
PROBE_BYTES = 64 * 1024
_PROBE_NAME = ".probe"


def probe_disk(folder: Path) -> OSError | None:
    """Write and fsync ``PROBE_BYTES`` in ``folder`` (then remove them); the error, or
    None when the disk took them."""
    path = folder / _PROBE_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = b"\0" * PROBE_BYTES
            if os.write(fd, data) != len(data):
                return OSError(f"short write to {path}")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return exc
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    return None


class Watchman:
    """Probes a failed service's disk and recovers it, retries snapshots (see the module
    docstring); ``start`` and ``stop`` it with the server."""

    def __init__(self, state: ServiceState, applier: Applier, *,
                 interval: float = DEFAULTS.service_probe_interval_s) -> None:
        self.state = state
        self.applier = applier
        self.interval = float(interval)
        self.probes = 0
        self.last_probe_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_line = ""

    def start(self) -> None:
        """Start the thread."""
        self._thread = threading.Thread(target=self._run, name="watchman", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (a reload under way completes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as exc:  # the watchman keeps watching
                line = f"roadpubsub serve: {format_error(exc)}"
                if line != self._last_line:  # once, not every second
                    print(line, file=sys.stderr, flush=True)
                    self._last_line = line

    def tick(self) -> None:
        """One round: probe and recover when failed, else maintain."""
        state = self.state
        if state.failure is None:
            self.applier.call(state.maintain, kind="maintain").result()
            return
        self.probes += 1
        error = probe_disk(state.dir)
        self.last_probe_error = None if error is None else str(error)
        if error is None:
            self.applier.call(state.recover, kind="recover").result()
