"""`make gpu-check` (tools/gpu_check.py): it covers every GPU tab and every example, skips what one
GPU cannot run with the reason, exits 0 with one line where there is no CUDA, the set-up page says
whether its report exists, and until a GPU run exists every GPU tab links there in place of an output."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from docexec.fences import DOCS, REPO, all_examples, all_fences, classify
from docexec.rule import Expected
from tools import gpu_check


@pytest.mark.fast
def test_it_covers_every_gpu_tab_and_every_example():
    names = [item.name for item in gpu_check.items(gpus=1)]
    tabs = [f.where for f in all_fences() if f.kind == "command" and f.gpu]
    assert tabs and set(tabs) <= set(names)
    assert {str(p.relative_to(REPO)) for p in all_examples()} <= set(names)


@pytest.mark.fast
def test_each_example_runs_at_its_pages_ranks_where_the_gpus_allow_and_at_one_per_gpu_elsewhere():
    plan = {item.name: item for item in gpu_check.items(gpus=2)}
    two = plan["examples/data_parallel/step02_ddp.py"]  # its page runs 2 ranks
    assert (two.ranks_shown, two.ranks_run) == (2, 2) and two.expected.self_check
    assert two.command == "torchrun --standalone --nproc_per_node=2 examples/data_parallel/step02_ddp.py"
    four = plan["examples/in_production/step01_2d_mesh.py"]  # its page runs 4
    assert (four.ranks_shown, four.ranks_run) == (4, 2) and "--nproc_per_node=2 " in four.command
    tabs = [item for item in plan.values() if item.ranks_shown is None and not item.name.startswith("examples/")]
    assert tabs and all(not item.expected.self_check for item in tabs)  # a tab's command runs as written


@pytest.mark.processes
def test_the_gpu_check_applies_the_tests_rule_and_fails_an_example_whose_self_check_did_not_print(
    monkeypatch, tmp_path, capsys
):
    """On a faked two-GPU machine (torch.cuda patched in this process), with two stand-in examples that
    both exit 0: the one that prints its self-check line passes, the one that does not fails, as under
    the tests' own rule; the report says which ran at fewer ranks than its page shows."""
    passes, silent = tmp_path / "passes.py", tmp_path / "silent.py"
    passes.write_text('print("self-check passed")\n')
    silent.write_text('print("trained, checked nothing")\n')
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "a faked GPU")
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    check = Expected(self_check=True)
    plan = [
        gpu_check.Item("examples/passes.py", f"python {passes}", check, ranks_shown=2, ranks_run=2),
        gpu_check.Item("examples/silent.py", f"python {silent}", check, ranks_shown=4, ranks_run=2),
    ]
    monkeypatch.setattr(gpu_check, "items", lambda gpus: plan)
    monkeypatch.setattr(gpu_check, "REPORT", tmp_path / "gpu-check.txt")
    assert gpu_check.main() == 1
    report = (tmp_path / "gpu-check.txt").read_text().splitlines()
    assert report[0].startswith("# a faked GPU x 2, torch ")
    assert report[1].startswith("examples/passes.py: passed in ")
    assert report[2].startswith("examples/silent.py: FAILED at 2 of the 4 ranks its page shows in ")
    assert "self-check did not finish" in report[2]


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


# The one line a GPU tab shows in place of an output that no GPU run produced: a link to the set-up
# page's section on what has run on a GPU, which says it once.
NOT_RUN_ON_A_GPU = re.compile(r"^    \[Not yet run on a GPU\]\(((?:\.\./)*(?:start/)?set-up\.md)?#gpu\)$", re.M)
SET_UP = DOCS / "start/set-up.md"


def gpu_tabs() -> list[tuple[str, str]]:
    """Every GPU tab of the site: its page, relative to docs/, and its body."""
    return [
        (str(page.relative_to(DOCS)), tab[1])
        for page in sorted(DOCS.rglob("*.md"))
        for tab in re.finditer(r'^=== "GPU[^\n]*\n((?:    .*\n|[ \t]*\n)*)', page.read_text(), re.M)
    ]


def marks_not_run(page: str, body: str) -> bool:
    """Whether a tab's body holds the not-run line once, linking to the set-up page's #gpu section."""
    links = NOT_RUN_ON_A_GPU.findall(body)
    if len(links) != 1:
        return False
    target = (DOCS / page).parent / links[0] if links[0] else DOCS / page
    return target.resolve() == SET_UP.resolve()


@pytest.mark.fast
def test_every_gpu_tab_shows_a_gpu_runs_output_or_links_to_where_the_gpu_status_is_said():
    """No page shows a GPU result that no run produced: until make gpu-check has saved a report, each
    GPU tab holds its command and the one line that links to the set-up page's #gpu section, and no
    output block; after, each shows either its output or that line, never both and never neither."""
    tabs = gpu_tabs()
    assert tabs
    assert re.search(r"^## .*\{ #gpu \}$", SET_UP.read_text(), re.M), "the set-up page lost its #gpu section"
    report = gpu_check.REPORT.exists()
    wrong = [
        where
        for where, body in tabs
        if marks_not_run(where, body) == ('title="Output"' in body) or (not report and 'title="Output"' in body)
    ]
    assert not wrong, f"GPU tabs without the not-run line, or with an output no GPU run produced: {wrong}"


@pytest.mark.fast
def test_the_not_run_line_is_told_apart_from_what_is_not_it():
    assert marks_not_run("lesson/x.md", "    [Not yet run on a GPU](../start/set-up.md#gpu)\n")
    assert marks_not_run("start/set-up.md", "    [Not yet run on a GPU](#gpu)\n")
    assert not marks_not_run("lesson/x.md", "    [Not yet run on a GPU](#gpu)\n")  # a link to itself
    assert not marks_not_run("lesson/x.md", "    [Not yet run on a GPU](../start/set-up.md#other)\n")
    assert not marks_not_run("lesson/x.md", "    ```bash\n    torchrun x.py\n    ```\n")  # neither line nor output


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
