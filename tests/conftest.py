"""Shared fixtures: one run per distinct command for the whole session, and the closing count of what
was executed."""

from __future__ import annotations

from collections import Counter

import pytest

from commands import CommandRuns

# Scripts that torchrun launches from the tests (faulty_scripts/ fail on purpose, exit_scripts/ test how a
# process exits); never imported by pytest.
collect_ignore_glob = ["faulty_scripts/*", "exit_scripts/*", "exit_probe/*"]


def pytest_addoption(parser):
    parser.addoption(
        "--update-outputs",
        action="store_true",
        help="rewrite the Output blocks in docs/ with what the commands print now",
    )


@pytest.fixture(scope="session")
def command_runs() -> CommandRuns:
    return CommandRuns()


def pytest_terminal_summary(terminalreporter):
    """5f: say how much of the docs this run executed."""
    counts: Counter[str] = Counter()
    for report in terminalreporter.stats.get("passed", []):
        if report.when != "call":
            continue
        if "::line" in report.nodeid or "[line" in report.nodeid:
            counts["inline python fences"] += 1
        for key, value in report.user_properties:
            if key == "executed":
                counts[value] += 1
    if not counts:
        return
    order = [
        "inline python fences",
        "examples",
        "shell commands",
        "output blocks checked",
        "fences not executed (each with its reason)",
    ]
    line = ", ".join(f"{counts[k]} {k}" for k in order)
    terminalreporter.write_sep("-", f"distdocs executed: {line}")
