"""Safe file output: checked before the work, locked during it, written atomically.

* :func:`check_output_path` refuses, before any work, an output that cannot be written or
  that is one of the run's inputs (same path, a link to it, the same file), and takes an
  advisory lock on it for the rest of the process, so a second run writing the same output
  at the same time is refused instead of silently overwriting the first one's result.
* :func:`atomic_paths` writes under temporary names (``.NAME.PID.XXXX.tmp`` beside the
  target) and renames them over the targets only when all are complete. A run killed with
  SIGKILL can leave its temporary behind; the next run to the same output removes it (and
  says so), since the pid in its name is no longer alive.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.npyio import NpzFile

from roadpubsub.roadnet.errors import InputError, RoadPubSubError

__all__ = ["OutputBusyError", "OutputIsInputError", "atomic_paths", "check_output_path",
           "read_npz", "release_output_locks"]

PathLike = str | os.PathLike[str]


class OutputIsInputError(InputError):
    """An output path that names one of the run's inputs (it would be destroyed)."""


class OutputBusyError(RoadPubSubError, RuntimeError):
    """Another live run is writing the same output."""


#: Output locks this process holds: lock file -> open descriptor (see check_output_path).
_LOCKS: dict[Path, int] = {}


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
            remove_stale_temporaries(final)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.{os.getpid()}.",
                                            suffix=".tmp", dir=final.parent)
            os.close(fd)
            temps.append(Path(tmp_name))
        try:
            yield temps
        except OSError as exc:
            # A full disk or a failing device: name the output, not the temporary.
            if exc.filename is None or str(exc.filename) in {str(t) for t in temps}:
                target = ", ".join(str(f) for f in finals)
                raise OSError(exc.errno or 0, exc.strerror or str(exc), target) from exc
            raise
        mode = 0o666 & ~_umask()
        for tmp, final in zip(temps, finals, strict=True):
            os.chmod(tmp, mode)  # mkstemp makes 0600 files; give the usual permissions
            os.replace(tmp, final)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)


def remove_stale_temporaries(final: Path) -> list[Path]:
    """Delete temporaries of ``final`` left by runs that are no longer alive.

    Temporaries are named ``.NAME.PID.XXXX.tmp``; one whose PID is not a live process was
    left by a killed run. Each removal is reported on stderr. Returns the removed paths.
    """
    pattern = re.compile(re.escape(f".{final.name}.") + r"(\d+)\.[^.]+\.tmp\Z")
    removed: list[Path] = []
    try:
        names = os.listdir(final.parent)
    except OSError:
        return removed
    for name in names:
        found = pattern.match(name)
        if found is None or _alive(int(found.group(1))):
            continue
        stale = final.parent / name
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
            removed.append(stale)
            print(f"note: removed {stale}, a temporary file left by an interrupted run "
                  f"(pid {found.group(1)})", file=sys.stderr)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: equal once resolved, or the same inode."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output_path(path: PathLike, *, folder: bool = False, what: str = "output",
                      inputs: Iterable[PathLike | None] = (), lock: bool = True) -> Path:
    """``path`` as a Path, or one error saying why it must not be written.

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
    inputs
        The run's input paths (None entries are skipped): the output must be none of them,
        by name, link or inode.
    lock
        Take an advisory lock on the output for the rest of the process, or until
        :func:`release_output_locks` (a file under the temporary directory's
        ``roadpubsub-locks``, named by the output's resolved path).

    Raises
    ------
    OutputIsInputError
        The output is one of ``inputs``.
    OutputBusyError
        Another live process holds the output's lock.
    OSError
        The path cannot be written (a folder where a file belongs, a read-only folder).
    """
    target = Path(path)
    for source in inputs:
        if source is not None and _same_file(target, Path(source)):
            msg = (f"{what} {target} is the input {source}: writing it would destroy the "
                   f"input")
            raise OutputIsInputError(msg, hint="choose another output path")
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
    if lock:
        _lock_output(target, what=what)
    return target


def _lock_output(target: Path, *, what: str) -> None:
    # Lock files live in one folder of the temporary directory, named by the output's
    # resolved path: nothing is created beside the user's outputs, and a run that fails
    # before writing leaves no folder behind.
    key = hashlib.sha1(str(target.resolve()).encode()).hexdigest()
    lock_path = Path(tempfile.gettempdir()) / "roadpubsub-locks" / f"{key}.lock"
    if lock_path in _LOCKS:
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            msg = (f"{what} {target}: another run (pid {holder}) is writing it now; two "
                   f"runs writing one output would lose one result")
            raise OutputBusyError(msg, hint="wait for it, or choose another output") from None
        # The holder we waited on may have removed the file before we locked it: lock the
        # file that is there now.
        try:
            same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _LOCKS[lock_path] = fd


def release_output_locks() -> None:
    """Release (and remove) every output lock this process took; called at exit too."""
    for lock_path, fd in list(_LOCKS.items()):
        with contextlib.suppress(OSError):
            lock_path.unlink()
        os.close(fd)
        del _LOCKS[lock_path]


atexit.register(release_output_locks)


def read_npz(path: PathLike, keys: tuple[str, ...] | None = None, *, mmap: bool = False
             ) -> tuple[Any, dict[str, Any]]:
    """(meta, arrays) of an ``.npz`` file holding a JSON ``meta`` entry beside its arrays.

    ``keys`` limits the arrays read (all but ``meta`` by default). ``mmap=True`` maps the
    large uncompressed arrays copy-on-write instead of reading them (see
    :func:`_map_members`). The files the project
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
            raise InputError(msg)
        with data:
            meta = json.loads(str(data["meta"]))
            names = [k for k in data.files if k != "meta"] if keys is None else list(keys)
            mapped = _map_members(Path(path), set(names)) if mmap else {}
            arrays = {k: mapped[k] if k in mapped else data[k] for k in names}
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        # numpy's own advice on pickled arrays (allow_pickle=...) does not apply here.
        detail = "not an .npz array archive" if "pickle" in str(exc) else str(exc)
        raise InputError(detail) from exc
    return meta, arrays


#: Members smaller than this are read, not mapped.
_MAP_MIN_BYTES = 1 << 20


def _map_members(path: Path, names: set[str]) -> dict[str, np.ndarray]:
    """The large uncompressed ``.npy`` members of an ``.npz`` as arrays over a private
    (copy-on-write) map of the file: nothing is read until used, and writes to an array
    stay in this process. Members that are compressed, small or hold objects are left to
    the caller. The project replaces files by renaming, so a mapped file is never
    rewritten underneath its maps."""
    import mmap as mmap_module

    from numpy.lib import format as npy

    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as zf, path.open("rb") as fh:
        infos = [i for i in zf.infolist() if i.filename.endswith(".npy")
                 and i.filename[:-4] in names and i.compress_type == zipfile.ZIP_STORED
                 and i.file_size >= _MAP_MIN_BYTES]
        if not infos:
            return out
        whole = mmap_module.mmap(fh.fileno(), 0, access=mmap_module.ACCESS_COPY)
        for info in infos:
            fh.seek(info.header_offset)
            local = fh.read(30)
            if local[:4] != b"PK\x03\x04":
                continue
            fh.seek(info.header_offset + 30 + int.from_bytes(local[26:28], "little")
                    + int.from_bytes(local[28:30], "little"))
            version = npy.read_magic(fh)
            shape, fortran, dtype = (npy.read_array_header_1_0(fh) if version == (1, 0)
                                     else npy.read_array_header_2_0(fh))
            count = int(np.prod(shape, dtype=np.int64))
            if dtype.hasobject or fh.tell() + count * dtype.itemsize > len(whole):
                continue
            flat = np.frombuffer(whole, dtype=dtype, count=count, offset=fh.tell())
            out[info.filename[:-4]] = flat.reshape(shape, order="F" if fortran else "C")
    return out


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
