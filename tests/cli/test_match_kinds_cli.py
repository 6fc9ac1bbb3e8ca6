"""``roadpubsub match`` on a file mixing threshold, boolean and top-k subscriptions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roadpubsub.cli import main
from roadpubsub.index.io import read_deliveries, read_messages, read_subscriptions, read_weights
from roadpubsub.index.kinds_io import read_subscription_set
from roadpubsub.index.tables import read_table
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher, TopkBruteMatcher
from roadpubsub.roadnet.io import load_network

DMAX = "20000"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory,
          shared: Callable[[str], Path]) -> tuple[Path, Path]:
    """(network, folder) with subscriptions.parquet (threshold only) and mixed.parquet:
    the same rows, a third each threshold, boolean and top-k."""
    shared("text/airline_tweets.csv")
    cal = shared("li_california/cal.cnode")
    out = tmp_path_factory.mktemp("calk")
    assert main(["generate", "--network", str(cal), "--out-dir", str(out), "--subscriptions",
                 "3000", "--messages", "80", "--seed", "2", "--tau", "0.3", "--quiet"]) == 0
    t = pq.read_table(out / "subscriptions.parquet")
    n = t.num_rows
    rng = np.random.default_rng(0)
    kind = np.array(["threshold", "boolean", "topk"])[np.arange(n) % 3]
    kws = t.column("keywords").to_pylist()
    kws = [k[:1] if kd == "boolean" else k for k, kd in zip(kws, kind, strict=True)]
    alpha = t.column("alpha").to_numpy().copy()
    tau = t.column("tau").to_numpy().copy()
    radius = np.where(kind == "boolean", rng.uniform(0, 20000, n), np.nan)
    k = np.where(kind == "topk", rng.integers(1, 6, n), 0)
    mixed = t.set_column(t.schema.get_field_index("keywords"), "keywords",
                         pa.array(kws, pa.list_(pa.string())))
    mixed = mixed.set_column(mixed.schema.get_field_index("alpha"), "alpha",
                             pa.array(np.where(kind == "boolean", np.nan, alpha),
                                      from_pandas=True))
    mixed = mixed.set_column(mixed.schema.get_field_index("tau"), "tau",
                             pa.array(np.where(kind == "threshold", tau, np.nan),
                                      from_pandas=True))
    mixed = mixed.append_column("kind", pa.array(kind.tolist()))
    mixed = mixed.append_column("radius", pa.array(radius, from_pandas=True))
    mixed = mixed.append_column("k", pa.array(np.where(k > 0, k, None).tolist(), pa.int64()))
    pq.write_table(mixed, out / "mixed.parquet")
    return cal, out


def run(cal: Path, wl: Path, out: Path, subs: str, index: str, *extra: str) -> int:
    return main(["match", "--network", str(cal), "--subscriptions", str(wl / subs),
                 "--messages", str(wl / "messages.parquet"), "--weights",
                 str(wl / "weights.parquet"), "--dmax", DMAX, "--index", index, "--out",
                 str(out), "--quiet", *extra])


def test_mixed_file_index_equals_references(mixed, tmp_path, capsys) -> None:
    cal, wl = mixed
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run(cal, wl, a, "mixed.parquet", "eia", "--window", "25", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["kinds"] == {"threshold": 1000, "boolean": 1000, "topk": 1000}
    assert run(cal, wl, b, "mixed.parquet", "brute", "--window", "25") == 0
    da, db = Deliveries(**read_deliveries(a)), Deliveries(**read_deliveries(b))
    assert da.pairs() == db.pairs() and len(da) > 20
    np.testing.assert_array_equal(da.distance, db.distance)
    ta = read_table(tmp_path / "a-topk.parquet").to_pylist()
    tb = read_table(tmp_path / "b-topk.parquet").to_pylist()
    assert ta == tb and summary["topk_events"] == len(ta) > 100
    assert {r["event"] for r in ta} == {"insert", "evict"}
    # Each kind's part is that kind's reference matcher on the same rows.
    network = load_network(cal)
    weights = read_weights(wl / "weights.parquet")
    subs = read_subscription_set(wl / "mixed.parquet", network, weights, dmax_m=float(DMAX))
    msgs = read_messages(wl / "messages.parquet", network, weights)
    boolean = BooleanBruteMatcher(network, subs.boolean, weights, dmax_m=float(DMAX))
    want_b = boolean.match(msgs).pairs()
    assert want_b and want_b <= da.pairs()
    events = TopkBruteMatcher(network, subs.topk, weights, dmax_m=float(DMAX),
                              window=25).push(msgs)
    assert [r["message_id"] for r in ta] == events.message_id.tolist()
    # Threshold rows deliver as in a file without the kind column.
    c = tmp_path / "c.parquet"
    assert run(cal, wl, c, "subscriptions.parquet", "eia") == 0
    thr_ids = set(subs.threshold.ids.tolist())
    dc = {p for p in Deliveries(**read_deliveries(c)).pairs() if p[1] in thr_ids}
    assert dc == {p for p in da.pairs() if p[1] in thr_ids}


@pytest.mark.parametrize(("change", "said"), [
    ({"radius": (0, 50.0)}, "radius on a threshold subscription: ids"),
    ({"k": (2, 0)}, "k < 1: ids"),
    ({"radius": (1, 1e9)}, "radius > Dmax"),
    ({"radius": (1, None)}, "boolean subscription without a radius: ids"),
    ({"k": (2, None)}, "top-k subscription without k: ids"),
    ({"kind": (0, "nearest")}, "kind not one of threshold, boolean, topk: ids"),
])
def test_bad_combinations_are_named(mixed, tmp_path, capsys, change, said) -> None:
    cal, wl = mixed
    t = pq.read_table(wl / "mixed.parquet")
    (col, (row, value)), = change.items()
    values = t.column(col).to_pylist()
    values[row] = value
    idx = t.schema.get_field_index(col)
    t = t.set_column(idx, col, pa.array(values, t.schema.field(col).type))
    bad = tmp_path / "bad.parquet"
    pq.write_table(t, bad)
    assert main(["match", "--network", str(cal), "--subscriptions", str(bad), "--messages",
                 str(wl / "messages.parquet"), "--weights", str(wl / "weights.parquet"),
                 "--dmax", DMAX, "--out", str(tmp_path / "o.parquet"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert said in err and str(bad) in err
    assert str(t.column("id")[row].as_py()) in err
    # The threshold-only reader refuses a file holding other kinds rather than lose them.
    network = load_network(cal)
    with pytest.raises(ValueError, match="ids"):
        read_subscriptions(wl / "mixed.parquet", network, read_weights(wl / "weights.parquet"))


def test_mixed_run_builds_the_cells_once(mixed, tmp_path, monkeypatch) -> None:
    """The threshold index and the boolean and top-k indexes share one cell structure."""
    import roadpubsub.index.spatial as spatial_module

    calls = {"cells": 0, "bounds": 0}

    def counted(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(spatial_module, "build_cells",
                        counted("cells", spatial_module.build_cells))
    monkeypatch.setattr(spatial_module, "compute_cell_bounds",
                        counted("bounds", spatial_module.compute_cell_bounds))
    cal, wl = mixed
    out = tmp_path / "a.parquet"
    assert run(cal, wl, out, "mixed.parquet", "eia", "--window", "25") == 0
    assert calls == {"cells": 1, "bounds": 1}
    assert len(read_table(tmp_path / "a-topk.parquet")) > 0


def test_topk_expires_at_through_match(mixed, tmp_path) -> None:
    """A top-k row's expires_at withdraws it at the first message whose time reaches it:
    index and reference agree, and each withdrawn subscription ends with an empty top-k
    and no event after that message."""
    cal, wl = mixed
    t = pq.read_table(wl / "mixed.parquet")
    n = t.num_rows
    rng = np.random.default_rng(4)
    exp = np.where(rng.random(n) < 0.5, rng.integers(0, 80, n).astype(float), np.nan)
    pq.write_table(t.append_column("expires_at", pa.array(exp, from_pandas=True)),
                   tmp_path / "exp.parquet")
    m = pq.read_table(wl / "messages.parquet")
    pq.write_table(m.append_column("time", pa.array(np.arange(m.num_rows, dtype=float))),
                   tmp_path / "messages.parquet")
    for name, index in (("a", "eia"), ("b", "brute")):
        assert main(["match", "--network", str(cal), "--subscriptions",
                     str(tmp_path / "exp.parquet"), "--messages",
                     str(tmp_path / "messages.parquet"), "--weights",
                     str(wl / "weights.parquet"), "--dmax", DMAX, "--index", index, "--out",
                     str(tmp_path / f"{name}.parquet"), "--window", "25", "--quiet"]) == 0
    ta = read_table(tmp_path / "a-topk.parquet").to_pylist()
    assert ta == read_table(tmp_path / "b-topk.parquet").to_pylist()
    kind = np.asarray(t.column("kind").to_pylist())
    ids = np.asarray(t.column("id").to_pylist())
    gone = {int(i): e for i, e, kd in zip(ids, exp, kind, strict=True)
            if kd == "topk" and not np.isnan(e)}
    withdrawn = 0
    for sid, e in gone.items():
        mine = [r for r in ta if r["subscription_id"] == sid]
        assert all(r["seq"] <= e for r in mine)
        late = [r for r in mine if r["seq"] == e]
        withdrawn += bool(late)
        ins = sum(r["event"] == "insert" for r in mine)
        assert ins == sum(r["event"] == "evict" for r in mine)
    assert withdrawn > 10
