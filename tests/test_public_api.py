"""Each package's public API: every listed name resolves, and no two modules of a package
export one name for different objects."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ("roadpubsub.roadnet", "roadpubsub.index", "roadpubsub.pruning", "roadpubsub.bench",
            "roadpubsub.demo")
#: Modules with an ``__all__`` of their own that stay out of the package API.
INTERNAL = {("roadpubsub.roadnet", "jit")}


@pytest.mark.parametrize("name", PACKAGES)
def test_every_listed_name_resolves(name: str) -> None:
    package = importlib.import_module(name)
    missing = [n for n in package.__all__ if not hasattr(package, n)]
    assert not missing, f"{name}.__all__ lists names it does not define: {missing}"
    assert len(package.__all__) == len(set(package.__all__))


@pytest.mark.parametrize("name", PACKAGES)
def test_modules_agree_on_shared_names(name: str) -> None:
    package = importlib.import_module(name)
    owners: dict[str, object] = {}
    for module in package.API_MODULES:
        for attr in module.__all__:
            obj = getattr(module, attr)
            if attr in owners:
                assert owners[attr] is obj, f"{name}: {attr} means two things"
            owners[attr] = obj
            assert getattr(package, attr) is obj


def test_api_modules_cover_the_package() -> None:
    """A new module with an ``__all__`` must join its package's API (or be private)."""
    import pkgutil

    for name in PACKAGES:
        package = importlib.import_module(name)
        listed = {m.__name__ for m in package.API_MODULES}
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.startswith("_") or f"{name}.{info.name}" in listed:
                continue
            module = importlib.import_module(f"{name}.{info.name}")
            if (name, info.name) in INTERNAL:
                continue
            assert not getattr(module, "__all__", None), (
                f"{name}.{info.name} has an __all__ but is not in {name}.API_MODULES")
