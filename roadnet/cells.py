"""PMR quadtree cells over the network's edges (paper Sec. IV, spatial component SI).

Each edge belongs to exactly one leaf cell, chosen by its chord midpoint; a leaf holding
more than ``capacity`` edges splits into four. A cell's *region* is the bounding box of its
edges' polylines, so every edge point of the cell lies inside it (what the Euclidean bounds
need). A *border vertex* of a cell is a node incident to one of its edges and to an edge of
another cell: any path between points of two different cells leaves the first through one
of its border vertices and enters the second through one of its border vertices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["Cells", "build_cells", "edge_bboxes"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Cells:
    """Leaf cells of the PMR quadtree.

    Attributes
    ----------
    edge_cell
        Cell of each edge, int32, shape (m,).
    bbox
        Region of each cell: (xmin, ymin, xmax, ymax) in metres, shape (c, 4).
    quad
        The quadtree square of each leaf (for display), shape (c, 4).
    border_ptr, border_nodes
        Border vertices of cell i: ``border_nodes[border_ptr[i]:border_ptr[i + 1]]``.
    node_is_border
        True for nodes that are a border vertex of some cell.
    """

    edge_cell: npt.NDArray[np.int32]
    bbox: FloatArray
    quad: FloatArray
    border_ptr: IntArray
    border_nodes: IntArray
    node_is_border: npt.NDArray[np.bool_]

    @property
    def n_cells(self) -> int:
        """Number of (non-empty) leaf cells."""
        return int(self.bbox.shape[0])

    def border_of(self, cell: int) -> IntArray:
        """Border vertices (internal node indices) of one cell."""
        return self.border_nodes[self.border_ptr[cell]:self.border_ptr[cell + 1]]

    def to_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """The cells as named arrays (for saving)."""
        return {"edge_cell": self.edge_cell, "bbox": self.bbox, "quad": self.quad,
                "border_ptr": self.border_ptr, "border_nodes": self.border_nodes,
                "node_is_border": self.node_is_border}

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray[np.generic]]) -> Cells:
        """Inverse of :meth:`to_arrays`."""
        return cls(**{k: np.asarray(arrays[k]) for k in
                      ("edge_cell", "bbox", "quad", "border_ptr", "border_nodes",
                       "node_is_border")})


def edge_bboxes(network: RoadNetwork) -> FloatArray:
    """Bounding box (xmin, ymin, xmax, ymax) in metres of each edge's polyline, shape (m, 4)."""
    def build() -> FloatArray:
        starts = network.geom_ptr[:-1]
        gx = network.geom_xy[:, 0]
        gy = network.geom_xy[:, 1]
        return np.column_stack([
            np.minimum.reduceat(gx, starts), np.minimum.reduceat(gy, starts),
            np.maximum.reduceat(gx, starts), np.maximum.reduceat(gy, starts),
        ])

    return network.memo("cells.edge_bboxes", build)


def build_cells(
    network: RoadNetwork,
    *,
    capacity: int = DEFAULTS.cell_capacity,
    max_depth: int = DEFAULTS.cell_max_depth,
) -> Cells:
    """Partition the edges into PMR quadtree leaf cells.

    Parameters
    ----------
    network
        The road network.
    capacity
        A leaf with more edges than this splits in four (>= 1).
    max_depth
        Leaves at this depth never split (guards against piles of coincident edges).

    Returns
    -------
    Cells
        Non-empty leaves in Z-order.
    """
    if capacity < 1:
        msg = f"capacity must be >= 1, got {capacity}"
        raise InputError(msg)
    mx = (network.node_x[network.edge_u] + network.node_x[network.edge_v]) / 2.0
    my = (network.node_y[network.edge_u] + network.node_y[network.edge_v]) / 2.0
    x0, y0 = float(mx.min()), float(my.min())
    side = max(float(mx.max()) - x0, float(my.max()) - y0, 1.0) * (1 + 1e-9)
    edge_cell = np.full(network.n_edges, -1, dtype=np.int32)
    quads: list[tuple[float, float, float, float]] = []
    # Depth-first with children pushed in reverse: leaves come out in Z-order.
    stack: list[tuple[npt.NDArray[np.int64], float, float, float, int]] = [
        (np.arange(network.n_edges), x0, y0, side, 0)]
    while stack:
        edges, qx, qy, qs, depth = stack.pop()
        if edges.size == 0:
            continue
        if edges.size <= capacity or depth >= max_depth:
            edge_cell[edges] = len(quads)
            quads.append((qx, qy, qx + qs, qy + qs))
            continue
        half = qs / 2.0
        right = mx[edges] >= qx + half
        top = my[edges] >= qy + half
        children = [(~right & ~top, qx, qy), (right & ~top, qx + half, qy),
                    (~right & top, qx, qy + half), (right & top, qx + half, qy + half)]
        for mask, cx, cy in reversed(children):
            stack.append((edges[mask], cx, cy, half, depth + 1))

    n_cells = len(quads)
    eb = edge_bboxes(network)
    bbox = np.empty((n_cells, 4))
    for k, fn in enumerate((np.minimum, np.minimum, np.maximum, np.maximum)):
        init = np.inf if k < 2 else -np.inf
        col = np.full(n_cells, init)
        fn.at(col, edge_cell, eb[:, k])
        bbox[:, k] = col

    # Border vertices: nodes whose incident edges lie in more than one cell.
    node = np.concatenate([network.edge_u, network.edge_v]).astype(np.int64)
    cell = np.concatenate([edge_cell, edge_cell]).astype(np.int64)
    pairs = np.unique(node * n_cells + cell)
    pair_node = pairs // n_cells
    pair_cell = pairs % n_cells
    cells_per_node = np.bincount(pair_node, minlength=network.n_nodes)
    is_border = cells_per_node > 1
    keep = is_border[pair_node]
    order = np.lexsort((pair_node[keep], pair_cell[keep]))
    border_nodes = pair_node[keep][order]
    border_cells = pair_cell[keep][order]
    border_ptr = np.zeros(n_cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(border_cells, minlength=n_cells), out=border_ptr[1:])
    return Cells(edge_cell=edge_cell, bbox=bbox, quad=np.asarray(quads, dtype=np.float64),
                 border_ptr=border_ptr, border_nodes=border_nodes, node_is_border=is_border)
