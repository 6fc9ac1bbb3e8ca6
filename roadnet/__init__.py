"""Road networks: graphs, edge points, cells and exact network distances (metres).

The public API is the union of the modules' ``__all__``: ``from roadpubsub.roadnet import
load_network, locate_lonlat, RoadNetwork`` and so on. Settings (:mod:`roadpubsub.roadnet.settings`)
and the error base (:mod:`roadpubsub.roadnet.errors`) sit here because every layer above uses them.

Examples
--------
>>> from roadpubsub import roadnet
>>> net = roadnet.load_network(roadnet.shared_data_dir() / "dimacs" / "rome.gr.gz")
... # doctest: +SKIP
"""

from roadpubsub.roadnet.jit import use_kernel_cache

use_kernel_cache()  # before any kernel module defines a cached kernel

# The order follows the layers inside the package: later modules import earlier ones.
from roadpubsub.roadnet import (  # noqa: E402
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
from roadpubsub.roadnet.cell_bounds import *  # noqa: E402, F403
from roadpubsub.roadnet.cells import *  # noqa: E402, F403
from roadpubsub.roadnet.chains import *  # noqa: E402, F403
from roadpubsub.roadnet.dijkstra_kernels import *  # noqa: E402, F403
from roadpubsub.roadnet.distance import *  # noqa: E402, F403
from roadpubsub.roadnet.errors import *  # noqa: E402, F403
from roadpubsub.roadnet.files import *  # noqa: E402, F403
from roadpubsub.roadnet.io import *  # noqa: E402, F403
from roadpubsub.roadnet.lengths import *  # noqa: E402, F403
from roadpubsub.roadnet.locations import *  # noqa: E402, F403
from roadpubsub.roadnet.network import *  # noqa: E402, F403
from roadpubsub.roadnet.osm import *  # noqa: E402, F403
from roadpubsub.roadnet.osm_files import *  # noqa: E402, F403
from roadpubsub.roadnet.segment_sets import *  # noqa: E402, F403
from roadpubsub.roadnet.settings import *  # noqa: E402, F403

#: The modules whose ``__all__`` make the package's API.
API_MODULES = (errors, settings, lengths, files, network, locations, dijkstra_kernels,
               distance, chains, cells, cell_bounds, osm, osm_files, io, segment_sets)

__all__ = sorted({name for module in API_MODULES for name in module.__all__})
