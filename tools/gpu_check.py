"""`make gpu-check`: the nccl half of "runs unchanged on GPUs", on a machine with CUDA.

It runs every command in a GPU tab of the site, and every example through torchrun with nccl, one
process per GPU, and writes benchmarks/gpu-check.txt: the machine, then a line per item with its
result and its time. An example runs with as many ranks as its docstring asks for, or as there are
GPUs if fewer (on one GPU, world size 1); one that needs exactly more ranks than that says so and is
skipped, since nccl cannot put two ranks on one GPU. The whole check stops after 10 minutes; what it did not reach
is listed as not run.

Without CUDA it says so in one line and exits 0.
"""

from __future__ import annotations

import datetime
import re
import sys
import time

from docexec.commands import EXIT_CRASH_MARKERS, CommandRuns
from docexec.fences import REPO, all_examples, all_fences, example_command

BUDGET_S = 600
REPORT = REPO / "benchmarks/gpu-check.txt"
NPROC = re.compile(r"--nproc_per_node=(\d+)")


def items(gpus: int) -> list[tuple[str, str]]:
    """(name, command) for every GPU-tab command, and every example with as many ranks as its
    docstring asks for, or as there are GPUs if fewer: most examples run at any world size."""
    out = [(f.where, f.command) for f in all_fences() if f.kind == "command" and f.gpu]
    for script in all_examples():
        command = NPROC.sub(lambda m: f"--nproc_per_node={min(int(m.group(1)), gpus)}", example_command(script))
        out.append((str(script.relative_to(REPO)), command))
    return out


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
    for name, command in items(gpus):
        if time.monotonic() - start > BUDGET_S:
            lines.append(f"{name}: not run: the check's {BUDGET_S} s were spent")
            continue
        result = runs.run(command, gpu=True)
        if result.returncode == 2 and "needs exactly" in result.stderr:  # the example's own check
            lines.append(f"{name}: skipped: it needs more ranks than the {gpus} GPU(s), one rank each under nccl")
            print(lines[-1], flush=True)
            continue
        crashed = any(m in result.stderr for m in EXIT_CRASH_MARKERS)
        ok = result.returncode == 0 and not result.timed_out and not result.leftovers and not crashed
        failed += not ok
        outcome = "passed" if ok else f"FAILED (exit {result.returncode}{', timed out' if result.timed_out else ''})"
        lines.append(f"{name}: {outcome} in {result.elapsed_s:.1f} s")
        print(lines[-1], flush=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"gpu-check: {failed} failed; report in {REPORT.relative_to(REPO)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
