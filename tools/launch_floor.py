"""The floor that launches set under the test suite: every torchrun launch starts a launcher and one
process per rank, and each of them imports torch before it does anything, so the suite cannot take
less CPU than its launches' start-up. Measured here, and counted from a test run's shared results.

    python -m tools.launch_floor /tmp/pytest-of-USER/pytest-N/distdocs-shared

The folder is where a `make test` run (pytest-xdist) saved one result per launch
(docexec.shared_runs). Prints lines for the header of measurements/test-durations-cpu.txt. Launches
that do not go through the shared runs (a World's forked ranks, which import nothing new; the
multi-node and SLURM tests' own launches; the site build's notebook kernel) are not counted, so the
floor is a lower bound.
"""

from __future__ import annotations

import pickle
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docexec.shared_runs import parse_launch

MINIMAL = """import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""
REPEATS = 5


def cpu_seconds(args: list[str]) -> float:
    """The CPU seconds (user and system) that running `args` to the end costs, its children included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def measure() -> dict[str, float]:
    """Medians of REPEATS: a Python process that imports torch, and a 2-rank torchrun launch of a script
    that only starts and ends a gloo process group (three processes that import torch)."""
    bin_ = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "minimal.py"
        script.write_text(MINIMAL)
        torchrun = [str(bin_ / "torchrun"), "--standalone", "--nproc_per_node=2", str(script)]
        return {
            "import_torch_s": statistics.median(
                cpu_seconds([sys.executable, "-c", "import torch"]) for _ in range(REPEATS)
            ),
            "torchrun_2_ranks_s": statistics.median(cpu_seconds(torchrun) for _ in range(REPEATS)),
        }


def processes(command: str) -> int:
    """How many Python processes that import torch a command starts: per torchrun launch, a launcher
    and its ranks on this machine (--nproc_per_node, however spelled); per python launch, one; per
    `distdocs bench` or `distdocs doctor`, one (`sim`, `memory` and `mfu` import no torch)."""
    count = 0
    for line in command.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        try:
            words = list(lexer)
        except ValueError:  # an unclosed quote: not a line we can read
            continue
        segments, current = [], []
        for word in words:
            if word in (";", "&&", "&", "|", "||"):
                segments.append(current)
                current = []
            else:
                current.append(word)
        segments.append(current)
        for segment in segments:
            launch = parse_launch(shlex.join(segment)) if segment else None
            if launch is None:
                continue
            if launch.launcher == "torchrun":
                count += 1 + (int(launch.ranks) if launch.ranks.isdigit() else 1)
            elif launch.launcher.startswith("python"):
                count += 1
            elif launch.args[:1] in (("bench",), ("doctor",)):
                count += 1
    return count


def count_launches(shared: Path) -> tuple[int, int]:
    """The commands that a test run ran once each (its saved results), and the processes they started."""
    commands = [pickle.loads(p.read_bytes()).command for p in sorted(shared.glob("*.pickle"))]
    return len(commands), sum(processes(c) for c in commands)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m tools.launch_floor SHARED_FOLDER_OF_A_TEST_RUN", file=sys.stderr)
        return 2
    start = time.monotonic()
    cost = measure()
    launches, started = count_launches(Path(argv[0]))
    floor = started * cost["import_torch_s"]
    print(
        f"# floor: {launches} commands started {started} processes that import torch, at "
        f"{cost['import_torch_s']:.2f} s of CPU each (a 2-rank torchrun launch: {cost['torchrun_2_ranks_s']:.2f} s), "
        f"so at least {floor:.0f} s of CPU, {floor / 2:.0f} s of wall time on 2 cores "
        f"(measured in {time.monotonic() - start:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
