"""SIGTERM stops the stream job after the micro-batch under way: exit 0, one line, no
traceback; a restart on the same checkpoint completes the rest exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from stream_helpers import Reference, assert_same, land_table, message_table

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.stream_files import read_sink

ROOT = Path(__file__).resolve().parents[2]
N_FILES = 8


@pytest.fixture(scope="module")
def workload(andorra: RoadNetwork, tweets_csv: Path) -> Workload:
    return generate_workload(andorra, n_subscriptions=3000, n_messages=20 * N_FILES, seed=9,
                             tweets=tweets_csv, tau=0.4, tau_spread=0.2)


def _command(tmp: Path, index_file: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "roadpubsub", "spark", "stream", "--master", "local[2]",
            "--index-file", str(index_file), "--messages", str(tmp / "messages"),
            "--changes", str(tmp / "changes"), "--out", str(tmp / "out"),
            "--checkpoint", str(tmp / "checkpoint"), "--max-files-per-trigger", "1", *extra]


@pytest.mark.spark
@pytest.mark.slow
def test_sigterm_stops_after_the_current_micro_batch(
        tmp_path: Path, andorra: RoadNetwork, andorra_cells: Cells,
        andorra_bounds: CellBounds, workload: Workload) -> None:
    spatial = SpatialIndex.build(andorra, cells=andorra_cells, bounds=andorra_bounds)
    index_file = EnhancedIndex(spatial, workload.subscriptions, workload.weights,
                               dmax_m=2000.0).save(tmp_path / "eia.npz")
    ref = Reference(index_file)
    files = []
    for j in range(N_FILES):
        path = tmp_path / "messages" / f"m{j:02d}.parquet"
        land_table(path, message_table(workload.messages.take(np.arange(20 * j, 20 * j + 20)),
                                       workload.weights, andorra))
        files.append(path)
    ref.match(files)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "driver.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(_command(tmp_path, index_file), cwd=ROOT, env=env,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        while not list((tmp_path / "out").glob("batch_id=*")):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() - t0 < 300, log.read_text()[-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # the driver's process, as a supervisor does
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert "Traceback" not in text and "Py4J" not in text, text[-3000:]
    stops = [line for line in text.splitlines() if "stream: stopped on SIGTERM" in line]
    assert len(stops) == 1, text[-3000:]
    committed = len(list((tmp_path / "out").glob("batch_id=*")))
    assert committed < N_FILES, "the stream finished before the signal"
    done = subprocess.run(_command(tmp_path, index_file, "--once"), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same(read_sink(tmp_path / "out"), Deliveries.concat(ref.found))
