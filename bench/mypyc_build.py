"""A mypyc build of the send path, in place, to measure against the interpreted build.

`python bench/mypyc_build.py` compiles the modules a send runs through (the py-spy profile of
`bench/send.py --rows ASYNC-8x16-1KiB --profile`) from the same source, together, so that most
calls stay compiled-to-compiled; the extension modules land beside the sources (git-ignored),
and Python imports them instead of the .py files. `--clean` removes them again; a source edit
without a rebuild is NOT seen while they are there, so clean (or rebuild) after every change.

Left interpreted (`INTERPRETED` says why): modules mypyc refuses, and modules whose compiled
form behaves differently, because compiled code checks every annotated type at run time and
keeps no annotations a class can be introspected by.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
#: the shared library holding every compiled module's code (one per build)
GROUP: Final = "rmq_send_path"
#: packages whose files may hold extension modules of this build
PACKAGES: Final = ("protocol", "store", "broker")

#: the compiled modules, as globs relative to the checkout; not listed: broker/store_metrics.py (an
#: async generator) and broker/processors/__init__.py (its dataclass names a type imported only
#: for checking, which a compiled dataclass looks up at import)
COMPILED: Final = (
    "protocol/*.py",
    "store/*.py",
    "store/index/*.py",
    "broker/connection.py",
    "broker/dispatcher.py",
    "broker/metrics.py",
    "broker/responses.py",
    "broker/rewrites.py",
    "broker/processors/send.py",
    "broker/processors/send_batch.py",
    "broker/processors/send_checks.py",
)
#: modules the globs above take in that stay interpreted, and why
INTERPRETED: Final = {
    "store/message_store.py": "an async generator (the store's open), which mypyc cannot compile",
    # `wire_fields` reads the header classes' annotations, which compiled classes lose
    "protocol/consumer_headers.py": "headers parsed by their annotations",
    "protocol/admin_group.py": "headers parsed by their annotations",
    "protocol/admin_topic.py": "headers parsed by their annotations",
    "protocol/namesrv_headers.py": "headers parsed by their annotations",
    "protocol/pop_headers.py": "headers parsed by their annotations",
    "protocol/transaction_headers.py": "headers parsed by their annotations",
    "protocol/_json_body.py": "a str parameter defaults to an object sentinel",
    "protocol/route.py": "its tests check decoded bodies against its classes' annotations",
    "store/config.py": "a field of the wrong type must fail as ValueError naming it, not TypeError",
    "store/columns.py": "numpy integers where the annotations say int",
    "store/columns_fast.py": "numpy integers where the annotations say int",
    "store/record_columns.py": "numpy integers where the annotations say int",
}


def compiled_paths() -> list[str]:
    """The source files of the build, relative to the checkout, in a stable order."""
    found: set[str] = set()
    for pattern in COMPILED:
        found.update(str(path.relative_to(ROOT)) for path in ROOT.glob(pattern))
    return sorted(found - INTERPRETED.keys())


def built_files() -> list[Path]:
    """Extension modules of a previous build (the group library and one stub per module)."""
    files = list(ROOT.glob(f"{GROUP}__mypyc.*.so"))
    for package in PACKAGES:
        files.extend((ROOT / package).rglob("*.cpython-*.so"))
    return files


def clean() -> int:
    files = built_files()
    for path in files:
        path.unlink()
    print(f"mypyc_build removed={len(files)}")
    return 0


def build(opt_level: str, jobs: int) -> int:
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]  # setuptools 65 has no hints

    clean()
    paths = compiled_paths()
    started = time.monotonic()
    extensions = mypycify(paths, opt_level=opt_level, multi_file=True, group_name=GROUP)
    setup(
        name="rmq-send-path-mypyc",
        ext_modules=extensions,
        script_args=["build_ext", "--inplace", "--parallel", str(jobs)],
    )
    elapsed = time.monotonic() - started
    size = sum(path.stat().st_size for path in built_files())
    print(
        f"mypyc_build modules={len(paths)} seconds={elapsed:.0f} "
        f"so_files={len(built_files())} so_mib={size / 2**20:.1f}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the extension modules")
    parser.add_argument("--opt-level", default="3", choices=("0", "1", "2", "3"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    os.chdir(ROOT)
    if args.clean:
        return clean()
    return build(args.opt_level, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
