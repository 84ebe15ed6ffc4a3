"""The same training with DistributedDataParallel and a DistributedSampler, the way production code
does it.

Launch (2 processes on the CPU, gloo):

    torchrun --standalone --nproc_per_node=2 examples/data_parallel/step02_ddp.py

DDP does what step01 did by hand: it broadcasts rank 0's weights once, then averages gradients
during backward() with all_reduce over buckets of parameters. DistributedSampler gives each rank a
disjoint shard of every shuffled epoch. At the end each rank checks its weights against one process
that trained on the same global batches; rank 0 prints the max abs difference and, at world size 2,
whether DDP is bitwise equal to averaging the two shards' gradients.
"""

import argparse

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from distdocs.reference import check_against_reference, make_model, make_regression_data
from distdocs.runtime import distributed

BATCH_PER_RANK = 32
EPOCHS = 3
LR = 0.05
MOMENTUM = 0.9


def shard_loader(data, rank, world_size):
    """Rank `rank`'s loader. Passing num_replicas and rank explicitly lets the self-check build every
    rank's loader in one process."""
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    return DataLoader(data, batch_size=BATCH_PER_RANK, sampler=sampler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    dtype = getattr(torch, parser.parse_args().dtype)

    with distributed(seed=0) as rt:
        data = make_regression_data(dtype=dtype)
        # --8<-- [start:ddp]
        model = DDP(make_model(seed=0, dtype=dtype).to(rt.device))
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        loader = shard_loader(data, rt.rank, rt.world_size)
        for epoch in range(EPOCHS):
            loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
            for x, y in loader:
                loss = nn.functional.mse_loss(model(x.to(rt.device)), y.to(rt.device))
                opt.zero_grad()
                loss.backward()  # DDP's hooks all_reduce the gradients during backward
                opt.step()
        # --8<-- [end:ddp]

        # --8<-- [start:self_check]
        # Every rank's loader, rebuilt here, gives each step's global batch as a list of shards.
        batches = []
        for epoch in range(EPOCHS):
            loaders = [shard_loader(data, r, rt.world_size) for r in range(rt.world_size)]
            for other in loaders:
                other.sampler.set_epoch(epoch)
            batches += [[(x.to(rt.device), y.to(rt.device)) for x, y in shards] for shards in zip(*loaders)]
        check_against_reference(model.module, batches, seed=0, lr=LR, momentum=MOMENTUM)
        # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
