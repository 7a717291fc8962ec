"""Makes this source tree importable the way an editable install does, for a subprocess with this
folder (and not the tree itself) on PYTHONPATH.

setuptools' editable install adds a finder to `sys.meta_path` behind the path finder, mapping the
project's top-level names to the tree. A folder named like one of them in the working directory
(on `sys.path` under `python -m`) then becomes a namespace package that wins over the finder:
the case `pipeline.package.use_project_packages` handles. This finder goes right behind the path
finder, ahead of the venv's own editable finder (which maps to another checkout).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import pathlib
import sys
from collections.abc import Sequence

_ROOT = pathlib.Path(__file__).resolve().parents[3]
_PACKAGES = ("broker", "pipeline", "protocol", "store")
_MODULES = ("pyspark_commitlog",)


class _TreeFinder:
    @classmethod
    def find_spec(
        cls, name: str, path: Sequence[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name in _PACKAGES:
            folder = _ROOT / name
            return importlib.util.spec_from_file_location(
                name, folder / "__init__.py", submodule_search_locations=[str(folder)]
            )
        if name in _MODULES:
            return importlib.util.spec_from_file_location(name, _ROOT / f"{name}.py")
        return None


_at = next(
    (i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder),
    len(sys.meta_path) - 1,
)
sys.meta_path.insert(_at + 1, _TreeFinder)
