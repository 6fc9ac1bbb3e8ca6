"""Road networks: graphs, edge points, cells and exact network distances (metres)."""

from roadnet.jit import refresh_kernel_caches

refresh_kernel_caches()  # before any kernel module loads a cached kernel

from roadnet.errors import (  # noqa: E402
    InvalidLocationError,
    NetworkFormatError,
    UnsupportedNetworkFormatError,
)
from roadnet.locations import EdgePoints  # noqa: E402, locate_lonlat, locate_uv, locate_xy, point_xy
from roadnet.network import RoadNetwork  # noqa: E402

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
