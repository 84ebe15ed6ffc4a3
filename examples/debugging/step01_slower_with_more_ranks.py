"""Slower with more ranks: split every DDP step into its computation and the synchronisation that
DDP adds, and see which one the step waits on. Fix: more work per rank between synchronisations.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step01_slower_with_more_ranks.py

Rank 0 prints, for a small and a large batch per rank, the step time, the computation alone, and
the share of the step spent synchronising. It imports distdocs.timing, the timers the benchmarks
also use: `pip install -e .` from the repository.
"""

import argparse
import contextlib
import datetime
import os
import platform
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from distdocs.timing import step_and_compute_seconds

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH, STEPS = 1024, 10
BATCHES = {"mistake": 8, "fix": 1024}  # samples per rank and step


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank = dist.get_rank()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; times vary by machine and load")
    torch.manual_seed(0)  # the same weights on every rank
    model = DDP(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    log(f"{'case':>8} {'batch':>6} {'step ms':>8} {'compute ms':>11} {'sync share':>11}")
    for case, batch in BATCHES.items():
        x = torch.randn(batch, WIDTH, generator=torch.Generator().manual_seed(rank)).to(device)

        # --8<-- [start:split]
        def step(sync: bool) -> None:  # one training step; under no_sync(), DDP skips its all_reduces
            with contextlib.nullcontext() if sync else model.no_sync():
                model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()

        step_s, compute_s = step_and_compute_seconds(step, STEPS)
        sync_share = max(0.0, step_s - compute_s) / step_s
        # --8<-- [end:split]
        log(f"{case:>8} {batch:>6} {step_s * 1e3:>8.1f} {compute_s * 1e3:>11.1f} {sync_share:>11.0%}")

    # --8<-- [start:self_check]
    # The split measures what it says: a synchronised backward leaves every rank the same gradient,
    # one under no_sync() leaves each rank its own (their batches differ).
    def gradients_agree(sync: bool) -> bool:
        with contextlib.nullcontext() if sync else model.no_sync():
            model(x).square().mean().backward()
        mine = torch.cat([p.grad.flatten() for p in model.parameters()])
        opt.zero_grad()
        rank0 = mine.clone()
        dist.broadcast(rank0, src=0)
        return torch.equal(mine, rank0)

    synced, unsynced = gradients_agree(sync=True), gradients_agree(sync=False)  # on every rank: collectives
    assert synced and (rank == 0 or not unsynced)
    log("with sync the ranks' gradients agree; under no_sync() they differ")
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
