"""Subscription rows mixing points, routes and areas on a real network, for the CLI's and
the Spark job's route tests (the same draw, so both exercise the same shapes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from pyproj import Transformer

from roadpubsub.roadnet.locations import EdgePoints, point_xy
from roadpubsub.roadnet.network import RoadNetwork


def lonlat(net: RoadNetwork, points: EdgePoints) -> np.ndarray:
    """The lon/lat of edge points (n x 2)."""
    xy = point_xy(net, points)
    tr = Transformer.from_crs(net.crs, "EPSG:4326", always_xy=True)
    return np.column_stack(tr.transform(xy[:, 0], xy[:, 1]))


def point_drawer(net: RoadNetwork, rng: np.random.Generator) -> Callable[[int], EdgePoints]:
    """Draws k points on the edges of the network's largest component."""
    labels = net.components()[1]
    main_edges = np.flatnonzero(labels[net.edge_u] == np.bincount(labels).argmax())

    def points(k: int) -> EdgePoints:
        e = rng.choice(main_edges, k)
        return EdgePoints.of(e, rng.random(k) * net.edge_length[e])

    return points


def mixed_rows(net: RoadNetwork, rng: np.random.Generator,
               points: Callable[[int], EdgePoints], vocab: list[str], *, n: int, tau: float,
               dmax: float) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """``n`` rows, threshold and boolean in turn: every third a route through 2-6
    waypoints, some an area (a Polygon or a MultiPolygon around a point), the rest points;
    and each route's waypoints (lon/lat)."""
    rows: list[dict[str, Any]] = []
    ll = lonlat(net, points(n))
    route_ll: list[np.ndarray] = []
    for i in range(n):
        row: dict[str, Any] = {
            "id": 1000 + i, "keywords": list(rng.choice(vocab, 2, replace=False)),
            "kind": "boolean" if i % 2 else "threshold",
            "alpha": None if i % 2 else 0.5, "tau": None if i % 2 else tau,
            "radius": float(rng.uniform(100, dmax)) if i % 2 else None,
            "lon": float(ll[i, 0]), "lat": float(ll[i, 1]), "geometry": None}
        if i % 3 == 1:
            wp = lonlat(net, points(int(rng.integers(2, 7))))
            route_ll.append(wp)
            row["geometry"] = json.dumps({"type": "LineString", "coordinates": wp.tolist()})
            row["lon"] = row["lat"] = None
        elif i % 9 == 2:
            x, y = ll[i]
            h = 0.003
            ring = [[x - h, y - h], [x + h, y - h], [x + h, y + h], [x - h, y + h],
                    [x - h, y - h]]
            geom = ({"type": "Polygon", "coordinates": [ring]} if i % 2 else
                    {"type": "MultiPolygon", "coordinates": [[ring]]})
            row["geometry"] = json.dumps(geom)
            row["lon"] = row["lat"] = None
        rows.append(row)
    return rows, route_ll
