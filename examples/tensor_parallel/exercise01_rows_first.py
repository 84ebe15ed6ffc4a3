"""Exercise solution: the MLP block split the other way round, A by rows and B by columns.

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel/exercise01_rows_first.py

Rank 0 prints the collectives each split needs in forward, and the distance of both to one process.
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
D_HIDDEN = 256  # both divisible by the world size


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def columns_then_rows(x, a, b, r, n) -> tuple[torch.Tensor, list[str]]:
    """Megatron's split, as on the page: one all_reduce."""
    cols = slice(r * D_HIDDEN // n, (r + 1) * D_HIDDEN // n)
    z = nn.functional.gelu(x @ a[:, cols]) @ b[cols, :]
    dist.all_reduce(z)
    return z, ["all_reduce"]


# --8<-- [start:rows_first]
def rows_then_columns(x, a, b, r, n) -> tuple[torch.Tensor, list[str]]:
    """A by rows: each rank multiplies its slice of x's features by its rows of A, a partial sum
    of every hidden unit. gelu is not linear, gelu(p0) + gelu(p1) != gelu(p0 + p1), so the partial
    sums must be added before it: an all_reduce in the middle of the block."""
    feats = slice(r * D_MODEL // n, (r + 1) * D_MODEL // n)
    h = x[:, feats] @ a[feats, :]  # partial sums of all D_HIDDEN hidden units
    dist.all_reduce(h)  # 1: the full pre-activation, on every rank
    out_cols = slice(r * D_MODEL // n, (r + 1) * D_MODEL // n)
    z_mine = nn.functional.gelu(h) @ b[:, out_cols]  # B by columns: my columns of z
    pieces = [torch.empty_like(z_mine) for _ in range(n)]
    dist.all_gather(pieces, z_mine)  # 2: every rank needs the whole z for the next block
    return torch.cat(pieces, dim=1), ["all_reduce", "all_gather"]


# --8<-- [end:rows_first]


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(0)  # the same matrices and input on every rank
    n, r = dist.get_world_size(), dist.get_rank()
    a = torch.randn(D_MODEL, D_HIDDEN, device=device) / D_MODEL**0.5
    b = torch.randn(D_HIDDEN, D_MODEL, device=device) / D_HIDDEN**0.5
    x = torch.randn(8, D_MODEL, device=device)
    reference = nn.functional.gelu(x @ a) @ b
    for split in (columns_then_rows, rows_then_columns):
        z, collectives = split(x, a, b, r, n)
        # float32's assert_close defaults: partial sums added across ranks, in another order than
        # one matmul adds them.
        torch.testing.assert_close(z, reference)
        name, diff = split.__name__.replace("_", " "), (z - reference).abs().max().item()
        log(f"{name:>17}: {' + '.join(collectives)} in forward, max |z - one process| = {diff:.0e}")
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
