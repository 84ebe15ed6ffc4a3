"""A model with two heads, each step training one: DDP stops at the second step unless it is told to
look for parameters that a step did not use.

    torchrun --standalone --nproc_per_node=2 examples/convert/step03_unused_parameters.py --find-unused-parameters

Without the flag, the second step fails with DDP's "Expected to have finished reduction in the prior
iteration". With it, DDP marks the unused head's parameters ready after each forward, and the run
ends where one process trained on the same batches ends.
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

STEPS, BATCH, LR = 6, 16, 0.1


class TwoHeads(nn.Module):
    """A shared body and two heads; a step uses the body and one head only."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head_a, self.head_b = nn.Linear(16, 32), nn.Linear(32, 1), nn.Linear(32, 1)

    def forward(self, x: torch.Tensor, task: str) -> torch.Tensor:
        h = torch.relu(self.body(x))
        return self.head_a(h) if task == "a" else self.head_b(h)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank and in the reference
    return TwoHeads()


def batches(device: torch.device):
    """The same global batches on every rank, with the head each step trains."""
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(BATCH, 16, generator=g)
        yield x.to(device), (x.sum(1, keepdim=True) / 4).to(device), "ab"[step % 2]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--find-unused-parameters", action="store_true", help="let DDP skip parameters a step did not use"
    )
    return parser.parse_args()


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:ddp]
    model = DDP(make_model().to(device), find_unused_parameters=args.find_unused_parameters)
    # --8<-- [end:ddp]
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step, (x, y, task) in enumerate(batches(device)):
        mine = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)
        loss = nn.functional.mse_loss(model(x[mine], task), y[mine])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step}: trained head {task}, loss {loss.item():.4f}", flush=True)

    # --8<-- [start:self_check]
    # One process on the whole batches: the mean of the two half-batch losses' gradients is the
    # whole batch's, so the weights agree within float32 rounding (its default tolerances).
    reference = make_model().to(device)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    for x, y, task in batches(device):
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x, task), y).backward()
        ref_opt.step()
    for p, q in zip(model.module.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)
    if rank == 0:
        print("the same weights as one process on the whole batches")
        print("self-check passed")
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
