"""The idf job: Spark weights equal the local TermWeights.from_idf, for every input format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from roadpubsub.cli import main as cli_main
from roadpubsub.index.io import read_weights
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.text import read_text_corpus, read_tweet_tokens, tokenize
from roadpubsub.spark_jobs.idf import compute_idf, read_corpus, write_idf


def _assert_same(got: TermWeights, want: TermWeights) -> None:
    assert got.terms == want.terms
    np.testing.assert_array_equal(got.weights, want.weights)
    assert got.default_weight == want.default_weight


@pytest.mark.spark
def test_idf_of_tweets_csv_equals_local(spark: SparkSession, tweets_csv: Path,
                                        tmp_path: Path) -> None:
    want = TermWeights.from_idf(read_tweet_tokens(tweets_csv))
    out, got = write_idf(spark, str(tweets_csv), tmp_path / "weights.parquet")
    _assert_same(got, want)
    _assert_same(read_weights(out), want)  # the file the index reads


@pytest.mark.spark
def test_idf_of_text_and_parquet_inputs(spark: SparkSession, tweets_csv: Path,
                                        tmp_path: Path) -> None:
    # One document per line: tweets with their line breaks folded, plus blank lines.
    texts = pd.read_csv(tweets_csv, usecols=["text"], dtype={"text": "string"})["text"]
    docs = [str(t).replace("\r", " ").replace("\n", " ") for t in texts.fillna("")][:3000]
    docs += ["", "   "]
    want = TermWeights.from_idf(tokenize(d) for d in docs)
    text_file = tmp_path / "corpus.txt"
    text_file.write_text("\n".join(docs) + "\n", encoding="utf-8")
    _assert_same(compute_idf(spark, read_corpus(spark, str(text_file))), want)
    parquet_file = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"body": pa.array([*docs, None], pa.string())}), parquet_file)
    want_pq = TermWeights.from_idf([*(tokenize(d) for d in docs), []])
    _assert_same(compute_idf(spark, read_corpus(spark, str(parquet_file), column="body")),
                 want_pq)
    with pytest.raises(ValueError, match="no 'text' column"):
        read_corpus(spark, str(parquet_file))


@pytest.mark.spark
def test_text_corpus_line_breaks_agree_with_spark(spark: SparkSession, tweets_csv: Path,
                                                  tmp_path: Path) -> None:
    """Unicode line breaks (U+2028, U+0085, form feed) stay inside a document on both
    sides; \\n, \\r\\n and \\r end one on both sides (issue 19, item 5)."""
    texts = pd.read_csv(tweets_csv, usecols=["text"], dtype={"text": "string"})["text"]
    docs = [str(t).replace("\r", " ").replace("\n", " ") for t in texts.fillna("")][:600]
    seps = ["\u2028", "\x85", "\x0c", "\u2029", "\x1c"]
    body = "".join(d + (seps[i % len(seps)] + "extra" if i % 3 == 0 else "")
                   + ("\r\n", "\r", "\n")[i % 3] for i, d in enumerate(docs))
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(body.encode("utf-8"))
    local = read_text_corpus(corpus)
    assert len(local) == len(docs)
    _assert_same(compute_idf(spark, read_corpus(spark, str(corpus))),
                 TermWeights.from_idf(local))


@pytest.mark.spark
def test_cli_idf_writes_weights(spark: SparkSession, tweets_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.parquet"
    assert cli_main(["spark", "idf", str(tweets_csv), "--out", str(out)]) == 0
    _assert_same(read_weights(out), TermWeights.from_idf(read_tweet_tokens(tweets_csv)))
    assert cli_main(["spark", "idf", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2


@pytest.mark.parametrize("bad", ["missing corpus", "output under a file"])
def test_cli_idf_refuses_bad_paths_before_starting_spark(
        tweets_csv: Path, tmp_path: Path, bad: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started before the paths were checked")

    monkeypatch.setattr("roadpubsub.spark_jobs.idf.session_from_args", no_spark)
    (tmp_path / "plain").write_text("x")
    corpus = tmp_path / "missing.csv" if bad == "missing corpus" else tweets_csv
    out = tmp_path / ("w.parquet" if bad == "missing corpus" else "plain/w.parquet")
    assert cli_main(["spark", "idf", str(corpus), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert ("corpus not found" if bad == "missing corpus" else "plain is a file") in err


@pytest.mark.spark
def test_cli_idf_with_file_urls_and_spaces(spark: SparkSession, tweets_csv: Path,
                                           tmp_path: Path) -> None:
    """Corpus and output as file:// URLs and as plain paths, with spaces (issue 19)."""
    texts = pd.read_csv(tweets_csv, usecols=["text"], dtype={"text": "string"})["text"]
    docs = [str(t).replace("\r", " ").replace("\n", " ") for t in texts.fillna("")][:2000]
    folder = tmp_path / "a folder"
    folder.mkdir()
    corpus = folder / "the corpus.txt"
    corpus.write_text("\n".join(docs) + "\n", encoding="utf-8")
    want = TermWeights.from_idf(tokenize(d) for d in docs)
    assert cli_main(["spark", "idf", f"file://{corpus}",
                     "--out", f"file://{folder}/out dir/w eights.parquet"]) == 0
    _assert_same(read_weights(folder / "out dir" / "w eights.parquet"), want)
    assert cli_main(["spark", "idf", str(corpus), "--out", str(folder / "w 2.parquet")]) == 0
    _assert_same(read_weights(folder / "w 2.parquet"), want)
    # An output that is the input is refused, URL or not.
    assert cli_main(["spark", "idf", str(corpus), "--out", f"file://{corpus}"]) == 2
    assert corpus.read_text(encoding="utf-8").startswith(docs[0])
