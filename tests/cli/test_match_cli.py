"""``roadpubsub match`` end to end on a generated Li California workload."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import roadpubsub.pruning.matchers as matchers
from roadpubsub.cli import main
from roadpubsub.index.io import read_deliveries, read_messages, read_subscriptions, read_weights
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.io import load_network

DMAX = "30000"



@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory,
             shared: Callable[[str], Path]) -> tuple[Path, Path]:
    """(network path, folder of a generated workload) with plenty of deliveries:
    a low tau and a long Dmax on the sparse California network."""
    shared("text/airline_tweets.csv")
    cal = shared("li_california/cal.cnode")
    out = tmp_path_factory.mktemp("cal")
    assert main(["generate", "--network", str(cal), "--out-dir", str(out), "--subscriptions",
                 "4000", "--messages", "60", "--seed", "1", "--tau", "0.3", "--quiet"]) == 0
    return cal, out


def match_argv(cal: Path, wl: Path, out: Path, *extra: str) -> list[str]:
    return ["match", "--network", str(cal), "--subscriptions", str(wl / "subscriptions.parquet"),
            "--messages", str(wl / "messages.parquet"), "--dmax", DMAX, "--index", "brute",
            "--out", str(out), *extra]


def test_match_equals_the_library(workload: tuple[Path, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    out = tmp_path / "d.parquet"
    assert main(match_argv(cal, wl, out, "--weights", str(wl / "weights.parquet"),
                           "--json", "--quiet", "--batch", "7")) == 0
    summary = json.loads(capsys.readouterr().out)
    got = Deliveries(**read_deliveries(out))
    assert summary["deliveries"] == len(got) > 20
    assert summary["messages"] == 60 and summary["subscriptions"] == 4000
    network = load_network(cal)
    weights = read_weights(wl / "weights.parquet")
    subs = read_subscriptions(wl / "subscriptions.parquet", network, weights)
    msgs = read_messages(wl / "messages.parquet", network, weights)
    want = match_brute(network, subs, msgs, weights, dmax_m=float(DMAX))
    for col in ("message_id", "subscription_id", "distance", "score"):
        np.testing.assert_array_equal(getattr(got, col), getattr(want, col))
    table = pq.read_table(out)
    assert table.column_names == ["message_id", "subscription_id", "distance", "score"]
    assert table.schema.field("message_id").type == pa.int64()

    # Without --weights: idf over the tweet corpus, the very weights generate wrote.
    out2 = tmp_path / "d2.jsonl"
    assert main(match_argv(cal, wl, out2, "--quiet")) == 0
    assert Deliveries(**read_deliveries(out2)).pairs() == got.pairs()

    # Directed: California has no one-way roads, so nothing changes.
    out3 = tmp_path / "d3.json"
    assert main(match_argv(cal, wl, out3, "--directed", "--quiet",
                           "--weights", str(wl / "weights.parquet"))) == 0
    assert Deliveries(**read_deliveries(out3)).pairs() == got.pairs()
    # CSV output too.
    out4 = tmp_path / "d4.csv"
    assert main(match_argv(cal, wl, out4, "--quiet")) == 0
    assert out4.read_text().splitlines()[0] == '"message_id","subscription_id","distance","score"'


def test_human_summary_and_progress(workload: tuple[Path, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    out = tmp_path / "d.parquet"
    assert main(match_argv(cal, wl, out, "--weights", str(wl / "weights.parquet"))) == 0
    captured = capsys.readouterr()
    assert "deliveries of 60 messages to 4,000 subscriptions" in captured.out
    assert "60/60" in captured.err  # the progress bar


def test_invalid_input_writes_nothing(workload: tuple[Path, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    table = pq.read_table(wl / "subscriptions.parquet")
    alpha = table.column("alpha").to_numpy().copy()
    alpha[[3, 17]] = 1.5
    table = table.set_column(table.column_names.index("alpha"), "alpha", pa.array(alpha))
    bad = tmp_path / "bad.parquet"
    pq.write_table(table, bad)
    ids = table.column("id").to_numpy()[[3, 17]].tolist()
    out = tmp_path / "d.parquet"
    argv = match_argv(cal, wl, out, "--quiet")
    argv[argv.index("--subscriptions") + 1] = str(bad)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "alpha" in err and f"ids {ids[0]}, {ids[1]}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]


@pytest.mark.parametrize(("extra", "words"), [
    (["--dmax", "0"], "--dmax"),
    (["--dmax", "nan"], "--dmax"),
    (["--messages", "/nonexistent/m.parquet"], "not found"),
    (["--weights", "/nonexistent/w.parquet"], "not found"),
    (["--corpus", "/nonexistent/c.csv"], "not found"),
])
def test_bad_arguments(workload: tuple[Path, Path], tmp_path: Path, extra: list[str],
                       words: str, capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    out = tmp_path / "d.parquet"
    assert main([*match_argv(cal, wl, out, "--quiet"), *extra]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("where", ["a folder", "under a file"])
def test_unusable_output_path_fails_before_any_work(workload: tuple[Path, Path],
                                                    tmp_path: Path, where: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    if where == "a folder":
        out = tmp_path / "d.parquet"
        out.mkdir()
        words = "is a folder; expected a file"
    else:
        (tmp_path / "plain").write_text("x")
        out = tmp_path / "plain" / "sub" / "d.parquet"
        words = "is a file, so no folder can be made under it"

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the inputs were read before the output path was checked")

    monkeypatch.setattr("roadpubsub.cli.sources.read_sources", never)
    monkeypatch.setattr("roadpubsub.cli.match.read_sources", never)
    assert main(match_argv(cal, wl, out, "--quiet")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err and "Traceback" not in err


def test_operating_system_errors_are_one_line(workload: tuple[Path, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A folder where a file is read: the OS error, as one line without its errno."""
    cal, wl = workload
    folder = tmp_path / "subs.jsonl"
    folder.mkdir()
    argv = match_argv(cal, wl, tmp_path / "d.parquet", "--quiet")
    argv[argv.index("--messages") + 1] = str(folder)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("roadpubsub match: error: ") and str(folder) in err
    assert "Errno" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["nan", "-1", "abc"])
def test_max_snap_must_be_a_distance(workload: tuple[Path, Path], tmp_path: Path, value: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    with pytest.raises(SystemExit) as exit_info:
        main(match_argv(cal, wl, tmp_path / "d.parquet", "--quiet", "--max-snap", value))
    assert exit_info.value.code == 2
    assert "--max-snap: must be a number of metres >= 0" in capsys.readouterr().err


def test_keywords_missing_from_the_weights_are_counted(workload: tuple[Path, Path],
                                                        tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    table = pq.read_table(wl / "subscriptions.parquet")
    keywords = table.column("keywords").to_pylist()
    keywords[0] = [*keywords[0], "zzz-mistyped"]
    keywords[5] = [*keywords[5], "zzz-mistyped", "qqq-mistyped"]
    table = table.set_column(table.column_names.index("keywords"), "keywords",
                             pa.array(keywords, pa.list_(pa.string())))
    subs = tmp_path / "subs.parquet"
    pq.write_table(table, subs)
    argv = match_argv(cal, wl, tmp_path / "d.parquet", "--weights", str(wl / "weights.parquet"))
    argv[argv.index("--subscriptions") + 1] = str(subs)
    assert main(argv) == 0
    assert "note: 2 keyword(s) of the subscriptions are not in the weights table" in \
        capsys.readouterr().err


def test_default_index_is_eia(workload: tuple[Path, Path], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    argv = match_argv(cal, wl, tmp_path / "d.parquet", "--quiet", "--json")
    del argv[argv.index("--index"):argv.index("--index") + 2]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["index"] == "eia"


def test_bad_output_suffix(workload: tuple[Path, Path], tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    assert main(match_argv(cal, wl, tmp_path / "d.txt", "--quiet")) == 2
    assert "suffix" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_failure_mid_run_keeps_old_output(workload: tuple[Path, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cal, wl = workload
    out = tmp_path / "d.parquet"
    out.write_bytes(b"previous result")

    class Failing:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.calls = 0

        def match(self, messages: object) -> Deliveries:
            self.calls += 1
            if self.calls > 1:
                msg = "matcher crashed"
                raise RuntimeError(msg)
            return Deliveries.empty()

    monkeypatch.setitem(matchers.MATCHERS, "brute", Failing)
    # A crash that is no RoadPubSubError is a bug: it keeps its traceback (no exit 2).
    with pytest.raises(RuntimeError, match="matcher crashed"):
        main(match_argv(cal, wl, out, "--quiet", "--batch", "10"))
    assert out.read_bytes() == b"previous result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet"]


def test_help_has_an_example() -> None:
    res = subprocess.run([sys.executable, "-m", "roadpubsub", "match", "--help"],
                         capture_output=True, text=True, check=True, timeout=120)
    assert "example:" in res.stdout
    assert "--index {bia,brute,eia}" in res.stdout
