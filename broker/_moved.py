"""The warning of a module that moved to `rmq_client`, pointed at the line that imported it.

Python skips its own import machinery when it places a warning, but not an import hook such as
pytest's assertion rewriting, which loads every module of an installed pytest plugin's
distribution (this one's included): those frames are skipped here too, so the warning names the
importing line under pytest as well.
"""

from __future__ import annotations

import sys
import warnings

#: frames between a module's code and its importer that are not the importer
_HOOK_FILES = ("_pytest/assertion/rewrite.py", "_pytest\\assertion\\rewrite.py")


def _is_import_machinery(filename: str) -> bool:
    return "importlib" in filename and "_bootstrap" in filename


def warn_moved(old: str, new: str) -> None:
    """Warn (DeprecationWarning) that `old` is now `new`; called by the shim module's body."""
    level = 3  # 1: here, 2: the shim's body, 3: whatever imported it
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith(_HOOK_FILES):
            level += 1
        elif not _is_import_machinery(name):
            break
        frame = frame.f_back  # type: ignore[assignment]
    warnings.warn(
        f"{old} is deprecated: import {new} instead", DeprecationWarning, stacklevel=level
    )
