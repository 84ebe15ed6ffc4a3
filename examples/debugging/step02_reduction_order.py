"""Results that change with the world size: the same seeds and the same data, trained on 2 ranks
and in one process, end a few float32 roundings apart; trained twice on 2 ranks, bit for bit equal.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step02_reduction_order.py

Rank 0 prints whether the two 2-rank runs are bitwise equal, and how far the 2-rank weights are
from one process's, against the float32 tolerance that the comparison uses.
"""

import argparse
import os
import random
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

STEPS, BATCH = 30, 64  # the global batch; each of 2 ranks takes half


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


# --8<-- [start:pin]
def pin_everything(seed: int) -> None:
    """Every source of randomness, and only deterministic kernels: the same world size then gives
    the same bits on every run."""
    random.seed(seed)  # and numpy.random.seed(seed), where NumPy draws numbers
    torch.manual_seed(seed)  # also seeds CUDA's generators
    torch.use_deterministic_algorithms(True)  # raise on a kernel that has no deterministic version
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs this to be deterministic


# --8<-- [end:pin]


def train(world: int, rank: int, device: torch.device) -> list[torch.Tensor]:
    pin_everything(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
    if world > 1:
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x, y = torch.randn(BATCH, 32, generator=g), torch.randn(BATCH, 1, generator=g)
        x, y = x.chunk(world)[rank].to(device), y.chunk(world)[rank].to(device)  # my share of the batch
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:compare]
    first, second = train(world, rank, device), train(world, rank, device)
    one_process = train(1, 0, device)  # every rank computes it; only the comparison matters
    same_bits = all(torch.equal(a, b) for a, b in zip(first, second))
    gap = max((a - b).abs().max().item() for a, b in zip(first, one_process))
    log(f"two runs on {world} ranks, bit for bit equal: {same_bits}")
    log(f"{world} ranks against 1 process, largest difference: {gap:.0e}")
    # float32 defaults: rtol 1.3e-6 and atol 1e-5, a few roundings of values near 1.
    for a, b in zip(first, one_process):
        torch.testing.assert_close(a, b)
    # --8<-- [end:compare]
    assert same_bits, "pinned seeds at a fixed world size must repeat bit for bit"
    log("within float32's default tolerance of one process")
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
