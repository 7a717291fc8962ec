"""What Spark executors need of this project, as one zip for `--py-files` / `addPyFile`.

Owns the executor side's code and its third-party needs. Executors only unpickle the source's
classes and read splits: `pipeline` (whose reading modules import no structlog or msgpack),
`store` (the record layout and decoders) and the `pyspark_commitlog` discovery shim. PySpark adds
only `.zip`, `.egg` and `.jar` files from `--py-files` to the Python path (a wheel is not one), so
this is a plain zip with the packages at its root. Third-party needs are not in it: every
executor's Python must have `EXECUTOR_REQUIREMENTS` installed.
"""

from __future__ import annotations

import os
import zipfile
from typing import Final

from pipeline.shadowing import project_root

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
