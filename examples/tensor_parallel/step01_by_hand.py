"""Tensor parallelism by hand: an MLP whose first matrix is split by columns and second by rows.

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel/step01_by_hand.py

Rank 0 prints how many weights each rank holds and how far the output and the input's gradient are
from one process holding the whole MLP. Try --nproc_per_node=4 too.
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
NPROC_PER_NODE = 2
TIMEOUT_S = 60

D_MODEL = 64
D_HIDDEN = 256  # divisible by the world size


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(0)  # the same matrices and input on every rank
    n, r = dist.get_world_size(), dist.get_rank()
    a = torch.randn(D_MODEL, D_HIDDEN, device=device) / D_MODEL**0.5  # same seed: same matrices
    b = torch.randn(D_HIDDEN, D_MODEL, device=device) / D_HIDDEN**0.5
    x = torch.randn(8, D_MODEL, device=device, requires_grad=True)
    cols = slice(r * D_HIDDEN // n, (r + 1) * D_HIDDEN // n)

    # --8<-- [start:forward_backward]
    a_mine = a[:, cols].clone().requires_grad_()  # column-parallel: my columns of A
    b_mine = b[cols, :].clone().requires_grad_()  # row-parallel: the matching rows of B
    z_partial = nn.functional.gelu(x @ a_mine) @ b_mine  # no communication so far
    z = z_partial.detach().clone()
    dist.all_reduce(z)  # forward: sum the partial outputs

    z.requires_grad_()
    loss = (z**2).mean()  # every rank holds the full z, so the same loss
    loss.backward()  # dloss/dz, identical on every rank
    z_partial.backward(z.grad)  # gradients of my shards, and my part of dloss/dx
    dist.all_reduce(x.grad)  # backward: sum the parts of the input's gradient
    # --8<-- [end:forward_backward]

    # --8<-- [start:self_check]
    x_ref = x.detach().clone().requires_grad_()
    a_ref, b_ref = a.clone().requires_grad_(), b.clone().requires_grad_()
    z_ref = nn.functional.gelu(x_ref @ a_ref) @ b_ref
    (z_ref**2).mean().backward()
    # assert_close at float32's defaults: the all_reduce adds n partial sums, one process adds
    # all D_HIDDEN terms in one matmul; the last bits differ.
    torch.testing.assert_close(z, z_ref)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(a_mine.grad, a_ref.grad[:, cols])
    torch.testing.assert_close(b_mine.grad, b_ref.grad[cols, :])
    diff = max((z - z_ref).abs().max().item(), (x.grad - x_ref.grad).abs().max().item())
    log(f"world size {n}: each rank holds {a_mine.numel() + b_mine.numel()} of {a.numel() + b.numel()} weights")
    log(f"max |tensor-parallel - one process| over output and input gradient = {diff:.0e}")
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
