"""One settings source: the commands' defaults come from
``roadpubsub.roadnet.settings.DEFAULTS``."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from roadpubsub.cli import build_parser
from roadpubsub.roadnet.settings import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "roadpubsub" / "cli"
#: The Spark jobs' own entry points (``spark-submit spark_jobs/X.py``), not the benchmarks.
SPARK_ENTRY_POINTS = tuple(ROOT / "spark_jobs" / f"{name}.py"
                           for name in ("batch_match", "precompute_bounds", "idf", "stream"))

#: Flags whose literal default is a mode or a name, not a tunable: a seed, "off" switches,
#: output folder and input column names.
LITERAL_OK = {"--seed", "--ratio-point", "--batch", "--out-dir", "--column"}


def literal_defaults(extra: tuple[Path, ...] = SPARK_ENTRY_POINTS) -> list[str]:
    """``file:line flag=value`` of every ``add_argument`` whose default is a number or a
    string literal and which offers no ``choices``."""
    found = []
    for source in [*sorted(CLI.glob("*.py")), *extra]:
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            words = {k.arg: k.value for k in node.keywords}
            default = words.get("default")
            if (default is None or "choices" in words
                    or not isinstance(default, ast.Constant)
                    or default.value is None or isinstance(default.value, bool)):
                continue
            flag = next((a.value for a in node.args if isinstance(a, ast.Constant)), "?")
            if flag in LITERAL_OK and not (flag == "--batch" and default.value != 1):
                continue
            found.append(f"{source.name}:{node.lineno} {flag}={default.value!r}")
    return found


def test_no_tunable_default_is_a_literal_in_the_commands() -> None:
    assert literal_defaults() == [], "move these defaults into roadpubsub.roadnet.settings.Settings"


def test_the_scan_sees_a_literal_default(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text('p.add_argument("--port", type=int, default=8000)\n'
                    'p.add_argument("--kind", choices=("a", "b"), default="a")\n')
    monkeypatch.setattr(f"{__name__}.CLI", tmp_path)
    assert literal_defaults(extra=()) == ["fake.py:1 --port=8000"]


def subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def defaults_of(name: str) -> dict[str, object]:
    return {a.dest: a.default for a in subcommand(name)._actions}


def test_every_command_keeps_its_defaults() -> None:
    # The values the commands had before their defaults moved into Settings.
    serve = defaults_of("serve")
    assert (serve["host"], serve["port"]) == ("127.0.0.1", 8000)
    assert (serve["snapshot_every"], serve["flush_every"], serve["group_max"]) == (
        20_000, 2_000, 1024)  # groups of hundreds for fleets over MQTT (issue 33)
    assert serve["group_wait"] == DEFAULTS.group_wait_ms == 10.0  # pipelined events only
    assert serve["switch_interval"] == 5.0 and serve["mqtt_prefix"] == "roadpubsub"
    assert serve["max_snap"] == DEFAULTS.snap_distance_m == 250.0
    assert serve["window"] is None  # given or not decides whether it may be passed
    load = defaults_of("loadgen")
    assert (load["clients"], load["events"], load["seconds"]) == (8, 20_000, 60.0)
    assert load["url"] == "http://127.0.0.1:8000"
    match = defaults_of("match")
    assert match["window"] == DEFAULTS.topk_window == 10_000 and match["batch"] == 256
    gen = defaults_of("generate")
    assert (gen["subscriptions"], gen["messages"]) == (10_000, 1_000)
    assert (gen["alpha"], gen["alpha_spread"], gen["tau"], gen["tau_spread"]) == (
        0.5, 0.1, 0.7, 0.1)
    spark = subcommand("spark")
    jobs = next(a for a in spark._actions if isinstance(a, argparse._SubParsersAction))
    stream = {a.dest: a.default for a in jobs.choices["stream"]._actions}
    assert (stream["max_files_per_trigger"], stream["trigger_seconds"]) == (8, 0.0)
    assert (stream["rebase_rows"], stream["kafka_topic"]) == (200_000, "messages")
    bounds = {a.dest: a.default for a in jobs.choices["precompute-bounds"]._actions}
    assert bounds["batch_cells"] == 32
    demo = defaults_of("demo")
    assert (demo["n_subscriptions"], demo["n_messages"], demo["brute_messages"]) == (
        20_000, 500, 100)


def test_the_live_window_stays_1000_and_the_service_reads_settings() -> None:
    from roadpubsub.service.options import DEFAULT_WINDOW, ServiceOptions

    assert DEFAULT_WINDOW == DEFAULTS.live_topk_window == 1000
    options = ServiceOptions()
    assert options.snapshot_every == DEFAULTS.snapshot_every
    assert options.flush_every == DEFAULTS.flush_every
    assert options.max_snap_m == DEFAULTS.snap_distance_m


def test_every_settings_field_is_documented() -> None:
    from roadpubsub.roadnet.settings import Settings

    doc = Settings.__doc__ or ""
    documented = set()
    for line in doc.splitlines():
        if line.startswith("    ") and not line.startswith("     "):
            documented.update(n.strip() for n in line.split(","))
    missing = [f.name for f in fields(Settings) if f.name not in documented]
    assert missing == []


@pytest.mark.parametrize("value", ["-1", "nan", "1001"])
def test_serve_refuses_a_group_wait_out_of_range(tmp_path: Path, value: str) -> None:
    r = subprocess.run([sys.executable, "-m", "roadpubsub", "serve", "--state",
                        str(tmp_path / "svc"), "--port", "0", "--group-wait", value],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "--group-wait must lie in [0, 1000] ms" in err[0], err
    assert not (tmp_path / "svc").exists()


def test_the_service_entry_points_take_their_defaults_from_the_settings() -> None:
    import inspect

    from roadpubsub.service.app import build_app
    from roadpubsub.service.applier import Applier

    app = inspect.signature(build_app).parameters
    applier = inspect.signature(Applier).parameters
    assert app["group_max"].default == applier["group_max"].default == DEFAULTS.group_max
    assert app["group_wait_ms"].default == applier["wait_ms"].default == DEFAULTS.group_wait_ms
    assert app["mqtt_prefix"].default == DEFAULTS.mqtt_prefix


@pytest.mark.parametrize(("flags", "named"), [
    (["--mqtt-push", "chosen"], "--mqtt-push needs --mqtt HOST:PORT"),
    (["--mqtt-prefix", "fleet", "--mqtt-user", "svc"],
     "--mqtt-prefix, --mqtt-user need --mqtt HOST:PORT"),
])
def test_serve_refuses_broker_options_without_a_broker(tmp_path: Path, flags: list[str],
                                                       named: str) -> None:
    r = subprocess.run([sys.executable, "-m", "roadpubsub", "serve", "--state",
                        str(tmp_path / "svc"), "--port", "0", *flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and named in err[0], err
    assert not (tmp_path / "svc").exists()
