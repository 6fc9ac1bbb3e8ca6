"""Index compaction off the apply thread.

A compaction rebuilds the slots and postings from the live subscriptions: 2.9 s at 1M
subscriptions on Rome, during which a service that compacted in line applied nothing.
Here the apply thread only takes a copy of the input (the delta rows and the active flags;
the slots are never changed in place), a worker thread builds the new index from it
(numpy and the compiled kernels, much of it without the GIL), and meanwhile the apply
thread keeps applying events to the live index and notes every id it removes. When the
build is done, the apply thread adopts it between two events
(:meth:`roadpubsub.index.base.SubscriptionIndex.adopt_compacted`): the removed ids are deactivated
in the new slots, and the delta rows added since the input was taken are carried over. The
live set is then exactly the one the events gave, so matching is unchanged; only the work
per message drops as the delta shrinks.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.delta import build_compacted, compaction_input

__all__ = ["Compactor"]

IntArray = npt.NDArray[np.int64]


class Compactor:
    """Builds compacted indexes of ``index`` in the background (see the module docstring).

    ``delta_rows``: compact once the delta holds more rows (None: the index's own rule);
    ``background=False`` compacts in line instead (when the index does not do so itself).

    Only the apply thread calls the methods; the worker thread touches the input copy and
    the index's fixed parts only.
    """

    def __init__(self, index: SubscriptionIndex, *, delta_rows: int | None = None,
                 background: bool = True) -> None:
        self.index = index
        self.delta_rows = delta_rows
        self.background = background
        self.completed = 0
        self.last_seconds = 0.0  # the last build, on the worker thread
        self.last_adopt_seconds = 0.0  # the last swap, on the apply thread
        self._thread: threading.Thread | None = None
        self._removed: list[IntArray] = []
        self._built: SubscriptionIndex | None = None
        self._error: BaseException | None = None
        self._t0 = 0.0

    @property
    def running(self) -> bool:
        """Whether a build is under way or waits to be adopted."""
        return self._thread is not None

    def removed(self, ids: IntArray) -> None:
        """Note ids unsubscribed (or moved, or expired) while a build runs."""
        if self._thread is not None and ids.size:
            self._removed.append(np.array(ids, dtype=np.int64))

    def step(self) -> bool:
        """Adopt a finished build, or start one if the delta is due; True on adoption."""
        if self._thread is not None:
            if self._thread.is_alive():
                return False
            return self._adopt()
        due = (self.index.delta_due() if self.delta_rows is None
               else len(self.index.delta) > self.delta_rows)
        if not due:
            return False
        if not self.background:
            self.index.compact()
            self.completed += 1
            return True
        self.start()
        return False

    def start(self) -> None:
        """Start a build from the index as it is now."""
        given = compaction_input(self.index)
        self._removed = []
        self._built = None
        self._error = None
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._build, args=(given,),
                                        name="compaction", daemon=True)
        self._thread.start()

    def _build(self, given: object) -> None:
        try:
            self._built = build_compacted(self.index, given)  # type: ignore[arg-type]
        except BaseException as exc:  # re-raised on the apply thread
            self._error = exc
        self.last_seconds = time.perf_counter() - self._t0

    def _adopt(self) -> bool:
        thread, self._thread = self._thread, None
        assert thread is not None
        thread.join()
        built, self._built = self._built, None
        removed = (np.concatenate(self._removed) if self._removed
                   else np.empty(0, dtype=np.int64))
        self._removed = []
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        assert built is not None
        t0 = time.perf_counter()
        self.index.adopt_compacted(built, removed)
        self.last_adopt_seconds = time.perf_counter() - t0
        self.completed += 1
        return True

    def finish(self) -> bool:
        """Wait for a running build and adopt it (True if one was adopted)."""
        if self._thread is None:
            return False
        self._thread.join()
        return self._adopt()
