"""Exercise solution: an all_reduce made of a reduce_scatter and an all_gather, as the ring does it.

    torchrun --standalone --nproc_per_node=2 examples/collectives/exercise01_allreduce_in_two_halves.py

Rank 0 prints what each half leaves on every rank, and whether the result equals dist.all_reduce.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

NUMEL = 1 << 16  # 64 Ki floats, a multiple of every world size tried here


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


# --8<-- [start:two_halves]
def allreduce_in_two_halves(x: torch.Tensor) -> torch.Tensor:
    n = dist.get_world_size()
    piece = torch.empty(x.numel() // n, dtype=x.dtype, device=x.device)
    dist.reduce_scatter(piece, list(x.chunk(n)))  # rank r: the sum of every rank's piece r
    pieces = [torch.empty_like(piece) for _ in range(n)]
    dist.all_gather(pieces, piece)  # every rank: every summed piece
    return torch.cat(pieces)


# --8<-- [end:two_halves]


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(rank)  # different data on every rank
    x = torch.randn(NUMEL, generator=g).to(device)
    ours = allreduce_in_two_halves(x)
    theirs = x.clone()
    dist.all_reduce(theirs)
    log(f"{n} ranks, {NUMEL} floats: after reduce_scatter each rank holds {NUMEL // n}, after all_gather {NUMEL}")
    # Each element is the sum of n numbers; with 2 there is one order, so the bits must match. With
    # more, the two ways may add in different orders: float32's assert_close defaults.
    same = torch.equal(ours, theirs)
    log(f"equal to dist.all_reduce, bit for bit: {same}")
    torch.testing.assert_close(ours, theirs)
    assert same or n > 2
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
