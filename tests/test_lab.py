"""The lab notebook (docs/lab/simulate-data-parallel-sync.py) runs as a plain script, as a reader
without Jupyter runs it, and passes the self-check that ends each of its three steps. It runs as a
reader without root does: step 3 measures the scale model live, its links paced by the ranks, where
no namespace or tc can be built."""

from __future__ import annotations

import pytest

from support.lab_notebook import lab_without_root

pytestmark = pytest.mark.processes  # the test tier: see the testing page


def test_lab_runs_with_plain_python_and_measures_step_3_without_root(command_runs):
    result = command_runs.run_ok(lab_without_root())
    lines = result.stdout.splitlines()
    for step in (1, 2, 3):
        assert f"step {step} self-check passed" in lines, result.describe()
    measured = [ln for ln in lines if ln.startswith("# ") and "emulated accelerators" in ln]
    assert measured and "links: emulated in the ranks" in measured[0], result.describe()
    assert "saved run" not in result.stdout and "8 workers, 1 micro-batch: you -, the cost model" in result.stdout
