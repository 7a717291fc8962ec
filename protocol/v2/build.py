"""Write the `apache.rocketmq.v2` bindings into `protocol/v2/` from the official client's wheel.

    python -m protocol.v2.build [--wheel PATH] [--check]

The wheel (rocketmq-python-client, pinned with its SHA-256) is fetched with pip unless `--wheel`
names a copy. Only its generated `*_pb2.py` modules are taken; their one import of each other is
pointed at this package, so the official client may be installed beside the broker without the
two sharing a module. A run with the files already made from the pinned wheel does nothing.
`--check` exits 1 when they are missing or stale.
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import subprocess
import sys
import tempfile
import zipfile
from typing import Final

from protocol.v2 import GENERATED

PACKAGE: Final = "rocketmq-python-client"
VERSION: Final = "5.1.2"
WHEEL: Final = f"rocketmq_python_client-{VERSION}-py3-none-any.whl"
SHA256: Final = "b527020694cb6a91bb490b158a63c0b34e4b46b790dde2d435e4c5ba54a621f6"
#: where the bindings sit inside the wheel, and the import line that names that place
INNER: Final = "rocketmq/grpc_protocol"
IMPORT_FROM: Final = b"from rocketmq.grpc_protocol import "
IMPORT_TO: Final = b"from protocol.v2 import "

HERE: Final = pathlib.Path(__file__).resolve().parent
STAMP: Final = HERE / "_source.txt"


def _stamp_text() -> str:
    return f"{WHEEL} sha256={SHA256}\n"


def is_current() -> bool:
    """True when every module was written from the pinned wheel."""
    if not STAMP.is_file() or STAMP.read_text() != _stamp_text():
        return False
    return all((HERE / f"{name}.py").is_file() for name in GENERATED)


def fetch(dest: pathlib.Path) -> pathlib.Path:
    """Download the pinned wheel into `dest` with this interpreter's pip."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--only-binary", ":all:", "--dest", str(dest), f"{PACKAGE}=={VERSION}"]
    subprocess.run(command, check=True)
    return dest / WHEEL


def extract(wheel: pathlib.Path) -> None:
    """Check the wheel's digest, then write the rewritten modules and the stamp."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"{wheel}: sha256 {digest}, expected {SHA256}")
    with zipfile.ZipFile(wheel) as archive:
        for name in GENERATED:
            source = archive.read(f"{INNER}/{name}.py")
            target = HERE / f"{name}.py"
            partial = target.with_suffix(".py.part")
            partial.write_bytes(source.replace(IMPORT_FROM, IMPORT_TO))
            partial.replace(target)
    STAMP.write_text(_stamp_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m protocol.v2.build", description=__doc__)
    parser.add_argument("--wheel", type=pathlib.Path, help="a local copy of the pinned wheel")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the files are made")
    args = parser.parse_args(argv)
    if args.check:
        return 0 if is_current() else 1
    if is_current() and args.wheel is None:
        return 0
    if args.wheel is not None:
        extract(args.wheel)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            extract(fetch(pathlib.Path(tmp)))
    print(f"protocol/v2: bindings written from {WHEEL}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
