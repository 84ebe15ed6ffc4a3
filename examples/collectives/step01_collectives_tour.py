"""The five collectives, each shown by what every rank holds before and after.

    torchrun --standalone --nproc_per_node=2 examples/collectives/step01_collectives_tour.py

Rank r starts every demo holding [10r, 10r+1, ..., 10r+n-1] in a world of n. Rank 0 prints what each
rank held before and after each collective; each result is checked against the same operation done
by hand. Try --nproc_per_node=4 too.
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


def show(title: str, before: torch.Tensor, after: torch.Tensor, expected: torch.Tensor, defined: bool = True) -> None:
    """Gather every rank's before/after to rank 0, print them in rank order, and check `after`."""
    line = f"before {before.tolist()}  after {after.tolist() if defined else '(undefined)'}"
    lines = [None] * dist.get_world_size()
    dist.all_gather_object(lines, line)  # printing from every rank would interleave at random
    if dist.get_rank() == 0:
        print(title)
        for rank, text in enumerate(lines):
            print(f"  [rank {rank}] {text}", flush=True)
    if defined:
        assert torch.equal(after, expected), f"{title}: got {after.tolist()}, expected {expected.tolist()}"


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    n, me = dist.get_world_size(), dist.get_rank()
    everyone = [torch.arange(n, device=device) + 10 * r for r in range(n)]  # what each rank starts with
    total = sum(everyone)

    # --8<-- [start:tour]
    x = torch.arange(n, device=device) + 10 * me
    dist.broadcast(y := x.clone(), src=0)  # rank 0's tensor, copied to every rank
    show("broadcast(src=0)", x, y, everyone[0])

    dist.reduce(y := x.clone(), dst=0)  # the sum, delivered to rank 0 only
    show("reduce(dst=0)", x, y, total, defined=me == 0)

    dist.all_reduce(y := x.clone())  # the sum, on every rank
    show("all_reduce", x, y, total)

    gathered = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(gathered, x)  # every rank's tensor, on every rank
    show("all_gather", x, torch.cat(gathered), torch.cat(everyone))

    mine = torch.empty(1, dtype=x.dtype, device=device)
    dist.reduce_scatter(mine, list(x.chunk(n)))  # the sum, cut in n pieces: rank r keeps piece r
    show("reduce_scatter", x, mine, total[me : me + 1])
    # --8<-- [end:tour]
    if me == 0:
        print("self-check passed")


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
