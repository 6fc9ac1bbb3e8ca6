"""The matcher registry: index names (``--index``) mapped to matcher factories.

A factory is called as ``factory(network, subs, weights, *, dmax_m)`` and returns an
object with ``match(messages) -> Deliveries``. Other index architectures register by
adding an entry to :data:`MATCHERS`.
"""

from __future__ import annotations

from typing import Protocol

from index.model import Messages, Subscriptions
from index.terms import TermWeights
from pruning.brute import BruteMatcher
from pruning.deliveries import Deliveries
from roadnet.network import RoadNetwork

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


#: Index name -> factory.
MATCHERS: dict[str, MatcherFactory] = {"brute": BruteMatcher}


def build_matcher(name: str, network: RoadNetwork, subs: Subscriptions,
                  weights: TermWeights, *, dmax_m: float) -> Matcher:
    """Build the matcher registered as ``name``.

    Raises
    ------
    ValueError
        No matcher has that name.
    """
    factory = MATCHERS.get(name)
    if factory is None:
        msg = f"unknown index {name!r}; choose one of {', '.join(sorted(MATCHERS))}"
        raise ValueError(msg)
    return factory(network, subs, weights, dmax_m=dmax_m)
