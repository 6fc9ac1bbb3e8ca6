"""``roadpubsub index build|info`` and ``roadpubsub match --index-file`` on Li California."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_match_cli import DMAX, match_argv, workload  # noqa: F401 - the fixture

from roadpubsub.cli import main
from roadpubsub.index.io import read_deliveries
from roadpubsub.pruning.deliveries import Deliveries


def build_argv(cal: Path, wl: Path, out: Path, *extra: str) -> list[str]:
    return ["index", "build", "--network", str(cal),
            "--subscriptions", str(wl / "subscriptions.parquet"),
            "--weights", str(wl / "weights.parquet"), "--dmax", DMAX, "--out", str(out),
            *extra]


@pytest.mark.parametrize("kind", ["eia", "bia"])
def test_build_once_then_match_from_the_file(workload: tuple[Path, Path],  # noqa: F811
                                             tmp_path: Path, kind: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    index_file = tmp_path / f"{kind}.npz"
    assert main(build_argv(cal, wl, index_file, "--kind", kind, "--quiet", "--json")) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["kind"] == kind and built["subscriptions"] == 4000
    assert built["file_bytes"] == index_file.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [index_file.name]  # no temp file

    assert main(["index", "info", str(index_file), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == kind and info["subscriptions"] == 4000
    assert info["dmax_m"] == float(DMAX) and info["network"]["edges"] > 20000
    assert main(["index", "info", str(index_file)]) == 0
    assert f"{kind.upper()} index, 4,000 subscriptions" in capsys.readouterr().out

    got_file = tmp_path / "from_index.parquet"
    assert main(["match", "--index-file", str(index_file), "--messages",
                 str(wl / "messages.parquet"), "--out", str(got_file), "--quiet",
                 "--json", "--batch", "9"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["index"] == kind and summary["index_file"] == str(index_file)
    assert summary["subscriptions"] == 4000 and summary["dmax_m"] == float(DMAX)
    want_file = tmp_path / "brute.parquet"
    assert main(match_argv(cal, wl, want_file, "--weights", str(wl / "weights.parquet"),
                           "--quiet")) == 0
    got = Deliveries(**read_deliveries(got_file))
    want = Deliveries(**read_deliveries(want_file))
    assert summary["deliveries"] == len(want) > 20
    np.testing.assert_array_equal(got.message_id, want.message_id)
    np.testing.assert_array_equal(got.subscription_id, want.subscription_id)
    np.testing.assert_array_equal(got.distance, want.distance)
    np.testing.assert_array_equal(got.score, want.score)


def test_index_file_and_sources_exclude_each_other(workload: tuple[Path, Path],  # noqa: F811
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    out = tmp_path / "d.parquet"
    argv = ["match", "--index-file", str(tmp_path / "x.npz"), "--network", str(cal),
            "--dmax", "100", "--messages", str(wl / "messages.parquet"), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "drop --network, --dmax" in err
    assert main(["match", "--messages", str(wl / "messages.parquet"), "--out", str(out)]) == 2
    assert "give --network and --subscriptions, or --index-file" in capsys.readouterr().err
    assert not out.exists()


def test_files_that_are_not_indexes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.npz"
    text.write_text("not a zip file")
    other = tmp_path / "arrays.npz"
    np.savez(other, a=np.arange(3))
    pickled = tmp_path / "objects.npz"
    with pickled.open("wb") as fh:
        np.save(fh, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    single = tmp_path / "single.npz"
    with single.open("wb") as fh:
        np.save(fh, np.arange(3))  # an .npy array under an .npz name
    for path in (text, other, pickled, single):
        assert main(["index", "info", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{path}: not a roadpubsub index file" in err and "Traceback" not in err
        assert "allow_pickle" not in err  # numpy's advice does not apply to a user
    assert main(["index", "info", str(tmp_path / "missing.npz")]) == 2
    err = capsys.readouterr().err
    assert "No such file or directory" in err and "missing.npz" in err and "Errno" not in err


def test_build_rejects_a_wrong_suffix(workload: tuple[Path, Path], tmp_path: Path,  # noqa: F811
                                      capsys: pytest.CaptureFixture[str]) -> None:
    cal, wl = workload
    assert main(build_argv(cal, wl, tmp_path / "eia.idx", "--quiet")) == 2
    assert "must end in .npz" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
