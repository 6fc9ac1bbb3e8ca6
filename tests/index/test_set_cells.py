"""Segment sets filed by cell and keyword (:mod:`roadpubsub.index.set_cells`, issue 32).

The keyword postings and :func:`~roadpubsub.index.set_cells.set_term_candidates` against a
plain recomputation: for random sets on a real network, random filed terms (repeated
ones too), always flags, cell bounds (some +inf and NaN) and message terms (repeated),
the kernel lists exactly the sets filed under a message term or always whose bound (the
minimum over their cells) is within the limit, each once with that bound less the slack;
malformed filings are refused before any kernel reads them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roadpubsub.index.set_cells import (
    BOUND_SLACK_M,
    CandidateWork,
    SetCellIndex,
    set_term_candidates,
)
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSet, SegmentSets

N_TERMS = 7


@pytest.fixture(scope="module")
def filed(andorra: RoadNetwork) -> tuple[SpatialIndex, SegmentSets, SetCellIndex]:
    rng = np.random.default_rng(3)
    spatial = SpatialIndex.build(andorra, capacity=40)
    sets = []
    for _ in range(60):
        k = int(rng.integers(1, 80))
        e = rng.integers(0, andorra.n_edges, k)
        sets.append(SegmentSet.of(andorra, e, np.zeros(k), andorra.edge_length[e]))
    batch = SegmentSets.of_sets(sets)
    return spatial, batch, SetCellIndex.build(spatial.cells, batch)


@settings(max_examples=200, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_term_candidates_equal_a_plain_recomputation(
        filed: tuple[SpatialIndex, SegmentSets, SetCellIndex], seed: int) -> None:
    spatial, batch, index = filed
    rng = np.random.default_rng(seed)
    n = len(batch)
    terms = [sorted(rng.choice(N_TERMS, int(rng.integers(0, 4)))) for _ in range(n)]
    ptr = np.r_[0, np.cumsum([len(t) for t in terms])].astype(np.int64)
    flat = np.array([t for row in terms for t in row], dtype=np.int64)
    always = rng.random(n) < 0.15
    post = index.term_postings(ptr, flat, always, N_TERMS)
    n_cells = spatial.cells.n_cells
    bound = rng.uniform(0, 1000, n_cells)
    bound[rng.random(n_cells) < 0.1] = np.inf
    bound[rng.random(n_cells) < 0.05] = np.nan
    limit = float(rng.choice([0.0, 300.0, 1000.0]))
    msg = rng.choice(N_TERMS, int(rng.integers(0, 5))).astype(np.int32)  # repeats too
    work = CandidateWork.of(n)
    k = set_term_candidates(post, bound, limit, msg, 0, msg.size, work)
    got = dict(zip(work.sets[:k].tolist(), work.bound[:k].tolist(), strict=True))
    assert len(got) == k
    assert np.all(np.isinf(work.best))  # restored
    lb = index.lower_bounds(np.where(bound <= limit + BOUND_SLACK_M, bound, np.inf))
    want = {s: max(0.0, float(lb[s]) - BOUND_SLACK_M) for s in range(n)
            if (always[s] or set(terms[s]) & set(msg.tolist()))
            and lb[s] <= limit + BOUND_SLACK_M}
    assert got == want


def test_malformed_filings_are_refused(
        filed: tuple[SpatialIndex, SegmentSets, SetCellIndex]) -> None:
    _, batch, index = filed
    n = len(batch)
    ok_ptr, no = np.zeros(n + 1, np.int64), np.zeros(n, bool)
    index.term_postings(ok_ptr, np.empty(0, np.int64), no, N_TERMS)
    bad_ptr = ok_ptr.copy()
    bad_ptr[-1] = 1
    for ptr, terms, always in ((ok_ptr[:-1], np.empty(0, np.int64), no),
                               (bad_ptr, np.array([N_TERMS]), no),
                               (bad_ptr, np.array([-1]), no),
                               (ok_ptr, np.empty(0, np.int64), no[:-1])):
        with pytest.raises(InputError, match="set terms must be a CSR"):
            index.term_postings(ptr, terms, always, N_TERMS)
