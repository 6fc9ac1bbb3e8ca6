"""``roadpubsub state check`` and ``state repair`` on copies of a real service folder (made
by a real server: :mod:`state_folder` of the service tests), run as subprocesses."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
from live import DMAX_M, Server, tweet_weights
from state_folder import FIRST_RUN, SECOND_RUN, make_folder

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.text import read_tweet_tokens
from roadpubsub.index.workload import generate_workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.state import create_state
from roadpubsub.service.wal import scan_segment, segments

LAST = FIRST_RUN + SECOND_RUN


@pytest.fixture(scope="module")
def golden(andorra: RoadNetwork, shared: Callable[[str], Path],
           tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tweets = read_tweet_tokens(shared("text/airline_tweets.csv"))
    template = tmp_path_factory.mktemp("template") / "svc"
    empty = Subscriptions(np.empty(0, np.int64), EdgePoints.of([], []), np.empty(0),
                          np.empty(0), np.zeros(1, np.int64), np.empty(0, np.int32))
    create_state(template, EnhancedIndex(SpatialIndex.build(andorra), empty,
                                         tweet_weights(tweets), dmax_m=DMAX_M))
    wl = generate_workload(andorra, n_subscriptions=1500, n_messages=400, seed=17,
                           tweets=tweets, alpha=0.5, alpha_spread=0.5, tau=0.5,
                           tau_spread=0.4)
    target = tmp_path_factory.mktemp("cli-integrity") / "svc"
    return target, make_folder(template, target, wl, andorra)


@pytest.fixture
def folder(golden: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    target = tmp_path / "svc"
    shutil.copytree(golden[0], target)
    return target


def _state(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roadpubsub", "state", *args],
                          capture_output=True, text=True, timeout=300, env=os.environ)


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "LOCK"}


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def test_check_reports_every_file_of_an_intact_folder(folder: Path) -> None:
    before = _digest(folder)
    r = _state("check", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    named = {line.split()[1].rstrip(":") for line in lines[:-1]}
    expected = {k for k in before if not k.endswith(".sum")}
    assert expected <= named, expected - named
    assert all(line.startswith("ok ") for line in lines[:-1]), lines
    assert lines[-1].endswith(f"would start from the snapshot of seq {FIRST_RUN}")
    assert _digest(folder) == before


def test_check_names_a_torn_tail_and_still_starts(folder: Path) -> None:
    newest = segments(folder / "wal")[-1][1]
    with newest.open("r+b") as fh:
        fh.truncate(newest.stat().st_size - 5)
    r = _state("check", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr
    torn = [line for line in r.stdout.splitlines() if line.startswith("torn")]
    assert len(torn) == 1 and newest.name in torn[0] and "bytes" in torn[0]


def test_check_names_a_damaged_outbox_segment(folder: Path) -> None:
    """The webhook outbox is checked as a start reads it: a flipped byte in a segment
    that is not the last is named, and the service would not start."""
    outbox = sorted((folder / "outbox").glob("0*.log"))
    assert len(outbox) >= 2, outbox
    _flip(outbox[0], 20)
    before = _digest(folder)
    r = _state("check", str(folder))
    assert r.returncode != 0, r.stdout + r.stderr
    damaged = [line for line in r.stdout.splitlines() if line.startswith("damaged")]
    assert len(damaged) == 1 and outbox[0].name in damaged[0], r.stdout
    assert "would NOT start" in r.stdout.splitlines()[-1]
    assert _digest(folder) == before


def test_check_names_damage_and_changes_nothing(folder: Path) -> None:
    newest = segments(folder / "wal")[-1][1]
    scan = scan_segment(newest)
    off = scan.records[40][0]
    _flip(newest, off + 30)
    before = _digest(folder)
    r = _state("check", str(folder))
    assert r.returncode == 1, r.stdout + r.stderr
    bad = [line for line in r.stdout.splitlines() if line.startswith("damaged")]
    assert len(bad) == 1 and newest.name in bad[0] and f"at byte {off:,}" in bad[0]
    assert f"seq {FIRST_RUN + 42}-{LAST}" in bad[0]
    assert "would NOT start" in r.stdout.splitlines()[-1]
    assert _digest(folder) == before


def test_repair_keeps_the_intact_prefix_and_deletes_nothing(
        folder: Path, golden: tuple[Path, dict[str, Any]]) -> None:
    newest = segments(folder / "wal")[-1][1]
    scan = scan_segment(newest)
    k = 40
    _flip(newest, scan.records[k][0] + 30)
    damaged_seq = FIRST_RUN + 1 + k
    before = _digest(folder)
    r = _state("repair", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"seq {damaged_seq + 1}-{LAST}" in r.stdout  # what was lost, said
    after = _digest(folder)
    # nothing deleted: every file's content is still in the folder, in place or moved
    assert set(before.values()) <= set(after.values())
    moved = list((folder / "damaged").rglob(newest.name))
    assert len(moved) == 1 and hashlib.sha256(moved[0].read_bytes()).hexdigest() == \
        before[str(newest.relative_to(folder))]
    assert scan_segment(newest).seqs == (FIRST_RUN + 1, damaged_seq - 1)
    check = _state("check", str(folder))
    assert check.returncode == 0, check.stdout
    # the service starts and serves every acknowledged record before the damage
    acked: dict[int, tuple[str, int]] = golden[1]["acked"]
    server = Server(folder)
    server.start()
    try:
        with server.client() as c:
            for seq, (kind, ident) in sorted(acked.items()):
                if kind != "publish":
                    continue
                got = c.get(f"/messages/{ident}")
                if seq < damaged_seq:
                    assert got.status_code == 200 and got.json()["seq"] == seq, (seq, got)
            health = c.get("/health").json()
            assert health, health
    finally:
        server.stop()


def test_repair_of_a_damaged_snapshot_uses_the_previous(folder: Path) -> None:
    index = folder / "snapshots" / f"{FIRST_RUN:020d}.npz"
    _flip(index, index.stat().st_size // 2)
    r = _state("check", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr  # the start would fall back
    assert "falling back to the previous snapshot" in r.stdout
    assert any(line.startswith("damaged") and index.name in line
               for line in r.stdout.splitlines())
    r = _state("repair", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing lost" in r.stdout
    assert list((folder / "damaged").rglob(index.name))
    r = _state("check", str(folder))
    assert r.returncode == 0 and "falling back" not in r.stdout
    assert r.stdout.strip().endswith("from the snapshot of seq 0")


def test_repair_of_a_damaged_deliveries_segment(folder: Path) -> None:
    seg = sorted((folder / "deliveries").glob("*[0-9].parquet"))[2]
    _flip(seg, 10)
    assert _state("check", str(folder)).returncode == 1
    r = _state("repair", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr
    assert seg.name in r.stdout and "lost" in r.stdout
    assert list((folder / "damaged").rglob(seg.name))
    assert _state("check", str(folder)).returncode == 0


def test_repair_refuses_a_folder_a_running_service_holds(folder: Path) -> None:
    server = Server(folder)
    server.start()
    try:
        before = _digest(folder)
        r = _state("repair", str(folder))
        assert r.returncode == 2
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and "another roadpubsub service is running" in err[0]
        assert _digest(folder) == before
        assert not (folder / "damaged").exists()
    finally:
        server.stop()


def test_serve_refuses_damage_in_one_line_and_reports_a_torn_tail(folder: Path) -> None:
    newest = segments(folder / "wal")[-1][1]
    scan = scan_segment(newest)
    intact = newest.read_bytes()
    _flip(newest, scan.records[5][0] + 30)
    before = _digest(folder)
    r = subprocess.run([sys.executable, "-m", "roadpubsub", "serve", "--state", str(folder),
                        "--port", "0", "--quiet"], capture_output=True, text=True,
                       timeout=300, env=os.environ)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and newest.name in err[0] and f"at byte {scan.records[5][0]:,}" \
        in err[0] and "state repair" in err[0], err
    assert _digest(folder) == before
    newest.write_bytes(intact[:scan.records[-1][0] + 9])  # a crash in mid-write instead
    server = Server(folder)
    server.start()
    try:
        with server.client() as c:
            assert c.get("/health").json()["seq"] == LAST - 1
    finally:
        server.stop()
    log = server.log.read_text()
    assert f"{newest.name}: cut an incomplete last record at byte " \
           f"{scan.records[-1][0]:,} (9 bytes dropped" in log
