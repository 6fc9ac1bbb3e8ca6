"""The ``roadpubsub demo`` pipeline: real data that ships with the install, end to end.

:func:`run_demo` (module :mod:`roadpubsub.demo.pipeline`) loads a network, builds both
indexes, matches with EIA, BIA and the brute-force reference, and draws one message
(:mod:`roadpubsub.demo.message_map`); :func:`format_summary` prints its summary
(:mod:`roadpubsub.demo.summary`). Defaults that suit a network (:func:`auto_dmax`,
:func:`auto_capacity`, :func:`helsinki_pbf`) live in :mod:`roadpubsub.networks`.
"""

from roadpubsub.demo import message_map as _map
from roadpubsub.demo import pipeline as _pipeline
from roadpubsub.demo import summary as _summary
from roadpubsub.demo.message_map import *  # noqa: F403
from roadpubsub.demo.pipeline import *  # noqa: F403
from roadpubsub.demo.summary import *  # noqa: F403

API_MODULES = (_pipeline, _summary, _map)
__all__ = sorted({name for module in API_MODULES for name in module.__all__})
