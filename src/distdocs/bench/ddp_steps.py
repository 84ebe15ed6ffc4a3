"""DDP steps timed at several world sizes, each split into computation and synchronization: what
`bench scaling` reports and `bench prediction` feeds the cost model with.

The batch per rank stays fixed (weak scaling), so n ranks do n times the work of one. The compute
time is the same step with DDP's all_reduces switched off (`no_sync()`); sync is the difference.
"""

from __future__ import annotations

import contextlib
import os

import torch

from distdocs.bench.harness import WARMUP, mlp, world_on
from distdocs.training.timing import step_and_compute_seconds

# name: (width, Linear layers, samples per rank and micro-batch)
MODELS = {"compute-bound": (256, 4, 1024), "sync-bound": (1024, 8, 8)}


def _measure(rank: int, world_size: int, models: dict, accumulation: list[int], steps: int) -> list[dict]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    records = []
    for name, (width, depth, batch) in models.items():
        model = DDP(mlp(width, depth))
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        x = torch.randn(batch, width, generator=torch.Generator().manual_seed(rank))
        for k in accumulation:

            def step(sync: bool) -> None:
                for i in range(k):  # only the last micro-batch syncs, and only if `sync`
                    with contextlib.nullcontext() if sync and i == k - 1 else model.no_sync():
                        model(x).square().mean().backward()
                opt.step()
                opt.zero_grad()

            step_s, compute_s = step_and_compute_seconds(step, steps, WARMUP)
            records.append(
                {
                    "model": name,
                    "width": width,
                    "depth": depth,
                    "batch_per_rank": batch,
                    "accumulation": k,
                    "world_size": world_size,
                    "cores": os.cpu_count(),
                    "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                    "step_s": step_s,
                    "compute_s": compute_s,
                    "samples_per_s": world_size * batch * k / step_s,
                }
            )
    return records


def bench_scaling(
    world_sizes: list[int],
    accumulation: list[int],
    steps: int = 8,
    models: dict | None = None,
    progress=None,
    link: str | None = None,
) -> list[dict]:
    """Every model and accumulation count at every world size; speedup against world size 1. With
    `link` (tc's spelling of a rate, as in 100mbit), each rank of a world is a node of its own, and
    the nodes are joined by links of that rate (distdocs.lab.links)."""
    records = []
    for n in world_sizes:
        if progress:
            progress(f"world size {n}: {len(models or MODELS)} models x {len(accumulation)} accumulation counts")
        with contextlib.ExitStack() as stack:
            found = world_on(stack, n, link, nodes=n).run(_measure, models or MODELS, accumulation, steps)[0]
        records += [{**r, "link": link or "loopback"} if link else r for r in found]
    base = {(r["model"], r["accumulation"]): r["samples_per_s"] for r in records if r["world_size"] == 1}
    for r in records:  # no 1-rank run (prediction's --compute-at-n): no speedup
        if (r["model"], r["accumulation"]) in base:
            r["speedup"] = r["samples_per_s"] / base[r["model"], r["accumulation"]]
    return sorted(records, key=lambda r: (r["model"], r["accumulation"], r["world_size"]))
