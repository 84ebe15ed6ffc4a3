"""Data parallelism by hand: average the gradients with dist.all_reduce after backward().

    torchrun --standalone --nproc_per_node=2 examples/data_parallel/step01_manual_allreduce.py

Rank 0 prints how far the trained weights are from one process trained on the full batches, and
whether they are bitwise equal to one process that averages the shards' gradients (world size 2).
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

# --8<-- [start:top]
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60
# --8<-- [end:top]

GLOBAL_BATCH = 64
EPOCHS = 3
LR = 0.05
MOMENTUM = 0.9


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_data(dtype: torch.dtype, samples: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """A noisy regression task, the same on every rank."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 16, generator=g, dtype=torch.float64)
    y = torch.sin(x @ torch.randn(16, 1, generator=g, dtype=torch.float64) / 4)
    return x.to(dtype), (y + 0.1 * torch.randn(samples, 1, generator=g, dtype=torch.float64)).to(dtype)


def make_model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank: the replicas start identical
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(dtype)


def global_batches(x, y, device):
    """Every step's global batch, split into one shard per rank (the same list on every rank)."""
    n = dist.get_world_size()
    for _ in range(EPOCHS):
        for i in range(0, len(x), GLOBAL_BATCH):
            xb, yb = x[i : i + GLOBAL_BATCH].to(device), y[i : i + GLOBAL_BATCH].to(device)
            yield list(zip(xb.chunk(n), yb.chunk(n)))


# --8<-- [start:sync_grads]
def average_gradients(model: nn.Module) -> None:
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)  # every rank now holds the sum
        p.grad /= dist.get_world_size()  # ... and the mean: the gradient of the full batch


# --8<-- [end:sync_grads]


# --8<-- [start:reference]
def train_one_process(batches, dtype, device, average_shards: bool) -> tuple[nn.Module, list[float]]:
    """The same training in one process. Each step's gradient is either the full batch's, or the
    mean of the shards' gradients, added in rank order as the ranks add them."""
    model = make_model(dtype).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for shards in batches:
        opt.zero_grad()
        if average_shards:
            grads = []
            for x, y in shards:
                model.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            for p, *per_shard in zip(model.parameters(), *grads):
                p.grad = sum(per_shard) / len(shards)
        else:
            x, y = torch.cat([x for x, _ in shards]), torch.cat([y for _, y in shards])
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            losses.append(loss.item())
        opt.step()
    return model, losses


# --8<-- [end:reference]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    return parser.parse_args()


def run(args: argparse.Namespace, device: torch.device) -> None:
    dtype = getattr(torch, args.dtype)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x, y = make_data(dtype)
    model = make_model(dtype).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    # --8<-- [start:train_loop]
    for shards in global_batches(x, y, device):
        x_mine, y_mine = shards[rank]  # this rank's shard of the global batch
        loss = nn.functional.mse_loss(model(x_mine), y_mine)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
    # --8<-- [end:train_loop]

    # --8<-- [start:self_check]
    batches = list(global_batches(x, y, device))
    full, losses = train_one_process(batches, dtype, device, average_shards=False)
    log(f"world size {world_size}, {dtype}, {len(batches)} steps")
    log(f"one-process loss: first step {losses[0]:.4f}, last step {losses[-1]:.4f}")
    diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), full.parameters()))
    log(f"max |data-parallel - one process, full batch| = {diff:.0e}")
    # assert_close's defaults for the dtype (float32: rtol 1.3e-6, atol 1e-5): the ranks add the
    # same numbers in another order than the full-batch mean, so the last bits differ.
    for p, q in zip(model.parameters(), full.parameters()):
        torch.testing.assert_close(p, q)
    if world_size == 2:  # two numbers add in one order only: copy the ranks' arithmetic, get their bits
        averaged, _ = train_one_process(batches, dtype, device, average_shards=True)
        same = all(torch.equal(p, q) for p, q in zip(model.parameters(), averaged.parameters()))
        log(f"bitwise equal to one process that averages the 2 shards' gradients: {same}")
        assert same
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
