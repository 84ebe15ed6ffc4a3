"""`make gpu-check` (tools/gpu_check.py): it covers every GPU tab and every example, skips what one
GPU cannot run with the reason, exits 0 with one line where there is no CUDA, the set-up page says
whether its report exists, and until a GPU run exists every GPU tab says that its output is not shown."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from docexec.fences import DOCS, REPO, all_examples, all_fences, classify
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


def launchers_on_one_host(command: str) -> list[tuple[list[str], int]]:
    """For a command fence that starts several torchrun launchers on one machine: each launcher's
    visible GPUs (CUDA_VISIBLE_DEVICES) and its number of processes."""
    found = []
    for line in command.splitlines():
        if "torchrun " not in line:
            continue
        visible = re.search(r"(?:^|\s)CUDA_VISIBLE_DEVICES=(\S*)", line)
        nproc = int(re.search(r"--nproc_per_node=(\d+)", line)[1])
        found.append(((visible[1].split(",") if visible and visible[1] else []), nproc))
    return found


@pytest.mark.fast
def test_launchers_that_share_a_host_never_share_a_gpu():
    """On a GPU host every launcher numbers its processes from local rank 0, and the examples give
    local rank r the r-th visible GPU: two launchers that saw the same GPUs would put two ranks on one
    device, which nccl refuses ("Duplicate GPU detected"). Faked host: GPU g is the g-th of the
    machine's; a replacement launcher (the same command, or the same replica group) takes over its
    lost predecessor's GPUs. Every rank must have a GPU, and no two live ranks one."""
    fences = [
        f
        for page in sorted(DOCS.rglob("*.md"))
        for f in classify(page)
        if f.kind == "command" and re.search(r"torchrun .* &$", f.command, re.M)
    ]
    assert len(fences) >= 6, [f.where for f in fences]
    for fence in fences:
        owner: dict[str, str] = {}  # physical GPU -> the launcher that holds it
        for line, (visible, nproc) in zip(
            [ln for ln in fence.command.splitlines() if "torchrun " in ln], launchers_on_one_host(fence.command)
        ):
            assert len(visible) >= nproc, f"{fence.where}: a launcher of {nproc} processes sees GPUs {visible}"
            who = re.sub(r"--kill-\S+( \d+)?", "", re.sub(r"CUDA_VISIBLE_DEVICES=\S* ", "", line)).strip(" &")
            group = re.search(r"REPLICA_GROUP_ID=(\d+)", line)
            who = f"replica group {group[1]}" if group else who
            for gpu in visible[:nproc]:
                assert owner.setdefault(gpu, who) == who, f"{fence.where}: GPU {gpu} given to two launchers"
