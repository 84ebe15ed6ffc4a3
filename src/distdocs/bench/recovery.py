"""From a killed rank back to training: the fault-tolerant example launched under torchrun, one rank
SIGKILLed mid-run, again and again (distdocs.bench.killed_run), and the median of each phase."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from distdocs.arguments import require
from distdocs.bench.harness import machine_line
from distdocs.bench.killed_run import EXAMPLE, PHASES, timed_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kill-at-step", type=int, default=13, help="the step at which rank 1 dies (default: 13)")
    parser.add_argument("--repeat", type=int, default=5, help="killed runs; the table gives medians (default: 5)")
    parser.add_argument("--example", default=EXAMPLE, help=f"the example to launch (default: {EXAMPLE})")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    require(args.repeat >= 1, "--repeat must be at least 1")
    require(1 <= args.kill_at_step <= 31, "--kill-at-step must be in 1..31")
    require(Path(args.example).is_file(), f"{args.example}: no such file; run this from the repository's root")
    records = []
    for i in range(args.repeat):
        if progress:
            progress(f"killed run {i + 1} of {args.repeat}")
        records.append(timed_run(args.example, args.kill_at_step))
    return records


def format_table(records: list[dict], machine: dict) -> str:
    def median(key: str) -> float:
        return statistics.median(r[key] for r in records)

    r0 = records[0]
    lines = [
        machine_line(
            machine,
            f"2 ranks, rank 1 killed at step {r0['kill_at_step']}, checkpoint every 4 steps; "
            f"medians of {len(records)} killed runs",
        ),
        f"{'phase':<64} {'seconds':>8}",
    ]
    for later, earlier, what in PHASES:
        lines.append(f"{what:<64} {median(f'{earlier}_to_{later}_s'):>8.2f}")
    lines.append(f"{'from the kill to training again':<64} {median('kill_to_resumed_s'):>8.2f}")
    redone = f"steps trained again ({r0['redone_steps']}, from step {r0['resumed_from']}), at the measured pace"
    lines.append(f"{redone:<64} {r0['redone_steps'] * median('step_s'):>8.2f}")
    return "\n".join(lines)
