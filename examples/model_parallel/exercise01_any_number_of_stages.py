"""Exercise solution: a model cut into as many stages as there are ranks, not just two.

    torchrun --standalone --nproc_per_node=3 examples/model_parallel/exercise01_any_number_of_stages.py

Rank 0 prints which layers each rank holds, and whether every stage is bitwise equal to one process.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 3
TIMEOUT_S = 60

WIDTH = 64
LAYERS = 6  # Linear + Tanh blocks, split as evenly as the ranks allow
STEPS = 20
BATCH = 32
LR = 0.05


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_blocks() -> list[nn.Module]:
    torch.manual_seed(0)  # the same weights on every rank, and in the reference
    blocks = [nn.Sequential(nn.Linear(16 if i == 0 else WIDTH, WIDTH), nn.Tanh()) for i in range(LAYERS - 1)]
    return blocks + [nn.Linear(WIDTH, 1)]


def batches(device):
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


# --8<-- [start:step]
def train_step(stage: nn.Module, x, y, device) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == n - 1
    if first:
        h_in = x
    else:
        h_in = torch.empty(BATCH, WIDTH, device=device)
        dist.recv(h_in, src=rank - 1)  # activations from the stage before
        h_in.requires_grad_()
    h_out = stage(h_in)
    if last:
        nn.functional.mse_loss(h_out, y).backward()
    else:
        dist.send(h_out.detach(), dst=rank + 1)  # activations to the stage after
        grad_out = torch.empty_like(h_out)
        dist.recv(grad_out, src=rank + 1)  # and, later, their gradient back
        h_out.backward(grad_out)
    if not first:
        dist.send(h_in.grad, dst=rank - 1)  # the gradient of my input, to the stage before


# --8<-- [end:step]


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def parse_args() -> argparse.Namespace:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    world_size = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if not 2 <= world_size <= LAYERS:
        usage_error(f"this example needs 2 to {LAYERS} processes, got {world_size}")
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    cuts = [round(i * LAYERS / n) for i in range(n + 1)]  # stage r holds blocks cuts[r]:cuts[r+1]
    stage = nn.Sequential(*make_blocks()[cuts[rank] : cuts[rank + 1]]).to(device)
    opt = torch.optim.SGD(stage.parameters(), lr=LR)
    for x, y in batches(device):
        opt.zero_grad()
        train_step(stage, x, y, device)
        opt.step()

    reference = nn.Sequential(*make_blocks()).to(device)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    for x, y in batches(device):
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    mine = reference[cuts[rank] : cuts[rank + 1]]
    same = all(torch.equal(p, q) for p, q in zip(stage.parameters(), mine.parameters()))
    every = [None] * n
    dist.all_gather_object(every, same)
    for r in range(n):
        log(f"rank {r}: blocks {cuts[r]} to {cuts[r + 1] - 1}, bitwise equal to one process: {every[r]}")
    assert all(every), "a stage drifted from the one-process model"
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
