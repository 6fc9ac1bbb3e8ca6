"""Index files read back: :func:`load_index` builds either architecture from a file
(:mod:`roadpubsub.index.index_file`, the format), :func:`verify_index` also rebuilds its bounds and
postings to compare. Every array is checked (:func:`roadpubsub.index.validate.check_index_arrays`)
before any compiled code reads it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.index_file import REBUILD_HINT, read_index_file
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.validate import IndexFileError, array_digest, check_index_arrays, file_terms
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["INDEX_KINDS", "index_from_arrays", "load_index", "verify_index"]

#: Index classes by the ``kind`` their files record.
INDEX_KINDS: dict[str, type[SubscriptionIndex]] = {"eia": EnhancedIndex, "bia": BasicIndex}


def load_index(path: str | os.PathLike[str]) -> SubscriptionIndex:
    """Read an index written by :meth:`SubscriptionIndex.save` (either architecture).

    Every array is checked (:func:`roadpubsub.index.validate.check_index_arrays`) before any
    compiled code reads it.

    Raises
    ------
    FileNotFoundError
        No such file.
    IndexFileError
        Not an index file, or one whose arrays are missing, malformed or out of range.
    """
    meta, arrays = read_index_file(path)
    check_index_arrays(meta, arrays, source=str(path))
    return index_from_arrays(meta, arrays, source=str(path))


def index_from_arrays(meta: dict[str, Any], arrays: dict[str, Any], *, source: str
                      ) -> SubscriptionIndex:
    """The index an index file's (checked) metadata and arrays describe."""
    net_meta = meta["network"]
    network = RoadNetwork(**{k[8:]: v for k, v in arrays.items() if k.startswith("network.")},
                          crs=net_meta["crs"], directed=net_meta["directed"],
                          name=net_meta["name"])
    spatial = SpatialIndex.from_arrays(network, arrays)
    terms = file_terms(arrays, source=source)
    # Files written before keywords were normalised hold exact strings: keep them exact.
    weights = TermWeights(dict(zip(terms, arrays["weights.values"].tolist(), strict=True)),
                          default_weight=meta["default_weight"],
                          normalize=bool(meta.get("normalize_keywords", False)))
    columns = (arrays["subs.ids"], EdgePoints(arrays["subs.edge"], arrays["subs.offset"]),
               arrays["subs.alpha"], arrays["subs.tau"], arrays["subs.kw_ptr"],
               arrays["subs.kw_terms"])
    saved = {k: v for k, v in arrays.items() if k == "subs.id_order" or k.startswith("facts.")}
    # check_index_arrays has checked every rule of Subscriptions (ids unique through the
    # saved id order, without sorting 10M ids twice more) when the file holds the order.
    subs = Subscriptions.checked(*columns) if "subs.id_order" in saved \
        else Subscriptions(*columns)
    cls = INDEX_KINDS[meta["kind"]]
    structures = {k[10:]: v for k, v in arrays.items() if k.startswith("structure.")}
    if not structures:  # written before the structures were saved: build them
        return cls(spatial, subs, weights, dmax_m=meta["dmax_m"], tolerance=meta["tolerance"])
    try:
        return cls.restore(spatial, subs, weights, dmax_m=meta["dmax_m"],
                           tolerance=meta["tolerance"], structures=structures, saved=saved)
    except ValueError as exc:
        msg = f"{source}: damaged index file: {exc}"
        raise IndexFileError(msg, hint=REBUILD_HINT) from exc



def _same_bits(a: npt.ArrayLike, b: npt.ArrayLike) -> bool:
    """Whether two arrays hold the same dtype, shape and bytes ("bit for bit").

    ``np.array_equal`` is not that test: NaN != NaN, and the bounds of cells that no path
    joins hold NaN (Rome has nodes outside its largest component), so a sound file would
    read as damaged; -0.0 == 0.0 the other way round.
    """
    x, y = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def verify_index(path: str | Any) -> dict[str, Any]:
    """Check an index file thoroughly: ranges (as every load does), the content digest
    written at save, and the cell bounds and postings rebuilt from the file's own network,
    cells and subscriptions, compared bit for bit.

    Returns
    -------
    dict
        ``digest`` ("ok", or "absent" for files written before digests were kept),
        ``bounds`` and ``structures`` ("ok"), ``subscriptions`` (count) and ``kind``.

    Raises
    ------
    IndexFileError
        The first problem found, naming the file and the array.
    """
    from roadpubsub.roadnet.cell_bounds import compute_cell_bounds

    source = str(path)
    meta, arrays = read_index_file(path)
    check_index_arrays(meta, arrays, source=source)
    digest = meta.get("digest")
    if digest is not None and digest != array_digest(arrays):
        msg = f"{source}: damaged index file: its arrays do not match the digest saved with them"
        raise IndexFileError(msg, hint=REBUILD_HINT)
    index = index_from_arrays(meta, arrays, source=source)
    spatial = index.spatial
    again = compute_cell_bounds(spatial.network, spatial.cells)
    for name, value in again.to_arrays().items():
        if not _same_bits(value, arrays[f"bounds.{name}"]):
            msg = (f"{source}: damaged index file: bounds.{name} differs from the bounds "
                   f"rebuilt from its network and cells")
            raise IndexFileError(msg, hint=REBUILD_HINT)
    cls = INDEX_KINDS[meta["kind"]]
    fresh = cls(spatial, index.subs, index.weights, dmax_m=index.dmax_m,
                tolerance=index.tolerance)
    for name, value in fresh.structure_arrays().items():
        if not _same_bits(value, arrays[f"structure.{name}"]):
            msg = (f"{source}: damaged index file: structure.{name} differs from the one "
                   f"rebuilt from its subscriptions")
            raise IndexFileError(msg, hint=REBUILD_HINT)
    return {"kind": meta["kind"], "subscriptions": len(index.subs),
            "digest": "ok" if digest is not None else "absent", "bounds": "ok",
            "structures": "ok"}
