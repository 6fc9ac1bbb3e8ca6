"""WGS84 positions for the live map: the roads as GeoJSON, messages as lon/lat."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
from pyproj import CRS, Transformer

from roadpubsub.roadnet.locations import EdgePoints, point_xy
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["lonlat_of", "roads_geojson"]


@functools.lru_cache(maxsize=8)
def _to_wgs84(crs: str) -> Transformer:
    return Transformer.from_crs(CRS.from_user_input(crs), CRS.from_epsg(4326), always_xy=True)


def lonlat_of(network: RoadNetwork, points: EdgePoints) -> npt.NDArray[np.float64]:
    """(k, 2) lon/lat degrees of edge points."""
    xy = point_xy(network, points)
    lon, lat = _to_wgs84(str(network.crs)).transform(xy[:, 0], xy[:, 1])
    return np.column_stack([lon, lat])


def roads_geojson(network: RoadNetwork) -> dict[str, Any]:
    """Every edge's polyline in lon/lat (one MultiLineString feature: the map needs no
    attributes, and one feature keeps the document small)."""
    xy = network.geom_xy
    lon, lat = _to_wgs84(str(network.crs)).transform(xy[:, 0], xy[:, 1])
    # rounded to about a centimetre: the page draws pixels
    pts = np.round(np.column_stack([lon, lat]), 7).tolist()
    ptr = network.geom_ptr.tolist()
    lines = [pts[a:b] for a, b in itertools.pairwise(ptr)]
    return {"type": "FeatureCollection", "features": [{
        "type": "Feature", "properties": {"name": network.name, "edges": len(lines)},
        "geometry": {"type": "MultiLineString", "coordinates": lines}}]}
