"""Spark plumbing shared by the jobs: the session, progress lines, broadcasts, atomic output.

* :func:`get_spark` checks for Java 17+ first (:class:`JavaNotFoundError`, one line with a
  hint), then creates or reuses a :class:`~pyspark.sql.SparkSession` (``local[*]`` unless
  ``master`` says otherwise).
* :func:`stage` names the Spark jobs of a block (``setJobDescription``, visible in the UI)
  and prints one concise line per stage on stderr.
* :func:`broadcast_payload` / :func:`cached_payload` ship numpy arrays (network, cells,
  bounds, vocabulary) to the tasks once; inside a Python worker the object rebuilt from a
  broadcast is cached, so the tasks of one job that share a worker rebuild it once.
* :func:`atomic_output_dir` yields a fresh temporary directory beside a local target and
  swaps it in only when the block succeeds (the local case of
  :func:`roadpubsub.spark_jobs.storage.atomic_output_dir`, which also takes storage URLs).
* :func:`task_timer` collects per-task timings for the benchmarks.
* :func:`session_conf` sets SQL settings for a block and restores them after it;
  :func:`jvm_class_problem` tells, in one line, which ``--packages`` a missing JVM class
  needs (the GraphFrames engine, the Kafka source).

The jobs run the same numpy/numba functions as the local path inside their tasks; the
Python workers must be able to import ``roadpubsub`` (an install, or the checkout on
their ``PYTHONPATH``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from roadpubsub.roadnet.errors import RoadPubSubError, format_error
from roadpubsub.roadnet.files import release_output_locks

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "FAST_START_JAVA_OPTIONS",
    "MIN_JAVA",
    "JavaNotFoundError",
    "SparkJobError",
    "TaskTimes",
    "add_spark_arguments",
    "atomic_output_dir",
    "broadcast_payload",
    "cached_payload",
    "get_spark",
    "java_version",
    "jvm_class_problem",
    "log",
    "require_java",
    "run_job",
    "session_conf",
    "session_from_args",
    "spark_errors",
    "spark_failure_message",
    "stage",
    "task_timer",
]

#: Spark master used when none is given: every core of this machine.
DEFAULT_MASTER = "local[*]"
#: Oldest Java major version Spark 4 runs on.
MIN_JAVA = 17
#: JVM options for local masters: C1-only JIT. On a 2-core machine the C2 compiler
#: competes with the job for the cores; measured here it cut session start from ~28 s to
#: ~9 s. The jobs spend their time in Python workers, so the JVM's peak speed matters little.
FAST_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

_JAVA_HINT = "Spark 4 needs Java 17+: install openjdk-17-jre-headless and set JAVA_HOME"

T = TypeVar("T")


class JavaNotFoundError(RoadPubSubError, RuntimeError):
    """No Java 17+ runtime was found for Spark (``hint`` says how to get one)."""

    hint = _JAVA_HINT


class SparkJobError(RoadPubSubError, RuntimeError):
    """A Spark job could not run as asked (the message names the cause and the fix)."""



# ---------------------------------------------------------------------------- Java
def _java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    return shutil.which("java")


def java_version() -> tuple[str | None, int | None]:
    """(java executable, major version) of the Java Spark would use; None where unknown.

    ``JAVA_HOME/bin/java`` wins over ``java`` on the PATH, as in Spark's launcher.
    """
    exe = _java_executable()
    if exe is None:
        return None, None
    try:
        out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=60,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return exe, None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        return exe, None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" is Java 8
        major = int(match.group(2))
    return exe, major


def require_java(minimum: int = MIN_JAVA) -> int:
    """The Java major version, checked to be at least ``minimum``.

    Raises
    ------
    JavaNotFoundError
        No ``java`` (JAVA_HOME or PATH), or one older than ``minimum``.
    """
    exe, major = java_version()
    if exe is None:
        msg = "no Java runtime found (neither JAVA_HOME/bin/java nor java on the PATH)"
        raise JavaNotFoundError(msg)
    if major is None or major < minimum:
        found = "an unknown version" if major is None else f"Java {major}"
        msg = f"{exe} is {found}; Spark 4 needs Java {minimum} or newer"
        raise JavaNotFoundError(msg)
    return major


# ---------------------------------------------------------------------------- session
def get_spark(
    *,
    master: str | None = None,
    app_name: str = "roadpubsub",
    packages: Sequence[str] = (),
    jars: Sequence[str] = (),
    config: Mapping[str, str] | None = None,
    log_level: str = "WARN",
    java_options: Sequence[str] = (),
) -> SparkSession:
    """The active SparkSession, or a new one on ``master``.

    Parameters
    ----------
    master
        Spark master URL (``local[2]``, ``spark://host:7077``, ``yarn``...). When omitted:
        spark-submit's ``--master`` under spark-submit, else ``local[*]``. Ignored when a
        session is already active (it is returned as is).
    app_name
        Application name shown in the Spark UI.
    packages
        Maven coordinates for ``spark.jars.packages`` (e.g. the GraphFrames JVM package).
    jars
        Jar files or URLs for ``spark.jars`` (an offline package, for example).
    config
        Further Spark settings.
    log_level
        Log level of the Spark driver (``WARN`` keeps stderr to warnings and errors).
    java_options
        Further JVM options of a local master's driver, after
        :data:`FAST_START_JAVA_OPTIONS` (e.g. a larger code cache for a job that needs
        one); ignored where Spark's JVM is not started here.

    Raises
    ------
    JavaNotFoundError
        No Java 17+ is available (checked before starting the JVM).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    require_java()
    # Python workers must run this interpreter (the one that has the project installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Under spark-submit the JVM is already up with its --master and --conf settings.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not submitted:
        master = DEFAULT_MASTER
    settings: dict[str, str] = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.log.level": log_level,
    }
    if master is not None and master.startswith("local") and not submitted:
        settings["spark.ui.enabled"] = "false"
        settings["spark.driver.extraJavaOptions"] = " ".join([FAST_START_JAVA_OPTIONS,
                                                              *java_options])
        settings["spark.driver.memory"] = os.environ.get("ROADPUBSUB_SPARK_DRIVER_MEMORY",
                                                         "4g")
    if packages:
        settings["spark.jars.packages"] = ",".join(packages)
    if jars:
        settings["spark.jars"] = ",".join(str(Path(j).resolve()) if "://" not in j else j
                                          for j in jars)
    settings.update(config or {})
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    t0 = time.perf_counter()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    log(f"Spark {spark.version} session on {spark.sparkContext.master} "
        f"({spark.sparkContext.defaultParallelism} cores) in {time.perf_counter() - t0:.1f} s")
    return spark


def add_spark_arguments(parser: Any) -> None:
    """Add ``--master``, ``--packages`` and ``--jars`` to an argparse parser."""
    parser.add_argument("--master", default=None,
                        help=f"Spark master URL (default: spark-submit's --master, else "
                             f"{DEFAULT_MASTER}: every local core)")
    parser.add_argument("--packages", action="append", default=[], metavar="COORD",
                        help="Maven coordinate to add to the Spark classpath (repeatable), "
                             "e.g. the GraphFrames JVM package (under spark-submit, give "
                             "--packages to spark-submit itself)")
    parser.add_argument("--jars", action="append", default=[], metavar="JAR",
                        help="jar file or URL to add to the driver and executor classpaths "
                             "(repeatable), e.g. an offline GraphFrames jar; a local file is "
                             "checked before Spark starts")


def session_from_args(args: Any, *, app_name: str,
                      java_options: Sequence[str] = ()) -> SparkSession:
    """A session for parsed :func:`add_spark_arguments` options (``java_options``: see
    :func:`get_spark`)."""
    jars = tuple(getattr(args, "jars", ()) or ())
    for jar in jars:
        if "://" not in jar and not Path(jar).is_file():
            msg = f"--jars {jar}: no such file"
            raise FileNotFoundError(msg)
    return get_spark(master=args.master, app_name=app_name,
                     packages=tuple(getattr(args, "packages", ()) or ()), jars=jars,
                     java_options=java_options)


_SPARK_URL = re.compile(r"(?:file|hdfs|s3a|s3|gs|abfss?|wasbs?):[^\s,;)\]}'\"]+")


def _is_spark_failure(exc: BaseException) -> bool:
    try:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors.exceptions.captured import CapturedException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return isinstance(exc, Py4JJavaError | CapturedException)


def spark_failure_message(exc: BaseException) -> str:
    """One line for an exception Spark's JVM raised: the innermost cause's message (the
    most specific, e.g. "... is not a Parquet file"), with the first file URL any cause
    names."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    messages: list[str] = []
    with contextlib.suppress(Exception):  # a gateway gone mid-way: keep what was read
        while java is not None and len(messages) < 30:
            text = java.getMessage()
            kind = str(java.getClass().getSimpleName())
            if text:
                messages.append(f"{kind}: {str(text).strip()}")
            java = java.getCause()
    if not messages:
        lines = [x.strip() for x in str(exc).strip().splitlines() if x.strip()]
        errors = [x for x in lines if "Error" in x.split(":")[0]]
        messages = [errors[-1] if errors else (lines[0] if lines else type(exc).__name__)]
    root = " ".join(messages[-1].split())
    urls = [m.group(0) for text in messages for m in _SPARK_URL.finditer(text)]
    where = f" (file {urls[0]})" if urls and urls[0] not in root else ""
    line = f"Spark failed: {root}{where}"
    return line if len(line) <= 600 else line[:597] + "..."


_Job = TypeVar("_Job", bound=Callable[[Any], int])


def spark_errors(func: _Job) -> _Job:
    """``func(args)`` with Spark's JVM failures turned into :class:`SparkJobError` (one
    line); the ``roadpubsub spark`` subcommands and :func:`run_job` use it."""
    def run(args: Any) -> int:
        try:
            return func(args)
        except Exception as exc:
            if not _is_spark_failure(exc):
                raise
            msg = spark_failure_message(exc)
            raise SparkJobError(msg) from exc
    run.__doc__ = func.__doc__
    return run  # type: ignore[return-value]


def run_job(func: Callable[[Any], int], args: Any, *, name: str) -> int:
    """Run a job's ``run(args)``; user-fixable errors become one stderr line and exit 2.

    Bad input, missing files and a missing Java or GraphFrames package are reported as
    ``NAME: error: MESSAGE (hint: HINT)``, as the ``roadpubsub`` command line does.
    """
    try:
        return int(spark_errors(func)(args) or 0)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except (RoadPubSubError, ValueError, OSError, RuntimeError) as exc:
        print(f"{name}: error: {format_error(exc)}", file=sys.stderr)
        return 2
    finally:
        release_output_locks()


def jvm_class_problem(spark: SparkSession, class_name: str, *, what: str,
                      package: str) -> str | None:
    """Why the JVM class ``class_name`` of the ``what`` package cannot be loaded on
    ``spark`` (one line naming the ``--packages`` coordinate to add), or None if it can.

    Under Spark Connect (no driver JVM here) the server decides: None.
    """
    jvm = getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return None
    from py4j.protocol import Py4JError

    try:
        jvm.Thread.currentThread().getContextClassLoader().loadClass(class_name)
    except Py4JError as exc:
        text = str(exc)
        if "ClassNotFoundException" in text or "NoClassDefFoundError" in text:
            return (f"the {what} package is not on the Spark classpath "
                    f"({class_name} not found): add --packages {package}")
        raise
    return None


# ---------------------------------------------------------------------------- progress
def log(message: str) -> None:
    """One progress line on stderr."""
    print(f"[roadpubsub spark] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stage(spark: SparkSession, description: str) -> Iterator[None]:
    """Name the Spark jobs started inside the block and log its start and duration.

    Examples
    --------
    >>> with stage(spark, "precompute-bounds: 267 border Dijkstras"):  # doctest: +SKIP
    ...     df.write.parquet(path)
    """
    sc = spark.sparkContext
    sc.setJobDescription(description)
    log(f"{description} ...")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    log(f"{description}: done in {time.perf_counter() - t0:.1f} s")


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings for the block, restoring the previous values after it."""
    old = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, previous in old.items():
            if previous is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, previous)


# ---------------------------------------------------------------------------- task timings
#: What a timed task reports: (label, partition key, seconds, rows in, rows out).
TaskTimes = list[tuple[str, int, float, int, int]]


def task_timer(spark: SparkSession) -> Any:
    """An accumulator the jobs' tasks add their timings to (for benchmarks).

    Tasks add ``[(label, key, seconds, rows_in, rows_out)]``; ``timer.value`` on the
    driver is the list of every task's entries (a retried task reports twice).
    """
    from pyspark.accumulators import AccumulatorParam

    class _Concat(AccumulatorParam):  # type: ignore[type-arg]
        def zero(self, value: TaskTimes) -> TaskTimes:
            return []

        def addInPlace(self, a: TaskTimes, b: TaskTimes) -> TaskTimes:  # noqa: N802
            return a + b

    return spark.sparkContext.accumulator([], _Concat())


# ---------------------------------------------------------------------------- broadcasts
_WORKER_CACHE: dict[tuple[str, str], Any] = {}
_TOKEN = "_roadpubsub_broadcast_token"


def broadcast_payload(spark: SparkSession, payload: Mapping[str, Any]
                      ) -> Broadcast[dict[str, Any]]:
    """Broadcast a dict of numpy arrays and plain values, tagged with a unique token.

    The token identifies the broadcast inside the workers (:func:`cached_payload`); a
    worker-side Broadcast object carries no usable id of its own.
    """
    return spark.sparkContext.broadcast({**payload, _TOKEN: uuid.uuid4().hex})


def cached_payload(bc: Broadcast[dict[str, Any]], key: str,
                   build: Callable[[dict[str, Any]], T]) -> T:
    """``build(bc.value)`` for a :func:`broadcast_payload`, once per Python worker.

    Only the objects of the most recent broadcast are kept, so a long-lived worker does not
    accumulate networks of earlier jobs.
    """
    value = bc.value
    ident = (str(value[_TOKEN]), key)
    if ident not in _WORKER_CACHE:
        for old in [k for k in _WORKER_CACHE if k[0] != ident[0]]:
            del _WORKER_CACHE[old]
        _WORKER_CACHE[ident] = build(value)
    return _WORKER_CACHE[ident]


# ---------------------------------------------------------------------------- atomic output
@contextlib.contextmanager
def atomic_output_dir(final: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory path beside the local ``final``, moved over it on success.

    The local case of :func:`roadpubsub.spark_jobs.storage.atomic_output_dir` (which also takes
    storage URLs), for callers that want a :class:`~pathlib.Path`.

    Examples
    --------
    >>> with atomic_output_dir("out/deliveries.parquet") as tmp:  # doctest: +SKIP
    ...     df.write.parquet(str(tmp))
    """
    from roadpubsub.spark_jobs.storage import atomic_output_dir as _atomic

    with _atomic(Path(final)) as tmp:
        yield Path(tmp)
