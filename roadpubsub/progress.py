"""Progress of a multi-step run on stderr (the demo and the benchmarks)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["Steps"]


class Steps:
    """Progress of a multi-step run on stderr: one line per step and tqdm bars inside.

    Parameters
    ----------
    total
        Number of steps.
    quiet
        Print nothing.
    """

    def __init__(self, total: int, *, quiet: bool = False) -> None:
        self.total = total
        self.quiet = quiet
        self.done = 0
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, key: str, text: str) -> Iterator[dict[str, str]]:
        """Time one step; the yielded dict's ``"note"`` is printed when it ends."""
        self.done += 1
        info: dict[str, str] = {}
        if not self.quiet:
            print(f"[{self.done}/{self.total}] {text} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        yield info
        dt = time.perf_counter() - t0
        self.seconds[key] = self.seconds.get(key, 0.0) + dt
        if not self.quiet:
            note = f" ({info['note']})" if info.get("note") else ""
            print(f"      done in {dt:.2f} s{note}", file=sys.stderr, flush=True)

    def bar(self, total: int, desc: str, unit: str = "it") -> tqdm[Any]:
        """A tqdm bar on stderr (disabled when quiet)."""
        from tqdm import tqdm

        return tqdm(total=total, desc=f"      {desc}", unit=unit, disable=self.quiet,
                    file=sys.stderr, leave=False, dynamic_ncols=True)

    def rounded(self, t_start: float) -> dict[str, float]:
        """Seconds of each step and the ``total`` since ``t_start``, rounded to ms."""
        return {**{k: round(v, 3) for k, v in self.seconds.items()},
                "total": round(time.perf_counter() - t_start, 3)}
