"""Workloads of the benchmarks: the keyword source, the network and its cells, and the
keyword-count pools of the |s.key| and |m.key| sweeps."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from roadpubsub.bench.config import KeywordSource
from roadpubsub.networks import auto_capacity, auto_dmax, resolve_network
from roadpubsub.progress import Steps
from roadpubsub.roadnet.errors import InputError, MissingDataError

if TYPE_CHECKING:
    from roadpubsub.index.model import Messages, Subscriptions
    from roadpubsub.index.pois import POIs
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.roadnet.network import RoadNetwork

__all__ = [
    "Prepared",
    "WorkloadSource",
    "load_source",
    "pool_messages",
    "pool_subscriptions",
    "prepare",
    "subsample_keywords",
    "with_keywords",
    "with_params",
]


@dataclass
class WorkloadSource:
    """What :func:`roadpubsub.index.workload.generate_workload` needs for one keyword source, loaded
    once (tweet documents or the network's POIs)."""

    keywords_from: KeywordSource
    documents: list[list[str]] | None = None
    pois: POIs | None = None
    description: dict[str, Any] = field(default_factory=dict)

    def generate(self, network: RoadNetwork, *, n_subscriptions: int, n_messages: int,
                 seed: int, alpha: float = 0.5, alpha_spread: float = 0.1, tau: float = 0.7,
                 tau_spread: float = 0.1) -> tuple[Subscriptions, Messages, TermWeights]:
        from roadpubsub.index.workload import generate_workload

        wl = generate_workload(
            network, n_subscriptions=n_subscriptions, n_messages=n_messages, seed=seed,
            keywords_from=self.keywords_from, locations="uniform", alpha=alpha,
            alpha_spread=alpha_spread, tau=tau, tau_spread=tau_spread,
            tweets=self.documents, pois=self.pois)
        return wl.subscriptions, wl.messages, wl.weights


def load_source(network: RoadNetwork, network_path: Path, keywords_from: str | None,
                tweets: str | None) -> WorkloadSource:
    """The keyword source: tweets when the corpus exists (or is asked for), else the
    network file's POIs."""
    from roadpubsub.index.pois import find_poi_source, load_pois
    from roadpubsub.index.text import read_tweet_tokens
    from roadpubsub.index.workload import default_tweets_path

    tweet_path = Path(tweets) if tweets else default_tweets_path()
    if keywords_from is None:
        keywords_from = "tweets" if tweet_path.exists() else "pois"
    if keywords_from == "tweets":
        if not tweet_path.exists():
            msg = f"tweet corpus not found: {tweet_path}"
            raise MissingDataError(msg, hint="pass --tweets PATH, or --keywords-from pois "
                                             "with an OSM network")
        docs = [list(d) for d in read_tweet_tokens(tweet_path)]
        return WorkloadSource("tweets", documents=docs,
                       description={"keywords_from": "tweets", "tweets_file": str(tweet_path),
                                    "documents": len(docs)})
    poi_source = find_poi_source(network_path)
    if poi_source is None:
        msg = (f"network {network_path.name} comes with no POIs and the tweet corpus "
               f"{tweet_path} is absent")
        raise MissingDataError(msg, hint="pass --tweets PATH, or use an OSM network")
    pois = load_pois(network, poi_source)
    return WorkloadSource("pois", pois=pois,
                   description={"keywords_from": "pois", "poi_file": str(poi_source),
                                "documents": len(pois)})


def subsample_keywords(
    ptr: npt.NDArray[np.int64],
    terms: npt.NDArray[np.int32],
    counts: Sequence[int],
    rng: np.random.Generator,
) -> dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]]:
    """Nested random keyword subsets of exactly k keywords per row, for each k in ``counts``.

    Every row must hold at least ``max(counts)`` keywords. One random order of each row's
    keywords is drawn, and the subset of size k is its first k (so smaller subsets are
    inside larger ones). Each result row is sorted by term id, as the model requires.

    Parameters
    ----------
    ptr, terms
        Keyword CSR of the rows.
    counts
        Subset sizes.
    rng
        Random generator.

    Returns
    -------
    dict
        k -> (ptr, terms) CSR with exactly k keywords per row.
    """
    lengths = np.diff(ptr)
    n = lengths.size
    kmax = max(counts)
    if n and int(lengths.min()) < kmax:
        msg = f"every row needs at least {kmax} keywords; the shortest has {lengths.min()}"
        raise InputError(msg)
    width = int(lengths.max()) if n else 0
    keys = rng.random((n, width))
    keys[np.arange(width)[None, :] >= lengths[:, None]] = 2.0
    order = np.argsort(keys, axis=1, kind="stable")[:, :kmax]
    out: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]] = {}
    for k in counts:
        chosen = terms[ptr[:-1, None] + order[:, :k]]
        chosen.sort(axis=1)
        out[int(k)] = (np.arange(n + 1, dtype=np.int64) * k, chosen.reshape(-1).astype(np.int32))
    return out


def _long_rows(make: Callable[[int, int], tuple[npt.NDArray[np.int64], Any]], need: int,
               kmin: int, rng: np.random.Generator, *, per_row: float) -> tuple[Any, int]:
    """Collect ``need`` generated rows with at least ``kmin`` keywords.

    ``make(n, seed_offset)`` generates ``n`` rows and returns (row lengths, batch). Batches
    grow as needed, up to 12 tries; then the rows found are drawn again with replacement.
    Returns (list of (batch, rows) parts, number of distinct rows).
    """
    parts: list[tuple[Any, npt.NDArray[np.int64]]] = []
    found = 0
    for attempt in range(12):
        remaining = need - found
        size = int(min(max(math.ceil(remaining * per_row * 1.3), 1_000), 4_000_000))
        lengths, batch = make(size, attempt)
        rows = np.flatnonzero(lengths >= kmin)[:remaining]
        if rows.size:
            parts.append((batch, rows))
            found += int(rows.size)
        if found >= need:
            break
    if found == 0:
        msg = f"no generated row holds {kmin} keywords; lower the sweep's largest value"
        raise InputError(msg)
    if found < need:
        # Too few long rows (short POI descriptions): repeat the ones found.
        extra = rng.integers(0, found, need - found)
        offsets = np.cumsum([0] + [r.size for _, r in parts])
        extra_parts = []
        for (batch, rows), lo, hi in zip(parts, offsets[:-1], offsets[1:], strict=True):
            pick = extra[(extra >= lo) & (extra < hi)] - lo
            if pick.size:
                extra_parts.append((batch, rows[pick]))
        parts += extra_parts
    return parts, found


def _gather(parts: list[tuple[Any, npt.NDArray[np.int64]]]) -> dict[str, Any]:
    """Rows of several batches (rows may repeat) as plain columns, without the ids."""
    edge, offset, lengths, terms, alpha, tau = [], [], [], [], [], []
    for batch, rows in parts:
        edge.append(batch.points.edge[rows])
        offset.append(batch.points.offset[rows])
        start, stop = batch.kw_ptr[rows], batch.kw_ptr[rows + 1]
        lengths.append(stop - start)
        total = int((stop - start).sum())
        first = np.repeat(start - (np.cumsum(stop - start) - (stop - start)), stop - start)
        terms.append(batch.kw_terms[np.arange(total) + first])
        if hasattr(batch, "alpha"):
            alpha.append(batch.alpha[rows])
            tau.append(batch.tau[rows])
    length = np.concatenate(lengths)
    ptr = np.zeros(length.size + 1, dtype=np.int64)
    np.cumsum(length, out=ptr[1:])
    return {"edge": np.concatenate(edge).astype(np.int32),
            "offset": np.concatenate(offset).astype(np.float64),
            "kw_ptr": ptr, "kw_terms": np.concatenate(terms).astype(np.int32),
            "alpha": np.concatenate(alpha) if alpha else None,
            "tau": np.concatenate(tau) if tau else None}


def _pool(source: WorkloadSource, network: RoadNetwork, need: int, kmin: int, seed: int, *,
          messages: bool) -> tuple[dict[str, Any], int]:
    """Columns of ``need`` generated rows with at least ``kmin`` keywords, and how many
    distinct rows they hold (subscriptions, or messages when ``messages``)."""

    def make(n: int, attempt: int) -> tuple[npt.NDArray[np.int64], Any]:
        subs, msgs, _ = source.generate(
            network, n_subscriptions=0 if messages else n, n_messages=n if messages else 0,
            seed=seed + (2000 if messages else 1000) + attempt)
        rows = msgs if messages else subs
        return np.diff(rows.kw_ptr), rows

    # About 1 subscription in 5 asks for 5 keywords (1 message in 20 for 25); a few more
    # are capped by short documents.
    parts, distinct = _long_rows(make, need, kmin,
                                 np.random.default_rng(seed + (2 if messages else 1)),
                                 per_row=25.0 if messages else 6.0)
    return _gather(parts), distinct


def pool_subscriptions(source: WorkloadSource, network: RoadNetwork, need: int, kmin: int,
                       seed: int) -> tuple[Subscriptions, int]:
    """``need`` generated subscriptions with at least ``kmin`` keywords each (ids 0..),
    and how many distinct generated rows they are."""
    from roadpubsub.index.model import Subscriptions
    from roadpubsub.roadnet.locations import EdgePoints

    cols, distinct = _pool(source, network, need, kmin, seed, messages=False)
    n = cols["kw_ptr"].size - 1
    subs = Subscriptions(np.arange(n, dtype=np.int64), EdgePoints(cols["edge"], cols["offset"]),
                         cols["alpha"], cols["tau"], cols["kw_ptr"], cols["kw_terms"])
    return subs, distinct


def pool_messages(source: WorkloadSource, network: RoadNetwork, need: int, kmin: int,
                  seed: int) -> tuple[Messages, int]:
    """``need`` generated messages with at least ``kmin`` keywords each (ids 0..), and how
    many distinct generated rows they are."""
    from roadpubsub.index.model import Messages
    from roadpubsub.roadnet.locations import EdgePoints

    cols, distinct = _pool(source, network, need, kmin, seed, messages=True)
    n = cols["kw_ptr"].size - 1
    msgs = Messages(np.arange(n, dtype=np.int64), EdgePoints(cols["edge"], cols["offset"]),
                    cols["kw_ptr"], cols["kw_terms"])
    return msgs, distinct


def with_keywords(subs: Subscriptions, csr: tuple[npt.NDArray[np.int64],
                                                  npt.NDArray[np.int32]]) -> Subscriptions:
    """``subs`` with the keyword CSR ``csr`` (same rows)."""
    from roadpubsub.index.model import Subscriptions

    return Subscriptions(subs.ids, subs.points, subs.alpha, subs.tau, csr[0], csr[1])


def with_params(subs: Subscriptions, *, alpha: float | None = None,
                tau: float | None = None) -> Subscriptions:
    """``subs`` with every alpha (tau) set to ``alpha`` (``tau``) when given."""
    from roadpubsub.index.model import Subscriptions

    n = len(subs)
    return Subscriptions(subs.ids, subs.points,
                         np.full(n, alpha) if alpha is not None else subs.alpha,
                         np.full(n, tau) if tau is not None else subs.tau,
                         subs.kw_ptr, subs.kw_terms)



@dataclass
class Prepared:
    """What every suite starts from: the network, its cells and bounds, the keyword source.

    Attributes
    ----------
    path
        The network file.
    network, spatial
        The network, and its PMR cells with cell-pair bounds.
    source
        The keyword source of the generated workloads.
    dmax_m
        Dmax in metres.
    cells
        ``capacity``, ``cells_seconds``, ``bounds_seconds``, ``count``,
        ``border_vertices`` (the JSON's ``cells``).
    """

    path: Path
    network: RoadNetwork
    spatial: SpatialIndex
    source: WorkloadSource
    dmax_m: float
    cells: dict[str, Any]


def prepare(network_arg: str | None, keywords_from: str | None, tweets: str | None,
            cell_capacity: int | None, dmax: float | None, steps: Steps) -> Prepared:
    """Load the network and the keyword source, build the cells and bounds (3 steps)."""
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.roadnet.cells import build_cells
    from roadpubsub.roadnet.io import load_network

    path = resolve_network(network_arg)
    with steps.step("load_network", f"loading the road network {path.name}") as info:
        network = load_network(path)
        info["note"] = f"{network.n_nodes:,} nodes, {network.n_edges:,} edges"
    with steps.step("keywords", "reading the keyword source") as info:
        source = load_source(network, path, keywords_from, tweets)
        info["note"] = (f"{source.description['documents']:,} "
                        f"{source.keywords_from}")
    capacity = cell_capacity or auto_capacity(network.n_edges)
    cells_info: dict[str, Any] = {"capacity": capacity}
    with steps.step("spatial", f"PMR cells (capacity {capacity}) and cell-pair bounds") as info:
        t0 = time.perf_counter()
        cells = build_cells(network, capacity=capacity)
        cells_info["cells_seconds"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        with steps.bar(cells.n_cells, "bounds", unit="cell") as bar:
            spatial = SpatialIndex.build(network, cells=cells, progress=bar.update)
        cells_info["bounds_seconds"] = round(time.perf_counter() - t0, 3)
        cells_info["count"] = cells.n_cells
        cells_info["border_vertices"] = int(cells.node_is_border.sum())
        info["note"] = f"{cells.n_cells} cells"
    dmax_m = float(dmax) if dmax is not None else auto_dmax(network)
    return Prepared(path, network, spatial, source, dmax_m, cells_info)
