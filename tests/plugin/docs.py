"""The fenced code blocks of docs/testing.md, by the label after their language.

```python test_orders.py     a file of the sample pytest project (`python`, `ini` blocks)
```python script             a script run on its own
```sh cli / ```sh podman     shell blocks run with bash
```java not-run              snippets the suite does not run (Java and Go only)
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass
from typing import Final

DOC: Final = pathlib.Path(__file__).resolve().parents[2] / "docs" / "testing.md"
_BLOCK: Final = re.compile(r"^```(\w*)[ \t]*([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    language: str
    label: str
    code: str


def blocks() -> list[Block]:
    return [Block(m[1], m[2].strip(), m[3]) for m in _BLOCK.finditer(DOC.read_text())]


def block(language: str, label: str) -> str:
    (found,) = [b.code for b in blocks() if (b.language, b.label) == (language, label)]
    return found


def project_files() -> dict[str, str]:
    """The files of the doc's sample pytest project: name -> text."""
    return {
        b.label: b.code
        for b in blocks()
        if b.language in {"python", "ini"} and b.label.endswith((".py", ".ini"))
    }
