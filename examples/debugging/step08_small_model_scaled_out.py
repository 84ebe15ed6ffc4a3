"""Mistake: a small model spread over two ranks. Each step's all_reduce outlasts the little
computation it saves, and two ranks train slower than one process. Fix: give each rank enough work.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step08_small_model_scaled_out.py

Rank 0 prints samples/s of one process and of two DDP ranks, with a small and a large batch per
rank. The numbers depend on the machine; the self-check asserts that DDP trained the same weights.
"""

import argparse
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
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 256
STEPS = 40
BATCHES = {"mistake": 16, "fix": 2048}  # samples per rank per step


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 1))


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


def train(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> float:
    """Train on `data`; return the seconds it took."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = now(device)
    for x, y in data:
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return now(device) - start


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; samples/s vary by machine and load")
    for case, batch in BATCHES.items():
        g = torch.Generator().manual_seed(1)  # the same global batches on every rank
        x, y = torch.randn(world * batch, WIDTH, generator=g), torch.randn(world * batch, 1, generator=g)
        steps = [(x.to(device), y.to(device))] * STEPS
        # --8<-- [start:compare]
        # One process trains on the whole global batch, while the other ranks wait.
        single = make_model().to(device)
        one_s = slowest(train(single, steps, device) if rank == 0 else 0.0, device)
        # Two ranks, each on its half: the same samples, the same gradient, plus one all_reduce a step.
        ddp = DDP(make_model().to(device))
        dist.barrier()  # start together
        halves = [(x.chunk(world)[rank], y.chunk(world)[rank]) for x, y in steps]
        two_s = slowest(train(ddp, halves, device), device)
        # --8<-- [end:compare]
        for p, q in zip(ddp.parameters(), single.parameters() if rank == 0 else ddp.parameters()):
            # float32 defaults: the halves' gradients are averaged, not summed in one pass.
            torch.testing.assert_close(p, q, msg=f"{case}: DDP trained other weights than one process")
        samples = STEPS * world * batch
        log(
            f"{case}: {batch} samples per rank: 1 process {samples / one_s:,.0f} samples/s, "
            f"{world} ranks {samples / two_s:,.0f} samples/s ({one_s / two_s:.2f}x)"
        )
        del ddp
    log("DDP trained the same weights as one process, in both cases")
    log("self-check passed")


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
