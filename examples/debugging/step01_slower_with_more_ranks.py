"""Slower with more ranks: split every DDP step into its computation and the synchronisation that
DDP adds, and see which one the step waits on. Fix: more work per rank between synchronisations.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step01_slower_with_more_ranks.py

For a small and a large batch per rank, rank 0 prints the computation, the sync the step adds, the
share of the sync that backward did not hide, and a `distdocs bench emulated` command that runs the
same job on 1 to 16 emulated GPUs. `time_the_sync` is the block to paste into your own script.
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

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH, STEPS = 1024, 10
BATCHES = {"mistake": 8, "fix": 1024}  # samples per rank and step
LINK = "10gbit"  # the link between the nodes of the cluster the printed command models


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


# --8<-- [start:measure]
def time_the_sync(model, micro_batch, link: str, steps: int = 10) -> None:
    """Paste into a DDP script and call once before training: `micro_batch()` runs one forward and
    backward (no optimizer step). Times it with DDP's sync and under no_sync(), in turns, and the
    gradient's allreduce alone; clears the gradients it made. Rank 0 prints the split."""
    import statistics
    import time

    def seconds(work) -> float:  # the slowest rank's time: the step ends when its last rank does
        dist.barrier()
        start = time.perf_counter()
        work()
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # CUDA runs kernels asynchronously: wait for them
        took = torch.tensor([time.perf_counter() - start], device=grads[0].device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        model.zero_grad(set_to_none=True)
        return took.item()

    def unsynced() -> None:
        with model.no_sync():  # DDP skips its allreduces: the computation alone
            micro_batch()

    grads = [p for p in model.parameters() if p.requires_grad]
    flat = torch.zeros(sum(p.numel() for p in grads), device=grads[0].device)  # the gradient, in fp32
    times = {"sync": [], "compute": [], "alone": []}
    for _ in range(steps + 1):  # in turns, so that all three see the same machine; the first warms up
        times["sync"].append(seconds(micro_batch))
        times["compute"].append(seconds(unsynced))
        times["alone"].append(seconds(lambda: dist.all_reduce(flat)))
    step, compute, alone = (statistics.median(t[1:]) for t in times.values())
    sync = max(0.0, step - compute)
    if dist.get_rank() == 0:
        print(f"  compute {compute * 1e3:.1f} ms; the sync adds {sync * 1e3:.1f} ms, {sync / step:.0%} of the step")
        print(f"  the allreduce alone takes {alone * 1e3:.1f} ms: backward hid {max(0.0, 1 - sync / alone):.0%} of it")
        mb = flat.numel() * 4 / 2**20
        print(f"  on 1 to 16 GPUs: distdocs bench emulated --job {mb:.4g},{compute * 1e3:.4g},{link}")


# --8<-- [end:measure]


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank = dist.get_rank()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; times vary by machine and load")
    torch.manual_seed(0)  # the same weights on every rank
    model = DDP(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for case, batch in BATCHES.items():
        x = torch.randn(batch, WIDTH, generator=torch.Generator().manual_seed(rank)).to(device)
        log(f"{case}: {batch} samples a rank")
        # --8<-- [start:split]
        time_the_sync(model, lambda: model(x).square().mean().backward(), LINK)  # noqa: B023
        # --8<-- [end:split]

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
