"""The lab notebook runs as a plain script, as a reader without Jupyter runs it, and passes the
self-check that ends each of its three steps. It runs as a reader without root does: step 3 measures
the scale model live, its links paced by the ranks, where no namespace or tc can be built."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.processes  # the test tier: see the testing page

LAB = "docs/lab/simulate-data-parallel-sync.py"


def lab_without_root() -> str:
    """The lab's command as a reader without root runs it. As root (CI), inside a user namespace of its
    own (`unshare --user`), where it is uid 65534, nobody, with no capability outside: distdocs.lab.links
    refuses it (it never tries a namespace), as it refuses any ordinary user. Dropping to nobody with
    setpriv would do the same, where nobody may run this Python; in CI's image it lives in /root."""
    return f"unshare --user python {LAB}" if os.geteuid() == 0 else f"python {LAB}"


def test_lab_runs_with_plain_python_and_measures_step_3_without_root(command_runs):
    result = command_runs.run_ok(lab_without_root())
    lines = result.stdout.splitlines()
    for step in (1, 2, 3):
        assert f"step {step} self-check passed" in lines, result.describe()
    measured = [ln for ln in lines if ln.startswith("# ") and "emulated accelerators" in ln]
    assert measured and "links: emulated in the ranks" in measured[0], result.describe()
    assert "saved run" not in result.stdout and "8 workers, 1 micro-batch: you -, the cost model" in result.stdout
