"""Subscription indexes: terms and weights, columnar subscriptions and messages, text
limits (TSIMlimit, LAP, TUB, DNUB), BIA and EIA, and their files.

The public API is the union of the modules' ``__all__``::

    from roadpubsub.index import EnhancedIndex, SpatialIndex, generate_workload, read_subscriptions
"""

from roadpubsub.index import (
    base,
    bia,
    boolean,
    csr,
    delta,
    eia,
    events,
    geofiles,
    index_file,
    io,
    kinds,
    kinds_io,
    limits,
    model,
    pois,
    postings,
    rows,
    set_cells,
    slot_record,
    spatial,
    store,
    tables,
    terms,
    text,
    topk,
    validate,
    workload,
)
from roadpubsub.index.base import *  # noqa: F403
from roadpubsub.index.bia import *  # noqa: F403
from roadpubsub.index.boolean import *  # noqa: F403
from roadpubsub.index.csr import *  # noqa: F403
from roadpubsub.index.delta import *  # noqa: F403
from roadpubsub.index.eia import *  # noqa: F403
from roadpubsub.index.events import *  # noqa: F403
from roadpubsub.index.geofiles import *  # noqa: F403
from roadpubsub.index.index_file import *  # noqa: F403
from roadpubsub.index.io import *  # noqa: F403
from roadpubsub.index.kinds import *  # noqa: F403
from roadpubsub.index.kinds_io import *  # noqa: F403
from roadpubsub.index.limits import *  # noqa: F403
from roadpubsub.index.model import *  # noqa: F403
from roadpubsub.index.pois import *  # noqa: F403
from roadpubsub.index.postings import *  # noqa: F403
from roadpubsub.index.rows import *  # noqa: F403
from roadpubsub.index.set_cells import *  # noqa: F403
from roadpubsub.index.slot_record import *  # noqa: F403
from roadpubsub.index.spatial import *  # noqa: F403
from roadpubsub.index.store import *  # noqa: F403
from roadpubsub.index.tables import *  # noqa: F403
from roadpubsub.index.terms import *  # noqa: F403
from roadpubsub.index.text import *  # noqa: F403
from roadpubsub.index.topk import *  # noqa: F403
from roadpubsub.index.validate import *  # noqa: F403
from roadpubsub.index.workload import *  # noqa: F403

#: The modules whose ``__all__`` make the package's API.
API_MODULES = (terms, text, csr, model, geofiles, tables, rows, io, kinds, kinds_io, limits,
               postings, spatial, slot_record, validate, delta, index_file, base, bia, eia,
               events, store, pois, workload, boolean, topk, set_cells)

__all__ = sorted({name for module in API_MODULES for name in module.__all__})
