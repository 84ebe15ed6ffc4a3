"""Shared fixtures: one run per distinct command for the whole session, and the closing count of what
was executed."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from distdocs.launch import CommandResult, run_command
from markdown_fences import REPO

# Scripts that fail on purpose, run by torchrun from the harness tests; never imported by pytest.
collect_ignore_glob = ["faulty_scripts/*"]

COMMAND_TIMEOUT_S = 180
EXIT_CRASH_MARKERS = ("terminate called", "SIGABRT", "Signal 6", "core dumped")


def pytest_addoption(parser):
    parser.addoption("--update-outputs", action="store_true",
                     help="rewrite the Output blocks in docs/ with what the commands print now")


def command_env(gpu: bool) -> dict[str, str]:
    """The reader's environment, with this venv's torchrun, python and distdocs first on PATH. CPU
    commands run with the GPUs hidden, so that they test the gloo path on a GPU machine too."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class CommandRuns:
    """Runs each distinct command once per session, from the repository root, with a hard timeout.
    An example's docstring command and the same command on a page share one run."""

    def __init__(self) -> None:
        self._results: dict[tuple[str, bool], CommandResult] = {}

    def run(self, command: str, gpu: bool = False) -> CommandResult:
        key = (command, gpu)
        if key not in self._results:
            self._results[key] = run_command(
                command, timeout_s=COMMAND_TIMEOUT_S, cwd=REPO, env=command_env(gpu)
            )
        return self._results[key]

    def run_ok(self, command: str, gpu: bool = False) -> CommandResult:
        """Run, and fail the test unless it exited 0, in time, cleanly, leaving nothing behind."""
        result = self.run(command, gpu)
        problems = []
        if result.timed_out:
            problems.append(f"timed out after {COMMAND_TIMEOUT_S} s")
        elif result.returncode != 0:
            problems.append(f"exit code {result.returncode}")
        if result.leftovers:
            problems.append("left processes running")
        crash = [m for m in EXIT_CRASH_MARKERS if m in result.stderr]
        if crash:
            problems.append(f"a process aborted ({crash[0]!r} in stderr)")
        if problems:
            pytest.fail("; ".join(problems) + "\n" + result.describe(), pytrace=False)
        return result


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
    order = ["inline python fences", "examples", "shell commands", "output blocks checked",
             "fences not executed (each with its reason)"]
    line = ", ".join(f"{counts[k]} {k}" for k in order)
    terminalreporter.write_sep("-", f"distdocs executed: {line}")
