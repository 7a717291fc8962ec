"""The pytest plugin, as another project uses it: pytest runs on sample projects in a temp dir.

The runs are subprocesses (`runpytest_subprocess`), so the plugin is loaded the way an installed
rmq-broker loads it: through its `pytest11` entry point when this checkout is installed, else
(a worktree beside the installed checkout) with `-p`. Few brokers start: one session broker for
the shared run, one broker that is killed and restarted, one under ini settings.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import shlex
import sys
import tomllib

import pytest

from rmq_client import pytest_plugin
from tests.plugin import docs, sample

PLUGIN = "rmq_client.pytest_plugin"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def plugin_args() -> list[str]:
    """`-p` only when no installed distribution declares the entry point (loading the plugin
    twice is an error)."""
    declared = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.value == PLUGIN for ep in declared) else ["-p", PLUGIN]


def section(output: str, title_part: str) -> str:
    """The text of the report section whose title holds `title_part`, up to the next title."""
    title = rf"^[-=]+ [^\n]*{re.escape(title_part)}[^\n]* [-=]+$"
    match = re.search(rf"{title}(.*?)(?:^[-=_]+ |\Z)", output, re.M | re.S)
    assert match is not None, f"no section {title_part!r} in:\n{output}"
    return match.group(1)


def test_the_entry_point_names_the_plugin_module() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {"rmq_broker": PLUGIN}
    for hook in ("pytest_addoption", "pytest_configure", "pytest_runtest_makereport"):
        assert callable(getattr(pytest_plugin, hook))


def test_the_docs_project_and_a_failing_test(pytester: pytest.Pytester) -> None:
    """docs/testing.md's pytest examples (the client package, the C++ client, a crash and
    restart, a Trio test) with two more tests, on the doc's shared session broker."""
    for name, text in docs.project_files().items():
        (pytester.path / name).write_text(text)
    pytester.makepyfile(test_shared=sample.SHARED)
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-v")
    output = result.stdout.str()
    result.assert_outcomes(passed=5, failed=1)
    if not plugin_args():  # loaded through the entry point: pytest names its distribution
        assert re.search(r"^plugins: .*rmq-broker-", output, re.M), output
    assert "FAILED test_shared.py::test_fails_on_purpose" in output
    # The failing test's report holds what the session broker logged during that test: the
    # topic it created, not the startup nor the topics of the tests before it.
    log = section(output, "rmq-broker 127.0.0.1:")
    assert '"topic": "ShownInTheReport"' in log
    assert '"event": "listening"' not in log and '"topic": "CppOrders"' not in log
    assert output.count("rmq-broker 127.0.0.1:") == 1, "only the failing test has a log section"
    # Without --rmq-keep-store every store is gone once its broker stopped, or failed to start.
    stores = list(pytester.path.glob("runpytest-*/rmq-store*"))
    assert stores == [], stores
    assert "rmq-broker stores kept" not in output


def test_keep_store_executable_and_ini_settings(pytester: pytest.Pytester) -> None:
    pytester.makeini(sample.INI)
    pytester.makepyfile(test_keep=sample.KEEP)
    # a wrapper that notes its arguments, then runs the broker
    wrapper = pytester.path / "my broker"
    wrapper.write_text(
        f'#!/bin/sh\necho "$@" > "$(dirname "$0")/invoked.txt"\n'
        f'exec "{sys.executable}" -m broker "$@"\n'
    )
    wrapper.chmod(0o755)
    result = pytester.runpytest_subprocess(
        *plugin_args(),
        "-p",
        "no:cacheprovider",
        "--rmq-keep-store",
        f"--rmq-broker-executable={shlex.quote(str(wrapper))}",
    )
    result.assert_outcomes(passed=1)
    assert (pytester.path / "invoked.txt").read_text().startswith("serve --listen 127.0.0.1:0 ")
    store = pathlib.Path((pytester.path / "kept_store.txt").read_text())
    assert (store / "commitlog").is_dir()
    assert {p.resolve() for p in pytester.path.glob("runpytest-*/rmq-store*")} == {store}
    assert str(store) in section(result.stdout.str(), "rmq-broker stores kept")


def test_bad_ini_values_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrmq_broker_config =\n    no equals sign here\n")
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess(*plugin_args())
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "rmq_broker_config: expected `key = value`, got 'no equals sign here'" in (
        result.stderr.str()
    )
