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


NO_SYNC_CALLS = re.compile(
    r"in (\d+) steps: (\d+) syncing every micro-batch, (\d+) with no_sync\n"
    r"only backward inside no_sync: (\d+) calls, every micro-batch still synced"
)


@pytest.mark.processes
@pytest.mark.holds(
    "docs/lesson/gradient-accumulation.md",
    "Run a micro-batch's forward and backward inside `model.no_sync()`, and its backward skips the all_reduce",
)
@pytest.mark.holds(
    "docs/lesson/gradient-accumulation.md",
    "DDP decides in the forward pass whether the backward will sync (it sets up the reducer for that backward), "
    "so a backward alone inside `no_sync()` all_reduces all the same.",
)
@pytest.mark.holds(
    "docs/multi-gpu/convert-your-script.md",
    "DDP decides in the forward whether the backward syncs: "
    "with only the backward inside, every micro-batch still syncs",
)
def test_no_sync_saves_k_minus_1_syncs_a_step_only_when_it_wraps_the_forward_too(command_runs):
    """The page's run (k = 4 on 2 ranks), counted by a communication hook: around forward and backward,
    no_sync() leaves one all_reduce a step, k - 1 fewer; around the backward alone, none fewer."""
    out = command_runs.run_ok(example_command(REPO / SCRIPT)).stdout
    steps, every, no_sync, backward_only = map(int, NO_SYNC_CALLS.search(out).groups())
    k = 4
    assert every == k * steps and no_sync == steps and every - no_sync == (k - 1) * steps, out
    assert backward_only == every, out
