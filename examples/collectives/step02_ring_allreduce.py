"""A ring allreduce built from send and recv, checked against dist.all_reduce.

    torchrun --standalone --nproc_per_node=2 examples/collectives/step02_ring_allreduce.py

The ring is the one piece this file imports: distdocs.collectives.ring_allreduce, the code the page
builds; outside this repository, install it with `pip install -e .` in a clone of the repository.
Rank 0 prints the steps and bytes each rank sent next to the formulas 2(n-1) and 2(n-1)/n * S, and
the largest difference from gloo's all_reduce. Try --nproc_per_node=4 too.
"""

import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from distdocs.collectives import ring_allreduce

NUMEL = 1 << 20  # 4 MiB of float32
UNIT_ROUNDOFF = 2.0**-24  # float32


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def run(device: torch.device) -> None:
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
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node=2 {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        torch.cuda.set_device(device)
    # A rank that stops answering fails the others after 60 s, not after gloo's default 30 minutes.
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    try:
        run(device)  # the work, in a function: its models are garbage once it returns
    finally:
        gc.collect()  # free models caught in reference cycles now: freed at exit, they can abort it
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Done: leave without Python's shutdown. torch can keep the group's worker threads alive past
    # destroy_process_group, and one that frees a tensor while the interpreter shuts down aborts it.
    sys.stdout.flush()
    os._exit(0)
# --8<-- [end:setup]
