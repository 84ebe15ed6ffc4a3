"""The same training with DistributedDataParallel and a DistributedSampler, the way production code
does it.

    torchrun --standalone --nproc_per_node=2 examples/data_parallel/step02_ddp.py

Rank 0 prints how far DDP's weights are from one process trained on the same global batches, and
whether they are bitwise equal to one process that averages the shards' gradients (world size 2).
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
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

BATCH_PER_RANK = 32
EPOCHS = 3
LR = 0.05
MOMENTUM = 0.9


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_data(dtype: torch.dtype, samples: int = 1024) -> TensorDataset:
    """A noisy regression task, the same on every rank. 1024 samples divide evenly among 2 or 4
    ranks, so DistributedSampler has nothing to pad."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 16, generator=g, dtype=torch.float64)
    y = torch.sin(x @ torch.randn(16, 1, generator=g, dtype=torch.float64) / 4)
    y = y + 0.1 * torch.randn(samples, 1, generator=g, dtype=torch.float64)
    return TensorDataset(x.to(dtype), y.to(dtype))


def make_model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank (DDP would broadcast rank 0's anyway)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(dtype)


def shard_loader(data, rank: int, world_size: int) -> DataLoader:
    """Rank `rank`'s loader. Naming num_replicas and rank lets the self-check build every rank's
    loader in one process."""
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    return DataLoader(data, batch_size=BATCH_PER_RANK, sampler=sampler)


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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    return parser.parse_args()


def run(args: argparse.Namespace, device: torch.device) -> None:
    dtype = getattr(torch, args.dtype)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = make_data(dtype)

    # --8<-- [start:ddp]
    model = DDP(make_model(dtype).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loader = shard_loader(data, rank, world_size)
    for epoch in range(EPOCHS):
        loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()  # DDP's hooks all_reduce the gradients during backward
            opt.step()
    # --8<-- [end:ddp]

    # --8<-- [start:self_check]
    batches = []  # every step's global batch, as the list of shards the ranks trained on
    for epoch in range(EPOCHS):
        loaders = [shard_loader(data, r, world_size) for r in range(world_size)]
        for other in loaders:
            other.sampler.set_epoch(epoch)
        batches += [[(x.to(device), y.to(device)) for x, y in shards] for shards in zip(*loaders)]
    full, losses = train_one_process(batches, dtype, device, average_shards=False)
    log(f"world size {world_size}, {dtype}, {len(batches)} steps")
    log(f"one-process loss: first step {losses[0]:.4f}, last step {losses[-1]:.4f}")
    pairs = list(zip(model.module.parameters(), full.parameters()))
    log(f"max |DDP - one process, full batch| = {max((p - q).abs().max().item() for p, q in pairs):.0e}")
    for p, q in pairs:
        torch.testing.assert_close(p, q)  # the dtype's defaults: the sums run in another order
    if world_size == 2:  # DDP computes g0/2 + g1/2; halving is exact, so that is (g0 + g1)/2
        averaged, _ = train_one_process(batches, dtype, device, average_shards=True)
        same = all(torch.equal(p, q) for p, q in zip(model.module.parameters(), averaged.parameters()))
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
