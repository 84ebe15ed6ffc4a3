"""docs/lesson/gradient-accumulation.md. examples/accumulation/step01_no_sync.py refuses settings that
break global batch = micro-batch x accumulation steps x ranks, in one line from rank 0, with exit code 2.
step02's sync-bound loop syncs 8 times fewer bytes when it accumulates: counted, the same on any
machine. Its rates move with the machine's load; what the page says of them is held live on the scale
model (tests/test_scale_model.py), beside the saved run it shows."""

from __future__ import annotations

import re

import pytest

from docexec.fences import REPO, example_command
from support.runs import check_refusal

SCRIPT = "examples/accumulation/step01_no_sync.py"
SYNC_BOUND = REPO / "examples/accumulation/step02_workers_instead_of_accumulation.py"
RATE = re.compile(r"^(mistake|fix): .* ranks ([\d,]+)")
BYTES = re.compile(r"^(mistake|fix): .* ([\d,]+) bytes synced$")


@pytest.mark.processes  # the test tiers: see the testing page
@pytest.mark.parametrize(
    "flags, message",
    [
        ("--accumulation-steps 0", "error: --accumulation-steps must be at least 1, got 0"),
        (
            "--global-batch 60 --accumulation-steps 4",
            "error: --global-batch 60 must divide into 4 micro-batches on each of 2 ranks",
        ),
    ],
)
def test_impossible_settings_get_one_line_and_exit_2(flags, message):
    check_refusal(f"torchrun --standalone --nproc_per_node=2 {SCRIPT} {flags}", message)


@pytest.mark.processes
def test_accumulating_syncs_8_times_fewer_bytes_for_the_same_samples(command_runs):
    out = command_runs.run_ok(example_command(SYNC_BOUND)).stdout
    synced = {m[1]: int(m[2].replace(",", "")) for m in map(BYTES.match, out.splitlines()) if m}
    assert synced["mistake"] == 8 * synced["fix"], out  # counted bytes, the same on any machine
    assert {m[1] for m in map(RATE.match, out.splitlines()) if m} == {"mistake", "fix"}, out
