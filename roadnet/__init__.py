"""Road networks: graphs, edge points, cells and exact network distances (metres).

The public API is the union of the modules' ``__all__``: ``from roadnet import
load_network, locate_lonlat, RoadNetwork`` and so on. Settings (:mod:`roadnet.settings`)
and the error base (:mod:`roadnet.errors`) sit here because every layer above uses them.

Examples
--------
>>> import roadnet
>>> net = roadnet.load_network(roadnet.shared_data_dir() / "dimacs" / "rome.gr.gz")
... # doctest: +SKIP
"""

from roadnet.jit import use_kernel_cache

use_kernel_cache()  # before any kernel module defines a cached kernel

# The order follows the layers inside the package: later modules import earlier ones.
from roadnet import (  # noqa: E402
    cell_bounds,
    cells,
    chains,
    dijkstra_kernels,
    distance,
    errors,
    files,
    io,
    lengths,
    locations,
    network,
    osm,
    osm_files,
    segment_sets,
    settings,
)
from roadnet.cell_bounds import *  # noqa: E402, F403
from roadnet.cells import *  # noqa: E402, F403
from roadnet.chains import *  # noqa: E402, F403
from roadnet.dijkstra_kernels import *  # noqa: E402, F403
from roadnet.distance import *  # noqa: E402, F403
from roadnet.errors import *  # noqa: E402, F403
from roadnet.files import *  # noqa: E402, F403
from roadnet.io import *  # noqa: E402, F403
from roadnet.lengths import *  # noqa: E402, F403
from roadnet.locations import *  # noqa: E402, F403
from roadnet.network import *  # noqa: E402, F403
from roadnet.osm import *  # noqa: E402, F403
from roadnet.osm_files import *  # noqa: E402, F403
from roadnet.segment_sets import *  # noqa: E402, F403
from roadnet.settings import *  # noqa: E402, F403

#: The modules whose ``__all__`` make the package's API.
API_MODULES = (errors, settings, lengths, files, network, locations, dijkstra_kernels,
               distance, chains, cells, cell_bounds, osm, osm_files, io, segment_sets)

__all__ = sorted({name for module in API_MODULES for name in module.__all__})
