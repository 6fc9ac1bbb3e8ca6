"""Rows grouped by the road edge they lie on, looked up by what a reverse search reached.

The reference matchers' candidate rule: a row (a subscription, or a piece of a route or
area) can be within the search's limit of a message only if it lies on the message's own
edge or on an edge with a reached end node. :class:`EdgeRows` returns exactly those rows,
each once, so every reference matcher shares one lookup instead of rebuilding it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["EdgeRows", "csr_gather"]

IntArray = npt.NDArray[np.int64]


def csr_gather(ptr: IntArray, values: IntArray, keys: IntArray) -> IntArray:
    """Concatenation of ``values[ptr[k]:ptr[k + 1]]`` for every k in ``keys``.

    Examples
    --------
    >>> import numpy as np
    >>> csr_gather(np.array([0, 2, 3]), np.array([7, 8, 9]), np.array([1, 0])).tolist()
    [9, 7, 8]
    """
    starts = ptr[keys]
    lengths = ptr[keys + 1] - starts
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=values.dtype)
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return values[np.arange(total) + offsets]


class EdgeRows:
    """Row numbers grouped by edge, with the edges incident to each node.

    Parameters
    ----------
    network : RoadNetwork
        The network the rows lie on.
    edge : ndarray of int
        Per row, its edge index (0 to ``network.n_edges - 1``; checked by the caller's
        location validation).
    """

    def __init__(self, network: RoadNetwork, edge: npt.NDArray[np.integer]) -> None:
        edge = np.asarray(edge, dtype=np.int64)
        self.rows: IntArray = np.argsort(edge, kind="stable").astype(np.int64)
        self.edge_ptr = np.zeros(network.n_edges + 1, dtype=np.int64)
        np.cumsum(np.bincount(edge, minlength=network.n_edges), out=self.edge_ptr[1:])
        # Edges incident to each node (a self-loop once).
        eu = network.edge_u.astype(np.int64)
        ev = network.edge_v.astype(np.int64)
        e = np.arange(network.n_edges, dtype=np.int64)
        loop = eu == ev
        inc_node = np.concatenate([eu, ev[~loop]])
        inc_edge = np.concatenate([e, e[~loop]])
        order = np.argsort(inc_node, kind="stable")
        self.inc_edge: IntArray = inc_edge[order]
        self.node_ptr = np.zeros(network.n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(inc_node, minlength=network.n_nodes), out=self.node_ptr[1:])
        self.eu, self.ev = eu, ev

    def near(self, dist: npt.NDArray[np.float64], touched: IntArray,
             message_edge: int) -> IntArray:
        """Rows on the message's edge or on an edge with a reached end, each once.

        Parameters
        ----------
        dist : ndarray of float64
            The reverse search's distances per node (metres, ``inf`` where not reached).
        touched : ndarray of int64
            The nodes the search reached.
        message_edge : int
            The message's edge index.
        """
        inc = csr_gather(self.node_ptr, self.inc_edge, touched)
        owner = np.repeat(touched, self.node_ptr[touched + 1] - self.node_ptr[touched])
        # Take each edge once: from its u if u was reached, else from its v.
        once = (owner == self.eu[inc]) | ~np.isfinite(dist[self.eu[inc]])
        edges = inc[once]
        if not (np.isfinite(dist[self.eu[message_edge]])
                or np.isfinite(dist[self.ev[message_edge]])):
            edges = np.append(edges, message_edge)
        return csr_gather(self.edge_ptr, self.rows, edges)
