"""Reading and writing subscriptions, messages, weights and deliveries; every input error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import roadpubsub.index.io as iio
from roadpubsub.index.io import (
    DEFAULT_WEIGHT_KEY,
    read_deliveries,
    read_messages,
    read_subscriptions,
    read_weights,
    write_deliveries,
    write_messages,
    write_subscriptions,
    write_weights,
)
from roadpubsub.index.model import (
    InvalidMessageError,
    InvalidSubscriptionError,
    Messages,
    Subscriptions,
)
from roadpubsub.index.terms import InvalidWeightsError, TermWeights
from roadpubsub.roadnet.files import atomic_paths
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

Columns = dict[str, Any]


def sub_columns() -> Columns:
    """Three valid subscriptions on the tiny network (u/v/offset locations)."""
    return {
        "id": pa.array([1, 2, 3], pa.int64()),
        "u": pa.array([10, 20, 30], pa.int64()),
        "v": pa.array([20, 30, 40], pa.int64()),
        "offset": pa.array([0.0, 50.0, 50.0]),
        "keywords": pa.array([["a", "b"], ["b"], ["c", "a", "c"]], pa.list_(pa.string())),
        "alpha": pa.array([0.0, 0.5, 1.0]),
        "tau": pa.array([0.1, 0.7, 1.0]),
    }


def msg_columns() -> Columns:
    cols = sub_columns()
    del cols["alpha"], cols["tau"]
    return cols


def lonlat_columns(cols: Columns) -> Columns:
    """Replace u/v/offset by lon/lat near the middle of each tiny edge."""
    out = {k: v for k, v in cols.items() if k not in ("u", "v", "offset")}
    out["lon"] = pa.array([2.0005, 2.0015, 2.0025])
    out["lat"] = pa.array([41.0, 41.0001, 40.9999])
    return out


def write(tmp_path: Path, cols: Columns, name: str = "in.parquet") -> Path:
    path = tmp_path / name
    pq.write_table(pa.table(cols), path)
    return path


def weights() -> TermWeights:
    return TermWeights({"a": 1.0, "b": 2.0, "c": 0.5})


# ----------------------------------------------------------------------------- valid input
def test_read_subscriptions_uv(tmp_path: Path, tiny: RoadNetwork) -> None:
    w = weights()
    subs = read_subscriptions(write(tmp_path, sub_columns()), tiny, w)
    assert subs.ids.tolist() == [1, 2, 3]
    assert tiny.node_ids[tiny.edge_u[subs.points.edge]].tolist() == [10, 20, 30]
    assert subs.points.offset.tolist() == [0.0, 50.0, 50.0]
    # Keyword rows are sets of term ids.
    assert [sorted(w.terms[t] for t in subs.keywords(i)) for i in range(3)] == [
        ["a", "b"], ["b"], ["a", "c"]]
    assert subs.alpha.tolist() == [0.0, 0.5, 1.0]
    assert subs.tau.tolist() == [0.1, 0.7, 1.0]


def test_read_reversed_uv_measures_offset_from_u(tmp_path: Path, tiny: RoadNetwork) -> None:
    cols = sub_columns()
    cols["u"], cols["v"] = cols["v"], cols["u"]  # (20, 10, offset 0) is node 20
    cols["offset"] = pa.array([0.0, 25.0, 50.0])
    subs = read_subscriptions(write(tmp_path, cols), tiny, weights())
    assert subs.points.offset.tolist() == [100.0, 75.0, 0.0]


def test_read_lonlat(tmp_path: Path, tiny: RoadNetwork) -> None:
    subs = read_subscriptions(write(tmp_path, lonlat_columns(sub_columns())), tiny, weights())
    ids = tiny.node_ids
    assert ids[tiny.edge_u[subs.points.edge]].tolist() == [10, 20, 30]
    # Half-way along each straight edge, scaled to the edge's length.
    np.testing.assert_allclose(subs.points.offset, [50.0, 50.0, 25.0], atol=1.0)


def test_rows_without_uv_fall_back_to_lonlat(tmp_path: Path, tiny: RoadNetwork) -> None:
    cols = sub_columns()
    cols.update(lonlat_columns(sub_columns()))
    cols["u"] = pa.array([10, None, 30], pa.int64())
    subs = read_subscriptions(write(tmp_path, cols), tiny, weights())
    assert subs.points.offset[0] == 0.0
    assert abs(subs.points.offset[1] - 50.0) < 1.0


def test_uv_far_from_the_rows_own_lonlat_is_refused(tmp_path: Path,
                                                     tiny: RoadNetwork) -> None:
    """A file written for another network: its node ids may exist here too, but then the
    u/v/offset place lies far from the row's lon/lat."""
    cols = msg_columns()
    cols.update({k: v for k, v in lonlat_columns(msg_columns()).items() if k in ("lon", "lat")})
    cols["lat"] = pa.array([41.0, 41.0001, 41.02])  # id 3: about 2 km north of its edge
    path = write(tmp_path, cols)
    with pytest.raises(InvalidMessageError, match=r"u/v/offset more than 250 m from the "
                                                  r"row's own lon/lat.*ids 3$"):
        read_messages(path, tiny, weights(), max_snap_m=250.0)
    # Rows within the snap distance pass, and an infinite snap distance checks nothing.
    assert len(read_messages(path, tiny, weights(), max_snap_m=np.inf)) == 3


@pytest.mark.parametrize("directed", [False, True])
def test_points_on_parallel_edges_round_trip(tmp_path: Path, andorra: RoadNetwork,
                                             directed: bool) -> None:
    """(u, v, offset) does not tell parallel edges apart; the row's lon/lat does."""
    net = andorra.with_direction(directed=directed)
    lo = np.minimum(net.edge_u, net.edge_v).astype(np.int64)
    hi = np.maximum(net.edge_u, net.edge_v).astype(np.int64)
    _, inverse, counts = np.unique(lo * net.n_nodes + hi, return_inverse=True,
                                   return_counts=True)
    parallel = np.flatnonzero(counts[inverse] > 1)
    assert parallel.size >= 40
    edge = np.repeat(parallel, 3)
    offset = np.tile([0.0, 0.5, 0.9], parallel.size) * net.edge_length[edge]
    w = weights()
    subs = Subscriptions.from_rows(ids=np.arange(edge.size), points=EdgePoints.of(edge, offset),
                                   keywords=[["a"]] * edge.size, alpha=[0.5] * edge.size,
                                   tau=[0.5] * edge.size, weights=w)
    path = write_subscriptions(subs, tmp_path / "s.parquet", network=net, weights=w)
    back = read_subscriptions(path, net, w)
    # Offset 0 is node u of every parallel edge alike; elsewhere the very edge comes back.
    inside = offset > 0
    np.testing.assert_array_equal(back.points.edge[inside], edge[inside])
    np.testing.assert_array_equal(back.points.offset[inside], subs.points.offset[inside])
    # Without lon/lat the shortest parallel edge is taken, as documented.
    bare = write_subscriptions(subs, tmp_path / "bare.parquet", network=net, weights=w,
                               lonlat=False)
    shortest = read_subscriptions(bare, net, w)
    assert (net.edge_length[shortest.points.edge] <= net.edge_length[edge] + 1e-9).all()


def test_unknown_terms(tmp_path: Path, tiny: RoadNetwork) -> None:
    w = TermWeights({"a": 1.0, "b": 2.0})
    subs = read_subscriptions(write(tmp_path, sub_columns()), tiny, w)
    assert "c" in w and w.weights[w.ids(["c"], add=False)[0]] == 2.0  # default = max weight
    cols = msg_columns()
    cols["keywords"] = pa.array([["a", "zzz"], ["zzz"], ["c"]], pa.list_(pa.string()))
    msgs = read_messages(write(tmp_path, cols, "m.parquet"), tiny, w)
    assert [w.terms[t] for t in msgs.keywords(0)] == ["a"]
    assert msgs.keywords(1).size == 0  # valid: all its terms are unknown to every subscription
    assert len(subs) == 3


def test_json_lines_and_json_array(tmp_path: Path, tiny: RoadNetwork) -> None:
    rows = pa.table(sub_columns()).to_pylist()
    jl = tmp_path / "s.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ja = tmp_path / "s.json"
    # Integral floats written as ints must still be accepted for float columns.
    rows[0]["alpha"] = 0
    ja.write_text(json.dumps(rows), encoding="utf-8")
    a = read_subscriptions(jl, tiny, weights())
    b = read_subscriptions(ja, tiny, weights())
    np.testing.assert_array_equal(a.points.offset, b.points.offset)
    np.testing.assert_array_equal(a.kw_terms, b.kw_terms)
    assert b.alpha.tolist() == [0.0, 0.5, 1.0]


def test_round_trip(tmp_path: Path, tiny: RoadNetwork) -> None:
    w = weights()
    rng = np.random.default_rng(1)
    e = rng.integers(0, tiny.n_edges, 50)
    pts = EdgePoints.of(e, rng.random(50) * tiny.edge_length[e])
    kws = [list(rng.choice(["a", "b", "c", "new"], size=rng.integers(1, 4), replace=False))
           for _ in range(50)]
    subs = Subscriptions.from_rows(ids=np.arange(50) * 7, points=pts, keywords=kws,
                                   alpha=rng.random(50), tau=1 - rng.random(50), weights=w)
    msgs = Messages.from_rows(ids=np.arange(50) + 100, points=pts, keywords=kws, weights=w)
    for suffix in (".parquet", ".jsonl"):
        write_subscriptions(subs, tmp_path / f"s{suffix}", network=tiny, weights=w)
        write_messages(msgs, tmp_path / f"m{suffix}", network=tiny, weights=w)
        write_weights(w, tmp_path / f"w{suffix}")
        w2 = read_weights(tmp_path / f"w{suffix}")
        assert w2.terms == w.terms
        np.testing.assert_array_equal(w2.weights, w.weights)
        s2 = read_subscriptions(tmp_path / f"s{suffix}", tiny, w2)
        m2 = read_messages(tmp_path / f"m{suffix}", tiny, w2)
        for a, b in ((subs, s2), (msgs, m2)):
            np.testing.assert_array_equal(a.ids, b.ids)
            np.testing.assert_array_equal(a.points.edge, b.points.edge)
            np.testing.assert_array_equal(a.points.offset, b.points.offset)
            np.testing.assert_array_equal(a.kw_ptr, b.kw_ptr)
            np.testing.assert_array_equal(a.kw_terms, b.kw_terms)
        np.testing.assert_array_equal(subs.alpha, s2.alpha)
        np.testing.assert_array_equal(subs.tau, s2.tau)
    table = pq.read_table(tmp_path / "s.parquet")
    assert table.schema.field("keywords").type == pa.list_(pa.string())
    assert table.schema.field("id").type == pa.int64()
    assert {"lon", "lat", "u", "v", "offset"} <= set(table.column_names)


def test_weights_default_weight_round_trips(tmp_path: Path) -> None:
    w = TermWeights.from_idf([["a", "b"], ["a"], ["c"]])
    write_weights(w, tmp_path / "w.parquet")
    meta = pq.read_schema(tmp_path / "w.parquet").metadata
    assert DEFAULT_WEIGHT_KEY in meta
    assert read_weights(tmp_path / "w.parquet").default_weight == w.default_weight
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"term": ["x", "y"], "weight": [1.0, 3.0]}), plain)
    assert read_weights(plain).default_weight == 3.0


def test_deliveries_round_trip(tmp_path: Path) -> None:
    from roadpubsub.pruning.deliveries import Deliveries

    d = Deliveries(np.array([2, 1, 1]), np.array([5, 9, 3]), np.array([1.5, 0.0, 2.25]),
                   np.array([0.9, 0.8, 0.75]))
    for name in ("d.parquet", "d.jsonl", "d.csv"):
        write_deliveries(d, tmp_path / name)
    back = Deliveries(**read_deliveries(tmp_path / "d.parquet"))
    assert back.message_id.tolist() == [1, 1, 2]
    assert back.subscription_id.tolist() == [3, 9, 5]
    assert back.distance.tolist() == [2.25, 0.0, 1.5]
    assert read_deliveries(tmp_path / "d.jsonl")["score"].tolist() == [0.75, 0.8, 0.9]


# ----------------------------------------------------------------------------- atomic writes
def test_failed_write_leaves_nothing(tmp_path: Path, tiny: RoadNetwork,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(table: pa.Table, tmp: Path, *, suffix: str) -> None:
        tmp.write_bytes(b"partial")
        msg = "disk full"
        raise OSError(msg)

    monkeypatch.setattr("roadpubsub.index.tables._write_table_to", broken)
    with pytest.raises(OSError, match="disk full"):
        write_weights(weights(), tmp_path / "w.parquet")
    assert list(tmp_path.iterdir()) == []


def test_atomic_group(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_paths(tmp_path / "a.txt", tmp_path / "b.txt") as (
            ta, tb):
        ta.write_text("new")
        tb.write_text("new")
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "old"
    with atomic_paths(tmp_path / "a.txt", tmp_path / "b.txt") as (ta, tb):
        ta.write_text("new")
        tb.write_text("new")
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


# ----------------------------------------------------------------------------- invalid input
def _set(name: str, values: list[Any], typ: pa.DataType | None = None
         ) -> Callable[[Columns], Columns]:
    def mutate(cols: Columns) -> Columns:
        cols[name] = pa.array(values, typ) if typ is not None else pa.array(values)
        return cols
    return mutate


def _drop(*names: str) -> Callable[[Columns], Columns]:
    def mutate(cols: Columns) -> Columns:
        for n in names:
            del cols[n]
        return cols
    return mutate


def _lonlat(lon: list[float | None], lat: list[float | None]) -> Callable[[Columns], Columns]:
    def mutate(cols: Columns) -> Columns:
        cols = lonlat_columns(cols)
        cols["lon"], cols["lat"] = pa.array(lon, pa.float64()), pa.array(lat, pa.float64())
        return cols
    return mutate


KW = pa.list_(pa.string())

# (case, mutation, words the message must contain); ids named are checked separately.
COMMON_CASES: list[tuple[str, Callable[[Columns], Columns], tuple[str, ...]]] = [
    ("nan lon/lat", _lonlat([2.0005, 2.0015, 2.0025], [41.0, float("nan"), 41.0]),
     ("missing or NaN location", "2")),
    ("null lon/lat", _lonlat([2.0005, None, 2.0025], [41.0, 41.0, 41.0]),
     ("missing or NaN location", "2")),
    ("null u", _set("u", [10, 20, None], pa.int64()), ("missing or NaN location", "3")),
    ("nan offset", _set("offset", [0.0, float("nan"), 1.0]), ("missing or NaN location", "2")),
    ("empty keywords", _set("keywords", [["a"], [], ["c"]], KW),
     ("empty keyword list", "2")),
    ("null keywords", _set("keywords", [["a"], ["b"], None], KW),
     ("empty keyword list", "3")),
    ("null keyword", _set("keywords", [["a", None], ["b"], ["c"]], KW),
     ("null, empty or white-space-only keywords", "1")),
    ("duplicate ids", _set("id", [7, 8, 7], pa.int64()), ("duplicate ids", "7")),
    ("null id", _set("id", [7, None, 9], pa.int64()), ("missing ids", "row 1")),
    ("unknown node", _set("u", [10, 99, 30], pa.int64()), ("unknown node ids", "2")),
    ("not an edge", _set("v", [20, 40, 40], pa.int64()), ("not an edge", "2")),
    ("offset past edge", _set("offset", [0.0, 100.5, 50.0]), ("outside", "2")),
    ("negative offset", _set("offset", [-1.0, 1.0, 50.0]), ("outside", "1")),
    ("beyond snap", _lonlat([2.0005, 2.0015, 2.5], [41.0, 41.0, 41.0]),
     ("farther than 250 m", "3")),
    ("lat out of range", _lonlat([2.0005, 2.0015, 2.0025], [41.0, 95.0, 41.0]),
     ("outside the valid range", "2")),
    ("keywords string", _set("keywords", ["a b", "b", "c"]), ("wrong column types", "keywords")),
    ("keywords ints", _set("keywords", [[1], [2], [3]]), ("wrong column types", "keywords")),
    ("id float", _set("id", [1.0, 2.0, 3.0]), ("wrong column types", "id")),
    ("id string", _set("id", ["1", "2", "3"]), ("wrong column types", "id")),
    ("u float", _set("u", [10.0, 20.0, 30.0]), ("wrong column types", "u")),
    ("offset string", _set("offset", ["0", "1", "2"]), ("wrong column types", "offset")),
    ("no keywords", _drop("keywords"), ("missing columns", "keywords")),
    ("no id", _drop("id"), ("missing columns", "id")),
    ("no location", _drop("u", "v", "offset"), ("missing columns", "location")),
    ("half location", _drop("offset"), ("missing columns", "location")),
]

SUB_CASES = [
    *COMMON_CASES,
    ("alpha above 1", _set("alpha", [0.0, 1.5, 1.0]), ("alpha", "[0, 1]", "2")),
    ("alpha negative", _set("alpha", [-0.1, 0.5, 1.0]), ("alpha", "1")),
    ("alpha nan", _set("alpha", [0.1, 0.5, float("nan")]), ("alpha", "3")),
    ("tau zero", _set("tau", [0.0, 0.5, 1.0]), ("tau", "(0, 1]", "1")),
    ("tau above 1", _set("tau", [0.5, 0.5, 1.0001]), ("tau", "3")),
    ("tau null", _set("tau", [0.5, None, 1.0], pa.float64()), ("tau", "2")),
    ("alpha string", _set("alpha", ["x", "y", "z"]), ("wrong column types", "alpha")),
    ("no alpha", _drop("alpha"), ("missing columns", "alpha")),
    ("no tau", _drop("tau"), ("missing columns", "tau")),
]


@pytest.mark.parametrize(("case", "mutate", "words"), SUB_CASES, ids=[c[0] for c in SUB_CASES])
def test_invalid_subscriptions(tmp_path: Path, tiny: RoadNetwork, case: str,
                               mutate: Callable[[Columns], Columns], words: tuple[str, ...]
                               ) -> None:
    path = write(tmp_path, mutate(sub_columns()))
    before = sorted(tmp_path.iterdir())
    with pytest.raises(InvalidSubscriptionError) as info:
        read_subscriptions(path, tiny, weights())
    text = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "invalid subscriptions" in text and str(path) in text
    for word in words:
        assert word in text, (word, text)
    assert sorted(tmp_path.iterdir()) == before  # reading writes nothing


@pytest.mark.parametrize(("case", "mutate", "words"), COMMON_CASES,
                         ids=[c[0] for c in COMMON_CASES])
def test_invalid_messages(tmp_path: Path, tiny: RoadNetwork, case: str,
                          mutate: Callable[[Columns], Columns], words: tuple[str, ...]) -> None:
    path = write(tmp_path, mutate(msg_columns()))
    with pytest.raises(InvalidMessageError) as info:
        read_messages(path, tiny, weights())
    text = str(info.value)
    assert "invalid messages" in text
    for word in words:
        assert word in text, (word, text)


def test_all_problems_in_one_error(tmp_path: Path, tiny: RoadNetwork) -> None:
    cols = sub_columns()
    cols["alpha"] = pa.array([2.0, 0.5, 0.5])
    cols["tau"] = pa.array([0.5, 0.5, 0.0])
    cols["keywords"] = pa.array([["a"], [], ["c"]], KW)
    cols["u"] = pa.array([10, 20, 77], pa.int64())
    with pytest.raises(InvalidSubscriptionError) as info:
        read_subscriptions(write(tmp_path, cols), tiny, weights())
    text = str(info.value)
    assert "alpha missing or outside [0, 1]: ids 1" in text
    assert "tau missing or outside (0, 1]: ids 3" in text
    assert "empty keyword list: ids 2" in text
    assert "unknown node ids in u/v: ids 3" in text


def test_many_offenders_are_summarised(tmp_path: Path, tiny: RoadNetwork) -> None:
    n = 40
    cols = {"id": pa.array(np.arange(n) + 1000), "u": pa.array(np.full(n, 10)),
            "v": pa.array(np.full(n, 20)), "offset": pa.array(np.zeros(n)),
            "keywords": pa.array([["a"]] * n, KW), "alpha": pa.array(np.full(n, 3.0)),
            "tau": pa.array(np.full(n, 0.5))}
    with pytest.raises(InvalidSubscriptionError, match=r"ids 1000, 1001, .* \(and 30 more\)"):
        read_subscriptions(write(tmp_path, cols), tiny, weights())


def test_unreadable_and_missing_files(tmp_path: Path, tiny: RoadNetwork) -> None:
    with pytest.raises(FileNotFoundError):
        read_subscriptions(tmp_path / "nope.parquet", tiny, weights())
    bad = tmp_path / "s.txt"
    bad.write_text("id\n1\n")
    with pytest.raises(InvalidSubscriptionError, match="unsupported file type"):
        read_subscriptions(bad, tiny, weights())
    short = tmp_path / "s.csv"  # CSV is read, and its missing columns named
    short.write_text("id\n1\n")
    with pytest.raises(InvalidSubscriptionError, match="missing columns: keywords"):
        read_subscriptions(short, tiny, weights())
    garbage = tmp_path / "s.parquet"
    garbage.write_bytes(b"not parquet at all")
    with pytest.raises(InvalidSubscriptionError, match="cannot read"):
        read_subscriptions(garbage, tiny, weights())
    mixed = tmp_path / "m.jsonl"
    mixed.write_text('{"id": 1, "keywords": ["a"]}\n{"id": 2, "keywords": "a"}\n')
    with pytest.raises(InvalidMessageError):
        read_messages(mixed, tiny, weights())


WEIGHT_CASES: list[tuple[str, Columns, tuple[str, ...]]] = [
    ("duplicate", {"term": ["a", "b", "a"], "weight": [1.0, 2.0, 3.0]},
     ("duplicate terms", "a")),
    ("zero", {"term": ["a", "b"], "weight": [1.0, 0.0]}, ("outside", "b")),
    ("negative", {"term": ["a", "b"], "weight": [-1.0, 1.0]}, ("outside", "a")),
    ("nan", {"term": ["a", "b"], "weight": [1.0, float("nan")]}, ("outside", "b")),
    ("null term", {"term": ["a", None], "weight": [1.0, 1.0]}, ("missing terms", "1")),
    ("weight string", {"term": ["a"], "weight": ["1"]}, ("wrong column types", "weight")),
    ("term int", {"term": [1], "weight": [1.0]}, ("wrong column types", "term")),
    ("no weight", {"term": ["a"]}, ("missing columns", "weight")),
    ("empty", {"term": pa.array([], pa.string()), "weight": pa.array([], pa.float64())},
     ("empty",)),
]


@pytest.mark.parametrize(("case", "cols", "words"), WEIGHT_CASES,
                         ids=[c[0] for c in WEIGHT_CASES])
def test_invalid_weights(tmp_path: Path, case: str, cols: Columns, words: tuple[str, ...]
                         ) -> None:
    path = tmp_path / "w.parquet"
    pq.write_table(pa.table(cols), path)
    with pytest.raises(InvalidWeightsError) as info:
        read_weights(path)
    for word in words:
        assert word in str(info.value)


def test_an_arrow_error_names_the_file(tmp_path: Path, tiny: RoadNetwork,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """An id Arrow cannot cast (uint64 beyond int64) is one error naming the file, in the
    library (an InputError) and on the command line (exit 2, one line, no traceback)."""
    from roadpubsub.cli import main
    from roadpubsub.roadnet.errors import InputError

    cols = msg_columns()
    path = tmp_path / "m.parquet"
    table = pa.table({**{k: v for k, v in cols.items() if k != "id"},
                      "id": pa.array([1, 2, 2**63 + 5], pa.uint64())})
    pq.write_table(table, path)
    with pytest.raises(InvalidMessageError, match="cannot read its columns") as exc:
        read_messages(path, tiny, weights())
    assert isinstance(exc.value, InputError) and str(path) in str(exc.value)
    assert isinstance(exc.value.__cause__, pa.ArrowInvalid)
    tiny_file = tmp_path / "tiny.npz"
    tiny.save(tiny_file)
    subs = tmp_path / "s.parquet"
    pq.write_table(pa.table(sub_columns()), subs)
    iio.write_weights(weights(), tmp_path / "w.parquet")
    code = main(["match", "--network", str(tiny_file), "--subscriptions", str(subs),
                 "--messages", str(path), "--dmax", "500", "--weights", str(tmp_path / "w.parquet"),
                 "--out", str(tmp_path / "d.parquet"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(path) in err[0], err
