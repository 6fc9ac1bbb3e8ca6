"""Hostile index files and points: one clear error, never a crash (issue 14, items 3, 7).

An index file is a zip of arrays; these tests rewrite it with ``np.savez`` (so every zip
checksum is valid) after changing one array, and check that loading, matching, ``index
info`` and ``index verify`` answer with one error naming the file and the array. The load
and match run in a child process, so a segmentation fault fails the test instead of
ending the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.io import write_messages
from roadpubsub.index.model import InvalidSubscriptionError, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.store import load_index, verify_index
from roadpubsub.index.validate import IndexFileError
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.locations import EdgePoints

Arrays = dict[str, np.ndarray]


def _set(name: str, row: int, value: float) -> Callable[[Arrays], None]:
    def edit(a: Arrays) -> None:
        arr = a[name].copy()
        arr.flat[row] = value
        a[name] = arr
    return edit


def _drop(name: str) -> Callable[[Arrays], None]:
    return lambda a: a.pop(name)


def _as(name: str, dtype: str) -> Callable[[Arrays], None]:
    def edit(a: Arrays) -> None:
        a[name] = a[name].astype(dtype)
    return edit


def _shorten(name: str) -> Callable[[Arrays], None]:
    def edit(a: Arrays) -> None:
        a[name] = a[name][:-1]
    return edit


def _meta(key: str, value: object) -> Callable[[Arrays], None]:
    def edit(a: Arrays) -> None:
        meta = json.loads(str(a["meta"]))
        meta[key] = value
        a["meta"] = np.array(json.dumps(meta))
    return edit


#: (case, edit, the array the error must name)
TAMPERS: list[tuple[str, Callable[[Arrays], None], str]] = [
    ("edge id 10^6 in postings", _set("structure.layout.eg_edge", 0, 10**6), "eg_edge"),
    ("slot 10^7 in postings", _set("structure.layout.post_slot", 0, 10**7), "post_slot"),
    ("term id 10^7", _set("subs.kw_terms", 0, 10**7), "subs.kw_terms"),
    ("negative term id", _set("subs.kw_terms", 3, -1), "subs.kw_terms"),
    ("subscription edge 10^6", _set("subs.edge", 0, 10**6), "subs.edge"),
    ("network node 10^6", _set("network.edge_u", 0, 10**6), "network.edge_u"),
    ("cell 10^4", _set("cells.edge_cell", 0, 10**4), "cells.edge_cell"),
    ("border node -1", _set("cells.border_nodes", 0, -1), "cells.border_nodes"),
    ("term pointer decreasing", _set("structure.layout.term_ptr", 5, 10**9),
     "structure.layout.term_ptr"),
    ("group pointer past the end", _set("structure.layout.grp_start", -1, 10**9),
     "structure.layout.grp_start"),
    ("polyline pointer past the end", _set("network.geom_ptr", -1, 10**9), "network.geom_ptr"),
    ("empty keyword row", _set("subs.kw_ptr", 1, 0), "subs.kw_ptr"),
    ("duplicate subscription id", lambda a: a.update(
        {"subs.ids": np.concatenate([a["subs.ids"][:1], a["subs.ids"][:-1]])}), "subs.ids"),
    ("NaN offset", _set("subs.offset", 0, float("nan")), "subs.offset"),
    ("id order out of range", _set("subs.id_order", 0, 10**7), "subs.id_order"),
    ("id order repeating a slot", lambda a: a["subs.id_order"].__setitem__(
        1, a["subs.id_order"][0]), "subs.id_order"),
    ("NaN position", _set("facts.x", 0, float("nan")), "facts.x"),
    ("negative border distance", _set("facts.din_in", 2, -1.0), "facts.din_in"),
    ("a fact missing", _drop("facts.din_out"), "facts"),
    ("offset beyond the edge", _set("subs.offset", 0, 1e9), "subs.offset"),
    ("negative weight", _set("weights.values", 0, -1.0), "weights.values"),
    ("alpha 2", _set("subs.alpha", 0, 2.0), "subs.alpha"),
    ("NaN bound", _set("bounds.D", 0, float("nan")), "bounds.D"),
    ("a posting array one short", _shorten("structure.layout.grp_cell"), "grp_cell"),
    ("a structure missing", _drop("structure.layout.eg_start"), "eg_start"),
    ("float edge ids", _as("subs.edge", "float64"), "subs.edge"),
    ("negative Dmax", _meta("dmax_m", -5), "metadata"),
    ("zero default weight", _meta("default_weight", 0), "metadata"),
]


@pytest.fixture(scope="module")
def saved(andorra, tmp_path_factory) -> dict[str, object]:
    """An EIA and a BIA file of Andorra, and a messages file for them."""
    folder = tmp_path_factory.mktemp("hostile")
    wl = generate_workload(andorra, n_subscriptions=1500, n_messages=20, seed=4)
    spatial = SpatialIndex.build(andorra, capacity=120)
    files = {}
    for cls in (EnhancedIndex, BasicIndex):
        files[cls.kind] = cls(spatial, wl.subscriptions, wl.weights,
                              dmax_m=3000.0).save(folder / f"{cls.kind}.npz")
    messages = folder / "messages.parquet"
    write_messages(wl.messages, messages, network=andorra, weights=wl.weights)
    return {"files": files, "messages": messages, "wl": wl, "spatial": spatial,
            "folder": folder}


def tampered(source: Path, folder: Path, case: str, edit: Callable[[Arrays], None]) -> Path:
    with np.load(source) as data:
        arrays = {k: data[k] for k in data.files}
    edit(arrays)
    out = folder / (case.replace(" ", "_").replace("^", "") + ".npz")
    np.savez(out, **arrays)
    return out


_CHILD = """
import json, sys
from roadpubsub.index.index_file import index_file_info
from roadpubsub.index.store import load_index
from roadpubsub.index.io import read_messages
from roadpubsub.pruning.indexed import IndexMatcher
out = []
for path in sys.argv[2:]:
    try:
        index = load_index(path)
        messages = read_messages(sys.argv[1], index.network, index.weights)
        IndexMatcher(index).match(messages)
        out.append(["loaded", ""])
    except Exception as exc:
        out.append([type(exc).__name__, str(exc)])
print(json.dumps(out))
"""


@pytest.mark.parametrize("kind", ["eia", "bia"])
def test_tampered_files_give_one_clear_error_and_never_crash(saved, kind) -> None:
    folder = saved["folder"]
    paths = [tampered(saved["files"][kind], folder, f"{kind}-{case}", edit)
             for case, edit, _ in TAMPERS]
    done = subprocess.run([sys.executable, "-c", _CHILD, str(saved["messages"]),
                           *map(str, paths)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, f"the child crashed ({done.returncode}): {done.stderr[-2000:]}"
    results = json.loads(done.stdout.splitlines()[-1])
    for (case, _, array), path, (kind_of_error, message) in zip(TAMPERS, paths, results,
                                                              strict=True):
        assert kind_of_error == "IndexFileError", (case, kind_of_error, message)
        assert str(path) in message and array in message, (case, message)


def test_cli_match_on_tampered_files_says_one_line(saved, tmp_path) -> None:
    for case, edit, array in TAMPERS[:3]:
        bad = tampered(saved["files"]["eia"], tmp_path, case, edit)
        done = subprocess.run(
            [sys.executable, "-m", "roadpubsub", "match", "--index-file", str(bad),
             "--messages", str(saved["messages"]), "--out", str(tmp_path / "d.parquet")],
            capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 2, (case, done.returncode, done.stderr[-2000:])
        lines = [ln for ln in done.stderr.splitlines() if "error" in ln]
        assert len(lines) == 1 and array in lines[0] and "Traceback" not in done.stderr
        assert not (tmp_path / "d.parquet").exists()


def test_info_and_verify_catch_what_a_load_cannot(saved, tmp_path) -> None:
    """A DNUB lowered within range loads (nothing crashes) but loses deliveries: ``info``
    sees the digest differ, ``verify`` the rebuilt postings differ, and a flipped bit
    anywhere fails the digest."""
    source = saved["files"]["eia"]
    lowered = tampered(source, tmp_path, "lowered", _set("structure.layout.post_value", 0, 0.5))
    cli = [sys.executable, "-m", "roadpubsub", "index"]
    for action in ("info", "verify"):
        done = subprocess.run([*cli, action, str(lowered)], capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 2 and "damaged index file" in done.stderr, done.stderr
    ok = subprocess.run([*cli, "verify", str(source)], capture_output=True, text=True,
                        timeout=300, check=False)
    assert ok.returncode == 0 and "ok" in ok.stdout, ok.stderr
    info = subprocess.run([*cli, "info", str(source)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert info.returncode == 0 and "ranges and digest" in info.stdout
    # Without the digest (as an older file), verify still finds the lowered DNUB.
    no_digest = tampered(lowered, tmp_path, "no-digest", _meta("digest", None))
    with pytest.raises(IndexFileError, match="post_value differs"):
        verify_index(no_digest)
    # Bit flips in the stored bytes of a few arrays: the digest notices every one.
    rng = np.random.default_rng(0)
    for name in ("subs.tau", "bounds.eta_minus", "network.node_x", "structure.edge_min_tau_e"):
        with np.load(source) as data:
            arr = data[name].copy()
        raw = arr.view(np.uint8).reshape(-1)
        raw[rng.integers(raw.size)] ^= np.uint8(1 << int(rng.integers(8)))
        flipped = tampered(source, tmp_path, f"flip-{name}", lambda a, n=name, v=arr: a.update(
            {n: v}))
        done = subprocess.run([*cli, "info", str(flipped)], capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 2 and "damaged index file" in done.stderr, (name, done.stderr)


@pytest.mark.parametrize("kind", [EnhancedIndex, BasicIndex])
def test_api_refuses_points_off_the_network(saved, kind) -> None:
    wl, spatial = saved["wl"], saved["spatial"]
    index = kind(spatial, wl.subscriptions, wl.weights, dmax_m=3000.0)
    sub = wl.subscriptions.take([0])
    n_edges = spatial.network.n_edges
    length = float(spatial.network.edge_length[5])
    before = len(index)
    bad_points = [EdgePoints(np.array([n_edges], np.int32), np.array([0.0])),
                  EdgePoints(np.array([-1], np.int32), np.array([0.0])),
                  EdgePoints(np.array([5], np.int32), np.array([-100.0])),
                  EdgePoints(np.array([5], np.int32), np.array([np.nan])),
                  EdgePoints(np.array([5], np.int32), np.array([length * 2 + 1]))]
    for points in bad_points:
        new = Subscriptions(np.array([10**9]), points, sub.alpha, sub.tau, sub.kw_ptr,
                            sub.kw_terms)
        with pytest.raises(InvalidSubscriptionError, match="1000000000"):
            index.subscribe(new)
        with pytest.raises(InvalidSubscriptionError, match=str(int(sub.ids[0]))):
            index.move(sub.ids, points)
    assert len(index) == before and index.contains(sub.ids).all()
    # Keyword ids the weights do not hold.
    strange = Subscriptions(np.array([10**9]), sub.points, sub.alpha, sub.tau, sub.kw_ptr,
                            np.array([10**7], np.int32))
    with pytest.raises(InvalidSubscriptionError, match="keyword ids"):
        index.subscribe(strange)
    # Messages off the network.
    msgs = wl.messages.take([0])
    from roadpubsub.index.model import Messages
    off = Messages(msgs.ids, EdgePoints(np.array([n_edges], np.int32), np.array([0.0])),
                   msgs.kw_ptr, msgs.kw_terms)
    with pytest.raises(ValueError, match="messages"):
        IndexMatcher(index).match(off)


def test_large_arrays_are_mapped_and_equal_to_the_read_ones(saved, monkeypatch) -> None:
    """Loading maps an index file's large arrays (copy-on-write) instead of reading them;
    they hold what a plain read gives, and writing to one leaves the file alone."""
    import roadpubsub.roadnet.files as files

    path = saved["files"]["eia"]
    _, plain = files.read_npz(path)
    monkeypatch.setattr(files, "_MAP_MIN_BYTES", 1)
    mapped = files._map_members(Path(path), set(plain))
    assert {"subs.ids", "subs.id_order", "facts.x", "structure.layout.post_slot"} <= set(mapped)
    for name, array in mapped.items():
        assert array.dtype == plain[name].dtype and np.array_equal(array, plain[name]), name
    before = Path(path).read_bytes()
    mapped["subs.alpha"][0] = 0.123
    assert Path(path).read_bytes() == before
    index = load_index(path)
    fresh = EnhancedIndex(saved["spatial"], saved["wl"].subscriptions, saved["wl"].weights,
                          dmax_m=3000.0)
    for name in ("x", "y", "cell", "din_out", "din_in", "chain", "chain_offset"):
        np.testing.assert_array_equal(getattr(index.facts, name), getattr(fresh.facts, name))
    np.testing.assert_array_equal(index._id_order, fresh._id_order)


def test_verify_accepts_a_sound_index_whose_bounds_hold_nan(rome, tmp_path) -> None:
    """Rome has nodes outside its largest component, so some cell pairs have no path and
    their bounds hold NaN; ``verify`` compares bits, so a sound file is not called
    damaged (``np.array_equal`` said NaN != NaN), while a changed bound still is."""
    wl = generate_workload(rome, n_subscriptions=2_000, n_messages=1, seed=3)
    index = EnhancedIndex(SpatialIndex.build(rome), wl.subscriptions, wl.weights, dmax_m=5000)
    assert np.isnan(index.spatial.bounds.D_far).any()  # the case this test is about
    path = index.save(tmp_path / "rome.npz")
    assert verify_index(path)["bounds"] == "ok"
    changed = tampered(path, tmp_path, "d-far", _set("bounds.D_far", 0, 1.0))
    with pytest.raises(IndexFileError, match=r"D_far differs|digest"):
        verify_index(changed)
