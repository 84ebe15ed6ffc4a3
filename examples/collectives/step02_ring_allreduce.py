"""A ring allreduce built from send and recv, checked against dist.all_reduce.

    torchrun --standalone --nproc_per_node=2 examples/collectives/step02_ring_allreduce.py

The ring is the one piece this file imports: distdocs.training.collectives.ring_allreduce, the code the page
builds; outside this repository, install it with `pip install -e .` in a clone of the repository.
Rank 0 prints the steps and bytes each rank sent next to the formulas 2(n-1) and 2(n-1)/n * S, and
the largest difference from gloo's all_reduce. Try --nproc_per_node=4 too.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group

from distdocs.training.collectives import ring_allreduce

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

NUMEL = 1 << 20  # 4 MiB of float32
UNIT_ROUNDOFF = 2.0**-24  # float32


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    n = dist.get_world_size()
    g = torch.Generator().manual_seed(dist.get_rank())  # different data on every rank
    x = torch.randn(NUMEL, generator=g).to(device)

    # --8<-- [start:use]
    ours, theirs, stats = x.clone(), x.clone(), {}
    ring_allreduce(ours, stats=stats)
    dist.all_reduce(theirs)
    # --8<-- [end:use]

    size = x.numel() * x.element_size()
    formula = 2 * (n - 1) * size // n if size % n == 0 else None
    log(f"world size {n}, tensor of {size} bytes")
    log(f"steps per rank:      {stats.get('steps', 0)}  (formula 2(n-1) = {2 * (n - 1)})")
    log(f"bytes sent per rank: {stats.get('bytes_sent', 0)}  (formula 2(n-1)/n * S = {formula})")
    log(f"max |ring - all_reduce| = {(ours - theirs).abs().max().item():.0e}")
    assert stats.get("steps", 0) == 2 * (n - 1) and stats.get("bytes_sent", 0) == formula
    # Each order of adding n numbers errs by at most (n-1)·u·Σ|x|: two orders differ by twice that.
    magnitude = x.abs().double()
    dist.all_reduce(magnitude)
    assert bool(((ours - theirs).abs().double() <= 2 * (n - 1) * UNIT_ROUNDOFF * magnitude).all())
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
