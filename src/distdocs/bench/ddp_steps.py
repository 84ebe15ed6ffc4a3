"""DDP steps timed at several world sizes, each split into computation and synchronization: what
`bench scaling` reports and `bench prediction` feeds the cost model with.

The batch per rank stays fixed (weak scaling), so n ranks do n times the work of one. The compute
time is the same step with DDP's all_reduces switched off (`no_sync()`); sync is the difference.
On a dialled link each rank is a node of its own, and the kernel's count of the bytes its link sent
(/proc/net/dev) is read around the timed steps: per synced step, the gradient's allreduce with TCP/IP's
headers and acknowledgements on top, whatever the number of micro-batches that step accumulated.
"""

from __future__ import annotations

import contextlib
import os

import torch

from distdocs.bench.harness import WARMUP, mlp, node_sent_bytes, world_on
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

            # DDP's broadcast of the weights, at its start, may still be leaving this node's link: a barrier
            # returns once the other ranks have all of it.
            torch.distributed.barrier()
            sent = node_sent_bytes()
            step_s, compute_s = step_and_compute_seconds(step, steps, WARMUP)
            # One synced step per timed pair (the other runs under no_sync), and the timer's barrier and
            # 8-byte all_reduce around each: bytes that ride on top of the gradient's, as headers do.
            per_sync = None if sent is None else (node_sent_bytes() - sent) / (WARMUP + steps)
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
                    "sent_bytes_per_sync": per_sync,  # this rank's node; None over loopback
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
    the nodes are joined by links of that rate (distdocs.lab.links), and each record says the fewest
    and the most bytes any node's link sent per synced step (`sent_bytes_per_sync_min`, `_max`; None
    over loopback)."""
    records = []
    for n in world_sizes:
        if progress:
            progress(f"world size {n}: {len(models or MODELS)} models x {len(accumulation)} accumulation counts")
        with contextlib.ExitStack() as stack:
            ranks = world_on(stack, n, link, nodes=n).run(_measure, models or MODELS, accumulation, steps)
        found = ranks[0]
        for i, r in enumerate(found):  # each rank is a node: the fewest and the most bytes any node sent
            sent = [rank[i].pop("sent_bytes_per_sync") for rank in ranks]
            r["sent_bytes_per_sync_min"] = None if None in sent else min(sent)
            r["sent_bytes_per_sync_max"] = None if None in sent else max(sent)
        records += [{**r, "link": link or "loopback"} if link else r for r in found]
    base = {(r["model"], r["accumulation"]): r["samples_per_s"] for r in records if r["world_size"] == 1}
    for r in records:  # no 1-rank run (prediction's --compute-at-n): no speedup
        if (r["model"], r["accumulation"]) in base:
            r["speedup"] = r["samples_per_s"] / base[r["model"], r["accumulation"]]
    return sorted(records, key=lambda r: (r["model"], r["accumulation"], r["world_size"]))
