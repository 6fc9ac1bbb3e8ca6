"""Checking and repairing a service folder (``roadpubsub state check`` / ``state repair``).

:func:`check_folder` reads every file the folder holds, changes nothing, and says per file
whether it is intact, has a torn tail (cut by the next start) or is damaged (offset and what
is affected), and whether the service would start. :func:`repair_folder` moves damaged
files into ``DIR/damaged/<UTC time>/`` (nothing is ever deleted) and keeps what is provably
intact: the log up to the first damaged record (its records after that point are named as
lost), the previous snapshot when the current one is damaged, the deliveries segments that
verify.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roadpubsub.service.deliveries_log import (
    DELIVERY_COLUMNS,
    SEGMENT_NAME,
    TOPK_COLUMNS,
    read_checked,
)
from roadpubsub.service.integrity import SUM_SUFFIX, StateDamageError, crc32_file, move_aside
from roadpubsub.service.outbox import check_outbox
from roadpubsub.service.snapshot import read_manifest, verify_snapshot, write_manifest
from roadpubsub.service.wal import (
    SegmentScan,
    WalCorruptError,
    check_log,
    create_segment,
    fsync_path,
    scan_segment,
    segments,
)

_SEGMENT = re.compile(r"^(\d{20})-(\d{20})\.(published\.)?parquet(\.sum)?$")

__all__ = ["FileStatus", "FolderReport", "check_folder", "repair_folder"]


@dataclass
class FileStatus:
    """One file: ``ok``, ``torn`` (an incomplete last record the start cuts) or
    ``damaged``, with a detail line."""

    path: Path
    status: str
    detail: str = ""


@dataclass
class FolderReport:
    """Every file's status and whether the service would start (and from which seq)."""

    files: list[FileStatus] = field(default_factory=list)
    starts: bool = False
    start_seq: int | None = None
    blocker: str = ""
    fallback: bool = False

    def lines(self, folder: Path) -> list[str]:
        """The report as lines (one per file, then the verdict)."""
        out = []
        for f in self.files:
            rel = f.path.relative_to(folder) if f.path.is_relative_to(folder) else f.path
            out.append(f"{f.status:<8} {rel}" + (f": {f.detail}" if f.detail else ""))
        if self.starts:
            via = " (falling back to the previous snapshot)" if self.fallback else ""
            out.append(f"{folder}: the service would start from the snapshot of seq "
                       f"{self.start_seq}{via}")
        else:
            out.append(f"{folder}: the service would NOT start: {self.blocker}")
        return out


def _segment_status(scan: SegmentScan) -> FileStatus:
    span = scan.seqs
    held = f"seq {span[0]}-{span[1]}" if span else "no record"
    if scan.damage is not None:
        off, what = scan.damage
        after = [int(r["seq"]) for r in scan.after_damage if isinstance(r.get("seq"), int)]
        more = (f"; {len(after):,} readable records (seq {min(after)}-{max(after)}) follow"
                if after else "")
        return FileStatus(scan.path, "damaged", f"{what} at byte {off:,} (intact before it: "
                                                f"{held}){more}")
    if scan.framing == 0:
        return FileStatus(scan.path, "damaged", "empty (its header is missing)")
    if scan.torn is not None:
        off, n = scan.torn
        return FileStatus(scan.path, "torn", f"{held}; an incomplete last record at byte "
                                             f"{off:,} ({n:,} bytes, never acknowledged)")
    return FileStatus(scan.path, "ok", held)


def _deliveries_files(folder: Path) -> list[tuple[Path, str, tuple[str, ...]]]:
    out: list[tuple[Path, str, tuple[str, ...]]] = []
    kinds: tuple[tuple[str, tuple[str, ...]], ...] = (("deliveries", DELIVERY_COLUMNS),
                                                      ("topk", TOPK_COLUMNS))
    for sub, columns in kinds:
        d = folder / sub
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            m = SEGMENT_NAME.match(p.name)
            if m is None:
                continue
            what = (f"{'top-k events' if sub == 'topk' else 'deliveries'} of the messages of "
                    f"seq {int(m.group(1)) + 1}-{int(m.group(2))}")
            out.append((p, what, columns))
            pub = p.with_name(p.stem + ".published.parquet")
            if sub == "deliveries" and pub.exists():
                out.append((pub, what, ("message_id", "seq", "time")))
    return out


def check_folder(folder: Path) -> FolderReport:
    """Check every file of a service folder; nothing is changed."""
    report = FolderReport()
    manifest_path = folder / "manifest.json"
    manifest: dict[str, Any] | None = None
    try:
        manifest = read_manifest(folder)
        if manifest is None:
            report.files.append(FileStatus(manifest_path, "damaged", "missing"))
            report.blocker = f"{manifest_path}: missing"
        else:
            report.files.append(FileStatus(manifest_path, "ok", f"snapshot of seq "
                                                                f"{manifest['seq']}"))
    except StateDamageError as exc:
        report.files.append(FileStatus(manifest_path, "damaged", str(exc)))
        report.blocker = str(exc)
        manifest = None
    legacy = manifest is not None and manifest.get("format") == 1
    entries = [] if manifest is None else \
        [manifest] + ([manifest["previous"]] if "previous" in manifest else [])
    snapshot_ok = []
    for entry in entries:
        for rel, want in (entry.get("files") or {}).items():
            path = folder / rel
            if not path.exists():
                report.files.append(FileStatus(path, "damaged", "missing"))
                continue
            size, crc = crc32_file(path)
            ok = size == int(want["size"]) and f"{crc:08x}" == want["crc32"]
            report.files.append(FileStatus(
                path, "ok" if ok else "damaged", f"snapshot of seq {entry['seq']}" if ok else
                f"checksum mismatch ({size:,} bytes, the manifest says "
                f"{int(want['size']):,}): the snapshot of seq {entry['seq']} is damaged"))
        try:
            verify_snapshot(folder, entry)
            snapshot_ok.append(True)
        except StateDamageError as exc:
            snapshot_ok.append(False)
            if not report.blocker:
                report.blocker = str(exc)
    scans: dict[Path, SegmentScan] = {}
    for _, path in segments(folder / "wal"):
        scans[path] = scan_segment(path)
        report.files.append(_segment_status(scans[path]))
    for path, what, columns in _deliveries_files(folder):
        try:
            read_checked(path, what=what, legacy=legacy, columns=columns)
            report.files.append(FileStatus(path, "ok", what))
        except StateDamageError as exc:
            report.files.append(FileStatus(path, "damaged", str(exc)))
            report.blocker = report.blocker or str(exc)
    outbox_damage = ""
    for path, status, detail in check_outbox(folder / "outbox"):
        report.files.append(FileStatus(path, status, detail))
        if status == "damaged":
            outbox_damage = outbox_damage or detail
    secret = folder / "webhook-secret"
    if secret.exists():  # a key, not a record: a changed one only makes receivers refuse
        report.files.append(FileStatus(secret, "ok", "the webhooks' signing secret "
                                                     f"({secret.stat().st_size} bytes)"))
    for k, entry in enumerate(entries):
        if not snapshot_ok[k]:
            continue
        try:
            check_log(folder / "wal", after=int(entry["seq"]), named=entry.get("wal"),
                      scans=scans)
        except WalCorruptError as exc:
            if k == 0 or report.blocker == "":
                report.blocker = str(exc)
            if not any(f.path == exc.path for f in report.files):
                report.files.append(FileStatus(exc.path, "damaged", str(exc)))
            break
        if not any(f.status == "damaged" and f.path.parent.name in ("deliveries", "topk")
                   for f in report.files):
            report.starts = True
            report.start_seq = int(entry["seq"])
            report.fallback = k > 0
            report.blocker = ""
        if k == 0 and len(entries) > 1:  # what a fall-back would need: reported only
            try:
                check_log(folder / "wal", after=int(entries[1]["seq"]),
                          named=entries[1].get("wal"), scans=scans)
            except WalCorruptError as exc:
                if not any(f.path == exc.path and f.status == "damaged"
                           for f in report.files):
                    report.files.append(FileStatus(
                        exc.path, "damaged", f"{exc} (only a fall-back to the previous "
                                             "snapshot reads it)"))
        break
    if outbox_damage and report.starts:
        report.starts = False
        report.blocker = outbox_damage
    return report


def _repair_log(folder: Path, after: int, named: str | None, stamp: str,
                lines: list[str]) -> None:
    """Keep the log's intact prefix; move the damaged segment and every later one aside."""
    wal_dir = folder / "wal"
    for _ in range(100):  # each round removes one damage; a folder has few segments
        try:
            check_log(wal_dir, after=after, named=named)
            return
        except WalCorruptError as exc:
            damaged = exc.path
            first = int(damaged.stem)
            later = [p for f, p in segments(wal_dir) if f > first]
            lines.append(f"log: {exc}")
            if not damaged.exists():  # named by the manifest or a footer: recreate it
                if later:
                    moved = move_aside(folder, later, stamp=stamp)
                    lines.append(f"log: moved {len(later)} later segment(s) to {moved}")
                create_segment(wal_dir, first)
                lines.append(f"log: made {damaged.name} again, with no record")
                continue
            # the bytes before the damage are whole frames that verified
            keep = damaged.read_bytes()[:exc.offset or 0]
            moved = move_aside(folder, [damaged, *later], stamp=stamp)
            lines.append(f"log: moved {damaged.name}"
                         + (f" and {len(later)} later segment(s)" if later else "")
                         + f" to {moved}; kept its first {len(keep):,} bytes")
            if keep:
                tmp = wal_dir / f".{damaged.name}.tmp"
                tmp.write_bytes(keep)
                fsync_path(tmp)
                os.replace(tmp, damaged)
                fsync_path(wal_dir)
    msg = f"{wal_dir}: could not repair the log"
    raise StateDamageError(msg, path=wal_dir)


def repair_folder(folder: Path) -> list[str]:
    """Move damaged files aside and keep what is provably intact; returns what was done
    and lost, one line each.

    Raises
    ------
    ServiceBusyError
        A running service holds the folder.
    StateDamageError
        The damage cannot be repaired (the manifest, or a snapshot without a previous one).
    """
    from roadpubsub.service.folder_lock import lock_folder

    lock = lock_folder(folder)
    try:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        lines: list[str] = []
        try:
            manifest = read_manifest(folder)
        except StateDamageError as exc:  # nothing says which snapshot is current
            msg = f"{exc}; it cannot be repaired from the folder"
            raise StateDamageError(msg, path=exc.path, hint="restore manifest.json from a "
                                   "backup of the folder") from exc
        if manifest is None:
            msg = f"{folder / 'manifest.json'}: missing"
            raise StateDamageError(msg, path=folder / "manifest.json")
        try:
            verify_snapshot(folder, manifest)
        except StateDamageError as exc:
            previous = manifest.get("previous")
            if previous is None:
                raise
            verify_snapshot(folder, previous)  # damaged too: raised
            bad = [folder / rel for rel in manifest.get("files") or {}
                   if (folder / rel).exists()]
            moved = move_aside(folder, bad, stamp=stamp)
            entry = {k: v for k, v in manifest.items() if k not in ("previous", "checksum")}
            entry.update(previous)
            write_manifest(folder, entry)
            manifest = read_manifest(folder)
            assert manifest is not None
            lines.append(f"snapshot: {exc}; moved its files to {moved}; the previous "
                         f"snapshot of seq {previous['seq']} is current (nothing lost: the "
                         "log since it is replayed)")
        before = len(lines)
        _repair_log(folder, int(manifest["seq"]), manifest.get("wal"), stamp, lines)
        if len(lines) > before:
            # deliveries of records the repaired log no longer holds would make the next
            # records' seqs collide with theirs
            last = check_log(folder / "wal", after=int(manifest["seq"]),
                             named=manifest.get("wal")).last_seq
            beyond = [q for sub in ("deliveries", "topk") if (folder / sub).is_dir()
                      for q in sorted((folder / sub).iterdir())
                      if (m := _SEGMENT.match(q.name)) and int(m.group(2)) > last]
            if beyond:
                moved = move_aside(folder, beyond, stamp=stamp)
                lines.append(f"deliveries: moved {len(beyond)} file(s) of messages beyond the "
                             f"repaired log's end at seq {last} to {moved}; lost: their "
                             "recorded deliveries")
        for path, what, columns in _deliveries_files(folder):
            if not path.exists():
                continue
            try:
                read_checked(path, what=what, legacy=manifest.get("format") == 1,
                             columns=columns)
            except StateDamageError as exc:
                group = [p for p in (path, path.with_name(path.name + SUM_SUFFIX))
                         if p.exists()]
                base = path.name.replace(".published", "")
                for sub in ("deliveries", "topk"):
                    for name in (base, base.replace(".parquet", ".published.parquet")):
                        for q in (folder / sub / name,
                                  folder / sub / (name + SUM_SUFFIX)):
                            if q.exists() and q not in group:
                                group.append(q)
                moved = move_aside(folder, group, stamp=stamp)
                lines.append(f"deliveries: {exc}; moved {len(group)} file(s) to {moved}; "
                             f"lost: the recorded {what} (messages after the snapshot "
                             "are matched again from the log)")
        if not lines:
            lines.append(f"{folder}: nothing to repair")
        return lines
    finally:
        os.close(lock)
