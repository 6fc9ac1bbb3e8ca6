"""Shared fixtures of the matcher tests: real networks, workloads in a small region, and an
independent networkx reference of the whole PSTPSN definition.

Real data lives in ``../shared/data`` beside the checkout (``ROADPUBSUB_SHARED_DATA``
overrides it); tests that need a missing file are skipped with the path in the reason.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np
import pytest
from split_graph import split_graph

from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

#: (message id, subscription id) -> (distance in metres, score)
Reference = dict[tuple[int, int], tuple[float, float]]


# ----------------------------------------------------------------------------- reference
def reference_match(network: RoadNetwork, subs: Subscriptions, messages: Messages,
                    weights: TermWeights, *, dmax_m: float,
                    node_mask: np.ndarray | None = None) -> Reference:
    """PSTPSN deliveries computed independently of the project's distance code.

    Every subscription and message point becomes a node of a networkx DiGraph splitting
    its edge; distances to each message come from ``nx.single_source_dijkstra`` on the
    reversed graph, and SIM is computed in plain Python from keyword strings.
    ``node_mask`` keeps only edges whose both ends are selected (a region of a big network;
    exact for every pair whose true distance is at most Dmax when the region holds every
    path of that length).
    """
    n_sub = len(subs)
    on_edge: dict[int, list[tuple[float, object]]] = {}
    for i in range(n_sub):
        on_edge.setdefault(int(subs.points.edge[i]), []).append(
            (float(subs.points.offset[i]), ("s", i)))
    for j in range(len(messages)):
        on_edge.setdefault(int(messages.points.edge[j]), []).append(
            (float(messages.points.offset[j]), ("m", j)))
    graph = split_graph(network, on_edge, node_mask=node_mask)
    reverse = graph.reverse(copy=False)
    w_of = dict(zip(weights.terms, weights.weights.tolist(), strict=True))
    sub_kw = [{weights.terms[t] for t in subs.keywords(i)} for i in range(n_sub)]
    out: Reference = {}
    for j in range(len(messages)):
        m_kw = {weights.terms[t] for t in messages.keywords(j)}
        node = ("m", j)
        if node not in graph:
            continue
        dist = nx.single_source_dijkstra_path_length(reverse, node, cutoff=dmax_m * 1.001)
        for i in range(n_sub):
            d = dist.get(("s", i))
            if d is None or d > dmax_m:
                continue
            total = sum(w_of[t] for t in sub_kw[i])
            common = sum(w_of[t] for t in sub_kw[i] & m_kw)
            alpha = float(subs.alpha[i])
            sim = alpha * (1 - d / dmax_m) + (1 - alpha) * common / total
            if sim >= float(subs.tau[i]) - 1e-9:
                out[(int(messages.ids[j]), int(subs.ids[i]))] = (d, sim)
    return out


@pytest.fixture(scope="session")
def reference() -> Callable[..., Reference]:
    """The networkx reference matcher (see :func:`reference_match`)."""
    return reference_match


# ----------------------------------------------------------------------------- workloads
VOCAB = ("discount", "iphone", "ipad", "ebook", "coffee", "pizza", "museum", "parking")


def region_workload(network: RoadNetwork, rng: np.random.Generator, *, n_subs: int,
                    n_messages: int, radius_m: float
                    ) -> tuple[Subscriptions, Messages, TermWeights, np.ndarray]:
    """Points on edges within ``radius_m`` of a random node of the largest component,
    keywords from a small vocabulary (so many pairs match). Returns the subscriptions,
    messages, weights and the region's centre (x, y metres)."""
    _, labels = network.components()
    big = np.flatnonzero(labels == np.bincount(labels).argmax())
    centre_node = int(rng.choice(big))
    centre = np.array([network.node_x[centre_node], network.node_y[centre_node]])
    r = np.hypot(network.node_x - centre[0], network.node_y - centre[1])
    inside = r <= radius_m
    edges = np.flatnonzero(inside[network.edge_u] & inside[network.edge_v])

    def points(k: int) -> EdgePoints:
        e = rng.choice(edges, size=k)
        frac = rng.random(k)
        frac[rng.random(k) < 0.05] = 0.0
        frac[rng.random(k) < 0.05] = 1.0
        return EdgePoints.of(e, frac * network.edge_length[e])

    weights = TermWeights({t: float(w) for t, w in zip(VOCAB, rng.uniform(0.2, 3.0, len(VOCAB)),
                                                       strict=True)})
    sub_kw = [list(rng.choice(VOCAB, size=int(rng.integers(1, 4)), replace=False))
              for _ in range(n_subs)]
    msg_kw = [list(rng.choice(VOCAB, size=int(rng.integers(2, 7)), replace=False))
              for _ in range(n_messages)]
    subs = Subscriptions.from_rows(ids=rng.permutation(n_subs * 3)[:n_subs],
                                   points=points(n_subs), keywords=sub_kw,
                                   alpha=rng.random(n_subs), tau=rng.uniform(0.2, 1.0, n_subs),
                                   weights=weights)
    messages = Messages.from_rows(ids=np.arange(n_messages) + 10_000,
                                  points=points(n_messages), keywords=msg_kw, weights=weights)
    return subs, messages, weights, centre


@pytest.fixture(scope="session")
def make_region_workload() -> Callable[..., tuple[Subscriptions, Messages, TermWeights,
                                                  np.ndarray]]:
    """``make_region_workload(network, rng, n_subs=, n_messages=, radius_m=)``."""
    return region_workload
