"""Inputs uneven by nature (documents of different lengths, a last shard cut short): rank 0 has 5
batches and rank 1 has 3, and DDP's join() context lets rank 1 stop early without a hang.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step12_uneven_inputs_join.py

Rank 0 prints each rank's number of batches and how far the trained weights are from one process
that does what join() does: rank 1, out of data, sends zeros in the all_reduces of rank 0's last
steps, and the sum is still divided by the world size.
"""

import argparse
import os
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

BATCH, LR = 8, 0.1


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank and in the reference
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))


def batches(rank: int, world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank r's own batches: 5 on rank 0, 3 on rank 1 (5 - 2r)."""
    g = torch.Generator().manual_seed(1 + rank)
    xs = [torch.randn(BATCH, 16, generator=g) for _ in range(5 - 2 * rank)]
    return [(x, x.sum(1, keepdim=True).sin()) for x in xs]


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    counts = [None] * world_size
    dist.all_gather_object(counts, len(batches(rank, world_size)))
    log(f"batches per rank: {counts}")

    model = DDP(make_model().to(device))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    # --8<-- [start:join]
    with model.join():  # a rank out of data shadows the others' all_reduces with zeros until all are done
        for x, y in batches(rank, world_size):
            opt.zero_grad()
            nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            opt.step()
    # --8<-- [end:join]

    # One process: at step s, the gradients of the ranks that still have a batch, summed, divided by 2.
    reference = make_model().to(device)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    shares = [batches(r, world_size) for r in range(world_size)]
    for step in range(max(counts)):
        grads = []
        for mine in (s for s in shares if step < len(s)):
            reference.zero_grad()
            x, y = mine[step]
            nn.functional.mse_loss(reference(x.to(device)), y.to(device)).backward()
            grads.append([p.grad.clone() for p in reference.parameters()])
        for p, *g in zip(reference.parameters(), *grads):
            p.grad = torch.stack(g).sum(0) / world_size  # join's default: divide by the initial world size
        ref_opt.step()
    diff = max((p - q).abs().max().item() for p, q in zip(model.module.parameters(), reference.parameters()))
    log(f"max |weights - one process shadowed as join() does| = {diff:.0e}")

    # --8<-- [start:self_check]
    for p, q in zip(model.module.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)  # float32's defaults: the same sums, in another order
    log(f"every rank left the join() after {max(counts)} steps")
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
