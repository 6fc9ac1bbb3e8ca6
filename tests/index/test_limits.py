"""The per-subscription bounds of the enhanced architecture (Eqs. 7-15) are safe and exact
at the edges alpha = 0, alpha = 1 and tau <= alpha."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.index.limits import (
    distance_limit,
    distance_upper_bound,
    effective_tau,
    location_aware_prefixes,
    subscription_limits,
    tsim_limit,
)
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.similarity import delivered, spatio_textual_similarity, text_similarity
from roadpubsub.roadnet.locations import EdgePoints

DMAX = 1000.0


def one_subscription(keywords: list[str], alpha: float, tau: float,
                     weights: TermWeights) -> Subscriptions:
    return Subscriptions.from_rows(ids=[1], points=EdgePoints.of([0], [0.0]),
                                   keywords=[keywords], alpha=[alpha], tau=[tau],
                                   weights=weights)


def test_paper_equations_on_a_worked_case() -> None:
    alpha = np.array([0.4])
    tau_e = np.array([0.7])
    # Eq. 8: (0.7 - 0.4) / 0.6 = 0.5
    np.testing.assert_allclose(tsim_limit(alpha, tau_e), [0.5])
    # Eq. 7: (1 - (0.7 - 0.6) / 0.4) * Dmax = 0.75 Dmax
    np.testing.assert_allclose(distance_limit(alpha, tau_e, DMAX), [750.0], atol=1e-6)
    # Eq. 13 with TUB = 0.5: 1 - (0.7 - 0.3) / 0.4 = 0 -> DNUB = 0
    np.testing.assert_allclose(distance_upper_bound(alpha, tau_e, np.array([0.5]), DMAX),
                               [0.0], atol=1e-6)


def test_alpha_one_is_a_wildcard_with_distance_only() -> None:
    w = TermWeights({"a": 1.0, "b": 2.0})
    lap = location_aware_prefixes(one_subscription(["a"], 1.0, 0.8, w), w.weights, w.rank(),
                                  dmax_m=DMAX)
    assert lap.wildcard_rows.tolist() == [0]
    # SIM = 1 - d / Dmax >= 0.8  <=>  d <= 200 m
    np.testing.assert_allclose(lap.wildcard_dnub, [200.0], atol=1e-3)
    assert np.isneginf(tsim_limit(np.array([1.0]), np.array([0.8])))[0]


def test_alpha_zero_needs_text_and_only_dmax() -> None:
    w = TermWeights({"a": 1.0, "b": 1.0, "c": 2.0})
    subs = one_subscription(["a", "b", "c"], 0.0, 0.5, w)
    lap = location_aware_prefixes(subs, w.weights, w.rank(), dmax_m=DMAX)
    assert lap.wildcard_rows.size == 0
    # Weight order c (2), a, b: sharing only b gives TSIM 0.25 < 0.5, so b is not in LAP.
    assert sorted(w.terms[t] for t in lap.term) == ["a", "c"]
    np.testing.assert_allclose(lap.dnub, DMAX)


def test_tau_below_alpha_adds_the_wildcard() -> None:
    w = TermWeights({"a": 1.0})
    lap = location_aware_prefixes(one_subscription(["a"], 0.7, 0.5, w), w.weights, w.rank(),
                                  dmax_m=DMAX)
    assert lap.wildcard_rows.tolist() == [0]
    # No shared keyword: 0.7 * (1 - d / Dmax) >= 0.5  <=>  d <= Dmax * 2 / 7
    np.testing.assert_allclose(lap.wildcard_dnub, [DMAX * 2 / 7], rtol=1e-7)


@settings(max_examples=300, deadline=None)
@given(
    weights=st.lists(st.floats(0.05, 5.0), min_size=1, max_size=6),
    sub_mask=st.integers(1, 63),
    msg_mask=st.integers(0, 63),
    alpha=st.sampled_from([0.0, 1.0]) | st.floats(0.0, 1.0),
    tau=st.floats(1e-3, 1.0),
    frac=st.floats(0.0, 1.2),
)
def test_delivered_pairs_always_pass_lemmas_3_and_6(weights, sub_mask, msg_mask, alpha, tau,
                                                    frac) -> None:
    """If SIM >= tau and d <= Dmax, then s and m share a LAP keyword (or LAP holds the
    wildcard) whose DNUB is at least d, and d <= DNlimit(s) (Lemmas 1, 3, 6)."""
    vocab = [f"t{i}" for i in range(len(weights))]
    w = TermWeights(dict(zip(vocab, weights, strict=True)))
    sub_kw = [t for i, t in enumerate(vocab) if sub_mask >> i & 1] or vocab[:1]
    msg_terms = w.ids([t for i, t in enumerate(vocab) if msg_mask >> i & 1], add=False)
    subs = one_subscription(sub_kw, alpha, tau, w)
    d = np.array([frac * DMAX])
    tsim = text_similarity(subs, np.array([0]), msg_terms, w.weights)
    score = spatio_textual_similarity(subs.alpha, d, DMAX, tsim)
    if not delivered(score, subs.tau, d, DMAX)[0]:
        return
    lap = location_aware_prefixes(subs, w.weights, w.rank(), dmax_m=DMAX)
    shared = np.isin(lap.term, msg_terms)
    bounds = list(lap.dnub[shared]) + list(lap.wildcard_dnub)
    assert bounds, "a delivered pair must share a LAP keyword or a wildcard"
    assert max(bounds) >= d[0] - 1e-9
    assert lap.dn_limit[0] >= d[0] - 1e-9
    assert effective_tau(subs.tau)[0] <= score[0]


@settings(max_examples=150, deadline=None)
@given(
    weights=st.lists(st.floats(1e-290, 1e290) | st.sampled_from([1.0, 2.0]), min_size=1,
                     max_size=8),
    rows=st.lists(st.tuples(st.integers(1, 255), st.sampled_from([0.0, 1.0, 0.5])
                            | st.floats(0.0, 1.0), st.floats(1e-3, 1.0)),
                  min_size=1, max_size=20),
    tolerance=st.sampled_from([0.0, 1e-9]),
)
def test_compiled_prefixes_equal_the_vectorised_ones(weights, rows, tolerance) -> None:
    """The compiled prefixes are bit for bit those of the numpy formulation, for weights of
    any magnitude, alpha at 0 and 1, and ties between weights."""
    from roadpubsub.index.limits import _location_aware_prefixes_vectorised

    vocab = [f"t{i}" for i in range(len(weights))]
    w = TermWeights(dict(zip(vocab, weights, strict=True)))
    keywords = [[t for i, t in enumerate(vocab) if mask >> i & 1] or vocab[:1]
                for mask, _, _ in rows]
    subs = Subscriptions.from_rows(
        ids=np.arange(len(rows)), points=EdgePoints.of([0] * len(rows), [0.0] * len(rows)),
        keywords=keywords, alpha=[a for _, a, _ in rows], tau=[t for _, _, t in rows],
        weights=w)
    got = location_aware_prefixes(subs, w.weights, w.rank(), dmax_m=DMAX, tolerance=tolerance)
    want = _location_aware_prefixes_vectorised(subs, w.weights, w.rank(), dmax_m=DMAX,
                                                tolerance=tolerance)
    for name in got.__dataclass_fields__:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from([0.0, 1.0, 0.5, 5e-324, 1.0 - 2**-53])
                            | st.floats(0.0, 1.0),
                            st.sampled_from([1e-3, 0.5, 1.0, 1.0 - 2**-53])
                            | st.floats(1e-3, 1.0)),
                  min_size=1, max_size=20),
    tolerance=st.sampled_from([0.0, 1e-9]),
    dmax=st.sampled_from([1000.0, 1.0, 5e5]),
)
def test_subscription_limits_equal_the_prefixes(rows, tolerance, dmax) -> None:
    """A moved subscription's DNlimit and wildcard flag without its postings are bit for
    bit those of LAP, alpha at 0 and 1 and tau at or below alpha included."""
    w = TermWeights({"a": 1.0, "b": 3.0})
    alpha, tau = [a for a, _ in rows], [t for _, t in rows]
    subs = Subscriptions.from_rows(
        ids=np.arange(len(rows)), points=EdgePoints.of([0] * len(rows), [0.0] * len(rows)),
        keywords=[["a", "b"]] * len(rows), alpha=alpha, tau=tau, weights=w)
    lap = location_aware_prefixes(subs, w.weights, w.rank(), dmax_m=dmax, tolerance=tolerance)
    limit, wildcard = subscription_limits(subs.alpha, subs.tau, dmax_m=dmax,
                                          tolerance=tolerance)
    np.testing.assert_array_equal(limit, lap.dn_limit)
    np.testing.assert_array_equal(np.flatnonzero(wildcard), lap.wildcard_rows)
    tau_e = effective_tau(subs.tau, tolerance=tolerance)
    np.testing.assert_array_equal(wildcard, tsim_limit(subs.alpha, tau_e) <= 0.0)
    want = distance_limit(subs.alpha, tau_e, dmax)
    np.testing.assert_array_equal(limit, np.where(want >= 0.0, want, -1.0))
