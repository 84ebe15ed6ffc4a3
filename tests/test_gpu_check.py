"""`make gpu-check` (tools/gpu_check.py): it covers every GPU tab and every example, skips what one
GPU cannot run with the reason, exits 0 with one line where there is no CUDA, the set-up page says
whether its report exists, and until a GPU run exists every GPU tab says that its output is not shown."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from docexec.fences import DOCS, REPO, all_examples, all_fences
from tools import gpu_check


@pytest.mark.fast
def test_it_covers_every_gpu_tab_and_every_example():
    names = [name for name, _ in gpu_check.items(gpus=1)]
    tabs = [f.where for f in all_fences() if f.kind == "command" and f.gpu]
    assert tabs and set(tabs) <= set(names)
    assert {str(p.relative_to(REPO)) for p in all_examples()} <= set(names)


@pytest.mark.fast
def test_one_gpu_runs_each_example_at_world_size_1():
    plan = dict(gpu_check.items(gpus=1))
    assert plan["examples/data_parallel/step02_ddp.py"] == (
        "torchrun --standalone --nproc_per_node=1 examples/data_parallel/step02_ddp.py"
    )
    assert all("--nproc_per_node=2" not in c and "--nproc_per_node=4" not in c for c in plan.values())


@pytest.mark.processes
@pytest.mark.skipif(torch.cuda.is_available(), reason="there is CUDA here: make gpu-check runs for real")
def test_without_cuda_it_says_so_in_one_line_and_exits_0():
    result = subprocess.run([sys.executable, "-m", "tools.gpu_check"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip().count("\n") == 0
    assert result.stdout.startswith("gpu-check: skipped: no CUDA")


@pytest.mark.fast
def test_the_set_up_page_says_whether_the_gpu_half_was_checked():
    page = (REPO / "docs/start/set-up.md").read_text()
    if gpu_check.REPORT.exists():
        assert "gpu-check.txt" in page, "a GPU report exists: include it on the set-up page"
    else:
        assert "The `nccl` path has not yet been run on a GPU." in " ".join(page.split())


NO_GPU_OUTPUT = "No GPU run has produced this tab's output yet, so none is shown."


@pytest.mark.fast
def test_every_gpu_tab_says_in_one_line_that_its_output_is_not_shown():
    """No page shows a GPU result that no run produced: until make gpu-check has saved a report, each
    GPU tab holds its command and this one line, and no output block."""
    if gpu_check.REPORT.exists():
        pytest.skip("a GPU report exists: the tabs show its outputs")
    tabs = []
    for page in sorted(DOCS.rglob("*.md")):
        for tab in re.finditer(r'^=== "GPU[^\n]*\n((?:    .*\n|[ \t]*\n)*)', page.read_text(), re.M):
            tabs.append((f"{page.relative_to(DOCS)}", tab[1]))
    assert tabs
    wrong = [where for where, body in tabs if body.count(NO_GPU_OUTPUT) != 1 or 'title="Output"' in body]
    assert not wrong, f"GPU tabs without the line, or with an output no GPU run produced: {wrong}"
