"""The idle share of each stage of a 2-stage GPipe pipeline, next to the bubble (p-1)/(m+p-1).

Each stage's compute time (not its waiting in send and recv) is timed inside the step; the idle share
is 1 - compute / step, where the step ends when both stages are done. Each record also keeps when
each stage computed in its last timed step (`spans`, seconds from the step's start), which `plot`
draws as the schedule: GPipe's forwards F1..Fm, then its backwards Bm..B1.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn

from distdocs.arguments import parse_list, require
from distdocs.bench.harness import WARMUP, machine_line, median_after_warmup, table
from distdocs.lab.world import World
from distdocs.training.pipeline import BusyTimer, bubble_fraction, gpipe_step


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
            end = time.perf_counter()
            idle.append(1 - timer.busy_s / (end - start))
        # the last step's stretches of compute, with its start and end: the ranks share one clock
        both, spans = [None] * world_size, [None] * world_size
        dist.all_gather_object(both, median_after_warmup(idle))
        dist.all_gather_object(spans, (start, end, timer.spans))
        records.append(
            {
                "microbatches": m,
                "stages": world_size,
                "width": width,
                "batch": batch,
                "bubble_theory": bubble_fraction(world_size, m),
                "idle_measured": both,
                "spans": _relative(spans),
            }
        )
    return records


def _relative(spans: list[tuple[float, float, list]]) -> dict:
    """Each rank's compute stretches in seconds from the earliest start, and the step's length."""
    t0 = min(start for start, _, _ in spans)
    return {
        "step_s": max(end for _, end, _ in spans) - t0,
        "busy": [[[a - t0, b - t0] for a, b in mine] for _, _, mine in spans],
    }


def bench_pipeline(counts: list[int], width: int = 1024, batch: int = 256, steps: int = 5) -> list[dict]:
    """Idle fraction of each stage for each micro-batch count, next to (p-1)/(m+p-1)."""
    with World(2, timeout_s=600) as world:
        return world.run(_pipeline_idle, counts, width, batch, steps)[0]


def format_table(records: list[dict], machine: dict) -> str:
    return table(
        machine_line(machine, f"2 stages, width {records[0]['width']}, batch {records[0]['batch']}"),
        [("micro-batches", 13), ("bubble (theory)", 15), ("idle, stage 0", 13), ("idle, stage 1", 13)],
        [
            [str(r["microbatches"]), f"{r['bubble_theory']:.3f}", *(f"{idle:.3f}" for idle in r["idle_measured"])]
            for r in records
        ],
    )


def plot(records: list[dict], machine: dict) -> str:
    """The schedule of one measured step for each micro-batch count: a row per stage, a bar for each
    forward (F) and backward (B) of each micro-batch, where the stage computed; the gaps are idle."""
    from distdocs.figures import pyplot, to_svg

    shown = [r for r in records if "spans" in r]
    fig, axes = pyplot().subplots(len(shown), 1, figsize=(7.2, 0.9 + 1.0 * len(shown)), squeeze=False)
    longest = max(r["spans"]["step_s"] for r in shown) * 1e3
    for ax, r in zip(axes[:, 0], shown):
        m = r["microbatches"]
        for stage, busy in enumerate(r["spans"]["busy"]):
            for i, (a, b) in enumerate(busy):
                forward = i < m
                label = f"F{i + 1}" if forward else f"B{2 * m - i}"  # GPipe: F1..Fm, then Bm..B1
                ax.broken_barh(
                    [(a * 1e3, (b - a) * 1e3)], (stage - 0.4, 0.8), facecolors="#4c72b0" if forward else "#dd8452"
                )
                if (b - a) * 1e3 > longest / 40:
                    ax.text((a + b) / 2 * 1e3, stage, label, ha="center", va="center", fontsize=7, color="white")
        ax.set_yticks(range(len(r["spans"]["busy"])), [f"stage {s}" for s in range(len(r["spans"]["busy"]))])
        ax.invert_yaxis()
        ax.set_xlim(0, longest)
        idle = ", ".join(f"{v:.0%}" for v in r["idle_measured"])
        ax.set_title(
            f"{m} micro-batch{'es' if m > 1 else ''}: idle {idle} (median of the steps), "
            f"bubble formula {r['bubble_theory']:.0%}",
            fontsize=8,
            loc="left",
        )
    axes[-1, 0].set_xlabel("ms from the start of the step (forward blue, backward orange; gaps are idle)")
    fig.suptitle(f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}", fontsize=8)
    fig.tight_layout()
    return to_svg(fig)
