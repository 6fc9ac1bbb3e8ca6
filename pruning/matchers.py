"""The matcher registry: index names (``--index``) mapped to matcher factories.

A factory is called as ``factory(network, subs, weights, *, dmax_m)`` and returns an
object with ``match(messages) -> Deliveries``. Other index architectures register by
adding an entry to :data:`MATCHERS`.
"""

from __future__ import annotations

from typing import Protocol

from index.base import SubscriptionIndex
from index.bia import BasicIndex
from index.eia import EnhancedIndex
from index.model import Messages, Subscriptions
from index.spatial import SpatialIndex
from index.terms import TermWeights
from pruning.brute import BruteMatcher
from pruning.deliveries import Deliveries
from pruning.indexed import IndexMatcher, MatchStats
from roadnet.errors import InputError
from roadnet.network import RoadNetwork

__all__ = ["MATCHERS", "ArchitectureMatcher", "LoadedIndexMatcher", "Matcher", "MatcherFactory",
           "build_matcher"]


class Matcher(Protocol):
    """Matches batches of messages against the subscriptions it was built on."""

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id)."""
        ...


class MatcherFactory(Protocol):
    """Builds a matcher over a network, subscriptions and weights, for one Dmax (metres)."""

    def __call__(self, network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
                 dmax_m: float) -> Matcher: ...


class LoadedIndexMatcher:
    """Prune-then-verify matching over an index that already exists (e.g. loaded from a file
    written by :meth:`~index.base.SubscriptionIndex.save`).

    Parameters
    ----------
    index
        An :class:`~index.eia.EnhancedIndex` or :class:`~index.bia.BasicIndex`.
    threads
        Threads per batch (default: every core this process may use).
    """

    def __init__(self, index: SubscriptionIndex, *, threads: int | None = None) -> None:
        self.index = index
        self._matcher = IndexMatcher(index, threads=threads)
        self.stats: MatchStats | None = None

    @property
    def threads(self) -> int:
        """Threads matching one batch (>= 1)."""
        return self._matcher.threads

    @threads.setter
    def threads(self, value: int) -> None:
        if int(value) < 1:
            msg = f"threads must be >= 1, got {value!r}"
            raise InputError(msg)
        self._matcher.threads = int(value)

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id); statistics in ``stats``."""
        deliveries, self.stats = self._matcher.match(messages)
        return deliveries


class ArchitectureMatcher(LoadedIndexMatcher):
    """Prune-then-verify matching over a freshly built BIA or EIA (see pruning.indexed).

    Parameters
    ----------
    network, subs, weights, dmax_m
        As for every matcher.
    architecture
        :class:`~index.eia.EnhancedIndex` or :class:`~index.bia.BasicIndex`.
    spatial
        Cells and bounds to reuse (e.g. a table precomputed on Spark); built when omitted.
    """

    def __init__(self, network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
                 dmax_m: float, architecture: type[SubscriptionIndex],
                 spatial: SpatialIndex | None = None) -> None:
        self.spatial = spatial or SpatialIndex.build(network)
        super().__init__(architecture(self.spatial, subs, weights, dmax_m=dmax_m))


def _eia(network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
         dmax_m: float, spatial: SpatialIndex | None = None) -> Matcher:
    return ArchitectureMatcher(network, subs, weights, dmax_m=dmax_m,
                               architecture=EnhancedIndex, spatial=spatial)


def _bia(network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
         dmax_m: float, spatial: SpatialIndex | None = None) -> Matcher:
    return ArchitectureMatcher(network, subs, weights, dmax_m=dmax_m, architecture=BasicIndex,
                               spatial=spatial)


#: Index name -> factory.
MATCHERS: dict[str, MatcherFactory] = {"brute": BruteMatcher, "bia": _bia, "eia": _eia}
# The registered factories that can reuse a SpatialIndex.
_TAKE_SPATIAL = {"bia": _bia, "eia": _eia}


def build_matcher(name: str, network: RoadNetwork, subs: Subscriptions,
                  weights: TermWeights, *, dmax_m: float,
                  spatial: SpatialIndex | None = None) -> Matcher:
    """Build the matcher registered as ``name``.

    ``spatial`` (cells and bounds built once and shared, e.g. with the boolean and top-k
    indexes of a mixed run) is handed to the indexes that use one (eia, bia); the other
    matchers (brute) do not need it.

    Raises
    ------
    ValueError
        No matcher has that name.
    """
    factory = MATCHERS.get(name)
    if factory is None:
        msg = f"unknown index {name!r}; choose one of {', '.join(sorted(MATCHERS))}"
        raise InputError(msg)
    if spatial is not None and name in _TAKE_SPATIAL:
        return _TAKE_SPATIAL[name](network, subs, weights, dmax_m=dmax_m, spatial=spatial)
    return factory(network, subs, weights, dmax_m=dmax_m)
