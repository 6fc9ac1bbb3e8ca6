"""Workload generation: reproducible, paper-shaped keyword counts, real networks and POIs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.index.io import read_messages, read_subscriptions, read_weights
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.pois import POIs, find_poi_source, load_pois, read_li_pois
from roadpubsub.index.terms import smoothed_idf
from roadpubsub.index.workload import (
    MESSAGE_KEYWORDS,
    SUBSCRIPTION_KEYWORDS,
    TAU_MIN,
    Workload,
    generate_workload,
    keyword_histogram,
    write_workload,
)
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

DOCS = [["lost", "bag", "gate"], ["great", "crew", "thanks"], [], ["delay", "gate"],
        ["refund", "ticket", "help", "please", "agent", "phone", "hold"], ["wifi"]]


def counts(ptr: np.ndarray) -> np.ndarray:
    return np.diff(ptr)


def assert_same_workload(a: Workload, b: Workload) -> None:
    assert a.weights.terms == b.weights.terms
    np.testing.assert_array_equal(a.weights.weights, b.weights.weights)
    for x, y in ((a.subscriptions, b.subscriptions), (a.messages, b.messages)):
        np.testing.assert_array_equal(x.ids, y.ids)
        np.testing.assert_array_equal(x.points.edge, y.points.edge)
        np.testing.assert_array_equal(x.points.offset, y.points.offset)
        np.testing.assert_array_equal(x.kw_ptr, y.kw_ptr)
        np.testing.assert_array_equal(x.kw_terms, y.kw_terms)
    np.testing.assert_array_equal(a.subscriptions.alpha, b.subscriptions.alpha)
    np.testing.assert_array_equal(a.subscriptions.tau, b.subscriptions.tau)


def assert_rows_are_sets(rows: Subscriptions | Messages) -> None:
    for i in range(len(rows)):
        kw = rows.keywords(i)
        assert np.all(np.diff(kw) > 0)


# ----------------------------------------------------------------------------- small corpus
def test_reproducible_and_seed_dependent(tiny: RoadNetwork) -> None:
    a = generate_workload(tiny, n_subscriptions=300, n_messages=40, seed=5, tweets=DOCS)
    b = generate_workload(tiny, n_subscriptions=300, n_messages=40, seed=5, tweets=DOCS)
    c = generate_workload(tiny, n_subscriptions=300, n_messages=40, seed=6, tweets=DOCS)
    assert_same_workload(a, b)
    assert not np.array_equal(a.subscriptions.points.offset, c.subscriptions.points.offset)
    # Messages have their own stream: more messages leave the subscriptions unchanged.
    d = generate_workload(tiny, n_subscriptions=300, n_messages=80, seed=5, tweets=DOCS)
    np.testing.assert_array_equal(a.subscriptions.kw_terms, d.subscriptions.kw_terms)
    np.testing.assert_array_equal(a.subscriptions.points.offset, d.subscriptions.points.offset)


def test_keywords_come_from_one_document(tiny: RoadNetwork) -> None:
    w = generate_workload(tiny, n_subscriptions=500, n_messages=50, seed=1, tweets=DOCS)
    subs, msgs, weights = w.subscriptions, w.messages, w.weights
    k = counts(subs.kw_ptr)
    assert k.min() >= 1 and k.max() <= 5
    assert set(np.unique(k)) == {1, 2, 3, 4, 5}  # the 7-keyword document allows 5
    doc_sets = [set(d) for d in DOCS if d]
    for i in range(len(subs)):
        kw = {weights.terms[t] for t in subs.keywords(i)}
        assert any(kw <= d for d in doc_sets)
    assert_rows_are_sets(subs)
    assert_rows_are_sets(msgs)
    # The whole vocabulary has 15 terms, so messages hold 5..15 keywords.
    mk = counts(msgs.kw_ptr)
    assert mk.min() >= 5 and mk.max() <= 15
    # Smoothed idf over the 6 documents (the empty one counts as a document).
    gate = weights.ids(["gate"], add=False)[0]
    assert weights.weights[gate] == pytest.approx(float(smoothed_idf(6, [2])[0]))
    assert weights.default_weight == pytest.approx(float(smoothed_idf(6, [0])[0]))


def test_alpha_and_tau(tiny: RoadNetwork) -> None:
    w = generate_workload(tiny, n_subscriptions=2000, n_messages=0, seed=2, tweets=DOCS,
                          alpha=0.95, alpha_spread=0.2, tau=0.05, tau_spread=0.3)
    a, t = w.subscriptions.alpha, w.subscriptions.tau
    assert a.min() >= 0.75 and a.max() == 1.0  # clipped at 1
    assert t.min() == TAU_MIN and t.max() <= 0.35
    assert np.all(t > 0)
    fixed = generate_workload(tiny, n_subscriptions=10, n_messages=0, seed=2, tweets=DOCS,
                              alpha=0.3, alpha_spread=0, tau=1.0, tau_spread=0)
    assert np.all(fixed.subscriptions.alpha == 0.3)
    assert np.all(fixed.subscriptions.tau == 1.0)


@pytest.mark.parametrize("bad", [{"alpha": 1.5}, {"tau": 0.0}, {"tau": 1.1},
                                 {"alpha_spread": -0.1}, {"n_subscriptions": -1},
                                 {"keywords_from": "pois"}, {"locations": "pois"},
                                 {"keywords_from": "books"}])
def test_bad_parameters(tiny: RoadNetwork, bad: dict[str, object]) -> None:
    kwargs: dict[str, object] = {"n_subscriptions": 5, "n_messages": 5, "tweets": DOCS, **bad}
    with pytest.raises(ValueError):
        generate_workload(tiny, **kwargs)  # type: ignore[arg-type]


def test_empty_corpus(tiny: RoadNetwork) -> None:
    with pytest.raises(ValueError, match="no keywords"):
        generate_workload(tiny, n_subscriptions=5, n_messages=5, tweets=[[], []])


def test_uniform_locations_follow_length(tiny: RoadNetwork) -> None:
    w = generate_workload(tiny, n_subscriptions=25_000, n_messages=0, seed=3, tweets=DOCS)
    pts = w.subscriptions.points
    share = np.bincount(pts.edge, minlength=3) / len(pts)
    np.testing.assert_allclose(share, [0.4, 0.4, 0.2], atol=0.015)
    assert np.all(pts.offset >= 0) and np.all(pts.offset < tiny.edge_length[pts.edge])


def test_pois_locations_and_keywords(tiny: RoadNetwork) -> None:
    pois = POIs(EdgePoints.of([0, 2], [10.0, 45.0]), [["museum", "art"], []], source="x")
    w = generate_workload(tiny, n_subscriptions=200, n_messages=20, seed=1,
                          keywords_from="pois", locations="pois", pois=pois)
    subs = w.subscriptions
    # POI keywords and POI locations: every subscription stands on the POI it describes.
    assert set(subs.points.edge.tolist()) == {0}
    assert set(subs.points.offset.tolist()) == {10.0}
    assert sorted(w.weights.terms) == ["art", "museum"]
    assert set(w.messages.points.edge.tolist()) <= {0, 2}
    assert counts(w.messages.kw_ptr).max() == 2  # capped at the vocabulary size
    t = generate_workload(tiny, n_subscriptions=200, n_messages=0, seed=1, tweets=DOCS,
                          locations="pois", pois=pois)
    assert set(t.subscriptions.points.edge.tolist()) == {0, 2}


def test_written_files_round_trip_and_are_reproducible(tmp_path: Path, tiny: RoadNetwork
                                                       ) -> None:
    w = generate_workload(tiny, n_subscriptions=400, n_messages=30, seed=9, tweets=DOCS)
    p1 = write_workload(w, tmp_path / "a", network=tiny)
    w2 = generate_workload(tiny, n_subscriptions=400, n_messages=30, seed=9, tweets=DOCS)
    p2 = write_workload(w2, tmp_path / "b", network=tiny)
    for key in p1:
        assert p1[key].read_bytes() == p2[key].read_bytes(), key
    weights = read_weights(p1["weights"])
    subs = read_subscriptions(p1["subscriptions"], tiny, weights)
    msgs = read_messages(p1["messages"], tiny, weights)
    assert_same_workload(w, Workload(subs, msgs, weights))


def test_li_poi_parser_handles_pair_lines_of_four_fields(tmp_path: Path) -> None:
    net = RoadNetwork.from_arrays(node_ids=[0, 1, 2], node_lon=[0.0, 0.01, 0.02],
                                  node_lat=[0.0, 0.0, 0.0], edge_u_ids=[0, 1],
                                  edge_v_ids=[1, 2], edge_length=[1000.0, 500.0])
    poi = tmp_path / "x.poi_on_edges.txt"
    # A two-POI pair line has four fields, like a header line.
    poi.write_text("0 1 0.01 2\n1 0.0025 0 0.01 \n1 2 0.02 0\n2 1 0.02 1\n1 0.005\n")
    cats = tmp_path / "x.poi_categories.csv"
    cats.write_text("cat_name,cat_id\nChurch,0\npark,1\n")
    pois = read_li_pois(net, poi, cats)
    assert pois.documents == [["park"], ["church"], ["park"]]
    assert pois.points.edge.tolist() == [0, 0, 1]
    # Fractions of the degree length, scaled to metres; (2, 1) is edge (1, 2) reversed.
    np.testing.assert_allclose(pois.points.offset, [250.0, 1000.0, 375.0])
    assert find_poi_source(tmp_path / "x.cnode") == poi
    assert find_poi_source(tmp_path / "rome.gr.gz") is None


# ----------------------------------------------------------------------------- real data
def check_shape(w: Workload, n_subs: int, n_msgs: int) -> None:
    sk = counts(w.subscriptions.kw_ptr)
    mk = counts(w.messages.kw_ptr)
    assert len(w.subscriptions) == n_subs and len(w.messages) == n_msgs
    assert SUBSCRIPTION_KEYWORDS[0] <= sk.min() and sk.max() <= SUBSCRIPTION_KEYWORDS[1]
    assert MESSAGE_KEYWORDS[0] <= mk.min() and mk.max() <= MESSAGE_KEYWORDS[1]
    assert sum(keyword_histogram(w.subscriptions.kw_ptr).values()) == n_subs


def test_rome_tweets(rome: RoadNetwork, tweet_docs: list[list[str]], tmp_path: Path) -> None:
    w = generate_workload(rome, n_subscriptions=20_000, n_messages=300, seed=11,
                          tweets=tweet_docs)
    check_shape(w, 20_000, 300)
    sk = counts(w.subscriptions.kw_ptr)
    assert set(np.unique(sk)) == {1, 2, 3, 4, 5}
    assert set(np.unique(counts(w.messages.kw_ptr))) >= {5, 25}
    paths = write_workload(w, tmp_path, network=rome)
    weights = read_weights(paths["weights"])
    subs = read_subscriptions(paths["subscriptions"], rome, weights)
    np.testing.assert_array_equal(subs.points.edge, w.subscriptions.points.edge)
    np.testing.assert_array_equal(subs.points.offset, w.subscriptions.points.offset)


def test_california_pois(california: RoadNetwork, shared: Callable[[str], Path]) -> None:
    source = find_poi_source(shared("li_california/cal.cnode"))
    assert source is not None and source.name == "cal.poi_on_edges.txt"
    pois = load_pois(california, source)
    assert len(pois) == 87_635
    assert np.all(pois.points.offset <= california.edge_length[pois.points.edge])
    w = generate_workload(california, n_subscriptions=3000, n_messages=100, seed=1,
                          keywords_from="pois", locations="pois", pois=pois)
    check_shape(w, 3000, 100)
    assert len(w.weights) <= 63  # category names
    assert "school" in w.weights


def test_california_tweets_uniform(california: RoadNetwork, tweet_docs: list[list[str]]
                                   ) -> None:
    w = generate_workload(california, n_subscriptions=3000, n_messages=100, seed=2,
                          tweets=tweet_docs)
    check_shape(w, 3000, 100)


def test_andorra_pois(andorra: RoadNetwork, shared: Callable[[str], Path], tmp_path: Path
                      ) -> None:
    pbf = shared("osm/andorra-latest.osm.pbf")
    source = find_poi_source(pbf)
    assert source == pbf
    pois = load_pois(andorra, source)
    assert 500 < len(pois) < 2_500
    vocab = {t for d in pois.documents for t in d}
    assert {"restaurant", "hotel"} <= vocab
    w = generate_workload(andorra, n_subscriptions=2000, n_messages=100, seed=4,
                          keywords_from="pois", locations="pois", pois=pois)
    check_shape(w, 2000, 100)
    # Each subscription's keywords describe the POI it stands on.
    where: dict[tuple[int, float], list[set[str]]] = {}
    for e, o, d in zip(pois.points.edge.tolist(), pois.points.offset.tolist(), pois.documents,
                       strict=True):
        where.setdefault((e, o), []).append(set(d))  # several POIs may snap to one point
    subs = w.subscriptions
    for i in range(0, len(subs), 50):
        kw = {w.weights.terms[t] for t in subs.keywords(i)}
        key = (int(subs.points.edge[i]), float(subs.points.offset[i]))
        assert any(kw <= doc for doc in where[key])
    # Andorra has parallel edges: the files still read back to the same places, undirected
    # and directed (one-way streets are written in their travel direction).
    paths = write_workload(w, tmp_path, network=andorra)
    weights = read_weights(paths["weights"])
    for net in (andorra, andorra.with_direction(directed=True)):
        subs2 = read_subscriptions(paths["subscriptions"], net, weights)
        msgs2 = read_messages(paths["messages"], net, weights)
        np.testing.assert_array_equal(subs2.points.edge, subs.points.edge)
        np.testing.assert_array_equal(subs2.points.offset, subs.points.offset)
        np.testing.assert_array_equal(msgs2.points.edge, w.messages.points.edge)
        np.testing.assert_array_equal(msgs2.points.offset, w.messages.points.offset)


def test_andorra_tweets_uniform(andorra: RoadNetwork, tweet_docs: list[list[str]],
                                tmp_path: Path) -> None:
    w = generate_workload(andorra, n_subscriptions=5000, n_messages=50, seed=4,
                          tweets=tweet_docs)
    check_shape(w, 5000, 50)
    paths = write_workload(w, tmp_path, network=andorra)
    subs = read_subscriptions(paths["subscriptions"], andorra.with_direction(directed=True),
                              read_weights(paths["weights"]))
    np.testing.assert_array_equal(subs.points.edge, w.subscriptions.points.edge)
    np.testing.assert_array_equal(subs.points.offset, w.subscriptions.points.offset)


def test_compiled_keyword_pick_is_the_stable_argsort_pick() -> None:
    """_pick_keywords takes, per row, the k smallest keys of the row's first `length`
    columns (ties by column) and returns their terms sorted: what the argsort formulation
    it replaced took, including on tied keys."""
    from roadpubsub.index.workload import _pick_keywords

    rng = np.random.default_rng(5)
    c, width = 400, 9
    keys = rng.integers(0, 4, (c, width)).astype(np.float64) / 4  # many ties
    length = rng.integers(1, width + 1, c)
    k = np.minimum(rng.integers(1, 6, c), length)
    ptr = np.arange(c) * width
    terms = rng.integers(0, 1000, c * width).astype(np.int32)
    got = _pick_keywords(keys, length, k, ptr, terms)
    masked = keys.copy()
    masked[np.arange(width)[None, :] >= length[:, None]] = 2.0
    pos = np.argsort(masked, axis=1, kind="stable")
    want = np.concatenate([np.sort(terms[ptr[r] + pos[r, :k[r]]]) for r in range(c)])
    np.testing.assert_array_equal(got, want)
