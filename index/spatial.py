"""The network side of both architectures: paper Fig. 2 components (a)-(c).

(a) the spatial component: PMR quadtree cells (:mod:`roadpubsub.roadnet.cells`) and edge regions;
(b) the adjacency component: the network's CSR arcs (:meth:`RoadNetwork.adjacency`);
(c) the distance bounds between each cell pair (:mod:`roadpubsub.roadnet.cell_bounds`).

Built once per network and shared by every subscription index on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.cell_bounds import (
    CellBounds,
    PointTables,
    cell_graph,
    compute_cell_bounds,
    point_facts,
    point_tables,
)
from roadpubsub.roadnet.cells import Cells, build_cells, edge_bboxes
from roadpubsub.roadnet.chains import ChainGraph
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["PointFacts", "SpatialIndex", "astuple_facts"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class PointFacts:
    """What the pruning needs to know of edge points.

    Projected position (metres), cell, border distances (metres) and the point on the
    spatial index's chain graph (chain, metres from its start) for the verification search.
    """

    x: FloatArray
    y: FloatArray
    cell: npt.NDArray[np.int32]
    din_out: FloatArray
    din_in: FloatArray
    chain: npt.NDArray[np.int32]
    chain_offset: FloatArray


def astuple_facts(facts: PointFacts) -> tuple[npt.NDArray[np.generic], ...]:
    """The fields of ``facts`` in declaration order (``PointFacts(*t)`` rebuilds it)."""
    return tuple(getattr(facts, f.name) for f in fields(facts))


@dataclass(frozen=True, eq=False)
class SpatialIndex:
    """Cells, cell-pair bounds and per-edge summaries of one network.

    Attributes
    ----------
    network, cells, bounds
        The road network, its PMR cells and the cell-pair bound table.
    edge_bbox
        Region of each edge (its polyline's bounding box), metres, shape (m, 4).
    edge_din_out
        A lower bound of din_out over the points of each edge: min over its end nodes.
    graph
        The chain graph searches run on (junctions include every border vertex).
    """

    network: RoadNetwork
    cells: Cells
    bounds: CellBounds
    edge_bbox: FloatArray
    edge_din_out: FloatArray
    graph: ChainGraph

    @classmethod
    def build(
        cls,
        network: RoadNetwork,
        *,
        capacity: int = DEFAULTS.cell_capacity,
        cells: Cells | None = None,
        bounds: CellBounds | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> SpatialIndex:
        """Build cells and bounds (or reuse given ones, e.g. a table precomputed on Spark)."""
        cells = cells or build_cells(network, capacity=capacity)
        bounds = bounds or compute_cell_bounds(network, cells, progress=progress)
        if bounds.n_cells != cells.n_cells:
            msg = (f"bound table has {bounds.n_cells} cells but the network has "
                   f"{cells.n_cells}; was it computed with another cell capacity?")
            raise InputError(msg)
        # din_out at any point of an edge is >= the smaller of its end nodes' values.
        edge_din = np.minimum(bounds.din_out[network.edge_u], bounds.din_out[network.edge_v])
        return cls(network=network, cells=cells, bounds=bounds,
                   edge_bbox=edge_bboxes(network), edge_din_out=edge_din,
                   graph=cell_graph(network, cells))

    def facts(self, points: EdgePoints) -> PointFacts:
        """Position, cell and border distances of edge points (one compiled pass, no
        temporaries: a single publish or move pays one call, not a dozen)."""
        return PointFacts(*point_facts(self._point_tables, points))

    @cached_property
    def _point_tables(self) -> PointTables:
        return point_tables(self.graph, self.cells, self.bounds)

    def to_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Cells and bounds as prefixed named arrays (for saving)."""
        out = {f"cells.{k}": v for k, v in self.cells.to_arrays().items()}
        out.update({f"bounds.{k}": v for k, v in self.bounds.to_arrays().items()})
        return out

    @classmethod
    def from_arrays(cls, network: RoadNetwork, arrays: dict[str, npt.NDArray[np.generic]]
                    ) -> SpatialIndex:
        """Inverse of :meth:`to_arrays` for the same network."""
        cells = Cells.from_arrays({k[6:]: v for k, v in arrays.items() if k.startswith("cells.")})
        bounds = CellBounds.from_arrays(
            {k[7:]: v for k, v in arrays.items() if k.startswith("bounds.")})
        if cells.edge_cell.size != network.n_edges:
            msg = "saved cells do not belong to this network (edge counts differ)"
            raise InputError(msg)
        return cls.build(network, cells=cells, bounds=bounds)
