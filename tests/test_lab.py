"""The lab notebook runs as a plain script, as a reader without Jupyter runs it, and passes the
self-check that ends each of its three steps."""

from __future__ import annotations

import pytest
from conftest import scale_model_run

pytestmark = pytest.mark.processes  # the test tier: see the testing page

LAB = "docs/lab/simulate-data-parallel-sync.py"


def test_lab_runs_with_plain_python(command_runs, workers_folder):
    """Step 3 shows the overview's scale-model run: the one this session made, where it could."""
    run = scale_model_run(workers_folder)
    result = command_runs.run_ok(f"DISTDOCS_SCALE_MODEL_RUN={run} python {LAB}" if run else f"python {LAB}")
    lines = result.stdout.splitlines()
    for step in (1, 2, 3):
        assert f"step {step} self-check passed" in lines, result.describe()
