"""The delta's id lookup stays right through appends and removals in any order."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.index.delta import DeltaBuffer
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import PointFacts
from roadpubsub.roadnet.locations import EdgePoints


def _rows(ids: list[int]) -> tuple[Subscriptions, PointFacts, np.ndarray, np.ndarray]:
    k = len(ids)
    subs = Subscriptions(np.asarray(ids, dtype=np.int64),
                         EdgePoints.of(np.zeros(k, np.int64), np.zeros(k)),
                         np.full(k, 0.5), np.full(k, 0.5), np.arange(k + 1, dtype=np.int64),
                         np.zeros(k, dtype=np.int32))
    facts = PointFacts(**{f.name: np.zeros(k, dtype=np.int32 if f.name in ("cell", "chain")
                                            else np.float64) for f in fields(PointFacts)})
    return subs, facts, np.zeros(k), np.zeros(k, dtype=bool)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(-50, 400), min_size=1,
                                                    max_size=30)), max_size=25),
       st.randoms(use_true_random=False))
def test_row_of_matches_a_scan(steps: list[tuple[bool, list[int]]], rnd: object) -> None:
    buf = DeltaBuffer()
    for add, values in steps:
        held = buf.subs.ids.tolist()
        if add:
            fresh = sorted(set(values) - set(held), key=lambda _: rnd.random())  # type: ignore[attr-defined]
            if fresh:
                buf.append(*_rows(fresh))
        elif held:
            keep = [r for r in range(len(held)) if held[r] not in set(values)]
            rnd.shuffle(keep)  # type: ignore[attr-defined]
            buf.keep(np.asarray(keep, dtype=np.int64))
        ids = buf.subs.ids.tolist()
        queries = list(range(-55, 405, 7)) + ids
        got = buf.row_of(np.asarray(queries, dtype=np.int64))
        want = [ids.index(q) if q in ids else -1 for q in queries]
        assert got.tolist() == want
