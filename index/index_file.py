"""Index files: the format of one ``.npz`` holding an index with its network, cells,
bounds and weights; writing one and reading its arrays.

:func:`save_index` writes one (``SubscriptionIndex.save`` calls it), :func:`read_index_file`
reads its metadata and arrays, :func:`index_file_info` describes a file without building
the index; :mod:`roadpubsub.index.store` builds the index back
(:func:`~roadpubsub.index.store.load_index`) and verifies a file thoroughly. Every array is checked
(:func:`roadpubsub.index.validate.check_index_arrays`) before any compiled code reads it.

Layout: ``meta`` (JSON: format version, kind, Dmax, tolerance, default weight, network
name/CRS/direction, keyword normalisation, content digest), then arrays named
``network.*``, ``cells.*``, ``bounds.*``, ``subs.*`` (the slots, in slot order),
``subs.id_order`` (the slots in id order) and ``facts.*`` (positions and border distances
of the slots' points, which a load would otherwise recompute), ``weights.terms``/
``weights.values`` and ``structure.*`` (the architecture's postings and
statistics, :meth:`~roadpubsub.index.base.SubscriptionIndex.structure_arrays`). Keywords are stored
as UTF-8 bytes and offsets (``weights.terms_utf8``, ``weights.terms_ptr``,
:func:`roadpubsub.index.validate.encode_terms`; format version 2): no fixed-width text array, whose
size would be the longest keyword times their count. Files of version 1 (a fixed-width
``weights.terms``) and without the id order or facts (older ones) load too. The format is
plain uncompressed ``.npz``, so a load maps the large arrays copy-on-write instead of
reading them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.validate import IndexFileError, array_digest, check_index_arrays, encode_terms
from roadpubsub.roadnet.files import atomic_paths, read_npz

if TYPE_CHECKING:
    from roadpubsub.index.base import SubscriptionIndex

# The format's constants stay out of the package API (``index.FORMAT_VERSION`` would not
# say which format).
__all__ = ["index_file_info", "read_index_file", "save_index"]

#: The format version :func:`save_index` writes.
FORMAT_VERSION = 2
#: Versions a load reads (1: keywords in a fixed-width text array).
READABLE_VERSIONS = (1, 2)
#: The hint of an error about a damaged or unreadable index file.
REBUILD_HINT = "rebuild it with 'roadpubsub index build'"


def save_index(index: SubscriptionIndex, path: str | os.PathLike[str]) -> Path:
    """Write ``index``, its network, cells, bounds and weights to one ``.npz`` file.

    The delta is compacted first. The postings and statistics are saved too, so
    :func:`~roadpubsub.index.store.load_index` does not rebuild them. The file is written under a
    temporary name and renamed, so a failure leaves nothing behind.
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
                   "subs.id_order": index.id_order, "facts.x": index.facts.x,
                   "facts.y": index.facts.y, "facts.din_out": index.facts.din_out,
                   "facts.din_in": index.facts.din_in,
                   "weights.values": index.weights.weights.copy()})
    arrays["weights.terms_utf8"], arrays["weights.terms_ptr"] = encode_terms(
        index.weights.terms)
    # The slots above are saved in slot order, which the postings refer to.
    arrays.update({f"structure.{k}": v for k, v in index.structure_arrays().items()})
    meta = {"version": FORMAT_VERSION, "kind": index.kind, "dmax_m": index.dmax_m,
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
    if not isinstance(meta, dict) or meta.get("version") not in READABLE_VERSIONS \
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
        raise IndexFileError(msg, hint=REBUILD_HINT)
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
