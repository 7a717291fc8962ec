"""A bounded atheris (libFuzzer) run over the codecs: only the protocol's own errors may escape."""

from __future__ import annotations

import pathlib
import subprocess
import sys

RUNS = 200_000


def test_coverage_guided_fuzzing_finds_no_crash(tmp_path: pathlib.Path) -> None:
    script = pathlib.Path(__file__).with_name("atheris_codecs.py")
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(script), f"-runs={RUNS}", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=root,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Done {RUNS} runs" in done.stderr
