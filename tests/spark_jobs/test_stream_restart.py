"""Exactly once: the stream job's driver is killed with SIGKILL mid-stream (at a random
moment, right after a batch's sink file is committed but before Spark's commit, and right
after a batch's change log entry) and restarted on the same checkpoint; the sink holds
every delivery of the single-process matcher exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from stream_helpers import (
    Reference,
    assert_same,
    jsonl,
    land,
    land_table,
    message_table,
    subscribe_events,
    unsubscribe_events,
)

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.stream_files import FAULT_ENV, read_sink

ROOT = Path(__file__).resolve().parents[2]
N_FILES = 6
DMAX_M = 2000.0
N_BASE = 4000


@pytest.fixture(scope="module")
def workload(andorra: RoadNetwork, tweets_csv: Path) -> Workload:
    return generate_workload(andorra, n_subscriptions=N_BASE + 200, n_messages=20 * N_FILES * 2,
                             seed=5, tweets=tweets_csv, tau=0.4, tau_spread=0.2)


def _command(tmp: Path, index_file: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "roadpubsub", "spark", "stream", "--master", "local[2]",
            "--index-file", str(index_file), "--messages", str(tmp / "messages"),
            "--changes", str(tmp / "changes"), "--out", str(tmp / "out"),
            "--checkpoint", str(tmp / "checkpoint"), "--max-files-per-trigger", "1", *extra]


def _start(cmd: list[str], log: Path, fault: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if fault:
        env[FAULT_ENV] = fault
    with log.open("ab") as fh:
        # Its own session: the kill reaches the driver's Python and JVM processes together.
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _sink_files(tmp: Path) -> int:
    return len(list((tmp / "out").glob("batch_id=*")))


@pytest.mark.spark
@pytest.mark.slow
def test_sigkill_mid_stream_then_restart_is_exactly_once(
        tmp_path: Path, andorra: RoadNetwork, andorra_cells: Cells,
        andorra_bounds: CellBounds, workload: Workload) -> None:
    spatial = SpatialIndex.build(andorra, cells=andorra_cells, bounds=andorra_bounds)
    index_file = EnhancedIndex(spatial, workload.subscriptions.take(np.arange(N_BASE)),
                               workload.weights, dmax_m=DMAX_M).save(tmp_path / "eia.npz")
    subs, w = workload.subscriptions, workload.weights
    ref = Reference(index_file)
    rng = random.Random(20)
    log = tmp_path / "driver.log"
    for rnd in range(2):
        # The round's changes land before its messages: all apply before its first batch.
        rows_s, ev_s = subscribe_events(subs.take(np.arange(N_BASE + 100 * rnd,
                                                            N_BASE + 100 * rnd + 100)), w, andorra)
        rows_u, ev_u = unsubscribe_events([int(x) for x in subs.ids[50 * rnd:50 * rnd + 40]])
        land(tmp_path / "changes" / f"c{rnd}.jsonl", jsonl(rows_s + rows_u))
        files = []
        for j in range(N_FILES):
            first = (rnd * N_FILES + j) * 20
            name = f"m{rnd}-{j:02d}.parquet"
            land_table(tmp_path / "messages" / name,
                       message_table(workload.messages.take(np.arange(first, first + 20)), w,
                                     andorra))
            files.append(tmp_path / "messages" / name)
        ref.apply(ev_s + ev_u)
        ref.match(files)
        if rnd == 0:
            # A kill at a random moment while batches are matched and committed ...
            proc = _start(_command(tmp_path, index_file), log)
            t0 = time.monotonic()
            # The moment is drawn from the stream's own progress (after its first or
            # second committed file, plus a little), not from the clock alone: on a quiet
            # machine a batch takes a fraction of a second, and a sleep of up to 1.5 s
            # let the stream finish before the kill.
            target = rng.randint(1, 2)
            while _sink_files(tmp_path) < target and proc.poll() is None:
                assert time.monotonic() - t0 < 300, log.read_text()[-3000:]
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.2))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            # ... then one between the sink file's rename and Spark's commit of the batch.
            after = _sink_files(tmp_path)
            assert after < N_FILES - 1, "the kill was not mid-stream"
            proc = _start(_command(tmp_path, index_file), log, f"after-sink:{after}")
            assert proc.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-3000:]
        else:
            # The first batch of round 1 takes c1: killed right after its log entry.
            proc = _start(_command(tmp_path, index_file), log, f"after-changelog:{N_FILES}")
            assert proc.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-3000:]
        done = subprocess.run(_command(tmp_path, index_file, "--once"), cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        with log.open("a") as fh:
            fh.write(done.stderr)
    sink = read_sink(tmp_path / "out")
    assert_same(sink, Deliveries.concat(ref.found))
    # Every message's deliveries sit in one batch, and batches are whole files.
    mid = np.asarray(sink.column("message_id"))
    bid = np.asarray(sink.column("batch_id"))
    for m in np.unique(mid):
        assert np.unique(bid[mid == m]).size == 1
    # One file per batch, except that a kill after Spark listed a batch's file but before
    # it logged the batch's offsets lets the re-planned batch take that file and the next.
    assert N_FILES < _sink_files(tmp_path) <= 2 * N_FILES
    text = log.read_text()
    assert "already committed" in text  # the batch re-run after the after-sink kill
    assert "4,060 subscriptions at version 2" in text  # set rebuilt from the change log
