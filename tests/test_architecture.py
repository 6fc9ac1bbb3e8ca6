"""The layout rules of the packages (issue 31), checked on their source:

* no import circle inside a package (lazy imports in functions count; imports under
  ``if TYPE_CHECKING`` do not);
* no private name (``_x``) imported from another module of the project, nor read as
  ``module._x`` through an imported module;
* no re-export: a module's ``__all__`` lists only names it defines, and a name is
  imported from the module that defines it (``from m import x`` or ``m.x`` with ``x``
  defined in ``m``); package ``__init__`` files are the only aggregators;
* no compiled kernel (numba ``njit``) with more than :data:`MAX_KERNEL_PARAMETERS`
  parameters: kernels take named tuples of arrays (:mod:`roadpubsub.pruning.kernel_args`).

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
NO_PRIVATE_IMPORTS = ("roadnet", "index", "pruning", "spark_jobs", "roadpubsub")
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


def _defined_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments), also
    inside top-level ``if``/``try``/``with`` blocks; imported names are not definitions."""
    found: set[str] = set()

    def scan(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update(n.id for t in targets for n in ast.walk(t)
                             if isinstance(n, ast.Name))
            elif isinstance(node, ast.If | ast.Try | ast.With):
                scan(node.body)
                scan(getattr(node, "orelse", []))
                scan(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    scan(handler.body)

    scan(tree.body)
    return found


def _listed_names(tree: ast.Module) -> list[str]:
    """The names of a module's literal ``__all__`` (with ``+=`` additions)."""
    names: list[str] = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__" \
                and isinstance(node, ast.Assign | ast.AugAssign):
            try:
                names += list(ast.literal_eval(node.value))
            except ValueError:  # computed (a package's aggregate): not a list to check
                continue
    return names


def reexports(mods: dict[str, tuple[Path, ast.Module]]) -> list[str]:
    """``module: name`` for each name a module takes from another one and hands on: listed
    in its ``__all__`` without being defined there, imported from a module that does not
    define it (``from m import x``), or read through such a module (``m.x``). Package
    ``__init__`` files may aggregate; a submodule is not a re-exported name."""
    inits = {m for m, (p, _) in mods.items() if p.name == "__init__.py"}
    defined = {m: _defined_names(tree) for m, (_, tree) in mods.items()}

    def passed_on(src: str, attr: str) -> bool:
        return (src in mods and src not in inits and f"{src}.{attr}" not in mods
                and attr != "*" and not attr.startswith("__") and attr not in defined[src])

    found = []
    for name, (path, tree) in mods.items():
        if name not in inits:
            found += [f"{name}: __all__ lists {x}" for x in _listed_names(tree)
                      if x not in defined[name] and f"{name}.{x}" not in mods]
        modules: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update({a.asname: a.name for a in node.names
                                if a.asname and a.name in mods})
            elif isinstance(node, ast.ImportFrom):
                src = _source_module(name, path, node)
                for a in node.names:
                    if f"{src}.{a.name}" in mods:
                        modules[a.asname or a.name] = f"{src}.{a.name}"
                    elif passed_on(src, a.name):
                        found.append(f"{name}: {src}.{a.name}")
        for use in ast.walk(tree):
            if isinstance(use, ast.Attribute) and isinstance(use.value, ast.Name) \
                    and use.value.id in modules and passed_on(modules[use.value.id], use.attr):
                found.append(f"{name}: {modules[use.value.id]}.{use.attr}")
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
    assert "roadpubsub.spark_jobs.stream" in mods
    assert "roadpubsub.cli.match" in mods
    assert "roadpubsub.service.state" in mods
    assert private_imports(mods) == []


def test_names_are_imported_from_where_they_are_defined() -> None:
    mods = sources(ROOT, PACKAGES)
    # The check reads the definitions (not an empty table): a name a module defines...
    assert "load_bounds_table" in _defined_names(mods["roadpubsub.spark_jobs.bound_table"][1])
    assert "roadpubsub.spark_jobs.storage_paths" in mods
    assert reexports(mods) == []


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


def test_the_reexport_check_sees_what_it_forbids(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        # A package may aggregate its modules' names.
        "pkg/__init__.py": "from pkg.a import x\nfrom pkg.sub import *\n__all__ = ['x']\n",
        "pkg/a.py": "import os\nx = 1\nif os.sep:\n    y = 2\nelse:\n    y = 3\n"
                    "def f():\n    pass\n__all__ = ['f', 'x', 'y']\n",
        # Hands on a's x through __all__; its own z and its submodule-free names are fine.
        "pkg/b.py": "from pkg.a import f, x\nz = f\n__all__ = ['x', 'z']\n",
        # c imports x from b (which only imported it); f reads it as b.x (b.z is b's own).
        "pkg/c.py": "from pkg.b import x as w, z\nv = w, z\n",
        "pkg/f.py": "from pkg import b\nv = b.x, b.z\n",
        "pkg/sub/__init__.py": "from pkg.sub.d import q\n__all__ = ['q']\n",
        "pkg/sub/d.py": "q = 1\n",
        "pkg/e.py": "from pkg import x\nfrom pkg.sub import q, d\nfrom pkg.sub.d import q as r\n",
    })
    assert reexports(mods) == ["pkg.b: __all__ lists x", "pkg.c: pkg.b.x", "pkg.f: pkg.b.x"]
