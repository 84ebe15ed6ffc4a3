"""The timers that the examples, the benchmarks and the debugging guide share, written for every
device a process group runs on.

Two rules make a timer right on a GPU as well as on the CPU:
- CUDA runs kernels asynchronously: a call returns once its work is queued. A clock read right after
  a GPU step times the queueing, not the work, so every timer waits for the device first
  (`wait_for_device`).
- A tensor that goes through a collective must live where the group's backend works: under nccl, on
  this rank's GPU (`collective_device`). A CPU tensor there fails with "No backend type associated
  with device type cpu".
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist


def collective_device(group=None) -> torch.device:
    """Where `group`'s collectives take their tensors: this rank's current GPU under nccl, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def wait_for_device() -> None:
    """Return once this process's current GPU has finished the work queued on it; on a machine that
    has not used CUDA, at once."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def slowest_rank_seconds(fn, group=None) -> float:
    """Run `fn` on every rank of `group` (default: all) from a common start (a barrier) and return
    the slowest rank's time: a collective step is done only when its last rank is."""
    dist.barrier(group=group)
    wait_for_device()
    start = time.perf_counter()
    fn()
    wait_for_device()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=collective_device(group))
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
    return elapsed.item()


def step_and_compute_seconds(step, steps: int, warmup: int = 2) -> tuple[float, float]:
    """Where a DDP step's time goes. `step(sync)` runs one training step, with DDP's all_reduces
    when `sync` is True and under `no_sync()` when it is False. Both are timed in turns, `steps`
    times each after `warmup` untimed ones, so that both see the same machine; returns the median
    seconds of a whole step and of its computation alone. Their difference is the time that
    synchronisation adds."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(warmup + steps):
        for sync in (True, False):
            times[sync].append(slowest_rank_seconds(lambda: step(sync)))
    return statistics.median(times[True][warmup:]), statistics.median(times[False][warmup:])
