"""Benchmark of the stream job against single-process ``roadpubsub match``, in one run.

1. ``roadpubsub match --index-file F`` on the throughput phase's messages (one process,
   every core): its matching rate and its wall time with the index load.
2. ``roadpubsub spark stream`` on ``--master`` (default ``local[2]``), started on empty
   directories, warmed with one small file (workers load the index and compile), then

   * latency phase: files land one at a time, ``--gap`` seconds apart; the latency of a
     file is from its rename into the messages directory to the moment its batch's sink
     file appears (polled every 10 ms);
   * throughput phase: many files land at once; sustained messages/s is their messages over
     the time from the first landing to the last batch's commit, and the steady rate is
     measured between the first and last commit of the phase.

The machine's load average is recorded before and after: other processes share the cores.

Examples
--------
::

    python -m roadpubsub.spark_jobs.bench_stream --index-file work/rome/eia.npz \\
        --messages work/rome/messages.parquet --work /tmp/bench-stream
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["main", "run_bench"]

_BATCH_LINE = re.compile(r"batch (\d+): (\d+) files, ([\d,]+) messages")


def _land(table: pa.Table, path: Path) -> float:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return time.time()


class _SinkWatch(threading.Thread):
    """Records when each sink file first appears."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.01):
            if not self.out.is_dir():
                continue
            now = time.time()
            for p in self.out.glob("batch_id=*"):
                self.seen.setdefault(int(p.name.split("=")[1]), now)


def _batches(log: Path) -> dict[int, int]:
    """Batch id -> messages, from the job's progress lines."""
    out: dict[int, int] = {}
    if log.exists():
        for m in _BATCH_LINE.finditer(log.read_text(errors="replace")):
            out[int(m.group(1))] = int(m.group(3).replace(",", ""))
    return out


def _wait(cond: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            msg = f"the stream job stopped: {log.read_text()[-2000:]}"
            raise RuntimeError(msg)
        if time.monotonic() - t0 > timeout:
            msg = f"timed out: {log.read_text()[-2000:]}"
            raise RuntimeError(msg)
        time.sleep(0.05)


def _batch_of(out: Path, ids: np.ndarray, batches: dict[int, int]) -> int:
    """The sink batch holding deliveries of message ids ``ids``."""
    for b in sorted(batches):
        for p in (out / f"batch_id={b}").glob("part-*.parquet"):
            got = np.asarray(pq.read_table(p, columns=["message_id"]).column("message_id"))
            if np.isin(ids, got).any():
                return b
    msg = "no batch holds deliveries of a latency file"
    raise RuntimeError(msg)


def _same(sink: pa.Table, single: pa.Table) -> bool:
    """Whether the stream's deliveries equal ``roadpubsub match``'s, row for row."""
    cols = ("message_id", "subscription_id", "distance", "score")
    a = sink.select(list(cols)).sort_by([(c, "ascending") for c in cols[:2]])
    b = single.select(list(cols)).sort_by([(c, "ascending") for c in cols[:2]])
    return a.num_rows == b.num_rows and all(
        np.array_equal(np.asarray(a.column(c)), np.asarray(b.column(c))) for c in cols)


def run_bench(*, index_file: Path, messages: Path, work: Path, master: str = "local[2]",
              warm: int = 200, lat_files: int = 8, lat_size: int = 250, gap: float = 3.0,
              tp_files: int = 16, tp_size: int = 1000, max_files: int = 4) -> dict[str, Any]:
    """Run both methods (see the module docstring); the figures as a dict."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    table = pq.read_table(messages)
    need = warm + lat_files * lat_size + tp_files * tp_size
    if table.num_rows < need:
        msg = f"{messages}: {table.num_rows} messages, the benchmark needs {need}"
        raise ValueError(msg)
    tp_start = warm + lat_files * lat_size
    tp_table = table.slice(tp_start, tp_files * tp_size)
    pq.write_table(tp_table, work / "throughput.parquet")
    env = {**os.environ}
    py = sys.executable
    result: dict[str, Any] = {
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "python": platform.python_version()},
        "load_before": os.getloadavg(), "master": master,
        "phases": {"warm": warm, "latency_files": lat_files, "latency_file_messages": lat_size,
                   "gap_s": gap, "throughput_files": tp_files,
                   "throughput_file_messages": tp_size, "max_files_per_trigger": max_files}}
    # 1. single process
    t0 = time.perf_counter()
    done = subprocess.run([py, "-m", "roadpubsub", "match", "--index-file", str(index_file),
                           "--messages", str(work / "throughput.parquet"), "--out",
                           str(work / "single.parquet"), "--json", "--quiet"],
                          env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    single = json.loads(done.stdout)
    result["single_process"] = {"messages": tp_table.num_rows,
                                "messages_per_second": single["messages_per_second"],
                                "seconds": single["seconds"], "wall_s": round(wall, 2),
                                "deliveries": single.get("deliveries")}
    # 2. the stream
    dirs = {k: work / k for k in ("messages", "changes", "out", "checkpoint")}
    dirs["messages"].mkdir()
    dirs["changes"].mkdir()
    log = work / "stream.log"
    cmd = [py, "-m", "roadpubsub", "spark", "stream", "--master", master,
           "--index-file", str(index_file), "--max-files-per-trigger", str(max_files),
           *(x for k, p in dirs.items() for x in (f"--{k}", str(p)))]
    watch = _SinkWatch(dirs["out"])
    watch.start()
    t_start = time.time()
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _land(table.slice(0, warm), dirs["messages"] / "w-0000.parquet")
        _wait(lambda: 0 in watch.seen, proc, log, 900)
        result["stream_first_commit_s"] = round(watch.seen[0] - t_start, 1)
        # latency phase
        landed: list[tuple[float, np.ndarray]] = []
        for i in range(lat_files):
            part = table.slice(warm + i * lat_size, lat_size)
            t = _land(part, dirs["messages"] / f"l-{i:04d}.parquet")
            landed.append((t, np.asarray(part.column("id"))))
            time.sleep(gap)
        n_lat = 1 + lat_files
        _wait(lambda: sum(_batches(log).values()) >= warm + lat_files * lat_size, proc, log,
              900)
        time.sleep(0.1)
        batches = _batches(log)
        lat = [watch.seen[_batch_of(dirs["out"], ids, batches)] - t for t, ids in landed]
        result["latency_s"] = {"median": round(float(np.median(lat)), 3),
                               "min": round(min(lat), 3), "max": round(max(lat), 3),
                               "files": n_lat - 1}
        # throughput phase
        first_tp = max(batches) + 1
        t_land = []
        for i in range(tp_files):
            t_land.append(_land(tp_table.slice(i * tp_size, tp_size),
                                dirs["messages"] / f"t-{i:04d}.parquet"))
        total = warm + lat_files * lat_size + tp_files * tp_size
        _wait(lambda: sum(_batches(log).values()) >= total, proc, log, 1800)
        time.sleep(0.1)
        batches = _batches(log)
        tp_ids = [b for b in sorted(batches) if b >= first_tp]
        commits = [watch.seen[b] for b in tp_ids]
        span = max(commits) - t_land[0]
        steady_msgs = sum(batches[b] for b in tp_ids[1:])
        steady_span = max(commits) - min(commits)
        result["stream"] = {
            "messages": tp_table.num_rows, "batches": len(tp_ids),
            "sustained_messages_per_second": round(tp_table.num_rows / span, 1),
            "steady_messages_per_second": (round(steady_msgs / steady_span, 1)
                                           if steady_span > 0 else None),
            "drain_s": round(span, 2),
        }
        sink = pa.concat_tables([pq.read_table(p) for b in tp_ids
                                 for p in (dirs["out"] / f"batch_id={b}").glob("part-*.parquet")])
        result["stream"]["deliveries"] = sink.num_rows
        result["stream"]["equal_to_single_process"] = _same(
            sink, pq.read_table(work / "single.parquet"))
    finally:
        watch.stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    result["load_after"] = os.getloadavg()
    s, t = result["single_process"], result["stream"]
    result["stream_over_single"] = round(t["sustained_messages_per_second"]
                                         / s["messages_per_second"], 3)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m roadpubsub.spark_jobs.bench_stream",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--index-file", required=True, type=Path)
    p.add_argument("--messages", required=True, type=Path)
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--gap", type=float, default=3.0)
    p.add_argument("--lat-files", type=int, default=8)
    p.add_argument("--tp-files", type=int, default=16)
    p.add_argument("--tp-size", type=int, default=1000)
    p.add_argument("--max-files", type=int, default=4)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    a = p.parse_args(argv)
    res = run_bench(index_file=a.index_file, messages=a.messages, work=a.work, master=a.master,
                    gap=a.gap, lat_files=a.lat_files, tp_files=a.tp_files, tp_size=a.tp_size,
                    max_files=a.max_files)
    text = json.dumps(res, indent=2)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
