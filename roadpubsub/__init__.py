"""roadpubsub: parameterized spatio-textual publish/subscribe on road networks.

The library lives in four layers that import one way only::

    roadnet  <-  index  <-  pruning  <-  spark_jobs, roadpubsub.cli

``roadpubsub.settings`` holds every tunable default and imports nothing of the project.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
