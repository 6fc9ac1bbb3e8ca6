"""Atomic file output: write under a temporary name, then rename over the target.

A failed write never leaves a half-written or partial file behind, and readers never see
one in progress.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.npyio import NpzFile

__all__ = ["atomic_paths", "check_output_path", "read_npz"]

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


def check_output_path(path: PathLike, *, folder: bool = False, what: str = "output") -> Path:
    """``path`` as a Path, or one OSError saying why nothing could be written there.

    Meant for the start of a long job, so that a bad output path fails in a second rather
    than after the work. The target may exist (it is replaced) but must be a file, or a
    folder when ``folder`` is true; missing parent folders are fine (they are created) as
    long as the nearest existing one is a writable folder.

    Parameters
    ----------
    path
        The file (or folder) to be written.
    folder
        Whether ``path`` is a folder to write files into.
    what
        How messages name the path (e.g. ``"--out"``).
    """
    target = Path(path)
    if target.exists() and target.is_dir() != folder:
        kind = "a file" if folder else "a folder"
        msg = f"{what} {target}: is {kind}; expected {'a folder' if folder else 'a file'}"
        raise (NotADirectoryError if folder else IsADirectoryError)(msg)
    parent = target if folder else target.parent
    while not parent.exists() and parent != parent.parent:
        if parent.is_symlink():  # exists() follows links: this one points nowhere
            msg = f"{what} {target}: {parent} is a link to nothing, so no folder can be made"
            raise NotADirectoryError(msg)
        parent = parent.parent
    if not parent.is_dir():
        msg = f"{what} {target}: {parent} is a file, so no folder can be made under it"
        raise NotADirectoryError(msg)
    if not os.access(parent, os.W_OK | os.X_OK):
        msg = f"{what} {target}: folder {parent} is not writable"
        raise PermissionError(msg)
    return target


def read_npz(path: PathLike, keys: tuple[str, ...] | None = None
             ) -> tuple[Any, dict[str, Any]]:
    """(meta, arrays) of an ``.npz`` file holding a JSON ``meta`` entry beside its arrays.

    ``keys`` limits the arrays read (all but ``meta`` by default). The files the project
    writes (networks, indexes) are read through here, so every one fails alike.

    Raises
    ------
    FileNotFoundError, PermissionError, IsADirectoryError
        As the operating system says.
    ValueError
        Anything else that keeps the file from being read as such an archive; the message
        says what, in a user's words (the caller adds the path).
    """
    try:
        data = np.load(Path(path), allow_pickle=False)
        if not isinstance(data, NpzFile):  # a plain .npy array under an .npz name
            msg = "a single array, not an .npz archive"
            raise ValueError(msg)
        with data:
            meta = json.loads(str(data["meta"]))
            names = [k for k in data.files if k != "meta"] if keys is None else list(keys)
            arrays = {k: data[k] for k in names}
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        # numpy's own advice on pickled arrays (allow_pickle=...) does not apply here.
        detail = "not an .npz array archive" if "pickle" in str(exc) else str(exc)
        raise ValueError(detail) from exc
    return meta, arrays


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
