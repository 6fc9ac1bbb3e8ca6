"""Subscription indexes: terms and weights, columnar subscriptions and messages, text
limits (TSIMlimit, LAP, TUB, DNUB), BIA and EIA, and their files.

The public API is the union of the modules' ``__all__``::

    from index import EnhancedIndex, SpatialIndex, generate_workload, read_subscriptions
"""

from index import (
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
from index.base import *  # noqa: F403
from index.bia import *  # noqa: F403
from index.boolean import *  # noqa: F403
from index.csr import *  # noqa: F403
from index.delta import *  # noqa: F403
from index.eia import *  # noqa: F403
from index.events import *  # noqa: F403
from index.geofiles import *  # noqa: F403
from index.index_file import *  # noqa: F403
from index.io import *  # noqa: F403
from index.kinds import *  # noqa: F403
from index.kinds_io import *  # noqa: F403
from index.limits import *  # noqa: F403
from index.model import *  # noqa: F403
from index.pois import *  # noqa: F403
from index.postings import *  # noqa: F403
from index.rows import *  # noqa: F403
from index.slot_record import *  # noqa: F403
from index.spatial import *  # noqa: F403
from index.store import *  # noqa: F403
from index.tables import *  # noqa: F403
from index.terms import *  # noqa: F403
from index.text import *  # noqa: F403
from index.topk import *  # noqa: F403
from index.validate import *  # noqa: F403
from index.workload import *  # noqa: F403

#: The modules whose ``__all__`` make the package's API.
API_MODULES = (terms, text, csr, model, geofiles, tables, rows, io, kinds, kinds_io, limits,
               postings, spatial, slot_record, validate, delta, index_file, base, bia, eia,
               events, store, pois, workload, boolean, topk)

__all__ = sorted({name for module in API_MODULES for name in module.__all__})
