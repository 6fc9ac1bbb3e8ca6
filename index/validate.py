"""Checks of what an index file holds, before any compiled kernel reads it.

A saved index is a zip of arrays; a damaged or hand-edited one can hold an edge id past the
last edge or a pointer past the end of its array, and the matchers' kernels do not check
bounds (that is what makes them fast). :func:`check_index_arrays` therefore checks every
array that a kernel indexes with or through: dtypes, shapes, ranges, monotone CSR
pointers, unique ids. It is linear in the file's size (about a second per million
subscriptions) and runs on every load.

Values a kernel only compares (a DNUB, a bound) cannot crash anything, but a tampered one
can lose deliveries: :func:`verify_index` rebuilds the cell bounds and the postings from
the file's subscriptions and compares them bit for bit (``roadpubsub index verify``).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.terms import MAX_WEIGHT, MIN_WEIGHT
from roadpubsub.roadnet.errors import InputError, describe_rows
from roadpubsub.roadnet.lengths import check_dmax

__all__ = ["IndexFileError", "array_digest", "check_index_arrays", "decode_terms",
           "encode_terms", "file_terms"]

Arrays = Mapping[str, npt.NDArray[Any]]


class IndexFileError(InputError):
    """An index file whose arrays are missing, malformed or out of range (file named)."""


def array_digest(arrays: Arrays) -> str:
    """SHA-256 over every array's name, dtype, shape and bytes, in name order.

    Kept in the file's metadata at save, so a flipped bit anywhere is found without
    rebuilding anything (the zip's own CRC covers only what a reader decompresses).
    """
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes() if a.dtype.kind != "U" else "\x00".join(a.ravel()).encode())
    return h.hexdigest()


class _Checker:
    """Checks arrays one rule at a time; the first failure raises, naming file and array."""

    def __init__(self, arrays: Arrays, source: str) -> None:
        self.arrays = arrays
        self.source = source

    def fail(self, name: str, problem: str) -> None:
        msg = f"{self.source}: damaged index file: {name} {problem}"
        raise IndexFileError(msg, hint="rebuild it with 'roadpubsub index build'")

    def get(self, name: str, kind: str, shape: tuple[int | None, ...]) -> npt.NDArray[Any]:
        """The array, checked for dtype kind ('i' int, 'f' float, 'b' bool, 'U' text) and
        shape (None matches any length)."""
        if name not in self.arrays:
            self.fail(name, "is missing")
        a = np.asarray(self.arrays[name])
        if a.dtype.kind != kind and not (kind == "i" and a.dtype.kind == "u"):
            self.fail(name, f"has dtype {a.dtype}, expected {_KINDS[kind]}")
        if a.ndim != len(shape) or any(w is not None and w != s
                                       for w, s in zip(shape, a.shape, strict=True)):
            want = "(" + ", ".join("n" if w is None else str(w) for w in shape) + ")"
            self.fail(name, f"has shape {a.shape}, expected {want}")
        return a

    def ids(self, name: str, shape: tuple[int | None, ...], upper: int) -> npt.NDArray[Any]:
        """Integer array whose values are indices into something of length ``upper``."""
        a = self.get(name, "i", shape)
        if a.size and (int(a.min()) < 0 or int(a.max()) >= upper):
            bad = np.flatnonzero((a < 0) | (a >= upper)).tolist()
            self.fail(name, f"holds values outside [0, {upper}) at rows {describe_rows(bad)}")
        return a

    def ptr(self, name: str, n: int, end: int) -> npt.NDArray[Any]:
        """CSR pointer: n + 1 entries from 0 to ``end``, never decreasing."""
        a = self.get(name, "i", (n + 1,))
        if int(a[0]) != 0 or int(a[-1]) != end:
            self.fail(name, f"must run from 0 to {end}, runs from {a[0]} to {a[-1]}")
        if (np.diff(a) < 0).any():
            self.fail(name, "decreases")
        return a

    def floats(self, name: str, shape: tuple[int | None, ...], *, lo: float = -np.inf,
               hi: float = np.inf, finite: bool = False) -> npt.NDArray[Any]:
        """Float array with no NaN, within [lo, hi] (and finite if asked)."""
        a = self.get(name, "f", shape)
        ok = (a >= lo) & (a <= hi)
        if finite:
            ok &= np.isfinite(a)
        if not ok.all():
            bad = np.flatnonzero(~ok.ravel()).tolist()
            self.fail(name, f"holds values outside [{lo}, {hi}] (or NaN) at "
                      f"{describe_rows(bad)}")
        return a

    def unique(self, name: str, a: npt.NDArray[Any]) -> None:
        s = np.sort(a, kind="stable")
        if s.size > 1 and (s[1:] == s[:-1]).any():
            dup = np.unique(s[1:][s[1:] == s[:-1]]).tolist()
            self.fail(name, f"repeats values: {describe_rows(dup)}")


_KINDS = {"i": "integers", "f": "floats", "b": "booleans", "U": "text",
          "u": "unsigned integers"}


def encode_terms(terms: Sequence[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Keywords as (UTF-8 bytes, offsets): term i is ``data[ptr[i]:ptr[i + 1]]``.

    The index file's keyword format (``weights.terms_utf8``, ``weights.terms_ptr``): its
    size is the keywords' total length, where a fixed-width text array would pad every
    keyword to the longest one (one 1 MB keyword made 11,831 of them need 46 GiB).
    """
    encoded = [t.encode("utf-8") for t in terms]
    ptr = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=ptr[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), ptr


def decode_terms(data: npt.NDArray[Any], ptr: npt.NDArray[Any]) -> list[str]:
    """The keywords of :func:`encode_terms`' arrays (UnicodeDecodeError if damaged)."""
    raw = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
    p = ptr.tolist()
    return [raw[a:b].decode("utf-8") for a, b in itertools.pairwise(p)]


def file_terms(arrays: Arrays, *, source: str) -> list[str]:
    """An index file's keywords, checked (well-formed, UTF-8, no repeats): the UTF-8
    format of :func:`encode_terms`, or the fixed-width text array ``weights.terms`` of
    files written before it."""
    c = _Checker(arrays, source)
    if "weights.terms_utf8" not in arrays:  # the former format
        old = c.get("weights.terms", "U", (None,))
        c.unique("weights.terms", old)
        return [str(t) for t in old.tolist()]
    data = c.get("weights.terms_utf8", "u", (None,))
    if data.dtype.itemsize != 1:
        c.fail("weights.terms_utf8", f"has dtype {data.dtype}, expected uint8")
    n = c.get("weights.terms_ptr", "i", (None,)).size - 1
    if n < 0:
        c.fail("weights.terms_ptr", "is empty, expected at least one offset")
    ptr = c.ptr("weights.terms_ptr", n, data.size)
    try:
        terms = decode_terms(data, ptr)
    except UnicodeDecodeError as exc:
        c.fail("weights.terms_utf8", f"is not UTF-8 text at byte {exc.start}")
    if len(set(terms)) != len(terms):
        seen: set[str] = set()
        dup = [t for t in terms if t in seen or seen.add(t)]  # type: ignore[func-returns-value]
        shown = ", ".join(repr(t[:40]) for t in dup[:5])
        c.fail("weights.terms_utf8", f"repeats keywords: {shown}")
    return terms


def check_index_arrays(meta: Mapping[str, Any], arrays: Arrays, *, source: str) -> None:
    """Check an index file's metadata and arrays; raise :class:`IndexFileError` on the first
    problem, naming ``source`` (the file) and the array.

    Every index a kernel uses is in range afterwards: node, edge, cell, slot and term ids,
    and the CSR pointers of keywords, borders, polylines and postings.
    """
    c = _Checker(arrays, source)
    try:
        check_dmax(float(meta["dmax_m"]))
        tolerance = float(meta["tolerance"])
        default = float(meta["default_weight"])
        net = meta["network"]
        str(net["crs"]), bool(net["directed"])
    except (KeyError, TypeError, ValueError) as exc:
        c.fail("metadata", f"is malformed ({exc})")
    if not 0.0 <= tolerance < 1.0:
        c.fail("metadata", f"tolerance {tolerance!r} is outside [0, 1)")
    if not MIN_WEIGHT <= default <= MAX_WEIGHT:
        c.fail("metadata", f"default_weight {default!r} is outside [{MIN_WEIGHT}, {MAX_WEIGHT}]")

    # Network.
    ids = c.get("network.node_ids", "i", (None,))
    n = ids.size
    c.unique("network.node_ids", ids)
    for name in ("network.node_lon", "network.node_lat", "network.node_x", "network.node_y"):
        c.floats(name, (n,), finite=True)
    eu = c.ids("network.edge_u", (None,), n)
    m = eu.size
    c.ids("network.edge_v", (m,), n)
    length = c.floats("network.edge_length", (m,), lo=0.0, finite=True)
    c.get("network.edge_oneway", "b", (m,))
    xy = c.floats("network.geom_xy", (None, 2), finite=True)
    gptr = c.ptr("network.geom_ptr", m, xy.shape[0])
    if m and (np.diff(gptr) < 2).any():
        c.fail("network.geom_ptr", "gives an edge fewer than two polyline points")

    # Cells and bounds.
    bbox = c.floats("cells.bbox", (None, 4))
    n_cells = bbox.shape[0]
    c.floats("cells.quad", (n_cells, 4))
    c.ids("cells.edge_cell", (m,), n_cells)
    border = c.ids("cells.border_nodes", (None,), n)
    c.ptr("cells.border_ptr", n_cells, border.size)
    c.get("cells.node_is_border", "b", (n,))
    c.floats("bounds.kappa", (), lo=0.0)
    # What the matchers compare must be a number; the informational bounds (far distances,
    # eta+) may hold NaN where a cell pair is not connected.
    for name in ("D", "dE_min", "eta_minus"):
        c.floats(f"bounds.{name}", (n_cells, n_cells))
    for name in ("D_far", "dE_max", "eta_plus"):
        c.get(f"bounds.{name}", "f", (n_cells, n_cells))
    c.floats("bounds.din_out", (n,))
    c.floats("bounds.din_in", (n,))

    # Keyword weights.
    n_terms = len(file_terms(arrays, source=source))
    c.floats("weights.values", (n_terms,), lo=MIN_WEIGHT, hi=MAX_WEIGHT)

    # Subscriptions (slots).
    sids = c.get("subs.ids", "i", (None,))
    n_subs = sids.size
    if "subs.id_order" in arrays:
        # The saved order of the ids: a permutation under which they strictly increase,
        # which also proves them unique (one pass instead of a sort).
        order = c.ids("subs.id_order", (n_subs,), n_subs)
        ranked = sids[order]
        if n_subs > 1 and not bool((ranked[1:] > ranked[:-1]).all()):
            c.unique("subs.ids", sids)  # names repeated ids, if that is the cause
            c.fail("subs.id_order", "does not put the ids in increasing order")
    else:
        c.unique("subs.ids", sids)
    edge = c.ids("subs.edge", (n_subs,), m)
    offset = c.floats("subs.offset", (n_subs,), lo=0.0, finite=True)
    beyond = offset > length[edge]
    if beyond.any():
        c.fail("subs.offset", f"lies beyond its edge at rows "
               f"{describe_rows(np.flatnonzero(beyond).tolist())}")
    c.floats("subs.alpha", (n_subs,), lo=0.0, hi=1.0)
    tau = c.floats("subs.tau", (n_subs,), hi=1.0)
    if (tau <= 0).any():
        c.fail("subs.tau", f"is not > 0 at rows {describe_rows(np.flatnonzero(tau <= 0).tolist())}")
    kw_terms = c.ids("subs.kw_terms", (None,), n_terms)
    kw_ptr = c.ptr("subs.kw_ptr", n_subs, kw_terms.size)
    if n_subs and (np.diff(kw_ptr) == 0).any():
        c.fail("subs.kw_ptr", "gives a subscription no keyword")
    # Each row's term ids strictly increase (a set, in the order TSIM sums them).
    step_ok = np.diff(kw_terms.astype(np.int64)) > 0
    step_ok[kw_ptr[1:-1] - 1] = True  # across row boundaries anything goes
    if not step_ok.all():
        rows = np.unique(np.searchsorted(kw_ptr, np.flatnonzero(~step_ok), side="right") - 1)
        c.fail("subs.kw_terms", f"is not a sorted set in rows {describe_rows(rows.tolist())}")

    # Saved point facts: positions and border distances, read by the bounds.
    facts = [k for k in ("x", "y", "din_out", "din_in") if f"facts.{k}" in arrays]
    if facts and len(facts) < 4:
        c.fail("facts", f"are incomplete (only {', '.join(facts)})")
    for name in facts:
        # din is +inf in a cell without border vertices; positions are finite.
        c.floats(f"facts.{name}", (n_subs,), lo=0.0 if name.startswith("din") else -np.inf,
                 finite=not name.startswith("din"))

    # Postings and statistics of the architecture.
    kind = meta.get("kind")
    if not any(k.startswith("structure.") for k in arrays):
        return
    p = "structure.layout."
    values = c.get(p + "post_value", "f", (None,))
    slots = c.ids(p + "post_slot", (values.size,), n_subs)
    eg_value = c.get(p + "eg_value", "f", (None,))
    c.ids(p + "eg_edge", (eg_value.size,), m)
    c.ptr(p + "eg_start", eg_value.size, slots.size)
    grp_value = c.get(p + "grp_value", "f", (None,))
    c.ids(p + "grp_cell", (grp_value.size,), n_cells)
    c.ptr(p + "grp_start", grp_value.size, eg_value.size)
    c.ptr(p + "term_ptr", n_terms + 1, grp_value.size)
    for name in ("post_value", "eg_value", "grp_value"):
        c.floats(p + name, (None,))
    for name in ("edge_min_alpha", "edge_max_alpha", "edge_min_tau_e"):
        c.floats(f"structure.{name}", (m,))
    cell_stats = ("cell_dn_limit",) if kind == "eia" else (
        "cell_min_alpha", "cell_max_alpha", "cell_min_tau_e")
    for name in cell_stats:
        c.floats(f"structure.{name}", (n_cells,))
