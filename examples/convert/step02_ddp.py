"""The training script of step01, made distributed: the page on converting a script shows the diff.

    torchrun --standalone --nproc_per_node=2 examples/convert/step02_ddp.py

Each rank trains DDP on its share of every batch, the ranks evaluate together, and rank 0 logs and
saves. It ends where the one-process script ends, within what BatchNorm's per-rank statistics change.
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

EPOCHS = 4
BATCH = 64  # samples per optimizer step, all ranks together: the one-process run's batch, so its LR holds
LR = 0.05


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="model.pt", help="where the trained weights go (default: model.pt)")
    return parser.parse_args()


def make_data(samples: int, seed: int) -> TensorDataset:
    """Points of ten classes around ten fixed centres: the same data on every run."""
    centres = torch.randn(10, 32, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (samples,), generator=g)
    return TensorDataset(centres[labels] + 1.5 * torch.randn(samples, 32, generator=g), labels)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    return nn.Sequential(nn.Linear(32, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10))


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    """The mean loss and the accuracy over every sample of the loader, summed over the ranks' shards."""
    model.eval()
    totals = torch.zeros(3, device=device)  # summed loss, correct predictions, samples
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            totals[0] += nn.functional.cross_entropy(out, y, reduction="sum")
            totals[1] += (out.argmax(1) == y).sum()
            totals[2] += len(y)
    model.train()
    dist.all_reduce(totals)  # every rank evaluated its shard: add them up
    loss, correct, count = totals.tolist()
    return loss / count, correct / count


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    train_set, val_set = make_data(8192, seed=1), make_data(2048, seed=2)
    model = make_model()
    if device.type == "cuda":  # SyncBatchNorm runs on GPUs only; on the CPU each rank normalizes its own share
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model.to(device))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # each rank a different share
    # Workers forked from this process would copy it after gloo (or nccl) started its threads, and a lock
    # one of them held stays locked in the copy: a worker can hang. Start them from a clean process, once.
    loader = DataLoader(
        train_set, batch_size=BATCH // world_size, sampler=sampler,
        num_workers=2, pin_memory=device.type == "cuda",
        multiprocessing_context="forkserver", persistent_workers=True,
    )  # fmt: skip
    val_loader = DataLoader(val_set, batch_size=256, sampler=DistributedSampler(val_set, shuffle=False))
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        val_loss, accuracy = evaluate(model, val_loader, device)
        if rank == 0:
            print(f"epoch {epoch}: validation loss {val_loss:.3f}, accuracy {accuracy:.1%}")
    if rank == 0:
        torch.save(model.module.state_dict(), args.out)  # the plain model's weights, not DDP's wrapper
        print(f"saved the weights to {args.out}")

    # --8<-- [start:self_check]
    assert accuracy > 0.9, f"the classifier did not learn: accuracy {accuracy:.1%}"
    # Every rank ends with the same weights, and the evaluation counted each validation sample once.
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    assert torch.equal(mine, rank0), f"rank {rank}'s weights differ from rank 0's"
    counted = torch.tensor([float(len(val_loader.sampler))], device=device)
    dist.all_reduce(counted)
    assert counted.item() == len(val_set), "DistributedSampler padded the validation set"
    if rank == 0:
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
