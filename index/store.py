"""Index files: one ``.npz`` holding an index with its network, cells, bounds and weights.

:func:`save_index` writes one (``SubscriptionIndex.save`` calls it), :func:`load_index`
reads either architecture back, :func:`index_file_info` describes a file without building
the index and :func:`verify_index` also rebuilds its bounds and postings to compare.
Every array is checked (:func:`index.validate.check_index_arrays`) before any compiled code
reads it.

Layout: ``meta`` (JSON: format version, kind, Dmax, tolerance, default weight, network
name/CRS/direction, keyword normalisation, content digest), then arrays named
``network.*``, ``cells.*``, ``bounds.*``, ``subs.*`` (the slots, in slot order),
``subs.id_order`` (the slots in id order) and ``facts.*`` (positions and border distances
of the slots' points, which a load would otherwise recompute), ``weights.terms``/
``weights.values`` and ``structure.*`` (the architecture's postings and
statistics, :meth:`~index.base.SubscriptionIndex.structure_arrays`). Keywords are stored
as UTF-8 bytes and offsets (``weights.terms_utf8``, ``weights.terms_ptr``,
:func:`index.validate.encode_terms`; format version 2): no fixed-width text array, whose
size would be the longest keyword times their count. Files of version 1 (a fixed-width
``weights.terms``) and without the id order or facts (older ones) load too. The format is
plain uncompressed ``.npz``, so :func:`load_index` maps the large arrays copy-on-write
instead of reading them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from index.base import SubscriptionIndex
from index.bia import BasicIndex
from index.eia import EnhancedIndex
from index.model import Subscriptions
from index.spatial import SpatialIndex
from index.terms import TermWeights
from index.validate import (
    IndexFileError,
    array_digest,
    check_index_arrays,
    encode_terms,
    file_terms,
)
from roadnet.files import atomic_paths, read_npz
from roadnet.locations import EdgePoints
from roadnet.network import RoadNetwork

__all__ = ["INDEX_KINDS", "index_file_info", "index_from_arrays", "load_index",
           "read_index_file", "save_index", "verify_index"]

#: Index classes by the ``kind`` their files record.
INDEX_KINDS: dict[str, type[SubscriptionIndex]] = {"eia": EnhancedIndex, "bia": BasicIndex}

_FORMAT_VERSION = 2
#: Versions a load reads (1: keywords in a fixed-width text array).
_READABLE_VERSIONS = (1, 2)
_REBUILD = "rebuild it with 'roadpubsub index build'"


def save_index(index: SubscriptionIndex, path: str | os.PathLike[str]) -> Path:
    """Write ``index``, its network, cells, bounds and weights to one ``.npz`` file.

    The delta is compacted first. The postings and statistics are saved too, so
    :func:`load_index` does not rebuild them. The file is written under a temporary name
    and renamed, so a failure leaves nothing behind.
    """
    index.compact()
    target = Path(path)
    net = index.network
    arrays: dict[str, npt.NDArray[Any]] = {
        f"network.{k}": v for k, v in net.to_arrays().items() if isinstance(v, np.ndarray)}
    arrays.update(index.spatial.to_arrays())
    s = index.subs
    arrays.update({"subs.ids": s.ids, "subs.edge": s.points.edge,
                   "subs.offset": s.points.offset, "subs.alpha": s.alpha,
                   "subs.tau": s.tau, "subs.kw_ptr": s.kw_ptr, "subs.kw_terms": s.kw_terms,
                   # What a load would otherwise recompute (a sort of the ids and the
                   # points' positions and border distances: most of loading 10M
                   # subscriptions); the load checks them instead.
                   "subs.id_order": index._id_order, "facts.x": index.facts.x,
                   "facts.y": index.facts.y, "facts.din_out": index.facts.din_out,
                   "facts.din_in": index.facts.din_in,
                   "weights.values": index.weights.weights.copy()})
    arrays["weights.terms_utf8"], arrays["weights.terms_ptr"] = encode_terms(
        index.weights.terms)
    # The slots above are saved in slot order, which the postings refer to.
    arrays.update({f"structure.{k}": v for k, v in index.structure_arrays().items()})
    meta = {"version": _FORMAT_VERSION, "kind": index.kind, "dmax_m": index.dmax_m,
            "tolerance": index.tolerance, "default_weight": index.weights.default_weight,
            "network": {"crs": net.crs, "directed": net.directed, "name": net.name},
            "normalize_keywords": index.weights.normalize, "digest": array_digest(arrays)}
    with atomic_paths(target) as (tmp,), tmp.open("wb") as fh:
        np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]
    return target


def read_index_file(path: str | os.PathLike[str], keys: tuple[str, ...] | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta, arrays) of an index file: all arrays, or just ``keys``; one clear error."""
    not_an_index = f"{path}: not a roadpubsub index file (or an unsupported version)"
    try:
        meta, arrays = read_npz(path, keys, mmap=True)
    except ValueError as exc:
        msg = f"{not_an_index}: {exc}"
        raise IndexFileError(msg) from exc
    if not isinstance(meta, dict) or meta.get("version") not in _READABLE_VERSIONS \
            or meta.get("kind") not in ("eia", "bia") or not isinstance(meta.get("network"), dict):
        raise IndexFileError(not_an_index)
    return meta, arrays


def index_file_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What an index file holds, checked as a load checks it, without building the index.

    Returns
    -------
    dict
        ``kind``, ``dmax_m`` (metres), ``subscriptions``, ``terms``, ``cells``,
        ``network`` (``name``, ``nodes``, ``edges``, ``directed``, ``crs``) and ``checked``:
        what was checked (every array's ranges, and the content digest when the file has
        one). ``roadpubsub index verify`` also rebuilds the postings and bounds.

    Raises
    ------
    FileNotFoundError
        No such file.
    IndexFileError
        Not an index file, or a damaged one (the file and array are named).
    """
    meta, arrays = read_index_file(path)
    check_index_arrays(meta, arrays, source=str(path))
    digest = meta.get("digest")
    if digest is not None and digest != array_digest(arrays):
        msg = f"{path}: damaged index file: its arrays do not match the digest saved with them"
        raise IndexFileError(msg, hint=_REBUILD)
    net = meta["network"]
    return {"kind": meta["kind"], "dmax_m": meta["dmax_m"],
            "subscriptions": int(arrays["subs.ids"].size),
            "terms": int(arrays["weights.values"].size),
            "cells": int(arrays["cells.bbox"].shape[0]),
            "network": {"name": net["name"], "nodes": int(arrays["network.node_ids"].size),
                        "edges": int(arrays["network.edge_u"].size),
                        "directed": net["directed"], "crs": net["crs"]},
            "checked": "ranges and digest" if digest is not None
                       else "ranges (no digest: written by an older version)"}


def load_index(path: str | os.PathLike[str]) -> SubscriptionIndex:
    """Read an index written by :meth:`SubscriptionIndex.save` (either architecture).

    Every array is checked (:func:`index.validate.check_index_arrays`) before any compiled
    code reads it.

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
        raise IndexFileError(msg, hint=_REBUILD) from exc



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
    from roadnet.cell_bounds import compute_cell_bounds

    source = str(path)
    meta, arrays = read_index_file(path)
    check_index_arrays(meta, arrays, source=source)
    digest = meta.get("digest")
    if digest is not None and digest != array_digest(arrays):
        msg = f"{source}: damaged index file: its arrays do not match the digest saved with them"
        raise IndexFileError(msg, hint=_REBUILD)
    index = index_from_arrays(meta, arrays, source=source)
    spatial = index.spatial
    again = compute_cell_bounds(spatial.network, spatial.cells)
    for name, value in again.to_arrays().items():
        if not _same_bits(value, arrays[f"bounds.{name}"]):
            msg = (f"{source}: damaged index file: bounds.{name} differs from the bounds "
                   f"rebuilt from its network and cells")
            raise IndexFileError(msg, hint=_REBUILD)
    cls = INDEX_KINDS[meta["kind"]]
    fresh = cls(spatial, index.subs, index.weights, dmax_m=index.dmax_m,
                tolerance=index.tolerance)
    for name, value in fresh.structure_arrays().items():
        if not _same_bits(value, arrays[f"structure.{name}"]):
            msg = (f"{source}: damaged index file: structure.{name} differs from the one "
                   f"rebuilt from its subscriptions")
            raise IndexFileError(msg, hint=_REBUILD)
    return {"kind": meta["kind"], "subscriptions": len(index.subs),
            "digest": "ok" if digest is not None else "absent", "bounds": "ok",
            "structures": "ok"}
