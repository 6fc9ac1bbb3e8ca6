"""Checksums of the files a service folder holds, and the one error damage raises.

Every file of ``DIR`` is covered by a checksum written before the file counts:

* log records: a crc32 over each frame's header and payload (:mod:`roadpubsub.service.wal`);
* deliveries, published and top-k segments: a side record ``<file>.sum`` (the file's size
  and crc32, itself checksummed), written durably before the file is renamed into place;
* snapshot files (index, expiry, kinds): their sizes and crc32s in the manifest, which
  carries a crc32 of its own content.

Damage raises :class:`StateDamageError`: one line naming the file, the byte offset when
known and what would be lost. Nothing is changed on disk when it is raised.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path
from typing import Any

from roadpubsub.roadnet.errors import RoadPubSubError

__all__ = ["SUM_SUFFIX", "StateDamageError", "crc32_bytes", "crc32_file", "move_aside",
           "read_sum", "verified_bytes", "write_sum"]

#: Suffix of the side record of an immutable file.
SUM_SUFFIX = ".sum"
_CHUNK = 1 << 22


class StateDamageError(RoadPubSubError, RuntimeError):
    """A file of the state folder is damaged (the message names it, the offset and what
    would be lost); nothing was changed on disk.

    Attributes
    ----------
    path
        The damaged file.
    offset
        Byte offset of the damage, or None when the whole file is in question.
    """

    hint = "run 'roadpubsub state check DIR' to see every file, 'roadpubsub state repair DIR' "\
           "to move damaged files aside and keep what is provably intact"

    def __init__(self, message: str, *, path: Path, offset: int | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path
        self.offset = offset


def crc32_bytes(data: bytes) -> int:
    """crc32 of ``data``."""
    return zlib.crc32(data) & 0xFFFFFFFF


def crc32_file(path: Path) -> tuple[int, int]:
    """(size, crc32) of a file, read in chunks."""
    crc = 0
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, crc & 0xFFFFFFFF


def _sum_body(name: str, size: int, crc: int) -> dict[str, Any]:
    return {"file": name, "size": size, "crc32": f"{crc:08x}"}


def _self_check(body: dict[str, Any]) -> str:
    return f"{crc32_bytes(json.dumps(body, sort_keys=True).encode()):08x}"


def write_sum(path: Path, *, name: str | None = None) -> Path:
    """Write durably the side record of ``path`` (before it is renamed to ``name``, its
    final name in the same folder; default: its own)."""
    final = path.with_name(name or path.name)
    size, crc = crc32_file(path)
    body = _sum_body(final.name, size, crc)
    target = final.with_name(final.name + SUM_SUFFIX)
    tmp = target.with_name("." + target.name + ".tmp")
    tmp.write_text(json.dumps({**body, "check": _self_check(body)}) + "\n")
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return target


def read_sum(path: Path) -> dict[str, Any] | None:
    """The side record of ``path`` (None when there is none).

    Raises
    ------
    StateDamageError
        The side record is damaged.
    """
    target = path.with_name(path.name + SUM_SUFFIX)
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        return None
    try:
        rec = json.loads(raw)
        body = {k: rec[k] for k in ("file", "size", "crc32")}
        ok = rec["check"] == _self_check(body) and body["file"] == path.name
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        msg = f"{target}: damaged checksum record (it no longer verifies itself)"
        raise StateDamageError(msg, path=target)
    return body


def verified_bytes(path: Path, expected: dict[str, Any] | None, *, what: str) -> bytes:
    """The bytes of ``path`` after checking them against ``expected`` (``size`` and
    ``crc32``; None skips the check, for files of folders made before checksums).

    Raises
    ------
    StateDamageError
        The file is missing, or its size or checksum differs.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        msg = f"{path}: missing ({what})"
        raise StateDamageError(msg, path=path) from exc
    if expected is None:
        return data
    if len(data) != int(expected["size"]):
        msg = (f"{path}: {len(data):,} bytes where its checksum record says "
               f"{int(expected['size']):,} ({what} would be lost)")
        raise StateDamageError(msg, path=path, offset=min(len(data), int(expected["size"])))
    if f"{crc32_bytes(data):08x}" != expected["crc32"]:
        msg = f"{path}: checksum mismatch ({what} would be lost)"
        raise StateDamageError(msg, path=path)
    return data


def move_aside(state_dir: Path, paths: list[Path], *, stamp: str | None = None) -> Path:
    """Move files of ``state_dir`` into ``state_dir/damaged/<UTC time>/`` (keeping their
    paths relative to the folder; nothing is deleted) and return that folder."""
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = state_dir / "damaged" / stamp
    for p in paths:
        rel = p.resolve().relative_to(state_dir.resolve())
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, dest)
        fd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return target
