"""Spark plumbing that needs no running Spark: the Java check and atomic output."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from py4j.protocol import Py4JError

from roadpubsub.spark_jobs.session import (
    JavaNotFoundError,
    atomic_output_dir,
    java_version,
    jvm_class_problem,
    require_java,
    session_conf,
)


def _fake_java(tmp_path: Path, banner: str) -> Path:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n", encoding="utf-8")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return home


def test_old_java_is_refused_with_one_line_and_a_hint(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    home = _fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15')
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert java_version() == (str(home / "bin" / "java"), 11)
    with pytest.raises(JavaNotFoundError, match="Java 11; Spark 4 needs Java 17") as info:
        require_java()
    assert "\n" not in str(info.value)
    assert "openjdk-17-jre-headless" in info.value.hint and "JAVA_HOME" in info.value.hint


def test_java_8_version_string_is_parsed(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    home = _fake_java(tmp_path, 'java version "1.8.0_392"')
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert java_version()[1] == 8


def test_missing_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="no Java runtime found"):
        require_java()


def test_java_17_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _fake_java(tmp_path, 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert require_java() == 17


def test_atomic_output_dir_replaces_and_keeps_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "result.parquet"
    with atomic_output_dir(out) as tmp:
        assert not tmp.exists() and tmp.parent == out.parent
        tmp.mkdir()
        (tmp / "a").write_text("first", encoding="utf-8")
    assert (out / "a").read_text(encoding="utf-8") == "first"

    with pytest.raises(RuntimeError, match="boom"), atomic_output_dir(out) as tmp:
        tmp.mkdir()
        (tmp / "b").write_text("half", encoding="utf-8")
        raise RuntimeError("boom")
    assert sorted(os.listdir(out)) == ["a"]  # previous output intact

    with atomic_output_dir(out) as tmp:
        tmp.mkdir()
        (tmp / "c").write_text("second", encoding="utf-8")
    assert sorted(os.listdir(out)) == ["c"]
    assert sorted(os.listdir(tmp_path)) == ["result.parquet"]  # no temporaries left


def test_every_spark_command_takes_jars_and_checks_them_first(tmp_path, capsys,
                                                              monkeypatch) -> None:
    """--jars on every job; a missing local jar is one line, before Spark starts."""
    from roadpubsub.cli import main as cli_main

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr("roadpubsub.spark_jobs.session.get_spark", no_spark)
    corpus = tmp_path / "c.txt"
    corpus.write_text("lost bag\n")
    assert cli_main(["spark", "idf", str(corpus), "--out", str(tmp_path / "w.parquet"),
                     "--jars", str(tmp_path / "missing.jar")]) == 2
    assert "missing.jar: no such file" in capsys.readouterr().err
    for job in ("precompute-bounds", "batch-match"):
        with pytest.raises(SystemExit):
            cli_main(["spark", job, "--help"])
        assert "--jars" in capsys.readouterr().out


class _Conf:
    """What :func:`session_conf` uses of ``spark.conf``."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        del self.values[key]


def test_session_conf_sets_for_the_block_and_restores_even_on_failure() -> None:
    spark: Any = SimpleNamespace(conf=_Conf({"a": "1", "c": "9"}))
    with session_conf(spark, {"a": "2", "b": "3"}):
        assert spark.conf.values == {"a": "2", "b": "3", "c": "9"}
    assert spark.conf.values == {"a": "1", "c": "9"}  # b was unset before: unset again
    with pytest.raises(RuntimeError, match="boom"), session_conf(spark, {"c": "0"}):
        raise RuntimeError("boom")
    assert spark.conf.values == {"a": "1", "c": "9"}


def _session_loading(error: str | None) -> Any:
    """A session whose driver JVM fails to load any class with ``error`` (None: loads)."""
    def load(name: str) -> None:
        if error is not None:
            raise Py4JError(f"An error occurred while calling loadClass: {error}: {name}")

    loader = SimpleNamespace(loadClass=load)
    thread = SimpleNamespace(getContextClassLoader=lambda: loader)
    jvm = SimpleNamespace(Thread=SimpleNamespace(currentThread=lambda: thread))
    return SimpleNamespace(sparkContext=SimpleNamespace(_jvm=jvm))


def test_jvm_class_problem_names_the_package_to_add() -> None:
    missing = _session_loading("java.lang.ClassNotFoundException")
    assert jvm_class_problem(missing, "org.x.Y", what="x-connector", package="org:x:1") == (
        "the x-connector package is not on the Spark classpath (org.x.Y not found): add "
        "--packages org:x:1")
    assert jvm_class_problem(_session_loading("java.lang.NoClassDefFoundError"), "org.x.Y",
                             what="x", package="p") is not None
    assert jvm_class_problem(_session_loading(None), "org.x.Y", what="x", package="p") is None
    connect: Any = SimpleNamespace(sparkContext=SimpleNamespace())  # no driver JVM here
    assert jvm_class_problem(connect, "org.x.Y", what="x", package="p") is None
    with pytest.raises(Py4JError, match="SecurityException"):
        jvm_class_problem(_session_loading("java.lang.SecurityException"), "org.x.Y",
                          what="x", package="p")
