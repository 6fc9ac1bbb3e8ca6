"""Keywords from free text (tweets, POI names): one tokenizer for the whole project.

:func:`tokenize` lower-cases, drops URLs and @mentions, keeps words (``#tag`` becomes
``tag``), removes English stop words (:data:`STOP_WORDS`), tokens of one character and
tokens without a letter (bare numbers), and returns each remaining token once, in order of
first appearance. Apostrophes inside words are handled before the stop-word test, so
``didn't`` and ``it's`` are stop words while ``customer's`` becomes ``customer``.
"""

from __future__ import annotations

import html
import os
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.settings import shared_data_hint

__all__ = ["STOP_WORDS", "read_text_corpus", "read_tweet_tokens", "split_lines", "tokenize",
           "tokenize_many"]

#: English stop words: NLTK's English list, the common contractions (with and without
#: apostrophe, as tweets write them) and a few tokens of tweet markup (rt, amp, via).
STOP_WORDS: frozenset[str] = frozenset([
    "a", "about", "above", "after", "again", "against", "ain", "all", "also", "am", "amp",
    "an", "and", "any", "are", "aren", "arent", "as", "at", "be", "because", "been", "before",
    "being", "below", "between", "both", "but", "by", "can", "cannot", "cant", "could",
    "couldn", "couldnt", "d", "did", "didn", "didnt", "do", "does", "doesn", "doesnt", "doing",
    "don", "dont", "down", "during", "each", "few", "for", "from", "further", "gt", "had",
    "hadn", "hadnt", "has", "hasn", "hasnt", "have", "haven", "havent", "having", "he", "her",
    "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "im", "in", "into",
    "is", "isn", "isnt", "it", "its", "itself", "ive", "just", "lets", "ll", "lt", "m", "ma",
    "me", "mightn", "more", "most", "mustn", "my", "myself", "needn", "no", "nor", "not",
    "now", "o", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves",
    "out", "over", "own", "re", "rt", "s", "same", "shan", "she", "should", "shouldn",
    "shouldnt", "so", "some", "such", "t", "than", "that", "thats", "the", "their", "theirs",
    "them", "themselves", "then", "there", "these", "they", "theyre", "this", "those",
    "through", "to", "too", "under", "until", "up", "ve", "very", "via", "was", "wasn",
    "wasnt", "we", "were", "weren", "werent", "what", "whats", "when", "where", "which",
    "while", "who", "whom", "why", "will", "with", "won", "wont", "would", "wouldn", "wouldnt",
    "y", "you", "youll", "your", "youre", "yours", "yourself", "yourselves", "youve",
    # contractions, tested whole before their apostrophe is dropped
    "aren't", "can't", "couldn't", "didn't", "doesn't", "don't", "hadn't", "hasn't", "haven't",
    "he'd", "he'll", "he's", "here's", "i'd", "i'll", "i'm", "i've", "isn't", "it'd", "it'll",
    "it's", "let's", "mightn't", "mustn't", "needn't", "shan't", "she'd", "she'll", "she's",
    "should've", "shouldn't", "that'll", "there's", "they'd", "they'll", "they're", "they've",
    "wasn't", "we'd", "we'll", "we're", "we've", "weren't", "what's", "who's", "won't",
    "wouldn't", "y'all", "you'd", "you'll", "you're", "you've",
])

_URL = re.compile(r"(?:https?://|www\.)\S+")
_MENTION = re.compile(r"@\w+")
# Words: runs of letters/digits, possibly joined by inner apostrophes (don't, o'neil).
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_HAS_LETTER = re.compile(r"[^\W\d_]")


def _normalise(token: str) -> str | None:
    """A raw word -> keyword, or None when it is a stop word / too short / no letter."""
    if token in STOP_WORDS:
        return None
    if token.endswith("'s"):
        token = token[:-2]
    token = token.replace("'", "")
    if len(token) < 2 or token in STOP_WORDS or _HAS_LETTER.search(token) is None:
        return None
    return token


def tokenize(text: str | None) -> list[str]:
    """Keywords of one text, each once, in order of first appearance.

    Parameters
    ----------
    text
        Any text; ``None`` (or a float NaN read from a table) gives ``[]``.

    Returns
    -------
    list of str
        Lower-case keywords without URLs, @mentions, punctuation, stop words, one-letter
        tokens or bare numbers.

    Examples
    --------
    >>> tokenize("@united Thanks!! #Lost bag at http://t.co/x  ... it's the 2nd time")
    ['thanks', 'lost', 'bag', '2nd', 'time']
    """
    if not isinstance(text, str) or not text:
        return []
    # NFC and case folding: the keyword form of roadpubsub.index.terms.normalize_keyword.
    s = unicodedata.normalize("NFC", html.unescape(text)).translate(_APOSTROPHES).casefold()
    s = _MENTION.sub(" ", _URL.sub(" ", s))
    out: dict[str, None] = {}
    for raw in _WORD.findall(s):
        tok = _normalise(raw)
        if tok is not None:
            out[tok] = None
    return list(out)


def tokenize_many(texts: Iterable[str | None]) -> list[list[str]]:
    """:func:`tokenize` over many texts (one list per text, empty lists kept)."""
    return [tokenize(t) for t in texts]


def read_tweet_tokens(path: str | os.PathLike[str], *, column: str = "text") -> list[list[str]]:
    """Tokenised tweets of a CSV file such as ``text/airline_tweets.csv``.

    Parameters
    ----------
    path
        A CSV file with a text column.
    column
        Name of that column.

    Returns
    -------
    list of list of str
        One keyword list per row, in file order (possibly empty).

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file has no ``column``.
    """
    p = Path(path)
    if not p.exists():
        msg = f"tweet corpus not found: {p}"
        exc = FileNotFoundError(msg)
        exc.hint = shared_data_hint()  # type: ignore[attr-defined]
        raise exc
    frame = pd.read_csv(p, usecols=lambda c: c == column, dtype={column: "string"})
    if column not in frame.columns:
        msg = f"{p}: no {column!r} column"
        raise InputError(msg)
    return tokenize_many(frame[column].fillna("").tolist())


_LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Documents of a plain-text corpus: lines ended by ``\\n``, ``\\r\\n`` or ``\\r``.

    The rule of Spark's (Hadoop's) text reader, so ``roadpubsub spark idf`` and the local
    readers count the same documents; other Unicode line breaks (U+2028, U+0085, form
    feed), which :meth:`str.splitlines` would split on, stay inside a document. A final
    line end does not start an empty document; empty lines in between are documents.

    Examples
    --------
    >>> split_lines("a\\nb\\u2028c\\r\\nd\\x0ce\\n")
    ['a', 'b\\u2028c', 'd\\x0ce']
    """
    parts = _LINE_END.split(text)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def read_text_corpus(path: str | os.PathLike[str]) -> list[list[str]]:
    """Tokenised documents of a corpus file: a ``.csv`` with a ``text`` column, or plain text
    with one document per line (any other suffix)."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return read_tweet_tokens(p)
    if not p.exists():
        msg = f"text corpus not found: {p}"
        raise FileNotFoundError(msg)
    with p.open("r", encoding="utf-8") as fh:
        return tokenize_many(split_lines(fh.read()))
