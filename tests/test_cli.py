"""The console script is installed and answers --version."""

import subprocess
import sys

from broker import __version__


def test_version_flag_prints_the_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "broker", "--version"], check=True, capture_output=True, text=True
    )
    assert out.stdout.strip() == f"rmq-broker, version {__version__}"
