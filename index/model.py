"""Columnar subscriptions and messages (paper Defs. 2, 3 and 7).

A subscription s = (id, location s.L, keywords s.psi, preference alpha, threshold tau);
a message m = (id, location m.L, keywords m.psi). Keywords are term ids of one
:class:`~roadpubsub.index.terms.TermWeights`, stored CSR-style (``kw_ptr``, ``kw_terms``), each row
a set (duplicates removed, ascending ids).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt

from roadpubsub.index.csr import take_csr
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints

__all__ = ["InvalidMessageError", "InvalidSubscriptionError", "KeywordRows", "Messages",
           "Subscriptions", "concat_csr", "concat_subscriptions", "has_repeats", "keyword_csr"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class InvalidSubscriptionError(InputError):
    """Subscriptions that break the input rules (offending ids are named)."""


class InvalidMessageError(InputError):
    """Messages that break the input rules (offending ids are named)."""


#: Term ids :func:`keyword_csr` holds as Python ints before it makes them an array.
_CSR_CHUNK = 1 << 16


def keyword_csr(rows: Iterable[Sequence[str]], weights: TermWeights, *, add: bool
                ) -> tuple[IntArray, npt.NDArray[np.int32]]:
    """Term-id CSR of keyword lists: each row becomes a sorted set of ids.

    ``add=True`` adds unseen terms to ``weights`` (subscriptions); ``add=False`` drops them
    (messages: a term no subscription holds cannot match).
    """
    ptr = [0]
    chunks: list[npt.NDArray[np.int32]] = []
    flat: list[int] = []
    for row in rows:
        # a set and a sort of a row's few ids in Python: np.unique's fixed cost per row
        # was a third of a message's keywords
        ids = sorted({t for t in weights.id_list(row, add=add) if t >= 0})
        flat.extend(ids)
        ptr.append(ptr[-1] + len(ids))
        if len(flat) >= _CSR_CHUNK:  # a big batch's ids as arrays, not Python ints
            chunks.append(np.asarray(flat, dtype=np.int32))
            flat = []
    chunks.append(np.asarray(flat, dtype=np.int32))
    terms = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    return np.asarray(ptr, dtype=np.int64), terms


def concat_csr(parts: Sequence[tuple[IntArray, npt.NDArray[np.int32]]]
               ) -> tuple[IntArray, npt.NDArray[np.int32]]:
    """One keyword CSR of several, rows in order (each part's pointers start at 0)."""
    ptrs = [np.zeros(1, np.int64)]
    base = 0
    for ptr, _ in parts:
        ptrs.append(ptr[1:] + base)
        base += int(ptr[-1])
    terms = [t for _, t in parts]
    return (np.concatenate(ptrs).astype(np.int64),
            np.concatenate(terms).astype(np.int32) if terms else np.empty(0, np.int32))


class KeywordRows:
    """What every columnar batch shares: one row per id and a keyword CSR (``kw_ptr``,
    ``kw_terms``); every other field is a column sliced alike by :meth:`take`.

    A base of the frozen dataclasses :class:`Subscriptions`, :class:`Messages`,
    :class:`~roadpubsub.index.kinds.BooleanSubscriptions` and
    :class:`~roadpubsub.index.kinds.TopkSubscriptions`.
    """

    __dataclass_fields__: ClassVar[dict[str, Any]]
    ids: IntArray
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]

    def __len__(self) -> int:
        return int(self.ids.size)

    def keywords(self, i: int) -> npt.NDArray[np.int32]:
        """Term ids of row i (for messages, terms unknown to the vocabulary were dropped)."""
        return self.kw_terms[self.kw_ptr[i]:self.kw_ptr[i + 1]]

    def take(self, rows: npt.ArrayLike) -> Self:
        """A new batch with the given rows, in that order (checked again on the way)."""
        r = np.asarray(rows, dtype=np.int64)
        ptr, terms = take_csr(self.kw_ptr, self.kw_terms, r)
        columns = {f.name: getattr(self, f.name)[r] for f in fields(self)
                   if f.name not in ("kw_ptr", "kw_terms")}
        return replace(self, **columns, kw_ptr=ptr, kw_terms=terms)

    @classmethod
    def concat(cls, parts: Sequence[Self]) -> Self:
        """The rows of each part, in order (at least one part; ids stay unique)."""
        if len(parts) == 1:
            return parts[0]
        ptr, terms = concat_csr([(p.kw_ptr, p.kw_terms) for p in parts])
        columns: dict[str, Any] = {}
        for f in fields(parts[0]):
            if f.name in ("kw_ptr", "kw_terms"):
                continue
            values = [getattr(p, f.name) for p in parts]
            columns[f.name] = (EdgePoints.concat(values) if isinstance(values[0], EdgePoints)
                               else np.concatenate(values))
        return replace(parts[0], **columns, kw_ptr=ptr, kw_terms=terms)


def check_rows(n: int, columns: tuple[int, ...], kw_ptr: IntArray) -> None:
    """Raise unless every column has ``n`` rows and the CSR ``n + 1`` pointers."""
    if not (all(c == n for c in columns) and kw_ptr.size == n + 1):
        msg = "subscription columns must all have one row per subscription"
        raise InvalidSubscriptionError(msg)


def keyword_and_id_problems(ids: IntArray, kw_ptr: IntArray) -> list[str]:
    """The rules every subscription kind shares: a non-empty keyword list, a unique id."""
    problems = []
    empty = np.diff(kw_ptr) == 0
    if empty.any():
        problems.append(f"empty keyword list: ids {describe_ids(ids, empty)}")
    dup = _duplicates(ids)
    if dup.any():
        problems.append(f"duplicate ids: {describe_ids(ids, dup)}")
    return problems


@dataclass(frozen=True, eq=False)
class Subscriptions(KeywordRows):
    """A batch of subscriptions, one row each, as arrays.

    Attributes
    ----------
    ids
        Unique int64 ids.
    points
        Locations on the network.
    alpha
        Preference for nearness, in [0, 1].
    tau
        Threshold, in (0, 1].
    kw_ptr, kw_terms
        Keyword sets: row i holds ``kw_terms[kw_ptr[i]:kw_ptr[i + 1]]`` (non-empty).
    """

    ids: IntArray
    points: EdgePoints
    alpha: FloatArray
    tau: FloatArray
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]

    def __post_init__(self) -> None:
        check_rows(self.ids.size, (len(self.points), self.alpha.size, self.tau.size),
                   self.kw_ptr)
        problems = []
        bad_alpha = ~((self.alpha >= 0) & (self.alpha <= 1))
        if bad_alpha.any():
            problems.append(f"alpha outside [0, 1]: ids {describe_ids(self.ids, bad_alpha)}")
        bad_tau = ~((self.tau > 0) & (self.tau <= 1))
        if bad_tau.any():
            problems.append(f"tau outside (0, 1]: ids {describe_ids(self.ids, bad_tau)}")
        problems += keyword_and_id_problems(self.ids, self.kw_ptr)
        if problems:
            msg = "invalid subscriptions: " + "; ".join(problems)
            raise InvalidSubscriptionError(msg)

    @classmethod
    def empty(cls) -> Subscriptions:
        """No subscriptions."""
        return cls(np.empty(0, np.int64), EdgePoints.of([], []), np.empty(0), np.empty(0),
                   np.zeros(1, np.int64), np.empty(0, np.int32))

    @classmethod
    def checked(cls, ids: IntArray, points: EdgePoints, alpha: FloatArray, tau: FloatArray,
                kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32]) -> Subscriptions:
        """A batch whose columns already passed every rule of this class elsewhere (an
        index file's slots, by :func:`roadpubsub.index.validate.check_index_arrays`): built without
        checking them again."""
        obj = cls.__new__(cls)
        for name, value in (("ids", ids), ("points", points), ("alpha", alpha), ("tau", tau),
                            ("kw_ptr", kw_ptr), ("kw_terms", kw_terms)):
            object.__setattr__(obj, name, value)
        return obj

    @classmethod
    def from_rows(
        cls,
        *,
        ids: npt.ArrayLike,
        points: EdgePoints,
        keywords: Iterable[Sequence[str]],
        alpha: npt.ArrayLike,
        tau: npt.ArrayLike,
        weights: TermWeights,
    ) -> Subscriptions:
        """Build from keyword strings; unseen terms join ``weights`` at its default weight."""
        ptr, terms = keyword_csr(keywords, weights, add=True)
        return cls(np.asarray(ids, dtype=np.int64), points,
                   np.asarray(alpha, dtype=np.float64), np.asarray(tau, dtype=np.float64),
                   ptr, terms)


def concat_subscriptions(parts: list[Subscriptions]) -> Subscriptions:
    """Stack batches of subscriptions (ids must stay unique)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return Subscriptions.empty()
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [int(p.kw_ptr[-1]) for p in parts[:-1]])
    ptr = np.concatenate([parts[0].kw_ptr[:1]] +
                         [p.kw_ptr[1:] + off for p, off in zip(parts, offsets, strict=True)])
    return Subscriptions(
        ids=np.concatenate([p.ids for p in parts]),
        points=EdgePoints(np.concatenate([p.points.edge for p in parts]),
                          np.concatenate([p.points.offset for p in parts])),
        alpha=np.concatenate([p.alpha for p in parts]),
        tau=np.concatenate([p.tau for p in parts]),
        kw_ptr=ptr.astype(np.int64),
        kw_terms=np.concatenate([p.kw_terms for p in parts]).astype(np.int32),
    )


@dataclass(frozen=True, eq=False)
class Messages(KeywordRows):
    """A batch of messages as arrays (see :class:`Subscriptions` for the keyword CSR)."""

    ids: IntArray
    points: EdgePoints
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]

    def __post_init__(self) -> None:
        if not (len(self.points) == self.ids.size and self.kw_ptr.size == self.ids.size + 1):
            msg = "message columns must all have one row per message"
            raise InvalidMessageError(msg)
        dup = _duplicates(self.ids)
        if dup.any():
            msg = f"invalid messages: duplicate ids: {describe_ids(self.ids, dup)}"
            raise InvalidMessageError(msg)

    @classmethod
    def from_rows(cls, *, ids: npt.ArrayLike, points: EdgePoints,
                  keywords: Iterable[Sequence[str]], weights: TermWeights) -> Messages:
        """Build from keyword strings; terms unknown to ``weights`` are dropped."""
        ptr, terms = keyword_csr(keywords, weights, add=False)
        return cls(np.asarray(ids, dtype=np.int64), points, ptr, terms)


def has_repeats(ids: IntArray) -> bool:
    """Whether an id array holds some id twice.

    Parameters
    ----------
    ids
        Int64 ids, in any order (any values, negative ones and ``2**63 - 1`` included).

    Returns
    -------
    bool
        True when two entries are equal; False for zero or one entry.
    """
    # Sorted, a repeat sits next to its twin: a third of np.unique's time, which a
    # fleet's parser and a batch move paid on every call.
    if ids.size < 2:  # a single publish or move: no sort, no comparison
        return False
    s = np.sort(ids)
    return bool((s[1:] == s[:-1]).any())


def _duplicates(ids: IntArray) -> npt.NDArray[np.bool_]:
    # The mask is built only when there is a duplicate (np.unique with inverse and counts
    # took a quarter of a live move's time); the sort again then, on the error path only.
    if not has_repeats(ids):
        return np.zeros(ids.size, dtype=bool)
    s = np.sort(ids)
    return np.isin(ids, s[1:][s[1:] == s[:-1]])


def describe_ids(ids: IntArray, mask: npt.NDArray[np.bool_]) -> str:
    from roadpubsub.roadnet.errors import describe_rows

    bad = ids[mask]
    return describe_rows(np.unique(bad)[:10].tolist(), total=int(np.unique(bad).size))
