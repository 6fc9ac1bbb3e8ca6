"""Snapshots of the live service: the index file, the expiry table and the manifest.

``DIR/manifest.json`` names the current snapshot and the log sequence number it covers;
it is replaced atomically (temporary file, fsync, rename, fsync of DIR), so a crash leaves
either the old or the new one. A snapshot is ``DIR/snapshots/<seq>.npz`` (written by the
index's own :meth:`~roadpubsub.index.base.SubscriptionIndex.save`, which writes a temporary file and
renames it), ``DIR/snapshots/<seq>.expiry.npz`` (ids and ``expires_at`` of the live
subscriptions that expire) and ``DIR/snapshots/<seq>.kinds.npz`` (the boolean and top-k
subscriptions and the top-k window, :mod:`roadpubsub.pruning.live_kinds`; absent in folders made
before those kinds, which then have none).

Snapshots are taken in the background by a forked child process: the fork is a
copy-on-write image of the index at one sequence number, so the service keeps applying
events on its own core while the child compacts and saves. The child dies with its parent
(``PR_SET_PDEATHSIG``) and closes its copies of the listening sockets, so a killed service
restarts on the same port at once. Only when the child has exited successfully does the
parent write the manifest and drop what the snapshot before it made unnecessary.

Integrity: the manifest (format 2) holds the size and crc32 of every file of its snapshot,
the log segment starting after it (``wal``), the same for the previous snapshot
(``previous``), and a crc32 of its own content (``checksum``). The previous snapshot and
the log since it are kept, so a damaged snapshot falls back to the previous one.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import stat
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba.core.compiler_lock import global_compiler_lock

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.roadnet.errors import InputError, format_error
from roadpubsub.roadnet.files import atomic_paths
from roadpubsub.service.integrity import StateDamageError, crc32_bytes, crc32_file
from roadpubsub.service.wal import fsync_path, segment_name

__all__ = ["SNAPSHOT_NICE", "KindsArrays", "Manifest", "SnapshotWorker", "clean_snapshots",
           "kinds_path", "read_manifest", "snapshot_entry", "snapshot_files", "snapshot_paths",
           "verify_snapshot", "write_manifest", "write_snapshot"]

Manifest = dict[str, Any]

#: The niceness the snapshot child adds to its own (0-19: lower priority).
SNAPSHOT_NICE = 10
#: The boolean and top-k state of a snapshot, made in the writing process (the forked
#: child: its memory is the parent's at the snapshot's seq).
KindsArrays = Callable[[], dict[str, np.ndarray]]
_FORMAT = 2
_NEW_KEYS = {"checksum", "files", "wal", "previous"}


def snapshot_paths(state_dir: Path, seq: int) -> tuple[Path, Path]:
    """(index file, expiry file) of the snapshot at ``seq``."""
    base = state_dir / "snapshots" / f"{seq:020d}"
    return base.with_suffix(".npz"), base.with_name(base.name + ".expiry.npz")


def kinds_path(state_dir: Path, seq: int) -> Path:
    """The boolean and top-k file of the snapshot at ``seq``."""
    return state_dir / "snapshots" / f"{seq:020d}.kinds.npz"


def snapshot_files(state_dir: Path, seq: int) -> list[Path]:
    """The files of the snapshot at ``seq`` that exist (index, expiry, kinds)."""
    return [p for p in (*snapshot_paths(state_dir, seq), kinds_path(state_dir, seq))
            if p.exists()]


_BLANK = '"checksum": "00000000"'


def _manifest_text(body: Manifest) -> str:
    """The manifest's text: ``body`` with a crc32 of the text itself (its own value
    blanked), over the bytes as written: a number whose digits change but that reads
    back as the same double changes the checksum too."""
    text = json.dumps({**body, "checksum": "00000000"}, indent=1)
    crc = crc32_bytes(text.encode())
    return text.replace(_BLANK, f'"checksum": "{crc:08x}"')


def _checksum_holds(raw: bytes, manifest: Manifest) -> bool:
    value = manifest.get("checksum")
    if not isinstance(value, str) or len(value) != 8:
        return False
    mark = f'"checksum": "{value}"'.encode()
    if raw.count(mark) != 1:
        return False
    return f"{crc32_bytes(raw.replace(mark, _BLANK.encode())):08x}" == value


def read_manifest(state_dir: Path) -> Manifest | None:
    """The manifest of ``state_dir``, or None when the folder holds no service.

    Raises
    ------
    StateDamageError
        The manifest does not verify (its checksum, or it is no JSON at all).
    """
    path = state_dir / "manifest.json"
    if not path.exists():
        return None
    raw = path.read_bytes()
    try:
        manifest: Manifest = json.loads(raw)
        if not isinstance(manifest, dict):
            raise ValueError
    except ValueError as exc:
        msg = f"{path}: damaged manifest (not JSON); the folder's snapshot is unknown"
        raise StateDamageError(msg, path=path) from exc
    fmt = manifest.get("format")
    if fmt == 1 and not _NEW_KEYS & manifest.keys():
        return manifest  # a folder made before checksums
    if fmt != _FORMAT:
        msg = f"{path}: not a roadpubsub service manifest of format {_FORMAT}"
        if fmt == 1 or "checksum" in manifest:  # a flipped digit of a checksummed one
            raise StateDamageError(msg + " (damaged)", path=path)
        raise InputError(msg)
    if not _checksum_holds(raw, manifest):
        msg = f"{path}: damaged manifest (checksum mismatch); the folder's snapshot is unknown"
        raise StateDamageError(msg, path=path)
    return manifest


def snapshot_entry(state_dir: Path, seq: int) -> Manifest:
    """The manifest's description of the snapshot at ``seq``: its seq, the log segment
    that starts after it (when it exists) and the size and crc32 of each of its files."""
    files = {}
    for p in snapshot_files(state_dir, seq):
        size, crc = crc32_file(p)
        files[str(p.relative_to(state_dir))] = {"size": size, "crc32": f"{crc:08x}"}
    entry: Manifest = {"seq": seq, "files": files}
    wal = state_dir / "wal" / segment_name(seq + 1)
    if wal.exists():
        entry["wal"] = wal.name
    return entry


def write_manifest(state_dir: Path, manifest: Manifest, *,
                   previous: Manifest | None = None) -> None:
    """Replace the manifest atomically and durably, with the checksums of the snapshot
    at ``manifest["seq"]`` (and ``previous``, the snapshot before it, still kept)."""
    target = state_dir / "manifest.json"
    body = {k: v for k, v in manifest.items()
            if k not in ("checksum", "files", "wal", "previous", "format")}
    body.update(snapshot_entry(state_dir, int(manifest["seq"])))
    if previous is not None and int(previous["seq"]) != int(manifest["seq"]):
        body["previous"] = {k: previous[k] for k in ("seq", "files", "wal") if k in previous}
    body["format"] = _FORMAT
    with atomic_paths(target) as (tmp,):
        tmp.write_text(_manifest_text(body))
        fsync_path(tmp)
    fsync_path(state_dir)


def verify_snapshot(state_dir: Path, entry: Manifest) -> None:
    """Check every file of a snapshot entry of the manifest against its checksum.

    Raises
    ------
    StateDamageError
        A file is missing or differs.
    """
    seq = int(entry["seq"])
    for rel, want in (entry.get("files") or {}).items():
        path = state_dir / rel
        what = f"the snapshot of seq {seq}"
        if not path.exists():
            msg = f"{path}: missing ({what})"
            raise StateDamageError(msg, path=path)
        size, crc = crc32_file(path)
        if size != int(want["size"]) or f"{crc:08x}" != want["crc32"]:
            msg = (f"{path}: checksum mismatch ({size:,} bytes, the manifest says "
                   f"{int(want['size']):,}); {what} is damaged")
            raise StateDamageError(msg, path=path)
    if entry.get("files") is not None:
        index_path = snapshot_paths(state_dir, seq)[0]
        if str(index_path.relative_to(state_dir)) not in entry["files"]:
            msg = f"{index_path}: missing from the manifest (the snapshot of seq {seq})"
            raise StateDamageError(msg, path=index_path)


def write_snapshot(state_dir: Path, seq: int, index: SubscriptionIndex,
                   expiry: tuple[np.ndarray, np.ndarray], kinds: KindsArrays | None = None
                   ) -> None:
    """Write the snapshot files of ``seq`` durably (the manifest is not touched)."""
    index_path, expiry_path = snapshot_paths(state_dir, seq)
    index_path.parent.mkdir(parents=True, exist_ok=True)
    index.save(index_path)
    fsync_path(index_path)
    with atomic_paths(expiry_path) as (tmp,):
        with tmp.open("wb") as fh:
            np.savez(fh, ids=expiry[0], expires_at=expiry[1])
        fsync_path(tmp)
    if kinds is not None:
        with atomic_paths(kinds_path(state_dir, seq)) as (tmp,):
            with tmp.open("wb") as fh:
                np.savez(fh, **kinds())  # type: ignore[arg-type]
            fsync_path(tmp)
    fsync_path(index_path.parent)


def clean_snapshots(state_dir: Path, keep_seq: int, *also: int) -> None:
    """Delete temporary files and every snapshot but those of ``keep_seq`` and ``also``
    (the previous one, kept for a fall-back)."""
    folder = state_dir / "snapshots"
    keep = set()
    for seq in (keep_seq, *also):
        keep |= {p.name for p in (*snapshot_paths(state_dir, seq), kinds_path(state_dir, seq))}
    for p in folder.iterdir():
        if p.name not in keep and p.is_file():
            p.unlink(missing_ok=True)


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _close_sockets() -> None:
    """Close inherited sockets (the listening one above all) in a forked child."""
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            with contextlib.suppress(OSError):
                if fd > 2 and stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.close(fd)


class SnapshotWorker:
    """Takes one background snapshot at a time.

    Parameters
    ----------
    state_dir
        The service's folder.
    on_done
        Called in the watcher thread with (seq, seconds) after the child succeeded and
        before older files are dropped: the caller writes the manifest there.
    """

    def __init__(self, state_dir: Path, on_done: Callable[[int, float], None]) -> None:
        self.state_dir = state_dir
        self.on_done = on_done
        self.pid: int | None = None
        self.failures = 0
        self.completed = 0
        self.last_seconds = 0.0
        self._thread: threading.Thread | None = None
        # failures in a row: the last one's reason and seq, and when to retry
        self.last_error: str | None = None
        self.failed_seq = 0
        self.consecutive_failures = 0
        self.retry_at = 0.0  # time.monotonic()
        self.retry_s = 1.0
        self.retry_max_s = 60.0
        self._stopped = False

    def configure(self, *, retry_s: float, retry_max_s: float) -> None:
        """Retry a failed snapshot after ``retry_s`` seconds, doubling per further
        failure, up to ``retry_max_s``."""
        self.retry_s, self.retry_max_s = float(retry_s), float(retry_max_s)

    def note_failure(self, seq: int, reason: str) -> None:
        """Count a failed snapshot of ``seq`` and schedule its retry (backoff)."""
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = reason
        self.failed_seq = seq
        self.retry_at = time.monotonic() + min(
            self.retry_max_s, self.retry_s * 2.0 ** (self.consecutive_failures - 1))
        print(f"roadpubsub serve: snapshot of seq {seq} failed ({reason}); the log is kept, "
              f"retry in {self.retry_at - time.monotonic():.0f} s", file=sys.stderr,
              flush=True)

    @property
    def running(self) -> bool:
        """Whether a snapshot is being written."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, seq: int, index: SubscriptionIndex,
              expiry: tuple[np.ndarray, np.ndarray], *, close_fds: tuple[int, ...] = (),
              kinds: KindsArrays | None = None) -> None:
        """Fork a child writing the snapshot of ``seq`` (the caller's state at this point);
        the child closes ``close_fds``."""
        t0 = time.perf_counter()
        sys.stdout.flush()
        sys.stderr.flush()
        # The child has only this thread, and every lock another thread held at the fork
        # stays held in it for good. numba's compiler lock is the one it needs: saving
        # compacts the index, whose kernels may still have to be compiled or loaded from
        # the cache in the child, while the compaction thread (or any other) may hold the
        # lock doing the same; the child then waited forever and no snapshot ever
        # completed again. Forking with the lock held by this thread (released on both
        # sides) means no other thread holds it.
        reason_r, reason_w = os.pipe()  # the child's one-line reason when it fails
        global_compiler_lock.acquire()
        try:
            pid = os.fork()
        except OSError:
            os.close(reason_r)
            os.close(reason_w)
            raise
        finally:
            global_compiler_lock.release()
        if pid == 0:  # pragma: no cover - the child (measured by the crash test)
            code = 1
            try:
                os.close(reason_r)
                _die_with_parent()
                # Behind the service: on a full machine the child's seconds of CPU
                # (compaction, saving, checksums) came out of the service's share, a
                # stall of every event queued meanwhile; at a low priority it takes what
                # is left over (the log keeps everything until it is done).
                with contextlib.suppress(OSError):
                    os.nice(SNAPSHOT_NICE)
                _close_sockets()
                for fd in close_fds:  # e.g. the folder's lock: it must die with the parent
                    with contextlib.suppress(OSError):
                        os.close(fd)
                write_snapshot(self.state_dir, seq, index, expiry, kinds)
                code = 0
            except BaseException as exc:
                traceback.print_exc()
                with contextlib.suppress(BaseException):
                    os.write(reason_w, format_error(exc).encode()[:2000])
            finally:
                os._exit(code)
        os.close(reason_w)
        self.pid = pid
        self._thread = threading.Thread(target=self._watch, args=(pid, seq, t0, reason_r),
                                        name="snapshot-watch", daemon=True)
        self._thread.start()

    def _watch(self, pid: int, seq: int, t0: float, reason_fd: int) -> None:
        _, status = os.waitpid(pid, 0)
        self.pid = None
        with os.fdopen(reason_fd, "rb") as fh:  # the child has exited: no wait
            reason = fh.read().decode(errors="replace").strip()
        if self._stopped:  # killed by stop(): not a failure
            return
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            self.note_failure(seq, reason or why)
            return
        seconds = time.perf_counter() - t0
        try:
            self.on_done(seq, seconds)
        except Exception as exc:
            self.note_failure(seq, format_error(exc))
            return
        self.completed += 1
        self.last_seconds = seconds
        self.last_error = None
        self.consecutive_failures = 0

    def stop(self) -> None:
        """Kill a running child and wait for the watcher (its files are cleaned later)."""
        self._stopped = True
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._thread is not None:
            self._thread.join(timeout=30)
