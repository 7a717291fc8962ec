"""Where this project's packages are, and what Spark executors need of them, as one zip.

Owns two things about the packages as a whole. First, the zip for `--py-files` / `addPyFile`
and the executors' third-party needs. Executors only unpickle the source's
classes and read splits: `pipeline` (whose reading modules import no structlog or msgpack),
`store` (the record layout and decoders) and the `pyspark_commitlog` discovery shim. PySpark adds
only `.zip`, `.egg` and `.jar` files from `--py-files` to the Python path (a wheel is not one), so
this is a plain zip with the packages at its root. Third-party needs are not in it: every
executor's Python must have `EXECUTOR_REQUIREMENTS` installed.

Second, keeping a folder in the working directory from standing in for one of the packages.
`python -m ...` (the broker, and every Spark Python worker: `python -m pyspark.daemon`) puts the
working directory first on `sys.path`. A broker store directory is usually named `store`, and it
holds `config/` and `index/` folders; with no `__init__.py` in them Python takes them for a
namespace package `store` (and `store.config`), which wins over an editable install's import hook
and fails later with "cannot import name ... (unknown location)". `use_project_packages()` runs
before anything imports those packages (from `pipeline/__init__.py` and `broker/__init__.py`):
for each one not yet imported whose name would resolve to such a folder, it loads the real
package from beside this one (a source tree, site-packages, or the zip shipped to executors). A
real package of the same name (a folder with `__init__.py`) is left alone: a deliberate override.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import zipfile
from typing import Final

#: third-party packages the executors' Python needs (the `spark` extra without the driver's JVM
#: side); pyspark itself comes with the cluster's Spark, at the cluster's version
EXECUTOR_REQUIREMENTS: Final = ("pyarrow>=18", "numpy>=1.26")
PACKAGES: Final = ("pipeline", "store")
MODULES: Final = ("pyspark_commitlog.py",)
ZIP_NAME: Final = "rmq_pipeline.zip"
#: the zip a session ships by itself: a name of its own, so that it never collides with the
#: `ZIP_NAME` a job also passes in --py-files (Spark refuses one file name at two paths)
SHIPPED_NAME: Final = "rmq_pipeline_session.zip"
REQUIREMENTS_NAME: Final = "executor-requirements.txt"
#: stored with a fixed time so that the same sources give the same bytes
_FIXED_TIME: Final = (2020, 1, 1, 0, 0, 0)


class PackageSourceError(FileNotFoundError):
    """The project's sources are not where this module was imported from."""


def write_zip(path: str) -> list[str]:
    """Write the executors' code to a zip at `path`; returns the names stored, in order."""
    members = _members(project_root())
    tmp = f"{path}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            out.writestr(info, data)
    os.replace(tmp, path)
    return [name for name, _ in members]


def write_bundle(out_dir: str) -> tuple[str, str]:
    """The zip and a pip requirements file for the executors, in `out_dir`; returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    zip_path = os.path.join(out_dir, ZIP_NAME)
    write_zip(zip_path)
    requirements = os.path.join(out_dir, REQUIREMENTS_NAME)
    with open(requirements, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{line}\n" for line in EXECUTOR_REQUIREMENTS))
    return zip_path, requirements


def _members(root: str) -> list[tuple[str, bytes]]:
    """(archive name, bytes) of every .py file of PACKAGES and MODULES under `root`, which is a
    source directory or, when this code itself runs from a zip, that zip."""
    if os.path.isdir(root):
        found = _from_directory(root)
    elif zipfile.is_zipfile(root):
        found = _from_zip(root)
    else:
        raise PackageSourceError(f"no project sources at {root}")
    names = {name for name, _ in found}
    missing = [p for p in (*PACKAGES, *MODULES) if not any(n.startswith(p) for n in names)]
    if missing:
        raise PackageSourceError(f"{root} lacks {', '.join(missing)}")
    return sorted(found)


def _from_directory(root: str) -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for file in files:
                if file.endswith(".py"):
                    full = os.path.join(folder, file)
                    found.append((os.path.relpath(full, root).replace(os.sep, "/"), _read(full)))
    for module in MODULES:
        full = os.path.join(root, module)
        if os.path.isfile(full):
            found.append((module, _read(full)))
    return found


def _from_zip(root: str) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(root) as source:
        return [
            (name, source.read(name))
            for name in source.namelist()
            if name.endswith(".py")
            and (name in MODULES or any(name.startswith(f"{p}/") for p in PACKAGES))
        ]


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


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
