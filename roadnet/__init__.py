"""Road networks: graphs, edge points, cells and exact network distances (metres)."""

from roadnet.errors import (
    InvalidLocationError,
    NetworkFormatError,
    UnsupportedNetworkFormatError,
)
from roadnet.locations import EdgePoints, locate_lonlat, locate_uv, locate_xy, point_xy
from roadnet.network import RoadNetwork

__all__ = [
    "EdgePoints",
    "InvalidLocationError",
    "NetworkFormatError",
    "RoadNetwork",
    "UnsupportedNetworkFormatError",
    "locate_lonlat",
    "locate_uv",
    "locate_xy",
    "point_xy",
]
