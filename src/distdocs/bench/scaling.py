"""Data-parallel scaling: samples per second at several world sizes, for a compute-bound and a
sync-bound model, each with and without gradient accumulation; every step split into computation
and synchronization (distdocs.bench.ddp_steps, which says how). World sizes above the core count
are oversubscribed: the ranks then share cores, and the table says so.
"""

from __future__ import annotations

import argparse

from distdocs.arguments import parse_list, require
from distdocs.bench.ddp_steps import MODELS, bench_scaling
from distdocs.bench.harness import add_step_flags, machine_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world-sizes", default="1,2,4", help="comma-separated (default: 1,2,4)")
    add_step_flags(parser)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="shrink the models' widths by this factor, for a quick look"
    )


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    world_sizes = parse_list(args.world_sizes, int, "--world-sizes")
    accumulation = parse_list(args.accumulation, int, "--accumulation")
    require(1 in world_sizes, "--world-sizes must include 1, the baseline of every speedup")
    require(args.steps >= 1 and 0 < args.scale <= 1, "--steps must be positive, --scale in (0, 1]")
    models = {name: (max(8, int(w * args.scale)), d, b) for name, (w, d, b) in MODELS.items()}
    return bench_scaling(world_sizes, accumulation, args.steps, models, progress)


def format_table(records: list[dict], machine: dict) -> str:
    lines = [
        machine_line(machine, "batch per rank fixed; * = more ranks than cores (oversubscribed)"),
        f"{'model':>13} {'accum':>5} {'ranks':>6} {'step (ms)':>9} {'compute':>8} {'sync':>7} "
        f"{'samples/s':>9} {'speedup':>7}",
    ]
    for r in records:
        ranks = f"{r['world_size']}{'*' if r['world_size'] > r['cores'] else ''}"
        lines.append(
            f"{r['model']:>13} {r['accumulation']:>5} {ranks:>6} {r['step_s'] * 1e3:>9.1f} "
            f"{r['compute_s'] * 1e3:>8.1f} {max(0.0, r['step_s'] - r['compute_s']) * 1e3:>7.1f} "
            f"{r['samples_per_s']:>9.0f} {r['speedup']:>6.2f}x"
        )
    return "\n".join(lines)
