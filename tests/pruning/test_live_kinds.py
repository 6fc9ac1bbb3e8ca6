"""Live boolean and top-k subscriptions (adds, removes, moves between messages, a growing
vocabulary) against the reference matchers over the live set, on random graphs.

Top-k follows the documented rule: after a change of the subscriptions the reference
starts a new :class:`TopkBruteMatcher` over the live ones and feeds it the window. The
live side retires rows, builds parts, merges and rebuilds them (small limits drawn)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import random_points, scenarios

from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
from roadpubsub.index.model import Messages, keyword_csr
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher, TopkBruteMatcher
from roadpubsub.pruning.live_kinds import LiveBoolean
from roadpubsub.pruning.live_topk import LiveTopk
from roadpubsub.roadnet.locations import EdgePoints


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 4, 30]),
       st.integers(5, 30))
def test_live_kinds_equal_the_references(scenario, seed, window, steps) -> None:
    network, subs, _, weights, dmax, capacity = scenario
    rng = np.random.default_rng(seed)
    n = len(subs)
    spatial = SpatialIndex.build(network, capacity=capacity)
    vocab = list(weights.terms)
    words = [[vocab[t] for t in subs.keywords(i)] for i in range(n)]
    radius = np.where(rng.random(n) < 0.1, 0.0, rng.uniform(0, dmax, n))
    radius[rng.random(n) < 0.1] = dmax
    ks = rng.choice([1, 2, 3, 50], n).astype(np.int64)
    places = {i: (int(subs.points.edge[i]), float(subs.points.offset[i])) for i in range(n)}
    live_b: set[int] = set()
    live_t: set[int] = set()
    b = LiveBoolean(spatial, weights, dmax_m=dmax, rebuild_min=int(rng.integers(0, 4)),
                    threads=1)
    t = LiveTopk(spatial, weights, dmax_m=dmax, window=window,
                 max_parts=int(rng.integers(1, 4)), rebuild_min=int(rng.integers(0, 6)))
    ring: list[tuple[int, int, float, list[str]]] = []
    arrivals = 0
    ref_t: TopkBruteMatcher | None = None
    offset = 0
    next_id = 1000

    def rows(i_list: list[int], kind: str) -> BooleanSubscriptions | TopkSubscriptions:
        ids = np.asarray([int(subs.ids[i]) for i in i_list], np.int64)
        pts = EdgePoints.of([places[i][0] for i in i_list], [places[i][1] for i in i_list])
        ptr, terms = keyword_csr([words[i] for i in i_list], weights, add=True)
        if kind == "b":
            return BooleanSubscriptions(ids, pts, radius[i_list], ptr, terms)
        return TopkSubscriptions(ids, pts, subs.alpha[i_list], ks[i_list], ptr, terms)

    def messages(part: list[tuple[int, int, float, list[str]]]) -> Messages:
        return Messages.from_rows(ids=[m[0] for m in part], points=EdgePoints.of(
            [m[1] for m in part], [m[2] for m in part]), keywords=[m[3] for m in part],
            weights=weights)

    for step in range(steps):
        u = rng.random()
        free = [i for i in range(n) if i not in live_b and i not in live_t]
        if u < 0.2 and free:
            pick = list(rng.choice(free, min(len(free), int(rng.integers(1, 4))),
                                   replace=False))
            for i in pick:
                if rng.random() < 0.5:
                    live_b.add(int(i))
                    b.add(rows([int(i)], "b"))  # type: ignore[arg-type]
                else:
                    live_t.add(int(i))
                    t.add(rows([int(i)], "t"))  # type: ignore[arg-type]
                    ref_t = None
        elif u < 0.3 and (live_b or live_t):
            i = int(rng.choice(sorted(live_b | live_t)))
            live_b.discard(i)
            if i in live_t:
                live_t.discard(i)
                ref_t = None
            b.remove([subs.ids[i]])
            t.remove([subs.ids[i]])
        elif u < 0.45 and (live_b or live_t):
            i = int(rng.choice(sorted(live_b | live_t)))
            p = random_points(rng, network, 1)
            places[i] = (int(p.edge[0]), float(p.offset[0]))
            (b if i in live_b else t).move([subs.ids[i]], p)
            if i in live_t:
                ref_t = None
        elif u < 0.5:
            weights.ids([f"new{step}"], add=True)  # a term another kind brought
            vocab.append(f"new{step}")
        else:
            k = int(rng.integers(1, 4))
            pts = random_points(rng, network, k)
            part = []
            for j in range(k):
                if rng.random() < 0.3 and live_t | live_b:  # on a subscription's edge
                    e = places[int(rng.choice(sorted(live_t | live_b)))][0]
                    pts.edge[j], pts.offset[j] = e, network.edge_length[e] * rng.random()
                kw = list(rng.choice(vocab, int(rng.integers(0, 5)), replace=False))
                part.append((next_id, int(pts.edge[j]), float(pts.offset[j]), kw))
                next_id += 1
            msgs = messages(part)
            # boolean: the reference over the live set
            got = b.match(msgs)
            if live_b:
                want = BooleanBruteMatcher(network, rows(sorted(live_b), "b"), weights,
                                           dmax_m=dmax).match(msgs)  # type: ignore[arg-type]
            else:
                want = Deliveries.empty()
            assert got.pairs() == want.pairs()
            assert np.array_equal(got.distance, want.distance)
            # top-k: the reference with the window rule
            ev = t.push(msgs, keywords=[m[3] for m in part])
            if live_t:
                if ref_t is None:
                    ref_t = TopkBruteMatcher(network, rows(sorted(live_t), "t"), weights,
                                             dmax_m=dmax, window=window)  # type: ignore
                    if ring:
                        ref_t.push(messages(ring))
                    offset = arrivals - len(ring)
                want_ev = ref_t.push(msgs)
                assert ev.rows() == [(s + offset, *rest) for s, *rest in want_ev.rows()]
            else:
                assert len(ev) == 0
            ring = (ring + part)[-window:]
            arrivals += k
    # every top-k now: the reference's
    if live_t:
        ids = sorted(int(subs.ids[i]) for i in live_t)
        got_top = [[x["message_id"] for x in r] for r in t.results(ids)]
        ref = TopkBruteMatcher(network, rows(sorted(live_t), "t"), weights, dmax_m=dmax,
                               window=window)  # type: ignore[arg-type]
        if ring:
            ref.push(messages(ring))
        by_id = {int(s): r for r, s in enumerate(ref.subs.ids)}
        want_top = [[ring[seq][0] for _, seq in reversed(ref._top[by_id[i]])] for i in ids]
        assert got_top == want_top
