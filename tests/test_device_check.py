"""The device check (docexec/device_check.py) over every example and every distdocs module an example may
import: no CPU tensor reaches a collective, no unmoved model reaches DDP, and no duration is taken
without waiting for the GPU, unless a comment says the CPU is meant. CI has no GPU; this is how the
nccl path is held to what it needs."""

from __future__ import annotations

import re

import pytest

from docexec.copies import ALLOWED_IN_EXAMPLES
from docexec.device_check import check_file
from docexec.fences import REPO, all_examples

pytestmark = pytest.mark.fast  # the test tier: see the testing page

CHECKED = all_examples() + [REPO / "src" / "distdocs" / "training" / f"{name}.py" for name in ALLOWED_IN_EXAMPLES]
SEEDED = REPO / "tests" / "faulty_scripts" / "device_bugs.py"


@pytest.mark.parametrize("path", CHECKED, ids=[str(p.relative_to(REPO)) for p in CHECKED])
def test_code_written_for_nccl_keeps_tensors_models_and_timers_on_the_device(path):
    findings = check_file(path, REPO)
    assert not findings, "\n".join(map(str, findings))


def test_the_check_finds_each_class_of_bug_in_a_seeded_file():
    marked = (re.search(r"# flagged: ([a-z-]+)", line) for line in SEEDED.read_text().splitlines())
    flagged = {i + 1: m.group(1) for i, m in enumerate(marked) if m}
    found = {f.line: f.rule for f in check_file(SEEDED, REPO)}
    # The seeded file marks what must be flagged; the rest (moved, synchronized, CPU meant) must pass.
    assert found == flagged, found
    assert set(found.values()) == {
        "cpu-tensor-in-collective",
        "unmoved-model-in-ddp",
        "clock-without-synchronize",
        "host-read-every-step",
    }
