"""Algorithm 2, the verification phase (paper Sec. VI-B).

One Dijkstra-like expansion from the message's location on the reversed arcs (so that it
measures distances *to* the message), bounded by the largest distance any candidate could
still be delivered at, and stopped as soon as every node a candidate leaves by is settled.
A candidate's distance is then exact whenever it is within that bound; beyond it the
candidate cannot be delivered and gets ``inf``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from roadnet.distance import NodeSearch, entry_costs, exit_costs, point_distances_to_target
from roadnet.locations import EdgePoints

__all__ = ["verify_distances"]


def verify_distances(
    search: NodeSearch,
    message: EdgePoints,
    candidates: EdgePoints,
    *,
    limit_m: float,
) -> tuple[npt.NDArray[np.float64], int]:
    """Exact network distances (metres) from candidate locations to the message.

    Parameters
    ----------
    search
        A reverse :class:`NodeSearch` of the network (reused across messages).
    message
        The message's location (one edge point).
    candidates
        Candidate subscriptions' locations.
    limit_m
        Largest distance of interest; farther candidates get ``inf``.

    Returns
    -------
    (distances, vertices settled)
    """
    network = search.network
    a, ca, b, cb = entry_costs(network, message)
    seeds = np.r_[a, b]
    seed_cost = np.r_[ca, cb]
    if len(candidates) == 0:
        return np.empty(0), 0
    xa, _, xb, cxb = exit_costs(network, candidates)
    targets = np.unique(np.concatenate([xa, xb[np.isfinite(cxb)]]))
    res = search.run(seeds[np.isfinite(seed_cost)], seed_cost[np.isfinite(seed_cost)],
                     limit=limit_m, targets=targets)
    dist = point_distances_to_target(network, res.dist, message, candidates, limit=limit_m)
    return dist, res.n_settled
