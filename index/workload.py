"""Synthetic subscription/message workloads from real text and real places (paper Sec. VII-A).

* Subscription keywords: 1-5 keywords (target drawn uniformly in 1..5, capped at the
  document's size) sampled without replacement from one real document: a tweet after
  :func:`~roadpubsub.index.text.tokenize`, or a real POI's description (OSM: the tokenised ``name``
  plus the ``amenity``/``shop``/``tourism`` values; Li California: the category name).
* Message keywords: a target drawn uniformly in 5..25; random documents of the same source
  are combined (set union, in draw order) until the target is reached, and the message
  keeps exactly that many.
* Locations: uniform over the network by length (an edge with probability proportional to
  its length, then a uniform offset), or at real POIs' positions. With POI keywords and
  POI locations each subscription takes the keywords of the POI it stands on. Points are
  only placed on edges that ``(u, v, offset)`` names unambiguously (among parallel edges
  between two nodes, the one :func:`~roadpubsub.roadnet.locations.locate_uv` picks), so the written
  files read back to exactly the same locations.
* alpha and tau: a fixed value, or uniform within +-spread of a centre, clipped into
  [0, 1] and [:data:`TAU_MIN`, 1].
* Weights: smoothed idf (``ln((1 + N) / (1 + df)) + 1``) over the source's documents.

Everything is drawn from :class:`numpy.random.Generator` streams spawned from one seed
(separate streams for subscriptions and messages), so one seed gives identical output.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.io import messages_table, subscriptions_table, weights_table
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.pois import POIs
from roadpubsub.index.tables import write_tables
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.text import read_tweet_tokens
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints, locate_uv
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS, shared_data_dir

__all__ = [
    "MESSAGE_KEYWORDS",
    "SUBSCRIPTION_KEYWORDS",
    "TAU_MIN",
    "Workload",
    "default_tweets_path",
    "generate_workload",
    "hotspot",
    "hotspots",
    "keyword_histogram",
    "write_workload",
]

#: Inclusive range of keywords per subscription.
SUBSCRIPTION_KEYWORDS = (1, 5)
#: Inclusive range of keywords per message.
MESSAGE_KEYWORDS = (5, 25)
#: Smallest generated tau (tau must lie in (0, 1]).
TAU_MIN = 1e-3

KeywordSource = Literal["tweets", "pois"]
LocationSource = Literal["uniform", "pois"]
PathLike = str | os.PathLike[str]
IntArray = npt.NDArray[np.int64]
_CHUNK = 1 << 16


# ---------------------------------------------------------------------------- data types
@dataclass(frozen=True, eq=False)
class Workload:
    """A generated workload: subscriptions and messages over one vocabulary.

    ``timings`` holds seconds spent per phase (informational).
    """

    subscriptions: Subscriptions
    messages: Messages
    weights: TermWeights
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class _Corpus:
    """Documents as a term-id CSR (ids of ``weights``; each row unique, in token order)."""

    ptr: IntArray
    terms: npt.NDArray[np.int32]

    @property
    def lengths(self) -> IntArray:
        return np.diff(self.ptr)

    @classmethod
    def build(cls, documents: Sequence[Sequence[str]], weights: TermWeights) -> _Corpus:
        lengths = np.fromiter((len(d) for d in documents), dtype=np.int64,
                              count=len(documents))
        ptr = np.zeros(len(documents) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        flat = [t for d in documents for t in d]
        return cls(ptr, weights.ids(flat, add=False))


# ---------------------------------------------------------------------------- text
def default_tweets_path() -> Path:
    """``text/airline_tweets.csv`` of the shared data folder."""
    return shared_data_dir() / "text" / "airline_tweets.csv"


# ---------------------------------------------------------------------------- sampling
def _canonical_edges(network: RoadNetwork) -> npt.NDArray[np.bool_]:
    """Edges that (u, v, offset) names unambiguously: locate_uv maps them back to themselves.

    Among parallel edges only the shortest one is reachable by (u, v); uniform locations
    are drawn on canonical edges so the written u/v/offset round-trip exactly.
    """
    def build() -> npt.NDArray[np.bool_]:
        und = network.with_direction(directed=False)
        ids = network.node_ids
        e = np.arange(network.n_edges)
        pts = locate_uv(und, ids[network.edge_u], ids[network.edge_v], np.zeros(e.size))
        return np.asarray((pts.edge == e) & (pts.offset == 0.0))

    return network.memo("workload.canonical_edges", build)


def _uniform_points(network: RoadNetwork, n: int, rng: np.random.Generator,
                    *, within: npt.NDArray[np.bool_] | None = None) -> EdgePoints:
    keep = _canonical_edges(network) if within is None else _canonical_edges(network) & within
    weight = np.where(keep, network.edge_length, 0.0)
    cum = np.cumsum(weight)
    if n == 0:
        return EdgePoints.of([], [])
    if cum[-1] <= 0:
        msg = f"network {network.name!r} has no edge of positive length to place points on"
        raise InputError(msg)
    # Looked up in sorted order (a sequential walk of cum instead of n cache misses),
    # then put back in draw order: the same points as an unsorted lookup.
    u = rng.random(n) * cum[-1]
    order = np.argsort(u)
    edge = np.empty(n, dtype=np.int64)
    edge[order] = np.searchsorted(cum, u[order], side="right")
    del u, order
    edge = np.minimum(edge, network.n_edges - 1)
    offset = rng.random(n) * network.edge_length[edge]
    return EdgePoints.of(edge, offset)


def hotspot(workload: Workload, network: RoadNetwork, *, share: float = 0.5,
            radius_m: float = 3000.0, seed: int = 0) -> Workload:
    """The workload with messages crowding where subscribers crowd (a centre at rush hour).

    Every message and a ``share`` of the subscriptions (in [0, 1]) move to uniform
    positions on the roads within ``radius_m`` metres (straight-line, of the edges' middle
    points) of the network's centre (the node nearest the median of the node positions);
    keywords, alpha and tau stay. Deliveries per message then run into the thousands.
    """
    if not (0.0 <= share <= 1.0 and radius_m > 0):
        msg = f"need 0 <= share <= 1 and radius_m > 0, got {share!r}, {radius_m!r}"
        raise InputError(msg)
    rng = np.random.default_rng(seed)
    cx, cy = float(np.median(network.node_x)), float(np.median(network.node_y))
    centre = int(np.argmin(np.hypot(network.node_x - cx, network.node_y - cy)))
    mx = (network.node_x[network.edge_u] + network.node_x[network.edge_v]) / 2
    my = (network.node_y[network.edge_u] + network.node_y[network.edge_v]) / 2
    near = np.hypot(mx - network.node_x[centre], my - network.node_y[centre]) <= radius_m
    subs = workload.subscriptions
    moved = rng.random(len(subs)) < share
    edge = subs.points.edge.copy()
    offset = subs.points.offset.copy()
    pts = _uniform_points(network, int(moved.sum()), rng, within=near)
    edge[moved], offset[moved] = pts.edge, pts.offset
    msgs = workload.messages
    mpts = _uniform_points(network, len(msgs), rng, within=near)
    return Workload(
        subscriptions=Subscriptions(subs.ids, EdgePoints.of(edge, offset), subs.alpha,
                                    subs.tau, subs.kw_ptr, subs.kw_terms),
        messages=Messages(msgs.ids, mpts, msgs.kw_ptr, msgs.kw_terms),
        weights=workload.weights, timings=dict(workload.timings))


def hotspots(workload: Workload, network: RoadNetwork, *, spots: int = 6,
             share: float = 0.05, radius_m: float = 600.0, spread_m: float = 6000.0,
             seed: int = 0) -> Workload:
    """The workload with crowds of subscribers around a few hot spots, alpha and tau drawn
    over their whole range.

    ``spots`` centres are nodes drawn uniformly among those within ``spread_m`` metres of
    the network's centre (as :func:`hotspot` finds it). A ``share`` of the subscriptions
    (in [0, 1]) and every message move to uniform positions on the roads within
    ``radius_m`` metres of one centre, drawn uniformly; the moved subscriptions' alpha
    and tau are drawn uniformly in [0, 1] and (0, 1]; keywords, and the others' alpha and
    tau, stay. A second dense shape beside :func:`hotspot`'s one wide crowd: several
    tight ones, with thresholds from "anything nearby" (high alpha, low tau: delivered
    without a shared keyword) to "an exact text match" (alpha 0). With the defaults on
    Rome and 1M subscriptions: 6 crowds of about 8,000 subscriptions.
    """
    if not (spots >= 1 and 0.0 <= share <= 1.0 and radius_m > 0 and spread_m >= 0):
        msg = (f"need spots >= 1, 0 <= share <= 1, radius_m > 0 and spread_m >= 0, got "
               f"{spots!r}, {share!r}, {radius_m!r}, {spread_m!r}")
        raise InputError(msg)
    rng = np.random.default_rng(seed)
    cx, cy = float(np.median(network.node_x)), float(np.median(network.node_y))
    centre = int(np.argmin(np.hypot(network.node_x - cx, network.node_y - cy)))
    around = np.flatnonzero(np.hypot(network.node_x - network.node_x[centre],
                                     network.node_y - network.node_y[centre]) <= spread_m)
    centres = rng.choice(around, size=min(spots, around.size), replace=False)
    mx = (network.node_x[network.edge_u] + network.node_x[network.edge_v]) / 2
    my = (network.node_y[network.edge_u] + network.node_y[network.edge_v]) / 2
    near = [np.hypot(mx - network.node_x[c], my - network.node_y[c]) <= radius_m
            for c in centres]

    def place(edge: IntArray, offset: npt.NDArray[np.float64], chosen: npt.NDArray[np.bool_]
              ) -> None:
        spot = rng.integers(0, len(near), int(chosen.sum()))
        rows = np.flatnonzero(chosen)
        for k, within in enumerate(near):
            pts = _uniform_points(network, int((spot == k).sum()), rng, within=within)
            edge[rows[spot == k]], offset[rows[spot == k]] = pts.edge, pts.offset

    subs = workload.subscriptions
    edge = subs.points.edge.astype(np.int64)
    offset = subs.points.offset.copy()
    moved = rng.random(len(subs)) < share
    place(edge, offset, moved)
    msgs = workload.messages
    m_edge = msgs.points.edge.astype(np.int64)
    m_offset = msgs.points.offset.copy()
    place(m_edge, m_offset, np.ones(len(msgs), dtype=bool))
    n_moved = int(moved.sum())
    alpha = subs.alpha.copy()
    tau = subs.tau.copy()
    alpha[moved] = rng.random(n_moved)
    tau[moved] = 1.0 - rng.random(n_moved)  # (0, 1], as the model requires
    return Workload(
        subscriptions=Subscriptions(subs.ids, EdgePoints.of(edge, offset), alpha, tau,
                                    subs.kw_ptr, subs.kw_terms),
        messages=Messages(msgs.ids, EdgePoints.of(m_edge, m_offset), msgs.kw_ptr,
                          msgs.kw_terms),
        weights=workload.weights, timings=dict(workload.timings))


def _spread(rng: np.random.Generator, n: int, centre: float, spread: float, lo: float,
            hi: float) -> npt.NDArray[np.float64]:
    if spread == 0:
        return np.full(n, float(np.clip(centre, lo, hi)))
    return np.clip(rng.uniform(centre - spread, centre + spread, n), lo, hi)


def _sample_subsets(rng: np.random.Generator, corpus: _Corpus, docs: IntArray,
                    ) -> tuple[IntArray, npt.NDArray[np.int32]]:
    """Per chosen document, 1-5 distinct keywords: (CSR ptr, term ids sorted per row)."""
    lo, hi = SUBSCRIPTION_KEYWORDS
    n = docs.size
    counts = np.empty(n, dtype=np.int64)
    parts: list[npt.NDArray[np.int32]] = []
    for start in range(0, n, _CHUNK):
        d = docs[start:start + _CHUNK]
        c = d.size
        length = corpus.lengths[d]
        k = np.minimum(rng.integers(lo, hi + 1, c), length)
        width = int(length.max()) if c else 0
        keys = rng.random((c, width))
        # The k smallest keys among each row's first `length` columns, ties by column
        # (what a stable argsort of the row would put first), then their terms ascending.
        parts.append(_pick_keywords(keys, length, k, corpus.ptr[d], corpus.terms))
        counts[start:start + c] = k
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    terms = np.concatenate(parts) if parts else np.empty(0, np.int32)
    return ptr, terms


@numba.njit(cache=True, nogil=True)
def _pick_keywords(keys: npt.NDArray[np.float64], length: IntArray, k: IntArray,
                   start: IntArray, terms: npt.NDArray[np.int32]
                   ) -> npt.NDArray[np.int32]:  # pragma: no cover - compiled
    out = np.empty(int(k.sum()), dtype=np.int32)
    w = 0
    for r in range(keys.shape[0]):
        kr = k[r]
        chosen = np.empty(kr, dtype=np.int64)
        for i in range(kr):  # selection: i-th smallest key, first column on ties
            best = -1
            for c in range(length[r]):
                taken = False
                for j in range(i):
                    if chosen[j] == c:
                        taken = True
                        break
                if not taken and (best < 0 or keys[r, c] < keys[r, best]):
                    best = c
            chosen[i] = best
        row = np.empty(kr, dtype=np.int32)
        for i in range(kr):
            row[i] = terms[start[r] + chosen[i]]
        row.sort()
        out[w:w + kr] = row
        w += kr
    return out


def _combine_documents(rng: np.random.Generator, corpus: _Corpus, eligible: IntArray,
                       n: int) -> tuple[IntArray, npt.NDArray[np.int32]]:
    """Per message, random documents united until 5-25 keywords: (CSR ptr, sorted ids)."""
    lo, hi = MESSAGE_KEYWORDS
    vocab = int(np.unique(corpus.terms).size)  # empty documents hold no terms
    targets = np.minimum(rng.integers(lo, hi + 1, n), vocab)
    ptr_l = corpus.ptr.tolist()
    terms_l = corpus.terms.tolist()
    counts = np.zeros(n, dtype=np.int64)
    rows: list[list[int]] = []
    block = rng.integers(0, eligible.size, 64).tolist() if eligible.size else []
    pick = 0
    el = eligible.tolist()
    for i in range(n):
        target = int(targets[i])
        got: dict[int, None] = {}
        draws = 0
        while len(got) < target and draws < 10_000:
            if pick == len(block):
                block = rng.integers(0, eligible.size, 64).tolist()
                pick = 0
            d = el[block[pick]]
            pick += 1
            draws += 1
            for t in terms_l[ptr_l[d]:ptr_l[d + 1]]:
                got[t] = None
                if len(got) == target:
                    break
        row = sorted(got)
        rows.append(row)
        counts[i] = len(row)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    flat = np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(ptr[-1]))
    return ptr, flat


def generate_workload(
    network: RoadNetwork,
    *,
    n_subscriptions: int,
    n_messages: int,
    seed: int = 0,
    keywords_from: KeywordSource = "tweets",
    locations: LocationSource = "uniform",
    alpha: float = DEFAULTS.generate_alpha,
    alpha_spread: float = DEFAULTS.generate_alpha_spread,
    tau: float = DEFAULTS.generate_tau,
    tau_spread: float = DEFAULTS.generate_tau_spread,
    tweets: PathLike | Sequence[Sequence[str]] | None = None,
    pois: POIs | None = None,
) -> Workload:
    """Generate subscriptions and messages in memory (see the module docstring).

    Parameters
    ----------
    network
        Where the locations lie.
    n_subscriptions, n_messages
        How many of each (>= 0); ids are ``0 .. n - 1``.
    seed
        Seed of every random draw: one seed gives identical workloads.
    keywords_from
        ``"tweets"`` (the tweet corpus) or ``"pois"`` (descriptions of ``pois``).
    locations
        ``"uniform"`` over the network by length, or ``"pois"`` (positions of ``pois``).
    alpha, alpha_spread
        Centre in [0, 1] and half-width (>= 0) of the uniform alpha distribution.
    tau, tau_spread
        Centre in (0, 1] and half-width (>= 0) of tau; draws are clipped to [TAU_MIN, 1].
    tweets
        The tweet corpus: a CSV path (default :func:`default_tweets_path`) or tokenised
        documents. Only read for ``keywords_from="tweets"``.
    pois
        Required when ``keywords_from`` or ``locations`` is ``"pois"``
        (see :func:`load_pois`).

    Raises
    ------
    ValueError
        Bad parameters, no POIs when they are needed, or a corpus without keywords.
    FileNotFoundError
        The tweet corpus file is missing.
    """
    t0 = time.perf_counter()
    if n_subscriptions < 0 or n_messages < 0:
        msg = "n_subscriptions and n_messages must be >= 0"
        raise InputError(msg)
    if not 0 <= alpha <= 1 or not 0 < tau <= 1:
        msg = f"alpha must lie in [0, 1] and tau in (0, 1]; got alpha={alpha}, tau={tau}"
        raise InputError(msg)
    if alpha_spread < 0 or tau_spread < 0:
        msg = "alpha_spread and tau_spread must be >= 0"
        raise InputError(msg)
    if keywords_from not in ("tweets", "pois") or locations not in ("uniform", "pois"):
        msg = (f"keywords_from must be 'tweets' or 'pois' and locations 'uniform' or 'pois'; "
               f"got {keywords_from!r}, {locations!r}")
        raise InputError(msg)
    if (keywords_from == "pois" or locations == "pois") and (pois is None or len(pois) == 0):
        msg = (f"POIs are needed for keywords_from={keywords_from!r}, "
               f"locations={locations!r}, but none were given for network {network.name!r}")
        raise InputError(msg)

    if keywords_from == "pois":
        assert pois is not None
        documents: Sequence[Sequence[str]] = pois.documents
    elif tweets is None or isinstance(tweets, str | os.PathLike):
        documents = read_tweet_tokens(tweets if tweets is not None else default_tweets_path())
    else:
        documents = tweets
    t_read = time.perf_counter()
    weights = TermWeights.from_idf(documents)
    corpus = _Corpus.build(documents, weights)
    eligible = np.flatnonzero(corpus.lengths > 0)
    if eligible.size == 0:
        msg = f"the {keywords_from} corpus holds no keywords"
        raise InputError(msg)
    t_corpus = time.perf_counter()

    streams = np.random.SeedSequence(seed).spawn(5)
    sub_loc, sub_kw, sub_par, msg_loc, msg_kw = (np.random.default_rng(s) for s in streams)

    # Subscriptions.
    if locations == "pois":
        assert pois is not None
        # Only POIs whose (u, v, offset) round-trips, and with POI keywords only POIs
        # that have some.
        placeable = _canonical_edges(network)[pois.points.edge]
        pool = np.flatnonzero(placeable & (corpus.lengths > 0) if keywords_from == "pois"
                              else placeable)
        if pool.size == 0:
            msg = f"no POI of {pois.source or 'the POI set'} can hold a subscription"
            raise InputError(msg)
        poi_rows = pool[sub_loc.integers(0, pool.size, n_subscriptions)]
        sub_points = pois.points[poi_rows]
    else:
        poi_rows = None
        sub_points = _uniform_points(network, n_subscriptions, sub_loc)
    if keywords_from == "pois" and poi_rows is not None:
        sub_docs = poi_rows.astype(np.int64)
    else:
        sub_docs = eligible[sub_kw.integers(0, eligible.size, n_subscriptions)]
    kw_ptr, kw_terms = _sample_subsets(sub_kw, corpus, sub_docs)
    a = _spread(sub_par, n_subscriptions, alpha, alpha_spread, 0.0, 1.0)
    t = _spread(sub_par, n_subscriptions, tau, tau_spread, TAU_MIN, 1.0)
    subs = Subscriptions(np.arange(n_subscriptions, dtype=np.int64), sub_points, a, t,
                         kw_ptr, kw_terms)
    t_subs = time.perf_counter()

    # Messages.
    if locations == "pois":
        assert pois is not None
        spots = np.flatnonzero(_canonical_edges(network)[pois.points.edge])
        msg_points = pois.points[spots[msg_loc.integers(0, spots.size, n_messages)]]
    else:
        msg_points = _uniform_points(network, n_messages, msg_loc)
    m_ptr, m_terms = _combine_documents(msg_kw, corpus, eligible, n_messages)
    messages = Messages(np.arange(n_messages, dtype=np.int64), msg_points, m_ptr, m_terms)
    t_msgs = time.perf_counter()
    timings = {"read_corpus_s": t_read - t0, "weights_s": t_corpus - t_read,
               "subscriptions_s": t_subs - t_corpus, "messages_s": t_msgs - t_subs}
    return Workload(subs, messages, weights, timings)


# ---------------------------------------------------------------------------- output
def write_workload(workload: Workload, out_dir: PathLike, *, network: RoadNetwork,
                   lonlat: bool = True) -> dict[str, Path]:
    """Write ``subscriptions.parquet``, ``messages.parquet`` and ``weights.parquet``.

    The three files are written atomically as a group: either all appear (replacing any
    earlier ones) or none changes.
    """
    out = Path(out_dir)
    paths = {"subscriptions": out / "subscriptions.parquet",
             "messages": out / "messages.parquet",
             "weights": out / "weights.parquet"}
    write_tables({
        paths["subscriptions"]: subscriptions_table(workload.subscriptions, network=network,
                                                    weights=workload.weights, lonlat=lonlat),
        paths["messages"]: messages_table(workload.messages, network=network,
                                          weights=workload.weights, lonlat=lonlat),
        paths["weights"]: weights_table(workload.weights),
    })
    return paths


def keyword_histogram(kw_ptr: npt.NDArray[np.int64]) -> dict[int, int]:
    """Number of rows per keyword count, e.g. ``{1: 120, 2: 98, ...}`` (zero counts left out)."""
    counts = np.bincount(np.diff(kw_ptr))
    return {int(k): int(c) for k, c in enumerate(counts) if c}
