"""docs/operations/in-production.md, the 2 x 2 x 2 mesh: each dimension carries only its own kind of
communication, in the numbers the page gives. The run, MESH_3D of tests/support/launches.py, is shared with
test_docs.py (its excerpt) and test_examples.py (its self-check)."""

from __future__ import annotations

import re

import pytest

from support.launches import MESH_3D
from support.runs import check_refusal

pytestmark = pytest.mark.processes  # the test tier: see the testing page

SCRIPT = "examples/in_production/step02_3d_mesh.py"
CALLS = re.compile(r"^  (pp|dp|tp): (.+)$", re.M)


def test_each_mesh_dimension_carries_only_its_own_communication(command_runs):
    result = command_runs.run_ok(MESH_3D)
    found = {dim: dict(c.split(" x ") for c in text.split(", ")) for dim, text in CALLS.findall(result.stdout)}
    calls = {dim: found.get(dim, {}) for dim in ("pp", "dp", "tp")}
    microbatches, blocks = 2, 2  # of rank 0's stage
    assert calls["pp"] == {"send": str(microbatches), "recv": str(microbatches)}, result.describe()
    # FSDP2 kept gathered through the step: each block's weights gathered once, and its gradients
    # reduce-scattered once, after the last micro-batch's backward.
    assert calls["dp"] == {"all_gather": str(blocks), "reduce_scatter": str(blocks)}, result.describe()
    # Tensor parallelism: one all_reduce per block forward, and one in backward but for the first block,
    # whose input (the data) needs no gradient.
    assert calls["tp"] == {"all_reduce": str(blocks * microbatches + (blocks - 1) * microbatches)}, result.describe()


def test_a_world_the_mesh_cannot_hold_gets_one_line():
    check_refusal(
        f"torchrun --standalone --nproc_per_node=2 {SCRIPT}",
        "error: this example needs a multiple of 4 processes (pp 2 x tp 2 x dp), got 2",
    )


def test_a_world_the_2d_mesh_cannot_hold_gets_one_line():
    check_refusal(
        "torchrun --standalone --nproc_per_node=2 examples/in_production/step01_2d_mesh.py",
        "error: this example needs a multiple of 2 processes, at least 4; got 2",
    )
