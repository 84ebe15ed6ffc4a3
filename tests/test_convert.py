"""The convert page: the one-process script and its distributed version train to the same result, and
the diff on the page is made from the two files."""

from __future__ import annotations

import re
import sys

import pytest

from docexec.fences import DOCS, REPO

ONE = "python examples/convert/step01_one_process.py"
TWO = "torchrun --standalone --nproc_per_node=2 examples/convert/step02_ddp.py"
LAST_EPOCH = re.compile(r"epoch 3: validation loss ([\d.]+), accuracy ([\d.]+)%")


@pytest.mark.processes
def test_the_distributed_script_trains_to_what_the_one_process_script_reaches(command_runs):
    """Two runs of one recipe, not one computation: the shuffles differ, and on the CPU each rank's
    BatchNorm sees half the batch. So the final accuracy must agree within 2 points and the
    validation loss within 25%."""
    one = LAST_EPOCH.search(command_runs.run_ok(ONE).stdout).groups()
    two = LAST_EPOCH.search(command_runs.run_ok(TWO).stdout).groups()
    (loss_one, acc_one), (loss_two, acc_two) = map(float, one), map(float, two)
    assert abs(acc_one - acc_two) <= 2.0, (acc_one, acc_two)
    assert abs(loss_one - loss_two) <= 0.25 * loss_one, (loss_one, loss_two)


@pytest.mark.fast
def test_the_page_shows_the_diff_of_the_two_files():
    sys.path.insert(0, str(REPO / "hooks"))
    import file_diff

    page = (DOCS / "multi-gpu/convert-your-script.md").read_text()
    rendered = file_diff.on_page_markdown(page, None, None, None)
    diff = file_diff.render("convert/step01_one_process.py", "convert/step02_ddp.py")
    assert "<!-- diff:" not in rendered and "```diff" in rendered and diff in rendered
    assert "+    model = DDP(model.to(device))" in diff.splitlines()  # the change the page is about
    assert "--8<--" not in diff  # snippet markers are the site's, not the reader's code
