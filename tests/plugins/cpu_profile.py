"""`pytest --cpu-profile FILE`: each test's CPU seconds (its own and its children's) and wall seconds,
one JSON line each, which tools/suite_profile.py sums by tier, module and test."""

from __future__ import annotations

import json
import resource
import time

import pytest

from distdocs.lab.world import forked_cpu_seconds

from plugins.tiers import TIERS


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-profile",
        metavar="FILE",
        help="append each test's CPU seconds (its own and its children's) and wall seconds to FILE, one JSON line each",
    )


def _cpu_seconds() -> float:
    """This process's CPU, its ended children's, and that of the World ranks it had forked (their
    forkserver reaps them, so RUSAGE_CHILDREN does not see them)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked_cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With --cpu-profile: on 2 cores the suite's time is bounded by the CPU its tests use, not by their
    wall time, so record both. Children count once they have been waited for: a command's processes
    when it ends, a session's browser when the session ends (charged to the last test)."""
    path = item.config.getoption("--cpu-profile")
    if not path:
        return (yield)
    cpu, wall = _cpu_seconds(), time.monotonic()
    try:
        return (yield)
    finally:
        line = {
            "test": item.nodeid,
            "tier": next((m.name for m in item.iter_markers() if m.name in TIERS), ""),
            "cpu_s": round(_cpu_seconds() - cpu, 2),
            "wall_s": round(time.monotonic() - wall, 2),
        }
        with open(path, "a") as sink:
            sink.write(json.dumps(line) + "\n")
