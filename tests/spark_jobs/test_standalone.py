"""All Spark jobs through spark-submit on a Spark standalone cluster started on loopback.

The test starts a master and a worker (``spark-class ...deploy.master.Master`` and
``...deploy.worker.Worker``, from pyspark's own package folder as SPARK_HOME), submits
precompute-bounds, idf and batch-match to it, checks their outputs against the local
computations, and stops both processes (and the executors the worker started).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyspark
import pytest
from ports import free_port

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.io import (
    read_deliveries,
    read_messages,
    read_subscriptions,
    read_weights,
    write_messages,
    write_subscriptions,
    write_weights,
)
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.text import tokenize
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.bound_table import load_bounds_table
from roadpubsub.spark_jobs.session import java_version

SPARK_HOME = Path(pyspark.__file__).parent
ROOT = Path(__file__).resolve().parents[2]
DMAX_M = 2000.0
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_MASTER_HOST="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return env


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    pytest.fail(f"{text!r} not seen in {log} within {timeout:.0f} s:\n{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started by this test, and its process group (the worker's executors)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    # Executors the worker forked stay in its group after it exits: end them too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(spark://127.0.0.1:PORT, the worker's work folder) of a master with one worker
    (2 cores), both stopped afterwards."""
    if java_version()[1] is None or (java_version()[1] or 0) < 17:
        pytest.skip("Spark needs Java 17+")
    folder = tmp_path_factory.mktemp("standalone")
    port = free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master_log = folder / "master.log"
    worker_log = folder / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with master_log.open("wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True))
        _wait_for(master_log, "I have been elected leader", procs[0], 180)
        url = f"spark://127.0.0.1:{port}"
        with worker_log.open("wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                 "127.0.0.1", "--cores", "2", "--memory", "3g", "--webui-port",
                 str(free_port()), "--work-dir", str(folder / "work")],
                stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True))
        _wait_for(worker_log, "Successfully registered with master", procs[1], 180)
        yield url, folder / "work"
    finally:
        for proc in reversed(procs):
            _stop(proc)
    assert all(p.poll() is not None for p in procs)


def _submit(cluster: tuple[str, Path], script: str, *args: str, cwd: Path) -> None:
    url, work = cluster
    apps = set(work.glob("app-*")) if work.exists() else set()
    cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", url,
           "--conf", f"spark.executorEnv.PYTHONPATH={ROOT}",
           "--conf", f"spark.pyspark.python={sys.executable}",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=2g",
           "--conf", "spark.task.maxFailures=1",
           str(ROOT / "spark_jobs" / script), *args]
    done = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-4000:]}"
    # The job's executors ran on the worker (one application folder per submission).
    assert len(set(work.glob("app-*")) - apps) == 1, done.stderr[-4000:]


def test_all_jobs_through_spark_submit_on_a_standalone_cluster(
        cluster: tuple[str, Path], andorra: RoadNetwork, andorra_path: Path, andorra_cells: Cells,
        andorra_capacity: int, andorra_bounds: CellBounds, tweets_csv: Path,
        tmp_path: Path) -> None:
    folder = tmp_path / "shared dir"
    folder.mkdir()
    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=100, seed=5,
                           tweets=tweets_csv)
    subs, msgs, weights = folder / "subs.parquet", folder / "msgs.parquet", folder / "w.parquet"
    write_subscriptions(wl.subscriptions, subs, network=andorra, weights=wl.weights)
    write_messages(wl.messages, msgs, network=andorra, weights=wl.weights)
    write_weights(wl.weights, weights)
    docs = [" ".join(wl.weights.terms[i::50]) for i in range(50)] + ["", "lost bag"]
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(docs) + "\n", encoding="utf-8")

    _submit(cluster, "precompute_bounds.py", f"file://{andorra_path}", "--capacity",
            str(andorra_capacity), "--out", f"file://{folder}/andorra.bounds", cwd=tmp_path)
    table = load_bounds_table(folder / "andorra.bounds", andorra, andorra_cells)
    np.testing.assert_array_equal(table.D, andorra_bounds.D)

    _submit(cluster, "idf.py", str(corpus), "--out", f"file://{folder}/idf.parquet",
            cwd=tmp_path)
    want_w = TermWeights.from_idf(tokenize(d) for d in docs)
    got_w = read_weights(folder / "idf.parquet")
    assert got_w.terms == want_w.terms
    np.testing.assert_array_equal(got_w.weights, want_w.weights)

    _submit(cluster, "batch_match.py", f"file://{andorra_path}", "--subscriptions",
            f"file://{subs}", "--messages", f"file://{msgs}", "--weights", str(weights),
            "--bounds", f"file://{folder}/andorra.bounds", "--capacity",
            str(andorra_capacity), "--dmax", str(DMAX_M), "--partitions", "3",
            "--out", f"file://{folder}/deliveries.parquet", cwd=tmp_path)
    w = read_weights(weights)
    spatial = SpatialIndex.build(andorra, cells=andorra_cells, bounds=andorra_bounds)
    want = IndexMatcher(EnhancedIndex(spatial, read_subscriptions(subs, andorra, w), w,
                                         dmax_m=DMAX_M)).match(read_messages(msgs, andorra, w))
    assert len(want) > 20
    got = read_deliveries(folder / "deliveries.parquet")
    for key, value in want.to_columns().items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
