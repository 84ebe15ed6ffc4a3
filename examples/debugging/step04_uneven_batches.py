"""A hang from uneven data: each rank takes every other batch of 33, so rank 0 trains one step
more than rank 1, and its extra gradient all_reduce meets rank 1's end-of-training metric. Fix:
`--fixed` shards with DistributedSampler, which gives every rank the same number of batches.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step04_uneven_batches.py --fixed
    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 examples/debugging/step04_uneven_batches.py

The first runs the fix: rank 0 prints the loss and the self-check passes. The second runs the bug
with torch's collective checks on: both ranks name the mismatch and fail. Without the variable, a
gloo error aborts a rank.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

SAMPLES, BATCH = 33 * 8, 8  # 33 batches: an odd number, as real datasets have


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def average_gradients(model: nn.Module) -> None:
    """What DDP does, by hand: here because TORCH_DISTRIBUTED_DEBUG=DETAIL crashes DDP on gloo
    (torch 2.13), and this example is about that variable."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)
    for g, avg in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(avg.view_as(g) / dist.get_world_size())


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixed", action="store_true", help="shard with DistributedSampler")
    args = p.parse_args()
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(SAMPLES, 16, generator=g), torch.randn(SAMPLES, 1, generator=g))
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    # --8<-- [start:shard]
    if args.fixed:  # pads the shards to equal length: every rank runs the same number of steps
        loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=False))
    else:  # the bug: every other batch, so 33 batches split 17 and 16
        loader = [b for i, b in enumerate(DataLoader(data, batch_size=BATCH)) if i % world == rank]
    # --8<-- [end:shard]
    counts = [None] * world
    dist.all_gather_object(counts, len(loader))
    log(f"batches per rank: {counts}")

    # --8<-- [start:train]
    total = torch.zeros(2, device=device)  # the loss summed over this rank's samples, and their count
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        average_gradients(model)  # one all_reduce a step
        opt.step()
        opt.zero_grad()
        total += torch.stack([loss.detach() * len(x), torch.tensor(float(len(x)), device=device)])
    dist.all_reduce(total)  # the epoch's mean loss over all ranks: one more collective
    # --8<-- [end:train]
    log(f"mean training loss over {int(total[1])} samples: {total[0] / total[1]:.4f}")

    # --8<-- [start:self_check]
    assert len(set(counts)) == 1, f"ranks ran different numbers of steps: {counts}"
    log(f"every rank ran {counts[0]} steps")
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
