"""Local paths and storage URLs: what a path names, the string Spark is given for it, and
the few questions asked of it (exists, is a directory, its entries), answered on the
local disk or through the Hadoop FileSystem of the running Spark session.

The outputs' checks, atomic output directories and whole-file copies built on these are
in :mod:`roadpubsub.spark_jobs.storage`. The Hadoop helpers (:func:`hadoop_filesystem`,
:func:`hadoop_path`, :func:`hadoop_call`, :func:`qualified_uri`, :func:`java_message`)
are for that module: they need the running Spark session for a URL.

Examples
--------
>>> is_url("s3a://bucket/rome.bounds"), is_url("out dir/rome.bounds")
(True, False)
>>> local_path("file:///tmp/a b/x.parquet")
PosixPath('/tmp/a b/x.parquet')
>>> local_path("hdfs://nn/x") is None
True
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from roadpubsub.roadnet.errors import RoadPubSubError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "PathLike",
    "StorageError",
    "exists",
    "hadoop_call",
    "hadoop_filesystem",
    "hadoop_path",
    "is_dir",
    "is_url",
    "java_message",
    "list_names",
    "local_path",
    "qualified_uri",
    "spark_uri",
]

PathLike = str | os.PathLike[str]

# A scheme of two or more letters: "C:" (a Windows drive) is not a URL.
_URL = re.compile(r"\A([A-Za-z][A-Za-z0-9+.-]+):")


class StorageError(RoadPubSubError, OSError):
    """A storage URL could not be read or written (the message names it and the cause)."""


def is_url(path: PathLike) -> bool:
    """Whether ``path`` is a URL (``scheme:...``) rather than a local path."""
    return bool(_URL.match(os.fspath(path)))


def local_path(path: PathLike) -> Path | None:
    """The local file a path or ``file:`` URL names; None for any other URL.

    ``file:///a b/x``, ``file:/a b/x`` and ``file://localhost/a b/x`` all name ``/a b/x``;
    percent escapes are decoded (``file:///a%20b`` is ``/a b``), as a browser would.
    """
    text = os.fspath(path)
    found = _URL.match(text)
    if found is None:
        return Path(text)
    if found.group(1).lower() != "file":
        return None
    rest = text[found.end():]
    if rest.startswith("//"):
        host, _, tail = rest[2:].partition("/")
        if host not in ("", "localhost"):
            return None
        rest = "/" + tail
    return Path(unquote(rest))


def spark_uri(path: PathLike) -> str:
    """What Spark's readers and writers are given for ``path``.

    A URL of another scheme is passed as given. A local path (relative ones resolved
    against the current folder) and a ``file:`` URL become ``file:/absolute/path``,
    unescaped, which Hadoop parses with spaces and all: a ``file:`` URL is decoded by
    :func:`local_path`, the one rule of the driver's checks and of Spark (Hadoop itself
    would read ``file:///a%20b`` as a folder named ``a%20b``).
    """
    text = os.fspath(path)
    local = local_path(text)
    if local is None:
        return text
    return "file:" + str(local.absolute())


def _display(path: PathLike) -> str:
    return os.fspath(path)


# ---------------------------------------------------------------------------- Hadoop
def _session(spark: SparkSession | None, path: PathLike) -> SparkSession:
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    if spark is None:
        msg = f"{_display(path)}: a storage URL needs a running Spark session"
        raise StorageError(msg)
    return spark


def hadoop_path(spark: SparkSession | None, *parts: Any) -> Any:
    """A new ``org.apache.hadoop.fs.Path(*parts)`` in the driver's JVM."""
    jvm: Any = _session(spark, str(parts[-1])).sparkContext._jvm  # the gateway to Hadoop
    return jvm.org.apache.hadoop.fs.Path(*parts)


def hadoop_filesystem(spark: SparkSession | None, path: PathLike) -> tuple[Any, Any]:
    """(FileSystem, Path) of the JVM for a URL; needs the running session."""
    spark = _session(spark, path)
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    jpath = hadoop_path(spark, os.fspath(path))
    try:
        fs = jpath.getFileSystem(conf)
    except Exception as exc:  # py4j wraps the Java exception
        msg = f"{_display(path)}: no filesystem for this URL ({java_message(exc)})"
        raise StorageError(msg) from exc
    return fs, jpath


def java_message(exc: BaseException) -> str:
    """The first line of a Java exception's message, without the py4j preamble."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            return f"{java.getClass().getSimpleName()}: {java.getMessage()}"
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def hadoop_call(path: PathLike, what: str, func: Callable[[], Any]) -> Any:
    """``func()``, a Java failure raised as :class:`StorageError` naming ``path`` and
    ``what`` could not be done (``"cannot list it"``)."""
    try:
        return func()
    except StorageError:
        raise
    except Exception as exc:
        msg = f"{_display(path)}: cannot {what} ({java_message(exc)})"
        raise StorageError(msg) from exc


def exists(spark: SparkSession | None, path: PathLike) -> bool:
    """Whether a local path or URL exists."""
    local = local_path(path)
    if local is not None:
        return local.exists()
    fs, jpath = hadoop_filesystem(spark, path)
    return bool(hadoop_call(path, "check it", lambda: fs.exists(jpath)))


def is_dir(spark: SparkSession | None, path: PathLike) -> bool:
    """Whether a local path or URL is an existing directory."""
    local = local_path(path)
    if local is not None:
        return local.is_dir()
    fs, jpath = hadoop_filesystem(spark, path)
    return bool(hadoop_call(path, "check it", lambda: fs.exists(jpath)
                      and fs.getFileStatus(jpath).isDirectory()))


def list_names(spark: SparkSession | None, path: PathLike) -> list[str]:
    """Names of the entries of a directory (local path or URL), sorted."""
    local = local_path(path)
    if local is not None:
        return sorted(os.listdir(local))
    fs, jpath = hadoop_filesystem(spark, path)
    status = hadoop_call(path, "list it", lambda: fs.listStatus(jpath))
    return sorted(str(st.getPath().getName()) for st in status)


def qualified_uri(spark: SparkSession | None, path: PathLike) -> str:
    """Fully qualified URI of a URL (scheme, authority, normalised path)."""
    fs, jpath = hadoop_filesystem(spark, path)
    return str(fs.makeQualified(jpath).toString()).rstrip("/")
