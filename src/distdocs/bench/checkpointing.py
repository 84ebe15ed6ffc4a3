"""A checkpoint saved while training: torch.distributed.checkpoint's synchronous `save` against its
`async_save`, at 2 ranks. For each, how long training stalls (the call blocks it), how long until the
checkpoint is durable (written and fsynced), and the training step's time while the write goes on.

The state is `size` MiB of float32 on each rank, replicated as under DDP (DCP writes each replicated
tensor once, split between the ranks). The training step is a stand-in: matrix products and an
all_reduce on the default group. The checkpoint's own collectives use a second gloo group, as torch
recommends for async_save, so that they never interleave with training's.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time

from distdocs.arguments import parse_list, require
from distdocs.bench.harness import machine_line
from distdocs.lab.world import World

KINDS = ("sync", "async")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="64,256", help="MiB of state on each rank (default: 64,256)")
    parser.add_argument("--repeat", type=int, default=3, help="saves of each kind and size; medians (default: 3)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    sizes = parse_list(args.sizes, int, "--sizes")
    require(args.repeat >= 1, "--repeat must be at least 1")
    records = []
    with tempfile.TemporaryDirectory() as folder, World(2, timeout_s=600) as world:
        for size in sizes:
            if progress:
                progress(f"{size} MiB: save and async_save, {args.repeat} times each")
            by_rank = world.run(_save_while_training, folder, size, args.repeat)
            records += by_rank[0]  # rank 0's clock; the ranks wait for each other at every save
    return records


def _save_while_training(rank: int, world_size: int, folder: str, size_mib: int, repeat: int) -> list[dict]:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    half = size_mib * 2**20 // 4 // 2
    state = {"model": {"weight": torch.randn(half)}, "optim": {"exp_avg": torch.randn(half)}}
    checkpoint_group = dist.new_group(backend="gloo")  # the save's collectives, apart from training's
    x, grad = torch.randn(256, 256), torch.ones(2**16)

    def step() -> float:
        start = time.perf_counter()
        for _ in range(4):
            x @ x
        dist.all_reduce(grad)
        return time.perf_counter() - start

    quiet_s = statistics.median(step() for _ in range(20))
    records, steps_while_writing = [], 1
    for i in range(repeat):
        for kind in KINDS:
            path = os.path.join(folder, f"{size_mib}-{kind}-{i}")
            dist.barrier()
            start = time.perf_counter()
            if kind == "sync":
                dcp.save(state, checkpoint_id=path, process_group=checkpoint_group)
                stall_s = durable_s = time.perf_counter() - start
                during = []
                # As many steps after each async_save as twice the synchronous write takes, the same on
                # every rank: the ranks must call training's all_reduce equally often.
                n = torch.tensor([math.ceil(2 * stall_s / quiet_s)])
                dist.all_reduce(n, op=dist.ReduceOp.MAX)
                steps_while_writing = int(n)
            else:
                done: list[float] = []
                future = dcp.async_save(state, checkpoint_id=path, process_group=checkpoint_group)
                future.add_done_callback(lambda _: done.append(time.perf_counter()))
                stall_s = time.perf_counter() - start
                during = []
                for _ in range(steps_while_writing):
                    (during if not done else []).append(step())
                future.result()  # a write that outlasts the steps: the next save would wait for it here
                durable_s = (done[0] if done else time.perf_counter()) - start  # the callback may still be due
            records.append(
                {
                    "size_mib": size_mib,
                    "kind": kind,
                    "repeat": i,
                    "stall_s": stall_s,
                    "durable_s": durable_s,
                    "quiet_step_s": quiet_s,
                    "steps_while_writing": len(during),
                    "step_while_writing_s": statistics.median(during) if during else None,
                    # what the slower steps cost training, against the same steps at the quiet pace
                    "slower_steps_s": max(0.0, sum(during) - len(during) * quiet_s),
                }
            )
    dist.barrier()
    return records


def medians(records: list[dict]) -> list[dict]:
    """One row per size and kind: the medians of its repeats."""
    rows = []
    for size in dict.fromkeys(r["size_mib"] for r in records):
        for kind in KINDS:
            mine = [r for r in records if r["size_mib"] == size and r["kind"] == kind]
            during = [r["step_while_writing_s"] for r in mine if r["step_while_writing_s"]]
            rows.append(
                {
                    "size_mib": size,
                    "kind": kind,
                    "stall_s": statistics.median(r["stall_s"] for r in mine),
                    "slower_steps_s": statistics.median(r["slower_steps_s"] for r in mine),
                    "cost_s": statistics.median(r["stall_s"] + r["slower_steps_s"] for r in mine),
                    "durable_s": statistics.median(r["durable_s"] for r in mine),
                    "slowdown": statistics.median(during) / statistics.median(r["quiet_step_s"] for r in mine)
                    if during
                    else None,
                }
            )
    return rows


def format_table(records: list[dict], machine: dict) -> str:
    repeats = len({r["repeat"] for r in records})
    lines = [
        machine_line(machine, f"2 ranks, DCP to local disk with fsync; medians of {repeats} saves of each kind"),
        f"{'state per rank':<15} {'save':<11} {'stall (s)':>10} {'slower steps (s)':>17} "
        f"{'cost to training (s)':>21} {'durable after (s)':>18}",
    ]
    for row in medians(records):
        name = "save" if row["kind"] == "sync" else "async_save"
        lines.append(
            f"{str(row['size_mib']) + ' MiB':<15} {name:<11} {row['stall_s']:>10.3f} {row['slower_steps_s']:>17.3f} "
            f"{row['cost_s']:>21.3f} {row['durable_s']:>18.3f}"
        )
    return "\n".join(lines)
