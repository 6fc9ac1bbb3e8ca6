"""The id and keyword helpers of :mod:`roadpubsub.index.model`."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from roadpubsub.index.model import has_repeats

TOP = 2**63 - 1


@pytest.mark.parametrize(("ids", "want"), [
    ([], False),
    ([7], False),
    ([3, 1, 2], False),
    ([5, 1, 2, 5], True),  # the twins at both ends
    ([1, 2, 3, 3], True),  # the twins last
    ([TOP, TOP - 1, -TOP - 1], False),  # the extremes apart, no overflow in the compare
    ([TOP - 1, 0, TOP, TOP], True),
    ([-(2**63), 4, -(2**63)], True),
    ([-1, 1, -2, 2], False),
])
def test_has_repeats(ids: list[int], want: bool) -> None:
    arr = np.array(ids, dtype=np.int64)
    assert has_repeats(arr) is want
    assert has_repeats(arr) == (np.unique(arr).size < arr.size)


def test_has_repeats_leaves_its_input_unsorted() -> None:
    arr = np.array([9, 3, 9, 1], dtype=np.int64)
    assert has_repeats(arr)
    assert arr.tolist() == [9, 3, 9, 1]


@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_keyword_csr_is_each_rows_sorted_set_of_known_ids(
        chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows become sorted sets of term ids, unknown terms dropped (messages) or added
    (subscriptions), however many rows the ids are gathered over before an array."""
    import roadpubsub.index.model as model
    from roadpubsub.index.model import keyword_csr
    from roadpubsub.index.terms import TermWeights, normalize_keyword

    monkeypatch.setattr(model, "_CSR_CHUNK", chunk)
    rows = [["b", "A", "a ", "zz"], [], ["zz"], ["c", "b", "B", "STRASSE", "straße"], ["q"]]
    w = TermWeights({"a": 1.0, "b": 2.0, "c": 3.0, "strasse": 1.5})
    ptr, terms = keyword_csr(rows, w, add=False)
    def one(k: str) -> int:  # the term id of one keyword, -1 if unknown
        return int(w.ids([k], add=False)[0])

    want = [sorted({one(k) for k in r} - {-1}) for r in rows]
    assert ptr.dtype == np.int64 and terms.dtype == np.int32
    assert [terms[a:b].tolist() for a, b in itertools.pairwise(ptr)] == want
    ptr, terms = keyword_csr(rows, w, add=True)  # "zz" and "q" join the table
    assert len(w) == 6 and one("zz") >= 0 and one(normalize_keyword("Q")) >= 0
    got = [terms[a:b].tolist() for a, b in itertools.pairwise(ptr)]
    assert got == [sorted({one(k) for k in r}) for r in rows]
