"""docs/deep-dives/expert-parallelism.md: what its runs show. The page's three commands are run once for
these tests and test_docs.py (which checks their excerpts, and test_examples.py the self-check): a
skewed router gives rank 0 most of the tokens and about nineteen times rank 1's activations, and a
capacity factor of 1.25 holds each expert to 160 tokens of each rank, dropping more than half."""

from __future__ import annotations

import ast
import re

import pytest

from docexec.fences import REPO
from support.runs import check_refusal

pytestmark = pytest.mark.processes  # the test tier: see the testing page

SCRIPT = "examples/expert_parallel/step01_moe_all_to_all.py"
COMMAND = f"torchrun --standalone --nproc_per_node=2 {SCRIPT}"
ROW = re.compile(r"^\s+(\d)\s+\d-\d\s+(\d+)\s+(\d+)\s+[\d.]+$", re.M)
DROPPED = re.compile(r"^tokens dropped past capacity: (\d+) of (\d+)$", re.M)
PAGE = REPO / "docs/deep-dives/expert-parallelism.md"
NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen \
seventeen eighteen nineteen twenty".split()


def constant(name: str) -> int:
    """A module-level constant of the example, as the example sets it (`A, B = 4, 64` included)."""
    for node in ast.parse((REPO / SCRIPT).read_text()).body:
        if isinstance(node, ast.Assign):
            names = [ast.unparse(t) for t in getattr(node.targets[0], "elts", node.targets)]
            values = getattr(node.value, "elts", [node.value])
            if name in names:
                return ast.literal_eval(values[names.index(name)])
    raise LookupError(name)


def table(stdout: str) -> tuple[dict[int, tuple[int, int]], int, int]:
    rows = {int(r): (int(tokens), int(kib)) for r, tokens, kib in ROW.findall(stdout)}
    dropped, total = map(int, DROPPED.search(stdout).groups())
    return rows, dropped, total


def test_a_skewed_router_overloads_the_rank_of_the_favourite_expert(command_runs):
    result = command_runs.run_ok(f"{COMMAND} --skew 1.5")
    rows, dropped, total = table(result.stdout)
    assert sum(t for t, _ in rows.values()) == total and dropped == 0, result.describe()
    (t0, kib0), (t1, kib1) = rows[0], rows[1]
    # Activations follow the tokens each rank's experts take; the page's "nineteen times", in words.
    said = re.search(r"Rank 0 now keeps (\w+) times rank 1's activations", " ".join(PAGE.read_text().split()))[1]
    assert t0 > 0.9 * total and round(kib0 / kib1) == NUMBERS.index(said), result.describe()
    assert kib0 / kib1 == pytest.approx(t0 / t1, rel=0.05), result.describe()


def test_a_capacity_holds_every_expert_to_its_share_and_counts_what_it_drops(command_runs):
    result = command_runs.run_ok(f"{COMMAND} --skew 1.5 --capacity-factor 1.25")
    rows, dropped, total = table(result.stdout)
    capacity = int(1.25 * constant("TOKENS") / constant("EXPERTS"))  # per expert, from each rank
    ranks, experts_per_rank = 2, constant("EXPERTS") // 2
    assert all(t <= ranks * capacity * experts_per_rank for t, _ in rows.values()), result.describe()
    assert sum(t for t, _ in rows.values()) + dropped == total and dropped > total / 2, result.describe()
    balanced = table(command_runs.run_ok(COMMAND).stdout)
    assert balanced[1] == 0 and max(t for t, _ in balanced[0].values()) < 0.6 * total


def test_experts_that_the_ranks_cannot_share_evenly_get_one_line_and_exit_2():
    check_refusal(
        f"torchrun --standalone --nproc_per_node=3 {SCRIPT}", "error: 4 experts cannot be shared evenly by 3 ranks"
    )
