"""Atomic file output: write under a temporary name, then rename over the target.

A failed write never leaves a half-written or partial file behind, and readers never see
one in progress.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_paths"]

PathLike = str | os.PathLike[str]


@contextlib.contextmanager
def atomic_paths(*targets: PathLike) -> Iterator[list[Path]]:
    """Temporary paths beside ``targets``, renamed over them when the block succeeds.

    All targets are replaced only after the block has written every temporary file; on
    any exception the temporary files are deleted and no target is touched.

    Examples
    --------
    >>> with atomic_paths("out/a.parquet", "out/b.parquet") as (tmp_a, tmp_b):
    ...     pq.write_table(table_a, tmp_a); pq.write_table(table_b, tmp_b)  # doctest: +SKIP
    """
    finals = [Path(t) for t in targets]
    temps: list[Path] = []
    try:
        for final in finals:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp",
                                            dir=final.parent)
            os.close(fd)
            temps.append(Path(tmp_name))
        yield temps
        mode = 0o666 & ~_umask()
        for tmp, final in zip(temps, finals, strict=True):
            os.chmod(tmp, mode)  # mkstemp makes 0600 files; give the usual permissions
            os.replace(tmp, final)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
