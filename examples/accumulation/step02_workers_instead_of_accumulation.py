"""Mistake: a sync-bound training loop given more workers. Each step's gradient sync costs more than
the computation a second rank takes over, so two ranks gain little or lose. Fix: accumulate
micro-batches under no_sync() and sync once per step.

    torchrun --standalone --nproc_per_node=2 examples/accumulation/step02_workers_instead_of_accumulation.py

Rank 0 prints samples/s of one process and of two DDP ranks, syncing every micro-batch and every 8,
with the bytes synced counted. The rates depend on the machine; the bytes do not.
"""

import argparse
import contextlib
import datetime
import os
import platform
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 1024  # 4 layers of 1024 x 1024: 16 MiB of gradients, and little work per sample
MICRO_BATCH = 8  # samples per rank per micro-batch
STEPS = 4  # optimizer steps, after one untimed step
K = 8  # micro-batches per optimizer step when accumulating


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())])


def count_then_allreduce(counts: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: count the bytes, then all_reduce as DDP does by default."""
    counts["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    return allreduce_hook(None, bucket)


def now(device: torch.device) -> float:
    """The clock, once `device` has done the work queued on it: CUDA runs asynchronously, and a clock read
    right after a GPU step would time the queueing, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def slowest(seconds: float, device: torch.device) -> float:
    """The slowest rank's time: a DDP run ends when its last rank does. The tensor lives on `device`:
    nccl moves GPU tensors only."""
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def train(model: nn.Module, k: int, sync_every_micro_batch: bool, device: torch.device) -> float:
    """STEPS optimizer steps of k micro-batches each, after one untimed step; return the seconds."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(MICRO_BATCH, WIDTH, generator=torch.Generator().manual_seed(dist.get_rank())).to(device)
    for step in range(STEPS + 1):
        if step == 1:
            start = now(device)
        # --8<-- [start:accumulate]
        for i in range(k):
            last = i == k - 1
            # The mistake syncs after every micro-batch; the fix only after the last of each step.
            skip = not (last or sync_every_micro_batch) and isinstance(model, DDP)
            with model.no_sync() if skip else contextlib.nullcontext():
                model(x).square().mean().backward()
            if sync_every_micro_batch or last:
                opt.step()
                opt.zero_grad()
        # --8<-- [end:accumulate]
    return now(device) - start


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; samples/s vary by machine and load")
    samples = STEPS * K * MICRO_BATCH  # per rank, in the timed steps of every case
    synced = {}
    for case, every in (("mistake: sync every micro-batch", True), ("fix: sync every 8 micro-batches", False)):
        one_process = train(make_model().to(device), K, every, device) if rank == 0 else 0.0  # the others wait
        one_s = slowest(one_process, device)
        model = DDP(make_model().to(device))
        counts = {"bytes": 0}
        model.register_comm_hook(counts, count_then_allreduce)
        dist.barrier()
        two_s = slowest(train(model, K, every, device), device)
        synced[every] = counts["bytes"]
        log(
            f"{case}: 1 process {samples / one_s:,.0f} samples/s, {world} ranks {world * samples / two_s:,.0f} "
            f"({world * one_s / two_s:.2f}x), {synced[every]:,} bytes synced"
        )
        del model
    # --8<-- [start:self_check]
    gradient_bytes = sum(p.numel() * p.element_size() for p in make_model().parameters())
    # Every sync moves every gradient byte once: a sync per micro-batch, or one per optimizer step.
    assert synced[True] == (STEPS + 1) * K * gradient_bytes, synced
    assert synced[False] == (STEPS + 1) * gradient_bytes, synced
    log(f"accumulating {K} micro-batches synced {K}x fewer bytes for the same samples")
    log("self-check passed")
    # --8<-- [end:self_check]


# --8<-- [start:setup]
def main() -> None:
    args = parse_args()  # before any process group: a bad flag stops every rank at once, exit code 2
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        if device.index >= torch.cuda.device_count():  # more processes than GPUs: nccl cannot share one
            sys.exit(
                f"error: local rank {device.index} has no GPU (this node has {torch.cuda.device_count()}); launch one "
                f"process per GPU, or run on the CPU: CUDA_VISIBLE_DEVICES= torchrun --standalone "
                f"--nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
            )
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT_S))
    try:
        run(args, device)  # the work, in a function: what it builds is freed when it returns
    finally:
        dist.destroy_process_group()  # also when run() raises


if __name__ == "__main__":
    main()
# --8<-- [end:setup]
