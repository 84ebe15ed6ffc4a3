"""docs/deep-dives/context-parallelism.md: what it says of torch's own context parallelism on a CPU comes
from a run (tests/faulty_scripts/context_parallel_on_cpu.py), and the example refuses a sequence it
cannot split evenly. The page's commands and their output are test_docs.py's; the ring's checks, the
example's own."""

from __future__ import annotations

import re

import pytest

from docexec.fences import REPO
from support.runs import check_refusal

pytestmark = pytest.mark.processes  # the test tier: see the testing page

PAGE = REPO / "docs/deep-dives/context-parallelism.md"


def test_the_page_quotes_what_torchs_context_parallel_says_on_a_cpu(command_runs):
    result = command_runs.run_ok("python tests/faulty_scripts/context_parallel_on_cpu.py")
    (said,) = re.findall(r"^NotImplementedError: .+$", result.stdout, re.M)
    quoted = re.search(r"`(NotImplementedError: [^`]+)`", " ".join(PAGE.read_text().split()))[1]
    assert quoted == said, (quoted, said)


def test_a_sequence_that_does_not_split_evenly_gets_one_line_and_exit_2():
    check_refusal(
        "torchrun --standalone --nproc_per_node=3 examples/context_parallel/step01_ring_attention.py",
        "error: a sequence of 1024 tokens cannot be split evenly over 3 ranks",
    )
