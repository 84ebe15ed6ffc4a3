"""The seed of the random kill points (tests/test_fault_tolerance.py, the SLURM jobs): drawn once per
run unless given, and printed in the header so that a failure can be run again."""

from __future__ import annotations

import os
import random


def pytest_configure(config):
    """One seed for the random kill points of test_fault_tolerance.py, drawn here unless given, so that
    every pytest-xdist worker (they inherit the environment) draws the same points."""
    os.environ.setdefault("DISTDOCS_KILL_SEED", str(random.SystemRandom().randrange(2**32)))


def pytest_report_header(config):
    return f"kill points drawn with DISTDOCS_KILL_SEED={os.environ['DISTDOCS_KILL_SEED']} (set it to run them again)"
