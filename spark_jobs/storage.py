"""Where the Spark jobs read and write: local paths and storage URLs, atomically.

Every input and output of a Spark job may be a local path (spaces allowed) or a URL that
all nodes of a cluster see (``file:///...``, ``hdfs://namenode/...``, ``s3a://bucket/...``).
This module is the one place that tells them apart and moves bytes:

* What a path is, and the string Spark's readers and writers are given (a local path
  becomes ``file:/abs/path``, so a cluster whose default filesystem is HDFS still reads
  the driver's local file rather than an HDFS path of the same name), is told by
  :mod:`roadpubsub.spark_jobs.storage_paths` (``is_url``, ``local_path``, ``spark_uri``).
* :func:`check_output`: the start-of-job check of an output, as
  :func:`roadpubsub.roadnet.files.check_output_path` does it for local paths (it is called for
  them, and for ``file://`` URLs): refuse an output that is one of the inputs, a folder
  where a file belongs (or the reverse), a parent that is a file, and a place where
  nothing can be created (probed by creating and deleting an empty file).
* :func:`atomic_output_dir`: yields a temporary URI beside the target for Spark's
  writers and moves it over the target when the block succeeds (a rename of the
  temporary directory; the previous output is moved aside first and deleted after).
  A failed block leaves the previous output as it was and no temporary behind.
  On object stores (``s3a``) a rename is a copy: a reader must then trust an output only
  with its ``_SUCCESS`` marker, which Spark's committer writes last.
* :func:`local_copy` and :func:`write_via_local`: whole small files (a network, a
  weights table, a bound table's metadata) read on or written from the driver, through
  a local temporary copy; local paths are used in place.

Remote files go through the Hadoop FileSystem of the running Spark session (the JVM
gateway: ``org.apache.hadoop.fs.Path(uri).getFileSystem(hadoopConfiguration)``), so every
scheme the cluster's Hadoop configuration knows works, with its credentials, and nothing
else has to be installed. Local paths need no Spark session at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roadpubsub.roadnet.files import OutputIsInputError, check_output_path
from roadpubsub.spark_jobs.storage_paths import (
    PathLike,
    StorageError,
    hadoop_call,
    hadoop_filesystem,
    hadoop_path,
    is_url,
    java_message,
    local_path,
    qualified_uri,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "atomic_output_dir",
    "check_output",
    "local_copies",
    "local_copy",
    "network_files",
    "read_text",
    "write_text",
    "write_via_local",
]

# ---------------------------------------------------------------------------- checks
def check_output(
    spark: SparkSession | None,
    path: PathLike,
    *,
    folder: bool = False,
    what: str = "output",
    inputs: Iterable[PathLike | None] = (),
) -> str:
    """Check an output before the work starts; returns it as given.

    Local paths and ``file:`` URLs go to :func:`roadpubsub.roadnet.files.check_output_path` (with
    the inputs that are local too), which also locks the output for the process. Other
    URLs need ``spark`` (or an active session) and are checked through Hadoop: not one
    of ``inputs`` (compared fully qualified), not a file where a folder belongs or the
    reverse, under a folder (not a file) where an empty probe file can be created.

    Raises
    ------
    roadnet.files.OutputIsInputError
        The output is one of ``inputs``.
    NotADirectoryError, IsADirectoryError, PermissionError
        As :func:`roadpubsub.roadnet.files.check_output_path`.
    StorageError
        A URL whose folder cannot be written, or no filesystem for its scheme.
    """
    text = os.fspath(path)
    given = [os.fspath(p) for p in inputs if p is not None]
    local = local_path(text)
    if local is not None:
        local_inputs = [lp for lp in (local_path(p) for p in given) if lp is not None]
        check_output_path(local, folder=folder, what=what, inputs=local_inputs)
        return text
    return _remote_check(spark, text, folder=folder, what=what,
                         inputs=[p for p in given if local_path(p) is None])


def _remote_check(spark: SparkSession | None, text: str, *, folder: bool, what: str,
                  inputs: Iterable[str]) -> str:
    """:func:`check_output` of a URL through Hadoop (any scheme, ``file:`` included)."""
    target = qualified_uri(spark, text)
    for source in inputs:
        if is_url(source) and qualified_uri(spark, source) == target:
            msg = (f"{what} {text} is the input {source}: writing it would destroy the "
                   f"input")
            raise OutputIsInputError(msg, hint="choose another output path")
    fs, jpath = hadoop_filesystem(spark, text)
    if hadoop_call(text, "check it", lambda: fs.exists(jpath)):
        isdir = bool(fs.getFileStatus(jpath).isDirectory())
        if isdir != folder:
            kind = "a file" if folder else "a folder"
            msg = f"{what} {text}: is {kind}; expected {'a folder' if folder else 'a file'}"
            raise (NotADirectoryError if folder else IsADirectoryError)(msg)
    parent = jpath if folder else jpath.getParent()
    while parent is not None and not fs.exists(parent):
        parent = parent.getParent()
    if parent is None:  # the root of a bucket always "exists"; be safe anyway
        return text
    if not fs.getFileStatus(parent).isDirectory():
        msg = f"{what} {text}: {parent.toString()} is a file, so no folder can be made under it"
        raise NotADirectoryError(msg)
    probe = fs.makeQualified(parent).suffix(f"/.roadpubsub-probe-{uuid.uuid4().hex[:12]}")
    try:
        fs.create(probe, False).close()
        fs.delete(probe, False)
    except Exception as exc:
        msg = (f"{what} {text}: folder {parent.toString()} is not writable "
               f"({java_message(exc)})")
        raise StorageError(msg) from exc
    return text


# ---------------------------------------------------------------------------- atomic output
def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return bool(result == 0)


def _replace_local_dir(tmp: Path, final: Path) -> None:
    """Put directory ``tmp`` at ``final``, replacing whatever was there."""
    if not final.exists() and not final.is_symlink():
        os.rename(tmp, final)
        return
    if _exchange(tmp, final):
        shutil.rmtree(tmp, ignore_errors=True)  # now holds the previous output
        return
    # Fallback: two renames; between them ``final`` is briefly absent, never half-written.
    old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(final, old)
    try:
        os.rename(tmp, final)
    except BaseException:
        os.rename(old, final)
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)


@contextlib.contextmanager
def _local_atomic_dir(final: Path) -> Iterator[Path]:
    target = final.absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        yield tmp
        if not tmp.exists():
            msg = f"nothing was written for {target}"
            raise StorageError(msg)
        _replace_local_dir(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _remote_atomic_dir(spark: SparkSession | None, final: str) -> Iterator[str]:
    fs, jpath = hadoop_filesystem(spark, final)
    parent = jpath.getParent()
    name = str(jpath.getName())
    tmp = hadoop_path(spark, parent, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        yield str(tmp.toString())
        if not fs.exists(tmp):
            msg = f"nothing was written for {final}"
            raise StorageError(msg)
        if fs.exists(jpath):
            old = hadoop_path(spark, parent, f".{name}.old-{uuid.uuid4().hex[:8]}")
            if not fs.rename(jpath, old):
                msg = f"{final}: cannot move the previous output aside"
                raise StorageError(msg)
            if not fs.rename(tmp, jpath):
                fs.rename(old, jpath)
                msg = f"{final}: cannot rename the new output into place"
                raise StorageError(msg)
            fs.delete(old, True)
        elif not fs.rename(tmp, jpath):
            msg = f"{final}: cannot rename the new output into place"
            raise StorageError(msg)
    finally:
        with contextlib.suppress(Exception):
            if fs.exists(tmp):
                fs.delete(tmp, True)


@contextlib.contextmanager
def atomic_output_dir(final: PathLike, *, spark: SparkSession | None = None
                      ) -> Iterator[str]:
    """A temporary location beside ``final`` (a path or URL), moved over it on success.

    The location yielded does not exist yet (Spark's writers create it): a local path
    (``str``) for a local ``final``, else a URI of the same filesystem. On any exception
    it is removed and ``final`` is untouched. ``spark`` (or the active session) is needed
    only for a URL other than ``file:``.

    Examples
    --------
    >>> with atomic_output_dir("out/deliveries.parquet") as tmp:  # doctest: +SKIP
    ...     df.write.parquet(spark_uri(tmp))
    """
    local = local_path(final)
    if local is not None:
        with _local_atomic_dir(local) as tmp:
            yield str(tmp)
    else:
        with _remote_atomic_dir(spark, os.fspath(final)) as uri:
            yield uri


# ---------------------------------------------------------------------------- whole files
@contextlib.contextmanager
def local_copy(path: PathLike, *, spark: SparkSession | None = None) -> Iterator[Path]:
    """A local file holding the content of ``path``, for readers that need a whole file.

    A local path (or ``file:`` URL) is used in place. Any other URL is copied by Hadoop
    into a fresh temporary folder under its own name (so suffix-based readers work), and
    the copy is deleted after the block; errors raised in the block that name the copy
    are re-raised naming the URL. ``companions`` of some formats (DIMACS ``.co`` beside
    ``.gr``) must be copied with :func:`local_copies`.

    Raises
    ------
    FileNotFoundError
        No such file.
    StorageError
        The URL cannot be read.
    """
    with local_copies([path], spark=spark) as paths:
        yield paths[0]


@contextlib.contextmanager
def local_copies(paths: Iterable[PathLike], *, spark: SparkSession | None = None
                 ) -> Iterator[list[Path]]:
    """:func:`local_copy` of several files into one temporary folder (for companions).

    A remote file that does not exist is skipped (its copy path is returned but absent),
    so optional companions can be asked for; the reader reports what it misses.
    """
    given = [os.fspath(p) for p in paths]
    if all(local_path(p) is not None for p in given):
        yield [Path(local_path(p) or p) for p in given]
        return
    with _remote_copies(spark, given) as out:
        yield out


def network_files(path: PathLike) -> list[str]:
    """A network file and the companions its reader may need beside it (DIMACS ``.co``
    beside ``.gr``, ``.cedge`` beside ``.cnode``), for :func:`local_copies`."""
    base = os.fspath(path).rstrip("/")
    lower = base.lower()
    for arcs, coords in ((".gr.gz", ".co.gz"), (".gr", ".co")):
        if lower.endswith(arcs):
            stem = base[: -len(arcs)]
            return [base, *dict.fromkeys([stem + coords, stem + ".co", stem + ".co.gz"])]
    if lower.endswith(".cnode"):
        return [base, base[: -len(".cnode")] + ".cedge"]
    return [base]


@contextlib.contextmanager
def _remote_copies(spark: SparkSession | None, given: list[str]) -> Iterator[list[Path]]:
    """Copies through Hadoop of every URL in ``given`` (``file:`` ones too); local paths
    are used in place."""
    folder = Path(tempfile.mkdtemp(prefix="roadpubsub-copy-"))
    out: list[Path] = []
    names: dict[str, str] = {}
    try:
        for p in given:
            if not is_url(p):
                out.append(Path(p))
                continue
            dest = folder / str(hadoop_filesystem(spark, p)[1].getName())
            if not _copy_to_local(spark, p, dest) and p == given[0]:
                msg = f"file not found: {p}"
                raise FileNotFoundError(msg)
            names[str(dest)] = p
            out.append(dest)
        try:
            yield out
        except Exception as exc:
            text = str(exc)
            if any(k in text for k in names):
                for k, v in names.items():
                    text = text.replace(k, v)
                raise _same_kind(exc, text) from exc
            raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy_to_local(spark: SparkSession | None, path: str, dest: Path) -> bool:
    """Copy a remote file to the local ``dest``; False when it does not exist."""
    fs, jpath = hadoop_filesystem(spark, path)
    if not hadoop_call(path, "check it", lambda: fs.exists(jpath)):
        return False
    local = hadoop_path(spark, "file:" + str(dest))
    # useRawLocalFileSystem: no .crc checksum file beside the copy.
    hadoop_call(path, "copy it to the driver",
                lambda: fs.copyToLocalFile(False, jpath, local, True))
    return True


def _same_kind(exc: Exception, text: str) -> Exception:
    """An exception like ``exc`` with message ``text`` (hint kept where there is one)."""
    kind: Any = type(exc)
    try:
        hint = getattr(exc, "hint", None)
        new = kind(text, hint=hint) if hint is not None else kind(text)
    except TypeError:
        new = StorageError(text)
    return new


def read_text(path: PathLike, *, spark: SparkSession | None = None) -> str:
    """The UTF-8 text of a small file (local path or URL)."""
    with local_copy(path, spark=spark) as p:
        return p.read_text(encoding="utf-8")


def write_via_local(path: PathLike, write: Callable[[Path], Any], *,
                    spark: SparkSession | None = None) -> Any:
    """Write a whole file at ``path`` (local path or URL) atomically with ``write(local)``.

    ``write`` receives a local path to write (with the target's name, so suffix-based
    writers pick the format) and its result is returned. A local target is written in
    place by ``write`` (which must itself be atomic, as the project's writers are). A
    remote one is written to a local temporary file, uploaded beside the target under a
    temporary name and renamed over it.
    """
    local = local_path(path)
    if local is not None:
        return write(local)
    return _remote_write(spark, os.fspath(path), write)


def _remote_write(spark: SparkSession | None, path: str, write: Callable[[Path], Any]) -> Any:
    """:func:`write_via_local` through Hadoop (any URL, ``file:`` included)."""
    fs, jpath = hadoop_filesystem(spark, path)
    folder = Path(tempfile.mkdtemp(prefix="roadpubsub-upload-"))
    tmp = hadoop_path(spark, jpath.getParent(), f".{jpath.getName()}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        result = write(folder / str(jpath.getName()))
        src = hadoop_path(spark, "file:" + str(folder / str(jpath.getName())))
        hadoop_call(path, "upload it", lambda: fs.copyFromLocalFile(False, True, src, tmp))
        if fs.exists(jpath) and not fs.delete(jpath, False):
            msg = f"{path}: cannot replace the previous file"
            raise StorageError(msg)
        if not fs.rename(tmp, jpath):
            msg = f"{path}: cannot rename the new file into place"
            raise StorageError(msg)
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(Exception):
            if fs.exists(tmp):
                fs.delete(tmp, False)


def write_text(path: PathLike, text: str, *, spark: SparkSession | None = None) -> None:
    """Write a small UTF-8 text file (local path or URL) atomically."""
    write_via_local(path, _text_writer(text), spark=spark)


def _text_writer(text: str) -> Callable[[Path], None]:
    from roadpubsub.roadnet.files import atomic_paths

    def write(local: Path) -> None:
        with atomic_paths(local) as (tmp,):
            tmp.write_text(text, encoding="utf-8")

    return write


def _remote_write_text(spark: SparkSession | None, path: str, text: str) -> None:
    _remote_write(spark, path, _text_writer(text))
