"""DeltaBuffer.drop (the compiled removal an unsubscribe uses) equals keep of the rest."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.index.delta import DeltaBuffer
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import PointFacts
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints


def _rows(ids: list[int], rng: np.random.Generator
          ) -> tuple[Subscriptions, PointFacts, np.ndarray, np.ndarray]:
    """Rows whose every field differs (keyword lists of 1 to 4 terms)."""
    k = len(ids)
    lengths = rng.integers(1, 5, size=k)
    ptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    subs = Subscriptions(np.asarray(ids, dtype=np.int64),
                         EdgePoints.of(rng.integers(0, 99, size=k), rng.integers(0, 9, k) / 4),
                         rng.random(k), rng.random(k), ptr,
                         rng.integers(0, 1000, size=int(ptr[-1])).astype(np.int32))
    facts = PointFacts(**{f.name: (rng.integers(0, 50, size=k).astype(np.int32)
                                   if f.name in ("cell", "chain") else rng.random(k))
                          for f in fields(PointFacts)})
    return subs, facts, rng.random(k), rng.random(k) < 0.3


def _state(buf: DeltaBuffer) -> dict[str, list[object]]:
    s, f = buf.subs, buf.facts
    out = {"ids": s.ids, "edge": s.points.edge, "offset": s.points.offset, "alpha": s.alpha,
           "tau": s.tau, "kw_ptr": s.kw_ptr, "kw_terms": s.kw_terms,
           "dn_limit": buf.dn_limit, "wildcard": buf.wildcard,
           **{f"facts.{x.name}": getattr(f, x.name) for x in fields(PointFacts)}}
    return {k: np.asarray(v).tolist() for k, v in out.items()}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 300), min_size=1, max_size=40),
                          st.lists(st.integers(0, 60), max_size=6)), min_size=1, max_size=8),
       st.integers(0, 2**32 - 1))
def test_drop_equals_keep_of_the_rest(steps: list[tuple[list[int], list[int]]],
                                      seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = DeltaBuffer(), DeltaBuffer()
    for values, positions in steps:
        fresh = sorted(set(values) - set(a.subs.ids.tolist()), key=lambda _: rng.random())
        if fresh:
            rows = _rows(fresh, rng)
            a.append(*rows)
            b.append(*rows)
        n = len(a)
        drop = sorted({p % n for p in positions}) if n else []
        a.drop(np.asarray(drop[::-1], dtype=np.int64))  # any order, repeats folded
        b.keep(np.asarray([r for r in range(n) if r not in set(drop)], dtype=np.int64))
        assert _state(a) == _state(b)
        ids = a.subs.ids.tolist()
        queries = np.asarray(list(range(-3, 305)), dtype=np.int64)
        want = [ids.index(q) if q in ids else -1 for q in queries.tolist()]
        assert a.row_of(queries).tolist() == want


def test_drop_names_rows_outside_the_delta() -> None:
    buf = DeltaBuffer()
    buf.append(*_rows([5, 6, 7], np.random.default_rng(0)))
    with pytest.raises(InputError, match=r"delta rows out of range 0\.\.2: 3"):
        buf.drop(np.array([1, 3]))
    assert buf.subs.ids.tolist() == [5, 6, 7]  # nothing removed
