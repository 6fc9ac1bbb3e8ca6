"""The forked snapshot child must not inherit a lock another thread holds."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest
from numba.core.compiler_lock import global_compiler_lock

from roadpubsub.service import snapshot


def test_fork_while_another_thread_compiles(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # The child compiles a kernel (as saving an index may: it compacts first) while, at
    # the moment of the fork, another thread holds numba's compiler lock (as the
    # compaction thread does while it compiles or loads its kernels). A child forked
    # with the lock held elsewhere waits for it forever.
    def write_snapshot(state_dir: Path, seq: int, index: Any, expiry: Any,
                       kinds: Any = None) -> None:
        @numba.njit(cache=False)
        def fresh(a: Any) -> Any:  # never compiled in the parent
            return a.sum() + seq

        (state_dir / "child.txt").write_text(str(fresh(np.arange(4))))

    monkeypatch.setattr(snapshot, "write_snapshot", write_snapshot)
    done: list[int] = []
    worker = snapshot.SnapshotWorker(tmp_path, lambda seq, seconds: done.append(seq))
    holding = threading.Event()

    def hold() -> None:
        with global_compiler_lock:
            holding.set()
            time.sleep(1.0)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    worker.start(7, None, (np.empty(0, np.int64), np.empty(0)))  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while worker.running and time.monotonic() < deadline:
        time.sleep(0.05)
    holder.join()
    if worker.running:  # the child hangs: kill it so that the test run goes on
        worker.stop()
    assert done == [7]
    assert (tmp_path / "child.txt").read_text() == "13"
