"""Hostile use of the command line (issue 14): outputs that are inputs, killed and
concurrent runs, damaged and odd files, keywords in other cases and forms.

Each check runs the real command, most in a child process, on Andorra with keywords from
the shared tweets.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roadpubsub.cli import main
from roadpubsub.index.io import read_deliveries
from roadpubsub.index.tables import write_tables
from roadpubsub.roadnet.files import (
    OutputBusyError,
    atomic_paths,
    check_output_path,
    release_output_locks,
)


@pytest.fixture(scope="module")
def andorra_files(tmp_path_factory: pytest.TempPathFactory,
                  shared: Callable[[str], Path]) -> dict[str, Path]:
    shared("text/airline_tweets.csv")
    network = shared("osm/andorra-latest.osm.pbf")
    out = tmp_path_factory.mktemp("andorra")
    assert main(["generate", "--network", str(network), "--out-dir", str(out),
                 "--subscriptions", "3000", "--messages", "40", "--seed", "2", "--tau", "0.4",
                 "--quiet"]) == 0
    return {"network": network, "subscriptions": out / "subscriptions.parquet",
            "messages": out / "messages.parquet", "weights": out / "weights.parquet"}


def argv(files: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return ["match", "--network", str(files["network"]), "--subscriptions",
            str(files["subscriptions"]), "--messages", str(files["messages"]), "--weights",
            str(files["weights"]), "--dmax", "3000", "--out", str(out), "--quiet", *extra]


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roadpubsub", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def one_error_line(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ": error: " in ln]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- item 2
@pytest.mark.parametrize("which", ["subscriptions", "messages", "weights"])
def test_output_equal_to_an_input_is_refused(andorra_files, tmp_path, which,
                                             capsys) -> None:
    victim = tmp_path / f"{which}.parquet"
    victim.write_bytes(andorra_files[which].read_bytes())
    files = {**andorra_files, which: victim}
    before = victim.read_bytes()
    link = tmp_path / "link.parquet"
    link.symlink_to(victim)
    hard = tmp_path / "hard.parquet"
    os.link(victim, hard)
    for out in (victim, link, hard, tmp_path / "." / f"{which}.parquet"):
        assert main(argv(files, out)) == 2
        err = capsys.readouterr().err
        assert "is the input" in err and "would destroy" in err
        assert victim.read_bytes() == before


def test_index_build_and_network_save_refuse_their_inputs(andorra_files, tmp_path,
                                                          capsys) -> None:
    net = tmp_path / "net.npz"
    assert main(["network", "info", str(andorra_files["network"]), "--save", str(net)]) == 0
    capsys.readouterr()
    before = net.read_bytes()
    assert main(["network", "info", str(net), "--save", str(net)]) == 2
    assert "is the input" in capsys.readouterr().err and net.read_bytes() == before
    assert main(["index", "build", "--network", str(net), "--subscriptions",
                 str(andorra_files["subscriptions"]), "--weights",
                 str(andorra_files["weights"]), "--out", str(net)]) == 2
    assert "is the input" in capsys.readouterr().err and net.read_bytes() == before


# ----------------------------------------------------------------------------- item 5
def test_sigterm_cleans_up_and_exits_143(andorra_files, tmp_path) -> None:
    out = tmp_path / "d.parquet"
    loud = [a for a in argv(andorra_files, out) if a != "--quiet"]
    child = subprocess.Popen([sys.executable, "-m", "roadpubsub", *loud],
                             stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    seen = child.stderr.readline()  # "match: reading the inputs": the handler is in place
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    err = seen + err
    # The first status line comes after the handler is installed and before the reading
    # (seconds on Andorra), so SIGTERM always lands mid-run.
    assert child.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".d.parquet.*"))


def test_a_killed_runs_temporary_is_removed_by_the_next_run(andorra_files, tmp_path) -> None:
    out = tmp_path / "d.parquet"
    # What SIGKILL mid-write leaves: a temporary named by a pid that is gone.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tmp_path / f".d.parquet.{int(dead.stdout)}.abcd1234.tmp"
    stale.write_bytes(b"x" * 1000)
    # ... and a live run's temporary (this process) must stay.
    live = tmp_path / f".d.parquet.{os.getpid()}.efgh5678.tmp"
    live.write_bytes(b"y")
    done = cli(*argv(andorra_files, out))
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and live.exists() and out.exists()
    assert "removed" in done.stderr and "interrupted run" in done.stderr


def test_sigkill_mid_run_then_rerun_leaves_only_the_output(andorra_files, tmp_path) -> None:
    out = tmp_path / "d.parquet"
    for delay in (2.0, 4.0):
        child = subprocess.Popen([sys.executable, "-m", "roadpubsub",
                                  *argv(andorra_files, out)], stderr=subprocess.DEVNULL)
        time.sleep(delay)
        child.kill()
        child.wait(timeout=60)
    done = cli(*argv(andorra_files, out))
    assert done.returncode == 0, done.stderr
    assert out.exists() and not list(tmp_path.glob(".d.parquet.*.tmp"))


# ----------------------------------------------------------------------------- item 10
def test_a_second_run_on_a_busy_output_is_refused(andorra_files, tmp_path) -> None:
    out = tmp_path / "d.parquet"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; "
         "from roadpubsub.roadnet.files import check_output_path; "
         f"check_output_path({str(out)!r}); print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        done = cli(*argv(andorra_files, out))
        one_error_line(done, "another run", str(holder.pid))
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    assert cli(*argv(andorra_files, out)).returncode == 0  # the lock died with its holder


def test_lock_is_per_process_and_released() -> None:
    path = Path("/tmp/roadpubsub-lock-test/out.parquet")
    check_output_path(path)
    check_output_path(path)  # the same process may check again
    release_output_locks()
    code = ("from roadpubsub.roadnet.files import check_output_path; "
            f"check_output_path({str(path)!r})")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    check_output_path(path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode != 0 and OutputBusyError.__name__ in done.stderr
    release_output_locks()


# ----------------------------------------------------------------------------- item 6
def test_damaged_inputs_get_one_line_naming_the_file(andorra_files, tmp_path,
                                                     shared) -> None:
    rome = shared("dimacs/rome.gr.gz")
    truncated = tmp_path / "cut.gr.gz"
    truncated.write_bytes(rome.read_bytes()[:300_000])
    (tmp_path / "cut.co.gz").write_bytes(shared("dimacs/rome.co.gz").read_bytes())
    one_error_line(cli("network", "info", str(truncated)), "cut.gr.gz", "truncated")
    (tmp_path / "neg.gr").write_text("p sp 3 2\nc a comment\na 1 2 4\na 2 3 -5\n")
    (tmp_path / "neg.co").write_text("v 1 1000000 42000000\nv 2 1001000 42000000\n"
                                     "v 3 1002000 42000000\n")
    one_error_line(cli("network", "info", str(tmp_path / "neg.gr")), "neg.gr", "line", "4")
    one_error_line(cli("network", "info", str(shared("dimacs/rome.co.gz"))), "rome.gr.gz")
    # Messages: not UTF-8, damaged Parquet pages, ids past int64.
    rows = pq.read_table(andorra_files["messages"]).to_pylist()[:5]
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b"".join(json.dumps({**r, "keywords": ["caf\u00e9"]},
                                          ensure_ascii=False).encode("latin-1") + b"\n"
                               for r in rows))
    damaged = tmp_path / "damaged.parquet"
    data = bytearray(andorra_files["messages"].read_bytes())
    for i in range(100, 300):
        data[i] ^= 0x5A
    damaged.write_bytes(bytes(data))
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({**r, "id": 2**63 + i}) + "\n"
                           for i, r in enumerate(rows)))
    for bad in (latin, damaged, big):
        files = {**andorra_files, "messages": bad}
        one_error_line(cli(*argv(files, tmp_path / "o.parquet")), bad.name)
    # An index file given as a network.
    index = tmp_path / "i.npz"
    assert cli("index", "build", "--network", str(andorra_files["network"]),
               "--subscriptions", str(andorra_files["subscriptions"]), "--weights",
               str(andorra_files["weights"]), "--out", str(index), "--quiet").returncode == 0
    one_error_line(cli("network", "info", str(index)), "i.npz", "index file")


def test_a_full_disk_names_the_output(tmp_path, monkeypatch) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(pq, "write_table", full)
    out = tmp_path / "x.parquet"
    with pytest.raises(OSError) as info:
        write_tables({out: pa.table({"a": [1]})})
    assert info.value.filename == str(out) and info.value.errno == errno.ENOSPC
    assert not list(tmp_path.iterdir())


def test_memory_error_is_one_line(andorra_files, tmp_path, monkeypatch, capsys) -> None:
    import roadpubsub.cli.match as match_cli

    def huge(args: object) -> int:
        import numpy as np
        np.empty(2**41)  # 16 TiB: refused by the allocator
        return 0
    monkeypatch.setattr(match_cli, "run", huge)
    from roadpubsub.cli import build_parser
    parser = build_parser()
    args = parser.parse_args(argv(andorra_files, tmp_path / "o.parquet"))
    args.func = huge
    monkeypatch.setattr("roadpubsub.cli.build_parser", lambda: _Fixed(args))
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "out of memory" in err and "hint" in err and len(err.strip().splitlines()) == 1


class _Fixed:
    def __init__(self, args: object) -> None:
        self.args = args

    def parse_args(self, argv: object) -> object:
        return self.args


def test_atomic_paths_never_leave_a_partial_file(tmp_path) -> None:
    out = tmp_path / "a.bin"
    with pytest.raises(RuntimeError), atomic_paths(out) as (tmp,):
        tmp.write_bytes(b"half")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- item 8
def test_keywords_in_other_case_and_form_match(andorra_files, tmp_path, capsys) -> None:
    """Messages whose keywords are upper-cased, padded and in decomposed Unicode get the
    deliveries of the original messages; --exact-keywords keeps strings exact."""
    table = pq.read_table(andorra_files["messages"])
    rows = table.to_pylist()
    for r in rows:
        r["keywords"] = [f"  {k.upper()} " for k in r["keywords"]]
    shouty = tmp_path / "shouty.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shouty)
    want, got, exact = (tmp_path / n for n in ("want.parquet", "got.parquet", "ex.parquet"))
    assert main(argv(andorra_files, want)) == 0
    assert main(argv({**andorra_files, "messages": shouty}, got)) == 0
    assert main(argv({**andorra_files, "messages": shouty}, exact, "--exact-keywords")) == 0
    a, b, c = (read_deliveries(p) for p in (want, got, exact))
    assert len(a["message_id"]) > 0
    assert a["subscription_id"].tolist() == b["subscription_id"].tolist()
    assert len(c["message_id"]) < len(a["message_id"])


def test_blank_keywords_are_refused_naming_the_rows(andorra_files, tmp_path) -> None:
    table = pq.read_table(andorra_files["subscriptions"])
    rows = table.to_pylist()[:10]
    rows[3]["keywords"] = ["   "]
    blank = tmp_path / "blank.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), blank)
    files = {**andorra_files, "subscriptions": blank}
    one_error_line(cli(*argv(files, tmp_path / "o.parquet")), "white-space-only",
                   str(rows[3]["id"]))


def test_unknown_keywords_are_counted_even_when_quiet(andorra_files, tmp_path,
                                                      capsys) -> None:
    table = pq.read_table(andorra_files["subscriptions"])
    rows = table.to_pylist()
    rows[0]["keywords"] = ["zzzunheardofword"]
    odd = tmp_path / "odd.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), odd)
    assert main([*argv({**andorra_files, "subscriptions": odd}, tmp_path / "o.parquet"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["keywords_not_in_weights"] == 1


# ----------------------------------------------------------------------------- item 9
def test_outputs_carry_page_checksums_that_reads_verify(andorra_files, tmp_path) -> None:
    out = tmp_path / "d.parquet"
    assert main(argv(andorra_files, out)) == 0
    meta = pq.ParquetFile(out).metadata
    assert meta.num_rows > 0
    data = bytearray(out.read_bytes())
    # Flip bytes inside the first data page (after the 4-byte magic and page header).
    for i in range(60, 120):
        data[i] ^= 0xFF
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"bad\.parquet"):
        read_deliveries(bad)


def test_new_user_rough_edges(andorra_files, tmp_path, capsys) -> None:
    """--version; a .graphml --save is refused rather than written as .graphml.npz; a
    subscriptions file given as --messages is refused."""
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("roadpubsub ")
    assert main(["network", "info", str(andorra_files["network"]), "--save",
                 str(tmp_path / "x.graphml")]) == 2
    assert ".npz" in capsys.readouterr().err and not list(tmp_path.iterdir())
    files = {**andorra_files, "messages": andorra_files["subscriptions"]}
    assert main(argv(files, tmp_path / "o.parquet")) == 2
    assert "holds subscriptions, not messages" in capsys.readouterr().err


def test_without_any_corpus_the_run_weighs_its_own_keywords(andorra_files, tmp_path,
                                                            monkeypatch, capsys) -> None:
    """No --weights, no --corpus and no shared tweets: idf over the run's own subscriptions
    and messages, said in a note and in the summary, rather than a failure."""
    monkeypatch.setenv("ROADPUBSUB_SHARED_DATA", str(tmp_path / "nowhere"))
    out = tmp_path / "d.parquet"
    args = [a for a in argv(andorra_files, out) if a != "--quiet"]
    i = args.index("--weights")
    del args[i:i + 2]
    assert main([*args, "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["weights_from"] == "own keywords" and summary["deliveries"] > 0
    assert "nowhere" in captured.err and "idf over this run's own" in captured.err
