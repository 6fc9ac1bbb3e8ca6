"""Matching: SIM (Eqs. 1-2), the reference matcher, Algorithms 1 and 2, and the matchers
that put them together.

The public API is the union of the modules' ``__all__``::

    from roadpubsub.pruning import IndexMatcher, BruteMatcher, MixedMatcher, build_matcher
"""

from roadpubsub.pruning import (
    algorithm1,
    algorithm2,
    boolean,
    brute,
    deliveries,
    edge_rows,
    expiry,
    indexed,
    kernel_args,
    kinds_reference,
    lanes,
    live_kinds,
    live_topk,
    matchers,
    mixed,
    routing,
    set_locations,
    set_matchers,
    set_search,
    similarity,
    topk,
    topk_buffers,
    topk_events,
    topk_kernels,
)
from roadpubsub.pruning.algorithm1 import *  # noqa: F403
from roadpubsub.pruning.algorithm2 import *  # noqa: F403
from roadpubsub.pruning.boolean import *  # noqa: F403
from roadpubsub.pruning.brute import *  # noqa: F403
from roadpubsub.pruning.deliveries import *  # noqa: F403
from roadpubsub.pruning.edge_rows import *  # noqa: F403
from roadpubsub.pruning.expiry import *  # noqa: F403
from roadpubsub.pruning.indexed import *  # noqa: F403
from roadpubsub.pruning.kernel_args import *  # noqa: F403
from roadpubsub.pruning.kinds_reference import *  # noqa: F403
from roadpubsub.pruning.lanes import *  # noqa: F403
from roadpubsub.pruning.live_kinds import *  # noqa: F403
from roadpubsub.pruning.live_topk import *  # noqa: F403
from roadpubsub.pruning.matchers import *  # noqa: F403
from roadpubsub.pruning.mixed import *  # noqa: F403
from roadpubsub.pruning.routing import *  # noqa: F403
from roadpubsub.pruning.set_locations import *  # noqa: F403
from roadpubsub.pruning.set_matchers import *  # noqa: F403
from roadpubsub.pruning.set_search import *  # noqa: F403
from roadpubsub.pruning.similarity import *  # noqa: F403
from roadpubsub.pruning.topk import *  # noqa: F403
from roadpubsub.pruning.topk_buffers import *  # noqa: F403
from roadpubsub.pruning.topk_events import *  # noqa: F403
from roadpubsub.pruning.topk_kernels import *  # noqa: F403

#: The modules whose ``__all__`` make the package's API.
API_MODULES = (similarity, deliveries, edge_rows, brute, routing, algorithm1, algorithm2,
               kernel_args, lanes, indexed, matchers, topk_events, kinds_reference, boolean,
               topk_buffers, topk_kernels, topk, live_kinds, live_topk, set_locations, expiry,
               set_search, set_matchers, mixed)

__all__ = sorted({name for module in API_MODULES for name in module.__all__})
