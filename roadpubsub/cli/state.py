"""``roadpubsub state``: check or repair the folder of a live service."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register", "run_check", "run_repair"]

_EXAMPLE = """\
example:
  roadpubsub state check work/live    # every file: ok / torn / damaged; exit 1 if it
                                      # would not start
  roadpubsub state repair work/live   # damaged files go to work/live/damaged/<time>/

A restart cuts only an incomplete last record of the newest log segment (never
acknowledged) and says so; any other damage stops it with one line naming the file.
'state repair' never deletes: it moves damaged files aside, keeps the log up to the
first damaged record and the previous snapshot when the current one is damaged, and
prints what was lost (seq ranges, records). It refuses a folder a running service holds.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``state`` subcommand (``check``, ``repair``)."""
    p = subparsers.add_parser(
        "state", help="check or repair a live service's folder",
        description="Check every file of a service folder against its checksums, or move "
                    "damaged files aside and keep what is provably intact.",
        epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("check", help="report every file; exit 1 when the service would "
                                     "not start (changes nothing)")
    c.add_argument("dir", metavar="DIR", type=Path)
    c.set_defaults(func=run_check)
    r = sub.add_parser("repair", help="move damaged files into DIR/damaged/<time>/ and "
                                      "keep what is provably intact")
    r.add_argument("dir", metavar="DIR", type=Path)
    r.set_defaults(func=run_repair)


def _folder(path: Path) -> Path:
    from roadpubsub.roadnet.errors import InputError

    if not (path / "manifest.json").exists() and not (path / "wal").is_dir():
        msg = f"{path}: no roadpubsub service folder here (no manifest.json, no wal/)"
        raise InputError(msg)
    return path


def run_check(args: argparse.Namespace) -> int:
    """Print one line per file and the verdict; 0 when the service would start."""
    from roadpubsub.service.repair import check_folder

    folder = _folder(args.dir)
    report = check_folder(folder)
    for line in report.lines(folder):
        print(line)
    return 0 if report.starts else 1


def run_repair(args: argparse.Namespace) -> int:
    """Repair, print what was done and lost, then the check of the result."""
    from roadpubsub.service.repair import check_folder, repair_folder

    folder = _folder(args.dir)
    for line in repair_folder(folder):
        print(f"repair: {line}")
    report = check_folder(folder)
    if not report.starts:
        print(f"repair: {folder}: still would not start: {report.blocker}", file=sys.stderr)
        return 1
    print(f"repair: {folder}: the service would start from the snapshot of seq "
          f"{report.start_seq}")
    return 0
