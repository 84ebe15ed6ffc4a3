"""Exercise solution: average all the gradients with one all_reduce instead of one per parameter.

    torchrun --standalone --nproc_per_node=2 examples/data_parallel/exercise01_one_all_reduce.py

Rank 0 prints the all_reduce calls each way, and whether the two trainings end bitwise equal.
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

STEPS = 20
BATCH_PER_RANK = 16
LR = 0.05


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))


def my_batches(device):
    g = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own data
    for _ in range(STEPS):
        x = torch.randn(BATCH_PER_RANK, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


def average_each_gradient(model: nn.Module) -> int:
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    return len(list(model.parameters()))  # calls made


# --8<-- [start:flat]
def average_in_one_call(model: nn.Module) -> int:
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])  # one buffer: every gradient, end to end
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for g, piece in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(piece.view_as(g))  # each gradient gets its slice of the sum back
    return 1


# --8<-- [end:flat]


def train(device, average) -> tuple[nn.Module, int]:
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    calls = 0
    for x, y in my_batches(device):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        calls += average(model)
        opt.step()
    return model, calls


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    each, each_calls = train(device, average_each_gradient)
    flat, flat_calls = train(device, average_in_one_call)
    log(f"all_reduce calls in {STEPS} steps: {each_calls} one per parameter, {flat_calls} with one buffer")
    assert flat_calls == STEPS and each_calls == STEPS * len(list(each.parameters()))
    # The same numbers are summed element by element either way. With two ranks they add in one
    # order only, so the bits match; with more, gloo cuts a larger buffer into other chunks, the
    # sums run in another order, and the last bits may differ: float32's assert_close defaults.
    same = all(torch.equal(p, q) for p, q in zip(each.parameters(), flat.parameters()))
    log(f"the two trainings end bitwise equal: {same}")
    for p, q in zip(each.parameters(), flat.parameters()):
        torch.testing.assert_close(p, q)
    assert same or dist.get_world_size() > 2
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
