"""``python -m roadpubsub.bench.live`` when a run cannot finish: one line on stderr naming
what failed (and the server's log, kept, when the server died), exit status 1, no
traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from ports import free_port

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.state import create_state


def _bench(tmp_path: Path, *args: str, network: str = "x"
           ) -> subprocess.CompletedProcess[str]:
    # the kept server log goes to TMPDIR: here, inside the test's folder
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "roadpubsub.bench.live", "--network",
                           network, "--port", str(free_port()), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("python -m roadpubsub.bench.live: error: ")
    return lines[0]


def test_a_missing_template_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-template"
    line = _one_line(_bench(tmp_path, "--template", str(missing)))
    assert f"No such file or directory: {missing}" in line


def test_a_server_that_exits_at_once_is_one_line_naming_its_log(tmp_path: Path) -> None:
    """A template folder with no service in it: ``serve`` exits before it answers; the
    line gives serve's own error and the log, which outlives the run's temporary folder."""
    empty = tmp_path / "empty"
    empty.mkdir()
    line = _one_line(_bench(tmp_path, "--template", str(empty)))
    assert "the server exited with status 2 before it answered" in line
    assert "holds no service yet" in line  # serve's own error, from its log
    log = Path(line.rsplit("(server log: ", 1)[1].rstrip(")"))
    assert log.parent == tmp_path and "holds no service yet" in log.read_text()


@pytest.mark.slow
def test_a_failing_load_generator_is_one_line(tmp_path: Path, andorra: RoadNetwork,
                                              shared: Callable[[str], Path]) -> None:
    """The server answers, the load generator refuses its arguments: its own error, in
    the bench's one line."""
    empty = Subscriptions(np.empty(0, np.int64), EdgePoints.of([], []), np.empty(0),
                          np.empty(0), np.zeros(1, np.int64), np.empty(0, np.int32))
    template = tmp_path / "template"
    create_state(template, EnhancedIndex(SpatialIndex.build(andorra), empty,
                                         TermWeights.from_idf([["a"]]), dmax_m=3000.0))
    line = _one_line(_bench(tmp_path, "--template", str(template), "--load-args",
                            "--existing 0", network=str(shared("osm/andorra-latest.osm.pbf"))))
    assert line.endswith("the load generator exited with status 2: roadpubsub loadgen: "
                         "error: --existing must be >= 1")
