"""Storage integrity of a real service folder (issue 29): every log record and every file
is checksummed; a torn tail of the newest log is cut and reported; any other damage stops
the start with one line naming the file and changes nothing on disk; a damaged snapshot
falls back to the previous one.

The folder is made once per module by a real server (:mod:`state_folder`: a clean stop
after 300 records, then 100 more and SIGKILL), and copied per case; the cases open the
copies with :meth:`ServiceState.open` in this process, or read the log with
:func:`recover_log` for the byte-by-byte loops.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from state_folder import FIRST_RUN, SECOND_RUN, make_folder

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.errors import RoadPubSubError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.integrity import StateDamageError
from roadpubsub.service.repair import check_folder
from roadpubsub.service.snapshot import read_manifest
from roadpubsub.service.state import ServiceState
from roadpubsub.service.wal import SEG_FOOTER, recover_log, scan_segment, segments

LAST = FIRST_RUN + SECOND_RUN


@pytest.fixture(scope="module")
def golden(service_template: Path, workload: Workload, andorra: RoadNetwork,
           tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    target = tmp_path_factory.mktemp("integrity") / "svc"
    return target, make_folder(service_template, target, workload, andorra)


@pytest.fixture
def folder(golden: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    target = tmp_path / "svc"
    shutil.copytree(golden[0], target)
    return target


def _digest(folder: Path) -> dict[str, str]:
    """Every file's sha256 (what "nothing changed on disk" compares)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "LOCK"}


def _newest(folder: Path) -> Path:
    return segments(folder / "wal")[-1][1]


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def _refused(folder: Path, capfd: pytest.CaptureFixture[str], name: str) -> str:
    """Open must fail with one line naming ``name``, and change nothing."""
    before = _digest(folder)
    with pytest.raises(StateDamageError) as info:
        ServiceState.open(folder).close()
    line = str(info.value)
    assert "\n" not in line and name in line, line
    assert isinstance(info.value, RoadPubSubError) and isinstance(info.value, RuntimeError)
    assert "state check" in info.value.hint
    assert _digest(folder) == before
    return line


def test_the_folder_is_what_the_cases_need(folder: Path) -> None:
    manifest = read_manifest(folder)
    assert manifest is not None and manifest["seq"] == FIRST_RUN
    assert manifest["previous"]["seq"] == 0  # the previous snapshot and its log are kept
    assert manifest["wal"] == f"{FIRST_RUN + 1:020d}.log"
    segs = segments(folder / "wal")
    assert [f for f, _ in segs] == [1, FIRST_RUN + 1]
    old = scan_segment(segs[0][1])
    assert old.footer == {"next": manifest["wal"], "next_seq": FIRST_RUN + 1}
    assert scan_segment(segs[1][1]).seqs == (FIRST_RUN + 1, LAST)
    assert list((folder / "topk").glob("*.parquet"))
    assert list((folder / "deliveries").glob("*.parquet.sum"))
    state = ServiceState.open(folder)
    try:
        assert state.wal.next_seq == LAST + 1
    finally:
        state.wal.close()  # no snapshot: the folder stays as it was


def _last_record(path: Path) -> tuple[int, int]:
    scan = scan_segment(path)
    off = scan.records[-1][0]
    return off, scan.size


def test_every_cut_of_the_last_record_is_a_torn_tail(folder: Path) -> None:
    path = _newest(folder)
    data = path.read_bytes()
    start, end = _last_record(path)
    for cut in range(start, end):
        path.write_bytes(data[:cut])
        log = recover_log(folder / "wal", after=FIRST_RUN, named=path.name, truncate=False)
        assert log.last_seq == LAST - 1, cut
        assert log.torn_bytes == cut - start, cut
        assert path.read_bytes() == data[:cut]  # truncate=False: nothing changed


def test_every_flip_of_the_last_record_is_refused(folder: Path) -> None:
    path = _newest(folder)
    data = path.read_bytes()
    start, end = _last_record(path)
    for k in range(start, end):
        damaged = bytearray(data)
        damaged[k] ^= 0xFF
        path.write_bytes(bytes(damaged))
        with pytest.raises(StateDamageError, match=rf"{path.name}: .* at byte {start:,}"):
            recover_log(folder / "wal", after=FIRST_RUN, named=path.name)
        assert path.read_bytes() == bytes(damaged), k


def test_a_torn_tail_is_cut_and_reported(folder: Path, capfd: pytest.CaptureFixture[str]
                                         ) -> None:
    path = _newest(folder)
    start, end = _last_record(path)
    with path.open("r+b") as fh:
        fh.truncate(end - 7)
    state = ServiceState.open(folder)
    try:
        assert state.wal.next_seq == LAST  # the cut record is gone, the rest is there
    finally:
        state.wal.close()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and path.name in err[0] and f"byte {start:,}" in err[0]
    assert f"{end - 7 - start:,} bytes dropped" in err[0]
    assert path.stat().st_size == start


@pytest.mark.parametrize("which", ["middle", "first record", "header", "zeroed tail"])
def test_damage_in_the_newest_segment_is_refused(folder: Path, which: str,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    path = _newest(folder)
    scan = scan_segment(path)
    if which == "zeroed tail":
        data = bytearray(path.read_bytes())
        data[-4096:] = bytes(4096)
        path.write_bytes(bytes(data))
    else:
        off = {"middle": scan.records[len(scan.records) // 2][0] + 20,
               "first record": scan.records[0][0] + 3, "header": 2}[which]
        _flip(path, off)
    line = _refused(folder, capfd, path.name)
    assert "would be lost" in line or "no readable record" in line
    if which == "middle":
        assert f"seq {FIRST_RUN + len(scan.records) // 2 + 2}-{LAST}" in line


@pytest.mark.parametrize("how", ["empty", "deleted"])
def test_an_empty_or_deleted_segment_is_refused(folder: Path, how: str,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    path = _newest(folder)
    if how == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
    line = _refused(folder, capfd, path.name)
    assert ("empty" if how == "empty" else "missing") in line


@pytest.mark.parametrize("cut", ["footer", "record boundary", "mid-record"])
def test_an_older_segment_cut_short_is_refused(folder: Path, cut: str) -> None:
    old = segments(folder / "wal")[0][1]
    scan = scan_segment(old)
    assert scan.footer_offset is not None
    at = {"footer": scan.footer_offset, "record boundary": scan.records[-1][0],
          "mid-record": scan.footer_offset - 10}[cut]
    with old.open("r+b") as fh:
        fh.truncate(at)
    if cut == "footer":  # no record lost: a crash while rotating looks the same
        assert recover_log(folder / "wal", after=0, named=old.name).last_seq == LAST
        return
    what = "without its footer" if cut == "record boundary" else "not the newest"
    with pytest.raises(StateDamageError, match=f"{old.name}: .*{what}"):
        recover_log(folder / "wal", after=0, named=old.name)
    assert old.stat().st_size == at
    assert SEG_FOOTER == 3


def _other_files(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file()
            and p.parent.name in ("deliveries", "topk")] + [folder / "manifest.json"]


def test_a_flip_in_any_deliveries_topk_or_manifest_file_is_refused(
        folder: Path, golden: tuple[Path, dict[str, Any]],
        capfd: pytest.CaptureFixture[str]) -> None:
    files = _other_files(folder)
    kinds = {p.parent.name + ("/sum" if p.name.endswith(".sum") else "/published"
                              if ".published" in p.name else "") for p in files}
    assert {"deliveries", "deliveries/published", "deliveries/sum", "topk",
            "topk/sum", "svc"} <= kinds
    for p in files:
        rel = p.relative_to(folder)
        for off in (p.stat().st_size // 2, p.stat().st_size - 1):
            shutil.rmtree(folder)
            shutil.copytree(golden[0], folder)
            _flip(folder / rel, off)
            _refused(folder, capfd, rel.name)


def _open_quietly(folder: Path) -> ServiceState:
    state = ServiceState.open(folder)
    state.wal.close()
    return state


def test_a_damaged_snapshot_falls_back_to_the_previous(
        folder: Path, golden: tuple[Path, dict[str, Any]],
        capfd: pytest.CaptureFixture[str]) -> None:
    manifest = read_manifest(folder)
    assert manifest is not None
    reference = _open_quietly(folder)
    capfd.readouterr()
    for rel in manifest["files"]:
        shutil.rmtree(folder)
        shutil.copytree(golden[0], folder)
        _flip(folder / rel, (folder / rel).stat().st_size // 3)
        state = _open_quietly(folder)  # from seq 0, replaying 400 records
        assert state.snapshot_seq == 0 and state.wal.next_seq == LAST + 1
        assert state.subscription_count() == reference.subscription_count()
        assert state.messages.keys() == reference.messages.keys()
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and Path(rel).name in err[0] and "previous snapshot" in err[0]
        moved = list((folder / "damaged").rglob(Path(rel).name))
        assert len(moved) == 1  # moved aside, not deleted


def test_a_damaged_snapshot_without_an_intact_previous_is_refused(
        folder: Path, capfd: pytest.CaptureFixture[str]) -> None:
    manifest = read_manifest(folder)
    assert manifest is not None
    current = next(r for r in manifest["files"] if r.endswith("0300.npz"))
    previous = next(r for r in manifest["previous"]["files"] if r.endswith("0000.npz"))
    _flip(folder / current, 1000)
    _flip(folder / previous, 1000)
    _refused(folder, capfd, Path(current).name)


def test_acknowledged_records_are_all_recovered(folder: Path,
                                               golden: tuple[Path, dict[str, Any]]) -> None:
    state = _open_quietly(folder)
    acked: dict[int, tuple[str, int]] = golden[1]["acked"]
    assert sorted(acked) == list(range(1, LAST + 1))
    for seq, (kind, ident) in acked.items():
        if kind == "publish":
            assert state.messages[ident][0] == seq


Check = Callable[[Path], Any]


def test_every_flipped_byte_of_the_manifest_is_refused(folder: Path) -> None:
    path = folder / "manifest.json"
    data = path.read_bytes()
    for k in range(len(data)):
        for mask in (0x01, 0x5A):
            damaged = bytearray(data)
            damaged[k] ^= mask
            if damaged[k:k + 1].isspace() and data[k:k + 1].isspace():
                continue  # one blank for another: the same manifest
            path.write_bytes(bytes(damaged))
            with pytest.raises(StateDamageError, match=r"manifest\.json"):
                read_manifest(folder)


def test_check_reports_damage_only_a_fall_back_needs(folder: Path) -> None:
    manifest = read_manifest(folder)
    assert manifest is not None
    rel = next(r for r in manifest["previous"]["files"] if r.endswith("0000.npz"))
    _flip(folder / rel, 500)
    old = segments(folder / "wal")[0][1]
    _flip(old, scan_segment(old).records[10][0] + 20)
    before = _digest(folder)
    report = check_folder(folder)
    assert report.starts and report.start_seq == FIRST_RUN  # the current state is intact
    bad = {f.path.name: f.detail for f in report.files if f.status == "damaged"}
    assert set(bad) == {Path(rel).name, old.name}, bad
    assert "at byte" in bad[old.name]
    assert _digest(folder) == before
    state = _open_quietly(folder)  # the start reads neither
    assert state.wal.next_seq == LAST + 1
