"""Keeping a folder in the working directory from standing in for one of the project's packages.

`python -m ...` (the broker, and every Spark Python worker: `python -m pyspark.daemon`) puts the
working directory first on `sys.path`. A broker store directory is usually named `store`, and it
holds `config/` and `index/` folders; with no `__init__.py` in them Python takes them for a
namespace package `store` (and `store.config`), which wins over an editable install's import hook
and fails later with "cannot import name ... (unknown location)".

`use_project_packages()` runs before anything imports those packages: for each one not yet
imported whose name would resolve to such a folder, it loads the real package from beside this
one (a source tree, site-packages, or the zip shipped to executors). A real package of the same
name (a folder with `__init__.py`) is left alone: that is a deliberate override.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import Final

#: the top-level packages of the distribution that a data folder's name may collide with
PROJECT_PACKAGES: Final = ("store", "protocol", "pipeline", "broker")


def project_root() -> str:
    """The sys.path entry holding this package: a directory, or the zip it was imported from."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def use_project_packages(names: tuple[str, ...] = PROJECT_PACKAGES) -> list[str]:
    """Import each of `names` from the project root where a namespace folder would shadow it;
    returns the names that were shadowed."""
    fixed: list[str] = []
    for name in names:
        if name in sys.modules or not _is_namespace(name):
            continue
        real = importlib.machinery.PathFinder.find_spec(name, [project_root()])
        if real is None or real.loader is None or not _is_regular(real):
            continue
        module = importlib.util.module_from_spec(real)
        sys.modules[name] = module
        try:
            real.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        fixed.append(name)
    return fixed


def _is_namespace(name: str) -> bool:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and not _is_regular(spec)


def _is_regular(spec: importlib.machinery.ModuleSpec) -> bool:
    """A package with an `__init__` (or a plain module), not a namespace of folders."""
    return spec.origin is not None and spec.origin != "namespace"
