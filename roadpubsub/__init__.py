"""roadpubsub: parameterized spatio-textual publish/subscribe on road networks.

The one installed name. The library lives in four layers, subpackages of this one (their
folders sit at the top of the repository, linked here), that import one way only::

    roadpubsub.roadnet  <-  .index  <-  .pruning  <-  .spark_jobs, roadpubsub.cli

Each layer's public API is the union of its modules' ``__all__``
(``from roadpubsub.index import EnhancedIndex``). ``roadpubsub.roadnet.settings`` holds
every tunable default and ``roadpubsub.roadnet.errors`` the one error base; both sit below
every layer.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
