"""The tokenizer: URLs, mentions, hashtags, punctuation, stop words, uniqueness; tweet CSV."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.index.text import (
    STOP_WORDS,
    read_text_corpus,
    read_tweet_tokens,
    tokenize,
    tokenize_many,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@VirginAmerica What @dhepburn said.", ["said"]),
        ("Check http://t.co/mWpG7grEZP and https://x.com/a?b=1 www.example.com now",
         ["check"]),
        ("#Lost #bag at #JFK!!!", ["lost", "bag", "jfk"]),
        ("Flight, flight; FLIGHT... delayed", ["flight", "delayed"]),
        ("I didn't fly; it's 2 late, you're a x b", ["fly", "late"]),
        ("the customer's bags & luggage", ["customer", "bags", "luggage"]),
        ("won\u2019t go away :)", ["go", "away"]),
        ("gate 23 at 10:30 on 2nd flight ua1234", ["gate", "2nd", "flight", "ua1234"]),
        ("snake_case words-with-dashes", ["snake", "case", "words", "dashes"]),
        ("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e", ["caf\u00e9", "cr\u00e8me", "br\u00fbl\u00e9e"]),
        ("fish &amp; chips &gt; nothing", ["fish", "chips", "nothing"]),
        ("", []),
    ],
)
def test_tokenize_examples(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_tokenize_missing_values() -> None:
    assert tokenize(None) == []
    assert tokenize(float("nan")) == []  # type: ignore[arg-type]


def test_tokenize_is_unique_in_first_order() -> None:
    out = tokenize("delay Delay baggage delay gate baggage")
    assert out == ["delay", "baggage", "gate"]


def test_tokens_are_clean() -> None:
    text = "RT @a: OMG!!! The plane's WiFi is down... 5 hours #fail http://t.co/z &amp; more"
    for tok in tokenize(text):
        assert tok == tok.lower()
        assert len(tok) >= 2
        assert tok not in STOP_WORDS
        assert tok.replace("\u00e9", "e").isalnum()


def test_stop_words_cover_common_words_and_contractions() -> None:
    for word in ("the", "and", "you", "didn't", "it's", "i'm", "we're", "amp"):
        assert word in STOP_WORDS
    assert all(w == w.lower() for w in STOP_WORDS)
    assert isinstance(STOP_WORDS, frozenset)


def test_tokenize_many_keeps_rows() -> None:
    assert tokenize_many(["a the", "lost bag", None]) == [[], ["lost", "bag"], []]


def test_read_tweet_tokens_small_csv(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('tweet_id,text\n1,"Lost my bag, @united!"\n2,\n3,"great crew"\n',
                    encoding="utf-8")
    assert read_tweet_tokens(path) == [["lost", "bag"], [], ["great", "crew"]]
    txt = tmp_path / "docs.txt"
    txt.write_text("lost bag\ngreat crew\n", encoding="utf-8")
    assert read_text_corpus(txt) == [["lost", "bag"], ["great", "crew"]]
    assert read_text_corpus(path)[0] == ["lost", "bag"]


def test_read_tweet_tokens_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_tweet_tokens(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,body\n1,hello\n", encoding="utf-8")
    with pytest.raises(ValueError, match="text"):
        read_tweet_tokens(bad)


def test_airline_tweets(shared: Callable[[str], Path]) -> None:
    docs = read_tweet_tokens(shared("text/airline_tweets.csv"))
    assert len(docs) == 14_640
    lengths = np.array([len(d) for d in docs])
    # The data README quotes a median of 9 keywords after stop-word removal.
    assert np.median(lengths) == 9
    assert lengths.max() <= 30
    vocab = {t for d in docs for t in d}
    assert 8_000 < len(vocab) < 20_000
    assert "flight" in vocab and "the" not in vocab
    assert not any(t.startswith(("http", "@", "#")) for t in vocab)
