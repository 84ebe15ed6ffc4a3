"""GPipe by hand: two stages on two ranks, the batch cut into micro-batches.

    torchrun --standalone --nproc_per_node=2 examples/pipeline_parallel/step01_gpipe_by_hand.py

Exactly 2 processes. gpipe_step is the one piece this file imports: distdocs.training.pipeline, the code the
page builds; outside this repository, install it with `pip install -e .` in a clone of the
repository. Rank 0 prints, for several micro-batch counts m, the bubble fraction (p-1)/(m+p-1) and
whether training matched one process.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn

from distdocs.training.pipeline import gpipe_step

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 128
BATCH = 32
STEPS = 10
LR = 0.05
MICROBATCH_COUNTS = (1, 2, 4, 8)


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Sequential:
    """Layers 0-3 are stage 0 (rank 0), layers 4-6 stage 1 (rank 1)."""
    torch.manual_seed(0)  # the same weights on both ranks and in the reference
    return nn.Sequential(
        nn.Linear(16, WIDTH),
        nn.Tanh(),
        nn.Linear(WIDTH, WIDTH),
        nn.Tanh(),
        nn.Linear(WIDTH, WIDTH),
        nn.Tanh(),
        nn.Linear(WIDTH, 1),
    )


def my_stage(model: nn.Sequential) -> nn.Sequential:
    return model[:4] if dist.get_rank() == 0 else model[4:]


def batches(device):
    """The same batches on both ranks: rank 0 feeds the inputs, rank 1 uses the targets."""
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


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
    if world_size != NPROC_PER_NODE:
        usage_error(
            f"this example needs exactly {NPROC_PER_NODE} processes, got {world_size}; launch it with: "
            f"torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
        )
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    reference = make_model().to(device)  # one process, the whole model, the same batches
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    for x, y in batches(device):
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()

    p = dist.get_world_size()  # pipeline stages
    log(f"{'micro-batches m':>15} {'bubble (p-1)/(m+p-1)':>21} {'equal to one process':>21}")
    for m in MICROBATCH_COUNTS:
        stage = my_stage(make_model()).to(device)
        opt = torch.optim.SGD(stage.parameters(), lr=LR)
        for x, y in batches(device):
            opt.zero_grad()
            gpipe_step(stage, dist.get_rank(), x, y, m, WIDTH)
            opt.step()
        # float32 defaults: m micro-batches' gradients add up in another order than one batch's.
        for a, b in zip(stage.parameters(), my_stage(reference).parameters()):
            torch.testing.assert_close(a, b)
        log(f"{m:>15} {(p - 1) / (m + p - 1):>21.3f} {'True':>21}")
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
