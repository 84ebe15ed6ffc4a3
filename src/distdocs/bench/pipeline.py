"""The idle share of each stage of a 2-stage GPipe pipeline, next to the bubble (p-1)/(m+p-1).

Each stage's compute time (not its waiting in send and recv) is timed inside the step; the idle share
is 1 - compute / step, where the step ends when both stages are done.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn

from distdocs.bench.harness import WARMUP, machine_line, median_after_warmup, parse_list, require
from distdocs.pipeline import BusyTimer, bubble_fraction, gpipe_step
from distdocs.world import World


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--microbatches", default="1,2,4,8", help="comma-separated (default: 1,2,4,8)")
    parser.add_argument("--width", type=int, default=1024, help="layer width (default: 1024)")
    parser.add_argument("--batch", type=int, default=256, help="samples per step (default: 256)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per count (default: 5)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    counts = parse_list(args.microbatches, int, "--microbatches")
    require(all(args.batch % c == 0 for c in counts), "--microbatches must divide --batch")
    require(min(args.width, args.steps, args.batch) >= 1, "--width, --batch and --steps must be positive")
    return bench_pipeline(counts, args.width, args.batch, args.steps)


def _pipeline_idle(rank: int, world_size: int, counts: list[int], width: int, batch: int, steps: int) -> list[dict]:
    torch.manual_seed(0)
    stage = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh())
    x, y = torch.randn(batch, width), torch.randn(batch, width)
    records = []
    for m in counts:
        idle = []
        for _ in range(WARMUP + steps):
            timer = BusyTimer()
            stage.zero_grad()
            dist.barrier()
            start = time.perf_counter()
            gpipe_step(stage, rank, x, y, m, width, timer)
            dist.barrier()  # the step ends when both stages are done: one wall time for both
            idle.append(1 - timer.busy_s / (time.perf_counter() - start))
        both = [None] * world_size
        dist.all_gather_object(both, median_after_warmup(idle))
        records.append(
            {
                "microbatches": m,
                "stages": world_size,
                "width": width,
                "batch": batch,
                "bubble_theory": bubble_fraction(world_size, m),
                "idle_measured": both,
            }
        )
    return records


def bench_pipeline(counts: list[int], width: int = 1024, batch: int = 256, steps: int = 5) -> list[dict]:
    """Idle fraction of each stage for each micro-batch count, next to (p-1)/(m+p-1)."""
    with World(2, timeout_s=600) as world:
        return world.run(_pipeline_idle, counts, width, batch, steps)[0]


def format_table(records: list[dict], machine: dict) -> str:
    lines = [
        machine_line(machine, f"2 stages, width {records[0]['width']}, batch {records[0]['batch']}"),
        f"{'micro-batches':>13} {'bubble (theory)':>15} {'idle, stage 0':>13} {'idle, stage 1':>13}",
    ]
    for r in records:
        lines.append(
            f"{r['microbatches']:>13} {r['bubble_theory']:>15.3f} {r['idle_measured'][0]:>13.3f} "
            f"{r['idle_measured'][1]:>13.3f}"
        )
    return "\n".join(lines)
