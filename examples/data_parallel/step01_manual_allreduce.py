"""Data parallelism by hand: average the gradients with dist.all_reduce after backward().

Launch (2 processes on the CPU, gloo):

    torchrun --standalone --nproc_per_node=2 examples/data_parallel/step01_manual_allreduce.py

Every rank holds the same model and takes its own shard of each global batch. After backward(),
all_reduce sums the gradients across ranks and each rank divides by the world size, so every rank
applies the same averaged gradient and the replicas never drift apart. At the end each rank trains a
single-process reference on the same batches and checks the claim; rank 0 prints the evidence:
the max abs difference from one process that trained on the full batches, and, at world size 2,
bitwise equality with one process that averages the two shards' gradients in the same order.
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn

from distdocs.reference import check_against_reference, make_model, make_regression_data
from distdocs.runtime import distributed

GLOBAL_BATCH = 64
EPOCHS = 3
LR = 0.05
MOMENTUM = 0.9


# --8<-- [start:sync_grads]
def average_gradients(model: nn.Module, world_size: int) -> None:
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)  # every rank now holds the sum
        p.grad /= world_size  # ... and the mean, the gradient of the full batch
# --8<-- [end:sync_grads]


def global_batches(data, device):
    """The same sequence of global batches on every rank: no shuffling, so no sampler is needed."""
    x, y = data.tensors
    for _ in range(EPOCHS):
        for start in range(0, len(x), GLOBAL_BATCH):
            yield x[start : start + GLOBAL_BATCH].to(device), y[start : start + GLOBAL_BATCH].to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    dtype = getattr(torch, parser.parse_args().dtype)

    with distributed(seed=0) as rt:
        data = make_regression_data(dtype=dtype)
        model = make_model(seed=0, dtype=dtype).to(rt.device)  # same seed: identical replicas
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

        # --8<-- [start:train_loop]
        for x, y in global_batches(data, rt.device):
            x_mine = x.chunk(rt.world_size)[rt.rank]  # this rank's shard of the global batch
            y_mine = y.chunk(rt.world_size)[rt.rank]
            loss = nn.functional.mse_loss(model(x_mine), y_mine)
            opt.zero_grad()
            loss.backward()
            average_gradients(model, rt.world_size)
            opt.step()
        # --8<-- [end:train_loop]

        # --8<-- [start:self_check]
        # The global batches again, each as the list of shards the ranks trained on.
        batches = [list(zip(x.chunk(rt.world_size), y.chunk(rt.world_size)))
                   for x, y in global_batches(data, rt.device)]
        check_against_reference(model, batches, seed=0, lr=LR, momentum=MOMENTUM)
        # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
