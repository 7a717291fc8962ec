"""Optional sampling profile of the broker under load: py-spy attached to the serve process.

`profiling(pid, path)` records collapsed stacks (py-spy's `raw` format: `frame;frame;... count`
per line) while a row runs; `print_hot_spots(path)` prints the functions holding the most
samples, by self time and by inclusive time, so a slow row comes with the places to look.
py-spy is a separate install (`pip install py-spy`); without it the bench says so and runs on.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

_PY_SPY: Final = "py-spy"
_RATE_HZ: Final = 250


def _py_spy() -> str | None:
    return shutil.which(_PY_SPY) or shutil.which(
        str(Path(__file__).parents[1] / ".venv/bin/py-spy")
    )


@contextmanager
def profiling(pid: int, path: Path) -> Iterator[None]:
    """Sample `pid` (idle threads left out) into `path` for the duration of the block."""
    executable = _py_spy()
    if executable is None:
        print("py-spy not found (pip install py-spy): no profile", flush=True)
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    command = [executable, "record", "--pid", str(pid), "--rate", str(_RATE_HZ)]
    command += ["--format", "raw", "--output", str(path), "--nonblocking"]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            recorder.wait(30)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()


_OURS: Final = ("broker/", "store/", "protocol/")


def _frame_name(frame: str) -> str:
    # py-spy frames read `function (path/to/file.py:line)`; keep the function, the file's
    # directory and name (broker/processors/send.py and bench/send.py are not the same)
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(file).parts[-2:])})" if file else name


def hot_spots(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    """Total samples, samples per innermost function, and per project function on the stack."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(frame) for frame in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            if any(package in name for package in _OURS):
                anywhere[name] += count
    return total, own, anywhere


def print_hot_spots(path: Path, top: int = 15) -> None:
    """Print the `top` functions by self and by inclusive share of the samples in `path`."""
    if not path.exists():
        return
    total, own, anywhere = hot_spots(path)
    if not total:
        return
    print(f"profile {path.name} samples={total}", flush=True)
    for title, counter in (("self", own), ("inclusive", anywhere)):  # inclusive: our code only
        for name, count in counter.most_common(top):
            print(f"  {title:9} {100 * count / total:5.1f}%  {name}", flush=True)
