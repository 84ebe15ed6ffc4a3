"""examples/accumulation/step01_no_sync.py refuses settings that break
global batch = micro-batch x accumulation steps x ranks, in one line from rank 0, with exit code 2."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.processes  # the test tier: see the testing page

SCRIPT = "examples/accumulation/step01_no_sync.py"


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
def test_impossible_settings_get_one_line_and_exit_2(command_runs, flags, message):
    command_runs.run_usage_error(f"torchrun --standalone --nproc_per_node=2 {SCRIPT} {flags}", message)
