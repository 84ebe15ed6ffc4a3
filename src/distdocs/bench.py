"""Benchmarks, measured in one run so that the ratios hold on a noisy shared machine.

`distdocs bench allreduce` times gloo's `all_reduce` and our ring, tree and naive allreduces side by
side, size by size, on the same ranks, and reports what nccl-tests reports:

- time: the median over iterations of the slowest rank's time (each iteration starts at a barrier);
- algbw = bytes / time;
- busbw = algbw * 2(n-1)/n, the bytes each rank's link actually carries in a ring, so that numbers
  for different world sizes compare with the hardware's bandwidth.

Before timing a size, each implementation's result is checked: every rank contributes rank+1, so the
sum must be n(n+1)/2 exactly (small integers are exact in float32).
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import statistics
import time

import torch
import torch.distributed as dist

from distdocs.collectives import (
    check_same_tensor_everywhere,
    naive_allreduce,
    ring_allreduce,
    tree_allreduce,
)
from distdocs.launch import World

IMPLS = ("gloo", "ring", "tree", "naive")
SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'256K', '4M', '1G' (binary: K = 1024) or plain bytes, to a byte count that is a multiple of 4."""
    t = text.strip().upper().removesuffix("B")
    scale = SUFFIXES.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in SUFFIXES else t
    if not number.isdigit() or int(number) * scale < 4 or int(number) * scale % 4:
        raise ValueError(f"bad size {text!r}: use bytes (a multiple of 4) or 256K, 4M, 1G")
    return int(number) * scale


def machine_info() -> dict:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "backend": "gloo",
            "python": platform.python_version(), "date": datetime.date.today().isoformat()}


def _run_impl(name: str, x: torch.Tensor) -> None:
    if name == "gloo":
        dist.all_reduce(x)
    else:
        ours = {"ring": ring_allreduce, "tree": tree_allreduce, "naive": naive_allreduce}[name]
        ours(x, validate=False)


def _slowest_rank_seconds(fn) -> float:
    """Run `fn` on every rank from a common start (a barrier); the slowest rank's time sets the pace."""
    dist.barrier()
    start = time.perf_counter()
    fn()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def _time_sizes(rank: int, world_size: int, sizes: list[int], iters: int, warmup: int) -> list[dict]:
    records = []
    for nbytes in sizes:
        x = torch.empty(nbytes // 4, dtype=torch.float32)
        for name in IMPLS:
            x.fill_(rank + 1)
            _run_impl(name, x)
            expected = world_size * (world_size + 1) / 2
            if not bool((x == expected).all()):
                raise AssertionError(f"{name} allreduce of {nbytes} bytes gave a wrong sum")
        times: dict[str, list[float]] = {name: [] for name in IMPLS}
        for i in range(warmup + iters):
            for name in IMPLS:  # take turns, so that a noisy moment hits every implementation alike
                elapsed = _slowest_rank_seconds(functools.partial(_run_impl, name, x))
                if i >= warmup:
                    times[name].append(elapsed)
        for name in IMPLS:
            t = statistics.median(times[name])
            algbw = nbytes / t / 1e9
            records.append({"impl": name, "world_size": world_size, "bytes": nbytes, "dtype": "float32",
                            "iters": iters, "time_s": t, "algbw_gbps": algbw,
                            "busbw_gbps": algbw * 2 * (world_size - 1) / world_size})
    # The input handshake that ring_allreduce runs unless validate=False: one all_reduce of 6 int64s.
    handshake = [_slowest_rank_seconds(lambda: check_same_tensor_everywhere(x)) for _ in range(warmup + iters)]
    t = statistics.median(handshake[warmup:])
    algbw = 48 / t / 1e9
    records.append({"impl": "check", "world_size": world_size, "bytes": 48, "dtype": "int64", "iters": iters,
                    "time_s": t, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world_size - 1) / world_size})
    return records


def bench_allreduce(world_sizes: list[int], sizes: list[int], iters: int = 10, warmup: int = 3,
                    progress=None, repeat: int = 1) -> list[dict]:
    """Time every implementation at every size and world size, `repeat` times over in fresh worlds.
    Each record holds the median over repeats of the time, and of the busbw ratio to gloo taken within
    each repeat, with that ratio's lowest and highest value: on a shared machine the spread between
    runs is part of the result."""
    runs = []
    for r in range(repeat):
        records = []
        for n in world_sizes:
            if progress:
                progress(f"run {r + 1}/{repeat}, world size {n}: {len(sizes)} sizes x {len(IMPLS)} "
                         f"implementations x {iters} iterations")
            with World(n, timeout_s=600) as world:
                records += world.run(_time_sizes, sizes, iters, warmup)[0]
        gloo = {(x["world_size"], x["bytes"]): x for x in records if x["impl"] == "gloo"}
        for x in records:
            base = gloo.get((x["world_size"], x["bytes"]))
            x["busbw_ratio_vs_gloo"] = x["busbw_gbps"] / base["busbw_gbps"] if base else None
        runs.append(records)
    merged = []
    for i, first in enumerate(runs[0]):
        same = [run[i] for run in runs]
        t = statistics.median(x["time_s"] for x in same)
        ratios = [x["busbw_ratio_vs_gloo"] for x in same if x["busbw_ratio_vs_gloo"] is not None]
        algbw = first["bytes"] / t / 1e9
        merged.append({**first, "repeats": repeat, "time_s": t, "algbw_gbps": algbw,
                       "busbw_gbps": algbw * 2 * (first["world_size"] - 1) / first["world_size"],
                       "busbw_ratio_vs_gloo": statistics.median(ratios) if ratios else None,
                       "ratio_range": [min(ratios), max(ratios)] if ratios else None})
    return merged


def machine_line(machine: dict, setup: str = "") -> str:
    """The comment line that opens every saved table: where it ran, then what was run."""
    line = (f"# {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['backend']}, "
            f"{machine['date']}")
    return f"{line}; {setup}" if setup else line


def format_allreduce_table(records: list[dict], machine: dict) -> str:
    """nccl-tests' columns, one line per implementation, size and world size."""
    lines = [machine_line(machine),
             f"{'ranks':>5} {'size (B)':>10} {'impl':>5} {'time (us)':>10} {'algbw (GB/s)':>12} "
             f"{'busbw (GB/s)':>12} {'vs gloo':>7} {'(lowest-highest)':>16}"]
    for r in records:
        ratio, spread = "", ""
        if r["impl"] not in ("gloo", "check") and r["busbw_ratio_vs_gloo"] is not None:
            ratio = f"{r['busbw_ratio_vs_gloo']:.2f}x"
            if r.get("repeats", 1) > 1:
                spread = f"{r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f}"
        lines.append(f"{r['world_size']:>5} {r['bytes']:>10} {r['impl']:>5} {r['time_s'] * 1e6:>10.1f} "
                     f"{r['algbw_gbps']:>12.3f} {r['busbw_gbps']:>12.3f} {ratio:>7} {spread:>16}".rstrip())
    return "\n".join(lines)


def _pipeline_idle(rank: int, world_size: int, counts: list[int], width: int, batch: int,
                   steps: int) -> list[dict]:
    from torch import nn

    from distdocs.pipeline import BusyTimer, gpipe_step

    torch.manual_seed(0)
    stage = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh())
    x, y = torch.randn(batch, width), torch.randn(batch, width)
    records = []
    for m in counts:
        gpipe_step(stage, rank, x, y, m, width)  # warm-up
        idle = []
        for _ in range(steps):
            timer = BusyTimer()
            stage.zero_grad()
            dist.barrier()
            start = time.perf_counter()
            gpipe_step(stage, rank, x, y, m, width, timer)
            dist.barrier()  # the step ends when both stages are done: one wall time for both
            idle.append(1 - timer.busy_s / (time.perf_counter() - start))
        both = [None] * world_size
        dist.all_gather_object(both, statistics.median(idle))
        records.append({"microbatches": m, "stages": world_size, "width": width, "batch": batch,
                        "bubble_theory": (world_size - 1) / (m + world_size - 1),
                        "idle_measured": both})
    return records


def bench_pipeline(counts: list[int], width: int = 1024, batch: int = 256, steps: int = 5) -> list[dict]:
    """Idle fraction of each stage of a 2-stage GPipe pipeline, measured from per-stage compute time,
    for each micro-batch count, next to the bubble fraction (p-1)/(m+p-1)."""
    with World(2, timeout_s=600) as world:
        return world.run(_pipeline_idle, counts, width, batch, steps)[0]


def format_pipeline_table(records: list[dict], machine: dict) -> str:
    lines = [machine_line(machine, f"2 stages, width {records[0]['width']}, batch {records[0]['batch']}"),
             f"{'micro-batches':>13} {'bubble (theory)':>15} {'idle, stage 0':>13} {'idle, stage 1':>13}"]
    for r in records:
        lines.append(f"{r['microbatches']:>13} {r['bubble_theory']:>15.3f} {r['idle_measured'][0]:>13.3f} "
                     f"{r['idle_measured'][1]:>13.3f}")
    return "\n".join(lines)
