"""``roadpubsub generate`` end to end on Li's California network (small and fast)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from roadpubsub.cli import main
from roadpubsub.roadnet.network import RoadNetwork

FILES = ("subscriptions.parquet", "messages.parquet", "weights.parquet")



@pytest.fixture(scope="module")
def cal(shared: Callable[[str], Path]) -> Path:
    shared("text/airline_tweets.csv")
    return shared("li_california/cal.cnode")


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(argv) == 0
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    return summary


def test_generate_tweets_uniform(cal: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", "--network", str(cal), "--subscriptions", "3000", "--messages", "120",
            "--seed", "7", "--json"]
    summary = run_json(capsys, [*argv, "--out-dir", str(tmp_path / "a")])
    assert summary["subscriptions"] == 3000 and summary["messages"] == 120
    sub_hist = {int(k): v for k, v in summary["subscription_keywords"].items()}
    msg_hist = {int(k): v for k, v in summary["message_keywords"].items()}
    assert set(sub_hist) == {1, 2, 3, 4, 5} and sum(sub_hist.values()) == 3000
    assert min(msg_hist) >= 5 and max(msg_hist) <= 25 and sum(msg_hist.values()) == 120
    assert summary["vocabulary"] > 5000
    subs = pq.read_table(tmp_path / "a" / "subscriptions.parquet")
    assert subs.num_rows == 3000
    assert {"id", "u", "v", "offset", "lon", "lat", "keywords", "alpha", "tau"} <= set(
        subs.column_names)
    alpha = subs.column("alpha").to_numpy()
    assert alpha.min() >= 0.4 and alpha.max() <= 0.6
    # Same seed, same bytes; another seed, other files.
    run_json(capsys, [*argv, "--out-dir", str(tmp_path / "b")])
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    argv[argv.index("--seed") + 1] = "8"
    run_json(capsys, [*argv, "--out-dir", str(tmp_path / "c")])
    assert (tmp_path / "a" / FILES[0]).read_bytes() != (tmp_path / "c" / FILES[0]).read_bytes()


def test_generate_pois(cal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = run_json(capsys, [
        "generate", "--network", str(cal), "--out-dir", str(tmp_path), "--subscriptions",
        "500", "--messages", "20", "--keywords-from", "pois", "--locations", "pois",
        "--alpha", "0.3", "--alpha-spread", "0", "--tau", "0.9", "--tau-spread", "0.2",
        "--json"])
    assert summary["pois"] == 87_635
    assert summary["subscription_keywords"] == {"1": 500}  # one category name per POI
    assert summary["vocabulary"] <= 63
    subs = pq.read_table(tmp_path / "subscriptions.parquet")
    assert np.all(subs.column("alpha").to_numpy() == 0.3)
    tau = subs.column("tau").to_numpy()
    assert tau.max() == 1.0 and tau.min() >= 0.7


def test_generate_human_output(cal: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--network", str(cal), "--out-dir", str(tmp_path),
                 "--subscriptions", "10", "--messages", "2"]) == 0
    out = capsys.readouterr().out
    assert "wrote 10 subscriptions, 2 messages" in out
    assert "keywords per subscription" in out
    assert main(["generate", "--network", str(cal), "--out-dir", str(tmp_path),
                 "--subscriptions", "10", "--messages", "2", "--quiet"]) == 0
    assert capsys.readouterr().out == ""


def test_failures_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    net = RoadNetwork.from_arrays(node_ids=[1, 2], node_lon=[0.0, 0.001], node_lat=[0.0, 0.0],
                                  edge_u_ids=[1], edge_v_ids=[2], edge_length=[100.0])
    path = net.save(tmp_path / "net.npz")
    out = tmp_path / "out"
    tweets = tmp_path / "t.csv"
    tweets.write_text("text\nlost bag\ngreat crew\n")
    base = ["generate", "--network", str(path), "--out-dir", str(out), "--tweets", str(tweets)]
    for extra, words in ((["--keywords-from", "pois"], "no POIs"),
                         (["--alpha", "1.5"], "alpha"),
                         (["--tau", "0"], "tau"),
                         (["--subscriptions", "-3"], ">= 0")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("roadpubsub generate: error:") and words in err
        assert len(err.strip().splitlines()) == 1
        assert not out.exists()
    assert main(["generate", "--network", str(tmp_path / "missing.cnode"), "--out-dir",
                 str(out)]) == 2
    assert "not found" in capsys.readouterr().err
    assert main([*base, "--subscriptions", "5", "--messages", "1", "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "example:" in text and "--keywords-from" in text
