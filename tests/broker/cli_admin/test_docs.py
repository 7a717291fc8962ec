"""deploy/README.md lists every admin command with an example whose flags the command takes."""

from __future__ import annotations

import pathlib
import re
import shlex

from broker.admin_cli import admin

README = pathlib.Path(__file__).parents[3] / "deploy" / "README.md"


def examples() -> dict[str, list[str]]:
    section = README.read_text().split("## 9. Administer it", 1)[1]
    found = {}
    for name, example in re.findall(r"^\| `(\w+)` \| `rmq-broker admin ([^`]+)`", section, re.M):
        found[name] = shlex.split(example)
    return found


def test_every_command_has_an_example_with_flags_it_takes() -> None:
    listed = examples()
    assert sorted(listed) == sorted(admin.commands)
    for name, args in listed.items():
        assert args[0] == name
        command = admin.commands[name]
        context = command.make_context(name, args[1:])  # raises on an unknown or bad flag
        assert context.params  # the example's values were parsed
