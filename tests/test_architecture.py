"""The layout rules of the packages (issue 31), checked on their source:

* no import circle inside a package (lazy imports in functions count; imports under
  ``if TYPE_CHECKING`` do not);
* no private name (``_x``) imported from another module of ``roadnet``, ``index``,
  ``pruning`` or ``roadpubsub`` (the service, the CLI), nor read as ``module._x``
  through an imported module;
* no compiled kernel (numba ``njit``) with more than :data:`MAX_KERNEL_PARAMETERS`
  parameters: kernels take named tuples of arrays (:mod:`pruning.kernel_args`).

Each rule has a test that feeds it a small broken example, so that the checks cannot pass
by seeing nothing.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Packages whose import graphs must have no circles.
PACKAGES = ("roadnet", "index", "pruning", "spark_jobs", "roadpubsub")
#: Packages whose modules must not import each other's private names.
NO_PRIVATE_IMPORTS = ("roadnet", "index", "pruning", "roadpubsub")
MAX_KERNEL_PARAMETERS = 12
#: Circles another branch removes (the command-line matcher's modules): the merge drops them.
#: Folders at the top of the repository imported as ``roadpubsub.<folder>`` (linked there).
LAYERS = ("roadnet", "index", "pruning", "spark_jobs")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, ast.Module]]:
    """``{module name: (path, tree)}`` of every module of ``packages`` under ``root``."""
    out = {}
    for package in packages:
        # The layers by their import names; the links inside roadpubsub/ are not followed
        # (rglob does not), so each module is read once.
        prefix = "roadpubsub." if package in LAYERS else ""
        for path in sorted((root / package).rglob("*.py")):
            name = prefix + module_name(path, root)
            out[name] = (path, ast.parse(path.read_text(), str(path)))
    return out


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def _source_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(mods: dict[str, tuple[Path, ast.Module]]) -> dict[str, set[str]]:
    """``{module: modules it imports}``, among ``mods`` (``from p import m`` of a
    submodule m counts as importing p.m)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, (path, tree) in mods.items():
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in mods)
                continue
            src = _source_module(name, path, node)
            for alias in node.names:
                sub = f"{src}.{alias.name}"
                target = sub if sub in mods else src
                if target in mods and target != name:
                    graph[name].add(target)
    return graph


def circles(mods: dict[str, tuple[Path, ast.Module]]) -> list[list[str]]:
    """Groups of two or more modules of one package that import each other, directly or
    through other modules of that package (package ``__init__`` files left out)."""
    def package(m: str) -> str:
        return m.rpartition(".")[0]

    inits = {m for m, (p, _) in mods.items() if p.name == "__init__.py"}
    graph = {m: {t for t in ts if t not in inits and package(t) == package(m)}
             for m, ts in import_graph(mods).items() if m not in inits}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def private_imports(mods: dict[str, tuple[Path, ast.Module]]) -> list[str]:
    """``importer: module._name`` for each private name one module takes from another:
    ``from m import _x``, or ``_x`` read through an imported module (``m._x``)."""
    found = []
    for name, (path, tree) in mods.items():
        aliases: dict[str, str] = {}
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        aliases[a.asname] = a.name
                continue
            src = _source_module(name, path, node)
            for a in node.names:
                if f"{src}.{a.name}" in mods:
                    aliases[a.asname or a.name] = f"{src}.{a.name}"
                elif src in mods and src != name and a.name.startswith("_") \
                        and not a.name.startswith("__"):
                    found.append(f"{name}: {src}.{a.name}")
        for use in ast.walk(tree):
            if isinstance(use, ast.Attribute) and isinstance(use.value, ast.Name) \
                    and use.value.id in aliases and use.attr.startswith("_") \
                    and not use.attr.startswith("__"):
                found.append(f"{name}: {aliases[use.value.id]}.{use.attr}")
    return sorted(set(found))


def long_kernels(mods: dict[str, tuple[Path, ast.Module]], most: int) -> list[str]:
    """``module.function (n)`` for each numba-compiled function with more than ``most``
    parameters."""
    found = []
    for name, (_, tree) in mods.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            compiled = any("jit" in ast.unparse(d).split("(")[0] for d in node.decorator_list)
            a = node.args
            n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            if compiled and n > most:
                found.append(f"{name}.{node.name} ({n})")
    return found


def test_no_import_circles_inside_packages() -> None:
    mods = sources(ROOT, PACKAGES)
    graph = import_graph(mods)
    # The checks see the project's imports under their import names (not an empty graph).
    assert "roadpubsub.index.base" in graph["roadpubsub.index.eia"]
    assert "roadpubsub.roadnet.distance" in graph["roadpubsub.pruning.brute"]
    assert circles(mods) == []


def test_no_private_names_cross_modules() -> None:
    mods = sources(ROOT, NO_PRIVATE_IMPORTS)
    assert "roadpubsub.pruning.brute" in mods
    assert private_imports(mods) == []


def test_kernels_take_named_tuples() -> None:
    assert long_kernels(sources(ROOT, PACKAGES), MAX_KERNEL_PARAMETERS) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, tuple[Path, ast.Module]]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sources(tmp_path, ("pkg",))


def test_the_checks_see_what_they_forbid(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg import a\n",
        "pkg/a.py": "from pkg.b import _hidden\n\ndef f():\n    from pkg import c\n",
        "pkg/b.py": "import numba\nfrom pkg import a as _a\n_hidden = 1\nx = _a._y\n"
                    "@numba.njit\ndef k(a, b, c, d, e, f, g, h, i, j, k, l, m):\n    pass\n",
        "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from pkg import a\n",
    })
    assert circles(mods) == [["pkg.a", "pkg.b"]]
    assert private_imports(mods) == ["pkg.a: pkg.b._hidden", "pkg.b: pkg.a._y"]
    assert long_kernels(mods, 12) == ["pkg.b.k (13)"]
    assert long_kernels(mods, 13) == []
