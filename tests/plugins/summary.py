"""The run's closing lines: how much of the docs it executed (the line that the README and the testing
page quote), and the machine's CPU over the run."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

START = pytest.StashKey[tuple]()


def machine_cpu_seconds() -> float:
    """CPU seconds every process on this machine has used since boot (Linux /proc/stat): user, nice,
    system, irq and softirq. Over a run, what the suite spent, orphaned helpers included."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller, or a run of one process
        session.config.stash[START] = (time.monotonic(), machine_cpu_seconds())


def pytest_terminal_summary(terminalreporter):
    """Say how much of the docs this run executed: the closing line that the README and the testing page quote."""
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
    if START in terminalreporter.config.stash:
        wall, cpu = terminalreporter.config.stash[START]
        wall, cpu = time.monotonic() - wall, machine_cpu_seconds() - cpu
        terminalreporter.write_sep("-", f"the machine's CPU over the run: {cpu:.0f} s in {wall:.0f} s of wall time")
