"""The delta: subscriptions added since the last build, in growable arrays.

Matchers scan the delta beside the postings, so it must always be a plain
:class:`~index.model.Subscriptions` with its point facts and limits. Rebuilding those arrays
on every update (a concatenation of the whole delta per moved vehicle) made one move cost
a millisecond and more once the delta held tens of thousands of rows. Here the arrays grow
by doubling and each update writes only its own rows; the public views are slices of the
buffers, built without re-validating rows that were checked when they arrived.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
import numpy.typing as npt

from index.model import Subscriptions
from index.spatial import PointFacts
from roadnet.locations import EdgePoints

__all__ = ["DeltaBuffer"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Per-row buffers: name -> dtype (the CSR of keywords is kept apart).
_ROW_FIELDS = {"ids": np.int64, "edge": np.int32, "offset": np.float64, "alpha": np.float64,
               "tau": np.float64, "dn_limit": np.float64, "wildcard": np.bool_,
               **{f"facts.{f.name}": None for f in fields(PointFacts)}}


def _trusted(cls: type, **values: Any) -> Any:
    """An instance of a frozen dataclass from already-checked arrays (no __post_init__)."""
    obj: Any = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


class DeltaBuffer:
    """Recent subscriptions, their point facts, DNlimit and wildcard flags.

    Appending k rows costs O(k) (amortised); removing rows rewrites the buffer once.
    After each change, :attr:`subs`, :attr:`facts`, :attr:`dn_limit` and :attr:`wildcard`
    are views of the first rows.
    """

    def __init__(self) -> None:
        self._n = 0
        self._nk = 0
        self._rows: dict[str, npt.NDArray[Any]] = {}
        self._ptr = np.zeros(1, dtype=np.int64)
        self._terms = np.empty(0, dtype=np.int32)
        self.subs: Subscriptions
        self.facts: PointFacts
        self.dn_limit: FloatArray
        self.wildcard: npt.NDArray[np.bool_]
        self._refresh()

    def __len__(self) -> int:
        return self._n

    def append(self, subs: Subscriptions, facts: PointFacts, dn_limit: FloatArray,
               wildcard: npt.NDArray[np.bool_]) -> None:
        """Add rows (already checked by the index: new ids, points on its network)."""
        k = len(subs)
        if k == 0:
            return
        new = {"ids": subs.ids, "edge": subs.points.edge, "offset": subs.points.offset,
               "alpha": subs.alpha, "tau": subs.tau, "dn_limit": dn_limit,
               "wildcard": wildcard,
               **{f"facts.{f.name}": getattr(facts, f.name) for f in fields(PointFacts)}}
        self._reserve(self._n + k, self._nk + int(subs.kw_terms.size))
        for name, values in new.items():
            self._rows[name][self._n:self._n + k] = values
        kk = int(subs.kw_terms.size)
        self._terms[self._nk:self._nk + kk] = subs.kw_terms
        self._ptr[self._n + 1:self._n + k + 1] = subs.kw_ptr[1:] - subs.kw_ptr[0] + self._nk
        self._n += k
        self._nk += kk
        self._refresh()

    def keep(self, rows: IntArray) -> None:
        """Keep only ``rows`` (delta row numbers, in that order)."""
        r = np.asarray(rows, dtype=np.int64)
        lengths = self._ptr[r + 1] - self._ptr[r]
        starts = self._ptr[r]
        ptr = np.zeros(r.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        flat = np.repeat(starts - ptr[:-1], lengths) + np.arange(int(ptr[-1]))
        terms = self._terms[flat]
        for values in self._rows.values():
            values[:r.size] = values[r]
        self._terms[:terms.size] = terms
        self._ptr[:r.size + 1] = ptr
        self._n = int(r.size)
        self._nk = int(terms.size)
        self._refresh()

    def _reserve(self, rows: int, terms: int) -> None:
        have = self._rows["ids"].size if self._rows else 0
        if rows > have:
            cap = max(256, 2 * have, rows)
            grown: dict[str, npt.NDArray[Any]] = {}
            for name, dtype in _ROW_FIELDS.items():
                old = self._rows.get(name)
                kind = old.dtype if old is not None else (dtype or _facts_dtype(name))
                grown[name] = np.empty(cap, dtype=kind)
                if old is not None:
                    grown[name][:self._n] = old[:self._n]
            self._rows = grown
            ptr = np.zeros(cap + 1, dtype=np.int64)
            ptr[:self._n + 1] = self._ptr[:self._n + 1]
            self._ptr = ptr
        if terms > self._terms.size:
            grown_terms = np.empty(max(1024, 2 * self._terms.size, terms), dtype=np.int32)
            grown_terms[:self._nk] = self._terms[:self._nk]
            self._terms = grown_terms

    def _refresh(self) -> None:
        n = self._n
        if not self._rows:
            self._reserve(1, 1)
        rows = {name: values[:n] for name, values in self._rows.items()}
        points = _trusted(EdgePoints, edge=rows["edge"], offset=rows["offset"])
        self.subs = _trusted(Subscriptions, ids=rows["ids"], points=points,
                             alpha=rows["alpha"], tau=rows["tau"],
                             kw_ptr=self._ptr[:n + 1], kw_terms=self._terms[:self._nk])
        self.facts = _trusted(PointFacts, **{f.name: rows[f"facts.{f.name}"]
                                             for f in fields(PointFacts)})
        self.dn_limit = rows["dn_limit"]
        self.wildcard = rows["wildcard"]


def _facts_dtype(name: str) -> type:
    # PointFacts: cell and chain are int32, the rest float64.
    return np.int32 if name in ("facts.cell", "facts.chain") else np.float64
