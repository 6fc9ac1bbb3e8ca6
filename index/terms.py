"""Term vocabulary and keyword weights w(t) (paper Def. 6: idf weights).

Terms get dense int32 ids in order of first appearance. The paper's "general keyword
order" sorts keywords by weight, descending; ties are broken by term id so the order is
total and reproducible (:meth:`TermWeights.rank`).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["MAX_WEIGHT", "MIN_WEIGHT", "InvalidWeightsError", "TermWeights", "normalize_keyword",
           "smoothed_idf"]


class InvalidWeightsError(InputError):
    """A weights table with missing, non-positive or duplicate entries."""


def smoothed_idf(n_documents: int, document_frequency: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Smoothed idf: w(t) = ln((1 + N) / (1 + df(t))) + 1, always > 0."""
    df = np.asarray(document_frequency, dtype=np.float64)
    return np.log((1.0 + n_documents) / (1.0 + df)) + 1.0


#: Smallest and largest accepted keyword weight. Any positive normal float in between works
#: exactly (text bounds are summed per subscription, see roadpubsub.index.limits); the ends keep
#: every sum of a subscription's weights away from overflow and from subnormal numbers, whose
#: rounding is absolute rather than relative.
MIN_WEIGHT = 1e-290
MAX_WEIGHT = 1e290


def normalize_keyword(keyword: str) -> str:
    """The form keywords are compared in: Unicode NFC, case-folded, white space stripped.

    Subscriptions, messages, weights tables and corpora all pass through here (unless
    exact matching is asked for), so "DELAYED", " delayed" and "delayed" are one keyword,
    and so are "naïve" typed with a combining diaeresis and with the single character.

    Examples
    --------
    >>> normalize_keyword(" DELAYED ")
    'delayed'
    >>> normalize_keyword("nai\u0308ve") == normalize_keyword("na\u00efve")
    True
    >>> normalize_keyword("Straße")
    'strasse'
    """
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", keyword).casefold()).strip()


#: normalize_keyword of the keywords seen last: a live service sees the same few thousand
#: tweet words again and again, and two Unicode passes per keyword were a fifth of turning
#: a message's keywords into term ids.
_normalized = functools.lru_cache(maxsize=1 << 16)(normalize_keyword)


def _valid_weight(w: object) -> bool:
    """Whether ``w`` is a real number in [MIN_WEIGHT, MAX_WEIGHT] (not a bool)."""
    if isinstance(w, bool | np.bool_) or not isinstance(w, int | float | np.integer | np.floating):
        return False
    return bool(MIN_WEIGHT <= float(w) <= MAX_WEIGHT)


class TermWeights:
    """A growing vocabulary with one positive weight per term.

    A term that is not in the weights table takes the table's largest weight (for idf
    weights: a term never seen in the corpus is as rare as it gets).

    Parameters
    ----------
    weights
        Mapping term -> weight (> 0). May be empty only if ``default_weight`` is given.
    default_weight
        Weight of unseen terms; the largest table weight when omitted.
    normalize
        Compare keywords by :func:`normalize_keyword` (the default, from
        ``DEFAULTS.normalize_keywords``) or as exact strings. Table terms are normalised
        too; two that become one are an error.
    """

    def __init__(self, weights: Mapping[str, float], *, default_weight: float | None = None,
                 normalize: bool = DEFAULTS.normalize_keywords) -> None:
        self.normalize = bool(normalize)
        if self.normalize:
            merged: dict[str, float] = {}
            clashes: list[str] = []
            for term, w in weights.items():
                key = normalize_keyword(term) if isinstance(term, str) else term
                if key in merged:
                    clashes.append(repr(term))
                merged[key] = w
            if clashes:
                msg = (f"terms that are the same keyword once normalised (case, accents, "
                       f"white space): {', '.join(clashes[:10])}")
                raise InvalidWeightsError(msg, hint="merge them, or compare keywords exactly")
            empty = [t for t in merged if isinstance(t, str) and not t]
            if empty:
                msg = "an empty or white-space-only term in the weights table"
                raise InvalidWeightsError(msg)
            weights = merged
        bad = [t for t, w in weights.items() if not _valid_weight(w)]
        if bad:
            msg = (f"weights must be numbers from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}; "
                   f"offending terms: {bad[:10]}")
            raise InvalidWeightsError(msg)
        values = np.fromiter(weights.values(), dtype=np.float64, count=len(weights))
        if default_weight is None:
            if values.size == 0:
                msg = "an empty weights table needs a default_weight"
                raise InvalidWeightsError(msg)
            default_weight = float(values.max())
        if not _valid_weight(default_weight):
            msg = (f"the default weight must be a number from {MIN_WEIGHT:g} to "
                   f"{MAX_WEIGHT:g}, got {default_weight!r}")
            raise InvalidWeightsError(msg)
        self.default_weight = float(default_weight)
        self._id: dict[str, int] = {}
        self._terms: list[str] = []
        self._weight = np.empty(max(16, len(weights)), dtype=np.float64)
        self._rank: npt.NDArray[np.int64] | None = None
        for term, w in weights.items():
            self._add(term, float(w))

    # -------------------------------------------------------------- vocabulary
    def _add(self, term: str, weight: float) -> int:
        tid = len(self._terms)
        if tid == self._weight.size:
            self._weight = np.concatenate([self._weight, np.empty_like(self._weight)])
        self._weight[tid] = weight
        self._id[term] = tid
        self._terms.append(term)
        return tid

    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, term: object) -> bool:
        if self.normalize and isinstance(term, str):
            term = normalize_keyword(term)
        return term in self._id

    @property
    def weights(self) -> npt.NDArray[np.float64]:
        """Weight per term id (a view; grows as terms are added)."""
        return self._weight[: len(self._terms)]

    @property
    def terms(self) -> list[str]:
        """Term strings by id."""
        return self._terms

    def ids(self, terms: Iterable[str], *, add: bool) -> npt.NDArray[np.int32]:
        """Term ids of ``terms``; unknown terms are added (``add=True``) or given -1.

        Terms are normalised first when the table normalises (see :func:`normalize_keyword`).
        """
        return np.asarray(self.id_list(terms, add=add), dtype=np.int32)

    def id_list(self, terms: Iterable[str], *, add: bool) -> list[int]:
        """:meth:`ids` as a list: for a few terms, no array is made."""
        out = []
        lookup = self._id.get
        for raw in terms:
            term = _normalized(raw) if self.normalize else raw
            tid = lookup(term)
            if tid is None:
                tid = self._add(term, self.default_weight) if add else -1
            out.append(tid)
        return out

    def reweigh_by_idf(self, *rows: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]
                       ) -> int:
        """Replace every weight by smoothed idf over keyword rows, in place.

        Each ``(ptr, terms)`` pair is a CSR of term-id sets (subscriptions' or messages'
        keywords); every row is one document. For runs with no corpus: the run's own
        subscriptions and messages stand in for it. Returns the number of documents.
        """
        n_docs = 0
        df = np.zeros(len(self), dtype=np.int64)
        for ptr, terms in rows:
            n_docs += int(np.asarray(ptr).size - 1)
            df += np.bincount(np.asarray(terms, dtype=np.int64), minlength=len(self))[:len(self)]
        self._weight[:len(self)] = smoothed_idf(n_docs, df.tolist())
        self.default_weight = float(smoothed_idf(n_docs, [0])[0])
        self._rank = None
        return n_docs

    def rank(self) -> npt.NDArray[np.int64]:
        """Position of each term id in the general keyword order (weight desc, id asc).

        Cached until a term is added. A new term takes the default weight, which never
        changes the relative order of the terms already there.
        """
        if self._rank is None or self._rank.size != len(self._terms):
            w = self.weights
            order = np.lexsort((np.arange(w.size), -w))
            rank = np.empty(w.size, dtype=np.int64)
            rank[order] = np.arange(w.size)
            self._rank = rank
        return self._rank

    @classmethod
    def from_idf(cls, documents: Iterable[Iterable[str]], *,
                 normalize: bool = DEFAULTS.normalize_keywords) -> TermWeights:
        """Smoothed idf over a corpus of tokenised documents (see :func:`smoothed_idf`).

        With ``normalize``, tokens are counted in their :func:`normalize_keyword` form, so
        "Delay" and "delay" are one term of the corpus as they are one keyword.
        """
        df: dict[str, int] = {}
        n = 0
        for doc in documents:
            n += 1
            tokens = {normalize_keyword(t) for t in doc} if normalize else set(doc)
            for term in tokens:
                if term:
                    df[term] = df.get(term, 0) + 1
        terms = sorted(df)
        w = smoothed_idf(n, [df[t] for t in terms])
        return cls(dict(zip(terms, w.tolist(), strict=True)),
                   default_weight=float(smoothed_idf(n, [0])[0]), normalize=normalize)
