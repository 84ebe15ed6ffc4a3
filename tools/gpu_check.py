"""`make gpu-check`: the nccl half of "runs unchanged on GPUs", on a machine with CUDA.

It runs every command in a GPU tab of the site, and every example through torchrun with nccl, and
writes measurements/gpu-check.txt: the machine, then a line per item with its result and its time.
Each run is judged by the rule the tests apply (docexec.rule): exit code, timeout, processes left,
an abort at exit, a process group that outlived its destroy, and, for an example, its
"self-check passed" line.

An example runs with the ranks its page shows (its docstring's command) where there are that many
GPUs, one rank per GPU as nccl requires. Where there are fewer, it runs with one per GPU, and the
report says so; one that needs exactly its page's count says so itself, and the report lists it as
not run. The whole check stops after 10 minutes; what it did not reach is listed as not run.

Without CUDA it says so in one line and exits 0.
"""

from __future__ import annotations

import datetime
import re
import sys
import time
from dataclasses import dataclass

from docexec.fences import REPO, all_examples, all_fences, example_command
from docexec.rule import EXIT_0, Expected, problems
from docexec.shared_runs import CommandRuns

BUDGET_S = 600
REPORT = REPO / "measurements/gpu-check.txt"
NPROC = re.compile(r"--nproc_per_node=(\d+)")
NEEDS_EXACTLY = "needs exactly"  # the examples' refusal of another world size (their usage_error)


@dataclass(frozen=True)
class Item:
    name: str
    command: str
    expected: Expected
    ranks_shown: int | None = None  # the page's rank count, for an example
    ranks_run: int | None = None
    fault: str | None = None  # the fault the page's fence has the test inject (docexec.fault_injection.fault_env)


def items(gpus: int) -> list[Item]:
    """Every GPU-tab command, as written, then every example at the ranks its page shows, or at one
    per GPU where there are fewer GPUs than that."""
    out = [
        Item(f.where, f.command, EXIT_0, fault=f.attrs.get("fault"))
        for f in all_fences()
        if f.kind == "command" and f.gpu
    ]
    for script in all_examples():
        command = example_command(script)
        counts = [int(n) for n in NPROC.findall(command)]  # a command of several launches: the largest
        ranks = max(counts) if counts else None
        run = min(ranks, gpus) if ranks else None
        command = NPROC.sub(lambda m: f"--nproc_per_node={min(int(m.group(1)), gpus)}", command)
        out.append(Item(str(script.relative_to(REPO)), command, Expected(self_check=True), ranks, run))
    return out


def verdict(item: Item, result) -> tuple[str, bool]:
    """The report's line for one run, and whether it failed."""
    if item.ranks_shown and item.ranks_run < item.ranks_shown and NEEDS_EXACTLY in result.stderr:
        return (
            f"{item.name}: not run: its page runs {item.ranks_shown} ranks, one per GPU, on {item.ranks_run} GPU(s)",
            False,
        )
    found = problems(result, item.expected)
    fewer = ""
    if item.ranks_shown and item.ranks_run < item.ranks_shown:
        fewer = f" at {item.ranks_run} of the {item.ranks_shown} ranks its page shows"
    if found:
        return f"{item.name}: FAILED{fewer} in {result.elapsed_s:.1f} s: {'; '.join(found)}", True
    return f"{item.name}: passed{fewer} in {result.elapsed_s:.1f} s", False


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: skipped: no CUDA on this machine; run it where a GPU is at hand")
        return 0
    gpus = torch.cuda.device_count()
    machine = (
        f"# {torch.cuda.get_device_name(0)} x {gpus}, torch {torch.__version__}, "
        f"nccl {'.'.join(map(str, torch.cuda.nccl.version()))}, {datetime.date.today()}"
    )
    runs, lines, failed = CommandRuns(), [machine], 0
    start = time.monotonic()
    for item in items(gpus):
        if time.monotonic() - start > BUDGET_S:
            lines.append(f"{item.name}: not run: the check's {BUDGET_S} s were spent")
            continue
        line, bad = verdict(item, runs.run(item.command, gpu=True, fault=item.fault))
        failed += bad
        lines.append(line)
        print(line, flush=True)
    REPORT.write_text("\n".join(lines) + "\n")
    fewer = sum(" of the " in line and ": passed" in line for line in lines)
    where = REPORT.relative_to(REPO) if REPORT.is_relative_to(REPO) else REPORT
    print(f"gpu-check: {failed} failed, {fewer} passed at fewer ranks than their pages show; report in {where}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
