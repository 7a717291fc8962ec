"""The client's old module paths under `broker` still import, warn, and hand on the new objects;
nothing in this repository imports them any more."""

from __future__ import annotations

import ast
import pathlib
import re
import sys
from typing import Final

import pytest

ROOT: Final = pathlib.Path(__file__).resolve().parents[2]
#: old module under broker/ -> its module under rmq_client/
MOVES: Final = {
    "client": "producer",
    "pull_client": "pull_consumer",
    "quick_send": "quick_send",
    "blocking_client": "blocking",
    "query_client": "query",
    "tx_client": "transaction",
    "admin_client": "admin",
    "admin_client_groups": "admin_groups",
}
SHIMS: Final = {ROOT / "broker" / f"{old}.py" for old in MOVES}
OLD_NAMES: Final = {f"broker.{old}" for old in MOVES}


@pytest.mark.parametrize(("old", "new"), sorted(MOVES.items()))
def test_an_old_path_warns_and_hands_on_the_same_objects(
    old: str, new: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, f"broker.{old}", raising=False)
    with pytest.warns(DeprecationWarning, match=rf"import rmq_client\.{new} instead") as seen:
        __import__(f"broker.{old}")
    shim = sys.modules[f"broker.{old}"]
    moved = sys.modules[f"rmq_client.{new}"]
    # stacklevel 2: the warning names the line that imported the old path, not the shim
    assert [w.filename for w in seen] == [__file__]
    names = [n for n in vars(moved) if not n.startswith("__")]
    assert names
    for name in names:
        assert getattr(shim, name) is getattr(moved, name), name


def test_broker_client_gives_the_producer_objects() -> None:
    with pytest.warns(DeprecationWarning):
        sys.modules.pop("broker.client", None)
        from broker.client import DEFAULT_TIMEOUT_S, Message, open_producer
    from rmq_client import producer

    assert (DEFAULT_TIMEOUT_S, Message, open_producer) == (
        producer.DEFAULT_TIMEOUT_S,
        producer.Message,
        producer.open_producer,
    )
    assert Message is producer.Message


def _old_imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in OLD_NAMES]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module in OLD_NAMES:
                found.append(node.module)
            elif node.module == "broker":
                found += [f"broker.{a.name}" for a in node.names if a.name in MOVES]
    return [f"{path.relative_to(ROOT)}:{name}" for name in found]


def test_no_code_of_ours_imports_an_old_path() -> None:
    sources = [
        p
        for top in ("broker", "rmq_client", "protocol", "store", "pipeline", "tests", "bench")
        for p in (ROOT / top).rglob("*.py")
        if p not in SHIMS and p != pathlib.Path(__file__).resolve()
    ]
    assert len(sources) > 100
    assert [hit for p in sources for hit in _old_imports(p)] == []


def test_no_doc_of_ours_imports_an_old_path() -> None:
    olds = "|".join(MOVES)
    pattern = re.compile(rf"(from|import)\s+broker(\.({olds})\b|\s+import\s+({olds})\b)")
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "deploy" / "README.md"]
    assert [str(d.relative_to(ROOT)) for d in docs if pattern.search(d.read_text())] == []
