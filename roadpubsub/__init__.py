"""roadpubsub: parameterized spatio-textual publish/subscribe on road networks.

The library lives in four layers that import one way only::

    roadnet  <-  index  <-  pruning  <-  spark_jobs, roadpubsub.cli

``roadnet.settings`` holds every tunable default and ``roadnet.errors`` the one error base;
both sit below every layer.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
