"""The ``kind`` column: mixed files, round trips, and bad combinations named by id."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.index.io import read_subscriptions
from roadpubsub.index.kinds_io import read_subscription_set, write_subscription_set
from roadpubsub.index.model import InvalidSubscriptionError
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.network import RoadNetwork


@pytest.fixture
def net() -> RoadNetwork:
    return RoadNetwork.from_arrays(
        node_ids=[1, 2, 3], node_lon=[0.0, 0.01, 0.02], node_lat=[0.0, 0.0, 0.0],
        edge_u_ids=[1, 2], edge_v_ids=[2, 3], edge_length=[1000.0, 1000.0],
        edge_oneway=[False, True], directed=True, name="line")


def rows(*extra: dict) -> list[dict]:
    base = [
        {"id": 1, "u": 1, "v": 2, "offset": 5.0, "keywords": ["a", "b"], "alpha": 0.5,
         "tau": 0.4},
        {"id": 2, "u": 1, "v": 2, "offset": 7.0, "keywords": ["a"], "kind": "boolean",
         "radius": 300.0},
        {"id": 3, "u": 2, "v": 3, "offset": 0.0, "keywords": ["c"], "kind": "topk", "k": 4,
         "alpha": 1.0},
        {"id": 4, "u": 2, "v": 3, "offset": 9.0, "keywords": ["b"], "kind": "threshold",
         "alpha": 0.0, "tau": 1.0},
    ]
    return base + list(extra)


def write(tmp_path: Path, records: list[dict]) -> Path:
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in records))
    return p


def test_mixed_file_and_round_trip(net: RoadNetwork, tmp_path: Path) -> None:
    w = TermWeights({}, default_weight=1.0)
    s = read_subscription_set(write(tmp_path, rows()), net, w, dmax_m=1000)
    assert s.counts() == {"threshold": 2, "boolean": 1, "topk": 1}
    assert s.threshold.ids.tolist() == [1, 4]
    assert s.boolean.radius.tolist() == [300.0] and s.topk.k.tolist() == [4]
    assert [w.terms[t] for t in s.boolean.keywords(0)] == ["a"]
    for name in ("out.parquet", "out.jsonl"):
        path = write_subscription_set(s, tmp_path / name, network=net, weights=w)
        back = read_subscription_set(path, net, w, dmax_m=1000)
        assert back.counts() == s.counts()
        np.testing.assert_array_equal(back.topk.alpha, s.topk.alpha)
        np.testing.assert_array_equal(back.boolean.points.offset, s.boolean.points.offset)


def test_file_without_kind_reads_as_today(net: RoadNetwork, tmp_path: Path) -> None:
    records = [r for r in rows() if "kind" not in r]
    p = write(tmp_path, records)
    a = read_subscriptions(p, net, TermWeights({}, default_weight=1.0))
    b = read_subscription_set(p, net, TermWeights({}, default_weight=1.0), dmax_m=1000)
    assert len(b.boolean) == len(b.topk) == 0
    np.testing.assert_array_equal(a.ids, b.threshold.ids)
    np.testing.assert_array_equal(a.kw_terms, b.threshold.kw_terms)
    np.testing.assert_array_equal(a.tau, b.threshold.tau)


@pytest.mark.parametrize(("extra", "said"), [
    ({"radius": 5.0}, "radius on a threshold subscription: ids 9"),
    ({"k": 3}, "k on a threshold subscription: ids 9"),
    ({"kind": "boolean", "alpha": None, "tau": None}, "without a radius: ids 9"),
    ({"kind": "boolean", "radius": 1000.5, "alpha": None, "tau": None}, "radius > Dmax"),
    ({"kind": "boolean", "radius": -1.0, "alpha": None, "tau": None}, "radius < 0: ids 9"),
    ({"kind": "boolean", "radius": 10.0},
     "alpha, tau or k on a boolean subscription (leave them null): ids 9"),
    ({"kind": "topk", "tau": None}, "without k: ids 9"),
    ({"kind": "topk", "k": 0, "tau": None}, "k < 1: ids 9"),
    ({"kind": "topk", "k": 2.5, "tau": None}, "k not a whole number"),
    ({"kind": "topk", "k": 2}, "tau or radius on a top-k subscription (leave them null): ids 9"),
    ({"kind": "topk", "k": 2, "tau": None, "alpha": None}, "alpha missing"),
    ({"kind": "Boolean"}, "kind not one of threshold, boolean, topk: ids 9"),
])
def test_bad_combinations_named(net: RoadNetwork, tmp_path: Path, extra: dict,
                                said: str) -> None:
    row = {"id": 9, "u": 1, "v": 2, "offset": 1.0, "keywords": ["z"], "alpha": 0.5,
           "tau": 0.5, **extra}
    p = write(tmp_path, [*rows(), row])
    with pytest.raises(InvalidSubscriptionError) as err:
        read_subscription_set(p, net, TermWeights({}, default_weight=1.0), dmax_m=1000)
    assert said in str(err.value) and str(p) in str(err.value)


def test_threshold_reader_refuses_other_kinds(net: RoadNetwork, tmp_path: Path) -> None:
    refused = r"boolean or top-k subscriptions .*ids 2, 3"
    with pytest.raises(InvalidSubscriptionError, match=refused):
        read_subscriptions(write(tmp_path, rows()), net, TermWeights({}, default_weight=1.0))
    # An explicit kind of threshold everywhere is today's file.
    only = [r for r in rows() if r.get("kind", "threshold") == "threshold"]
    s = read_subscriptions(write(tmp_path, only), net, TermWeights({}, default_weight=1.0))
    assert s.ids.tolist() == [1, 4]
