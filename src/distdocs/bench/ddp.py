"""Samples per second of torch's DistributedDataParallel and distdocs' BucketedDDP on the same 2
ranks, taking turns step by step so that both see the same machine."""

from __future__ import annotations

import argparse

import torch
from torch import nn

from distdocs.arguments import require
from distdocs.bench.harness import WARMUP, machine_line, median_after_warmup, mlp, slowest_rank_seconds, table
from distdocs.lab.world import World


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, default=256, help="samples per rank and step (default: 256)")
    parser.add_argument("--width", type=int, default=1024, help="MLP width (default: 1024)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per implementation (default: 10)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    require(min(args.batch, args.width, args.steps) >= 1, "--batch, --width and --steps must be positive")
    return bench_ddp(args.batch, args.width, args.steps)


def _ddp_step_times(rank: int, world_size: int, batch: int, width: int, steps: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from distdocs.training.ddp import BucketedDDP

    def make():  # the same weights each time: mlp seeds, and the head draws after it
        return nn.Sequential(*mlp(width, 3), nn.Linear(width, 10))

    g = torch.Generator().manual_seed(rank)
    data = [
        (torch.randn(batch, width, generator=g), torch.randint(0, 10, (batch,), generator=g))
        for _ in range(WARMUP + steps)
    ]
    wrapped = {"torch DDP": DDP(make()), "BucketedDDP": BucketedDDP(make())}
    opts = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in wrapped.items()}

    def step(name, x, y):
        loss = nn.functional.cross_entropy(wrapped[name](x), y)
        opts[name].zero_grad()
        loss.backward()
        opts[name].step()

    times: dict[str, list[float]] = {name: [] for name in wrapped}
    for x, y in data:  # alternate, so that both see the same machine
        for name in wrapped:
            times[name].append(slowest_rank_seconds(lambda: step(name, x, y)))
    return {name: median_after_warmup(t) for name, t in times.items()}


def bench_ddp(batch: int = 256, width: int = 1024, steps: int = 10) -> list[dict]:
    with World(2, timeout_s=600) as world:
        step_s = world.run(_ddp_step_times, batch, width, steps)[0]
    base = batch * 2 / step_s["torch DDP"]
    return [
        {
            "impl": name,
            "world_size": 2,
            "batch_per_rank": batch,
            "width": width,
            "step_s": t,
            "samples_per_s": batch * 2 / t,
            "ratio_vs_torch": batch * 2 / t / base,
        }
        for name, t in step_s.items()
    ]


def format_table(records: list[dict], machine: dict) -> str:
    r0 = records[0]
    return table(
        machine_line(machine, f"2 ranks, MLP width {r0['width']}, batch {r0['batch_per_rank']} per rank"),
        [("impl", 12), ("step (ms)", 10), ("samples/s", 10), ("vs torch DDP", 13)],
        [
            [r["impl"], f"{r['step_s'] * 1e3:.1f}", f"{r['samples_per_s']:.0f}", f"{r['ratio_vs_torch']:.2f}x"]
            for r in records
        ],
    )
