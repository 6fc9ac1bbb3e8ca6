"""The matcher registry: index names (``--index``) mapped to matcher factories.

A factory is called as ``factory(network, subs, weights, *, dmax_m)`` and returns an
object with ``match(messages) -> Deliveries``. Other index architectures register by
adding an entry to :data:`MATCHERS`.
"""

from __future__ import annotations

from typing import Protocol

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.brute import BruteMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["MATCHERS", "Matcher", "MatcherFactory", "build_matcher"]


class Matcher(Protocol):
    """Matches batches of messages against the subscriptions it was built on."""

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id)."""
        ...


class MatcherFactory(Protocol):
    """Builds a matcher over a network, subscriptions and weights, for one Dmax (metres)."""

    def __call__(self, network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
                 dmax_m: float) -> Matcher: ...


def _indexed(architecture: type[SubscriptionIndex], network: RoadNetwork,
             subs: Subscriptions, weights: TermWeights, *, dmax_m: float,
             spatial: SpatialIndex | None = None, threads: int | None = None,
             tolerance: float = DEFAULTS.score_tolerance) -> IndexMatcher:
    """Prune-then-verify matching over a freshly built BIA or EIA (see roadpubsub.pruning.indexed);
    ``spatial``: cells and bounds to reuse (e.g. a table precomputed on Spark), built when
    omitted."""
    index = architecture(spatial or SpatialIndex.build(network), subs, weights,
                         dmax_m=dmax_m, tolerance=tolerance)
    return IndexMatcher(index, threads=threads)


def _eia(network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
         dmax_m: float) -> Matcher:
    return _indexed(EnhancedIndex, network, subs, weights, dmax_m=dmax_m)


def _bia(network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
         dmax_m: float) -> Matcher:
    return _indexed(BasicIndex, network, subs, weights, dmax_m=dmax_m)


#: Index name -> factory.
MATCHERS: dict[str, MatcherFactory] = {"brute": BruteMatcher, "bia": _bia, "eia": _eia}
# The registered indexes, which can reuse a SpatialIndex and take a thread count.
_INDEXED: dict[str, type[SubscriptionIndex]] = {"bia": BasicIndex, "eia": EnhancedIndex}


def build_matcher(name: str, network: RoadNetwork, subs: Subscriptions,
                  weights: TermWeights, *, dmax_m: float,
                  spatial: SpatialIndex | None = None, threads: int | None = None,
                  tolerance: float = DEFAULTS.score_tolerance) -> Matcher:
    """Build the matcher registered as ``name``.

    ``spatial`` (cells and bounds built once and shared, e.g. with the boolean and top-k
    indexes of a mixed run), ``threads`` (per batch; default: every core) and
    ``tolerance`` (the score tolerance of the index's bounds, as for
    :class:`~roadpubsub.index.base.SubscriptionIndex`) are handed to the indexes (eia, bia: an
    :class:`~roadpubsub.pruning.indexed.IndexMatcher`); the other matchers (brute) take none.

    Raises
    ------
    ValueError
        No matcher has that name.
    """
    factory = MATCHERS.get(name)
    if factory is None:
        msg = f"unknown index {name!r}; choose one of {', '.join(sorted(MATCHERS))}"
        raise InputError(msg)
    if name in _INDEXED:
        return _indexed(_INDEXED[name], network, subs, weights, dmax_m=dmax_m,
                        spatial=spatial, threads=threads, tolerance=tolerance)
    return factory(network, subs, weights, dmax_m=dmax_m)
