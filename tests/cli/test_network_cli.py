"""``roadpubsub network info``: statistics, JSON output, --save and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.cli import main
from roadpubsub.roadnet.io import load_network


def tiny_dimacs(tmp_path: Path) -> Path:
    """Nodes 1-2-3 (two-way, then one-way) and a separate two-way 4-5."""
    (tmp_path / "t.gr").write_text("p sp 5 4\na 1 2 100\na 2 1 100\na 2 3 50\n"
                                   "a 4 5 70\na 5 4 70\n")
    (tmp_path / "t.co").write_text("p aux sp co 5\nv 1 12000000 41000000\n"
                                   "v 2 12001000 41000000\nv 3 12002000 41000000\n"
                                   "v 4 12010000 41010000\nv 5 12011000 41010000\n")
    return tmp_path / "t.gr"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["network", "info", *args, "--json"]) == 0
    info: dict[str, object] = json.loads(capsys.readouterr().out)
    return info


def test_info_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["network", "info", str(tiny_dimacs(tmp_path))]) == 0
    out = capsys.readouterr().out
    for needle in ("nodes            5", "edges            3", "one-way edges    1",
                   "components       2 (2 nodes outside the largest)", "total length     0.2 km",
                   "kappa", "projected CRS    EPSG:32633", "load time"):
        assert needle in out, needle


def test_info_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = run_json(capsys, str(tiny_dimacs(tmp_path)))
    assert info["nodes"] == 5 and info["edges"] == 3 and info["oneway_edges"] == 1
    assert info["components"] == 2 and info["nodes_outside_largest_component"] == 2
    assert info["total_length_km"] == pytest.approx(0.22)
    extent = info["extent_lonlat"]
    assert isinstance(extent, dict)
    assert extent["west"] == pytest.approx(12.0) and extent["north"] == pytest.approx(41.01)
    assert info["crs"] == "EPSG:32633" and info["directed"] is False
    assert 0 < float(info["kappa"]) <= 1.01  # type: ignore[arg-type]
    assert float(info["load_seconds"]) >= 0  # type: ignore[arg-type]
    assert "strong_components" not in info


def test_info_directed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = run_json(capsys, str(tiny_dimacs(tmp_path)), "--directed")
    assert info["directed"] is True
    # 1 <-> 2 -> 3 and 4 <-> 5: node 3 is a strong component of its own.
    assert info["strong_components"] == 3


def test_info_directed_parallel_one_way_arcs(tmp_path: Path) -> None:
    """Parallel arcs once made scipy's strong-component search spin forever: run the
    command in a subprocess with a timeout so a regression fails instead of hanging."""
    (tmp_path / "p.gr").write_text("a 1 2 100\na 1 2 100\na 2 3 50\n")
    (tmp_path / "p.co").write_text("v 1 12000000 41000000\nv 2 12001000 41000000\n"
                                   "v 3 12002000 41000000\n")
    done = subprocess.run(
        [sys.executable, "-m", "roadpubsub", "network", "info", str(tmp_path / "p.gr"),
         "--directed", "--json"], capture_output=True, text=True, timeout=120, check=True)
    info = json.loads(done.stdout)
    assert info["oneway_edges"] == 3 and info["strong_components"] == 3


def test_info_save(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tiny_dimacs(tmp_path)
    out = tmp_path / "out" / "tiny.npz"
    info = run_json(capsys, str(src), "--save", str(out))
    assert info["saved_to"] == str(out) and out.exists()
    again = run_json(capsys, str(out))
    for key in ("nodes", "edges", "oneway_edges", "components", "total_length_km", "kappa"):
        assert again[key] == info[key], key
    np.testing.assert_array_equal(load_network(out).edge_length, load_network(src).edge_length)


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["network", "info", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out and "roadpubsub network info" in out and "--save" in out


@pytest.mark.parametrize(("name", "content", "message"), [
    ("broken.gr", "a 1 x 3\n", "broken.gr"),
    ("roads.shp", "x", "unsupported network format"),
    ("empty.osm.pbf", "", "empty.osm.pbf"),
])
def test_errors_are_one_line_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    if name.endswith(".gr"):
        (tmp_path / "broken.co").write_text("v 1 0 0\n")
    assert main(["network", "info", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roadpubsub network: error:") and message in err
    assert err.count("\n") == 1


def test_npz_files_that_are_not_networks(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.npz"
    text.write_text("not a zip file")
    assert main(["network", "info", str(text)]) == 2
    err = capsys.readouterr().err
    assert f"{text}: not a network file written by roadpubsub: not an .npz array archive" in err
    assert err.count("\n") == 1 and "allow_pickle" not in err
    single = tmp_path / "single.npz"
    with single.open("wb") as fh:
        np.save(fh, np.arange(3))  # an .npy array under an .npz name
    assert main(["network", "info", str(single)]) == 2
    assert "a single array, not an .npz archive" in capsys.readouterr().err


def test_save_path_is_checked_before_loading(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken.npz").mkdir()
    assert main(["network", "info", str(tmp_path / "nowhere.gr"), "--save",
                 str(tmp_path / "taken.npz")]) == 2
    assert "--save" in capsys.readouterr().err  # not "not found": the load never started
    # --save NAME writes NAME.npz, so a folder called NAME is no obstacle.
    (tmp_path / "rome").mkdir()
    assert main(["network", "info", str(tiny_dimacs(tmp_path)), "--save",
                 str(tmp_path / "rome")]) == 0
    assert (tmp_path / "rome.npz").is_file()


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["network", "info", str(tmp_path / "nowhere.gr")]) == 2
    assert "not found" in capsys.readouterr().err


def test_info_west_oakland(capsys: pytest.CaptureFixture[str],
                           shared: Callable[[str], Path]) -> None:
    info = run_json(capsys, str(shared("osm/West-Oakland.osm.bz2")))
    assert info["crs"] == "EPSG:32610"
    assert int(info["edges"]) > int(info["oneway_edges"]) > 0  # type: ignore[call-overload]


def test_info_rome(capsys: pytest.CaptureFixture[str],
                   shared: Callable[[str], Path]) -> None:
    assert main(["network", "info", str(shared("dimacs/rome.gr.gz"))]) == 0
    out = capsys.readouterr().out
    assert "nodes            234,496" in out
    assert "edges            258,193" in out
    assert "(2,946 nodes outside the largest)" in out
