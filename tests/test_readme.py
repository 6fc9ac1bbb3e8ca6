"""The README's Python blocks run as written, from the checkout, after the install."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from roadpubsub.roadnet.settings import shared_data_dir

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_blocks() -> None:
    assert python_blocks(), "README.md lost its Python example"


@pytest.mark.slow
@pytest.mark.parametrize("number", range(len(python_blocks())))
def test_python_block_runs(number: int, tmp_path: Path) -> None:
    if not (shared_data_dir() / "dimacs" / "rome.gr.gz").is_file():
        pytest.skip(f"the README's example reads Rome from {shared_data_dir()}, absent here")
    script = tmp_path / f"readme_block_{number}.py"
    script.write_text(python_blocks()[number], encoding="utf-8")
    # From the checkout, as the README says; the script's own folder is not the package's.
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


# A figure: digits with thousands commas and decimals, a range of two, and the unit that
# changes its meaning (1M subscriptions, 2.5x): "1,806", "2,238-2,645", "2.54×", "10M".
_FIGURE = r"\d[\d,]*(?:\.\d+)?(?:-\d[\d,]*(?:\.\d+)?)?[M×]?"


def figures(text: str) -> list[str]:
    """The figures of ``text``, each once, in order (digits inside words left out)."""
    found = re.findall(rf"(?<![\w.,\-]){_FIGURE}(?![\w])", text)
    return list(dict.fromkeys(f.rstrip(",.") for f in found))


def quoted_in(figure: str, text: str) -> bool:
    """Whether ``text`` holds ``figure`` as a whole figure (not inside a longer one)."""
    return re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d]|[.,]\d)", text) is not None


def test_every_benchmark_figure_of_the_readme_is_in_benchmarks_md() -> None:
    readme = README.read_text(encoding="utf-8")
    section = readme.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]
    quoted = figures(section)
    assert len(quoted) > 20, "the README's Benchmarks paragraph lost its figures"
    bench = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    missing = [f for f in quoted if not quoted_in(f, bench)]
    assert missing == [], f"figures the README quotes that BENCHMARKS.md does not hold: {missing}"


def test_the_figure_check_tells_a_changed_figure() -> None:
    assert figures("EIA 7,610 msg/s, 2.54× BIA at 1M; p99 10.3-12.2 ms.") == [
        "7,610", "2.54×", "1M", "10.3-12.2"]
    assert quoted_in("7,610", "| 7,610 msg/s |")
    assert not quoted_in("7,610", "17,610") and not quoted_in("2.5×", "2.54×")
    assert not quoted_in("610", "7,610") and not quoted_in("10.3", "10.35")
