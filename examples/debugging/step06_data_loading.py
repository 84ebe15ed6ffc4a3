"""A step that waits for its data: each sample takes a millisecond to read (a stand-in for a disk or
network read), so with `num_workers=0` every rank spends most of its step loading. Time the wait for
the next batch beside the step itself, then again with worker processes that read ahead.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step06_data_loading.py

Rank 0 prints, for each num_workers, the milliseconds a step waits for its batch and the milliseconds
it computes and syncs. The times depend on the machine; the batches do not.
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH, BATCH, STEPS, READ_S = 1024, 32, 30, 0.001  # BATCH per rank; READ_S a sample


class SlowReads(Dataset):
    """Samples that take READ_S each to read: the process waits, as on a disk or network read."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(READ_S)
        return torch.randn(WIDTH, generator=torch.Generator().manual_seed(i)), i


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def now(device: torch.device) -> float:
    """The clock, once `device` has done the work queued on it: CUDA runs asynchronously, and a clock read
    right after a GPU step would time the queueing, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


# --8<-- [start:measure]
def timed_epoch(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float, list[int]]:
    """Mean seconds a step waits for its batch, mean seconds it computes and syncs, and the ids seen. Means,
    not medians: with workers reading ahead, the waits come in bursts, and what they cost is their sum."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    waits, works, seen = [], [], []
    batches = iter(loader)
    for _ in range(STEPS):
        start = now(device)
        x, ids = next(batches)  # with num_workers=0 the read happens here, in the training process
        x = x.to(device, non_blocking=True)
        loaded = now(device)
        opt.zero_grad()
        model(x).square().mean().backward()  # DDP syncs the gradients during backward
        opt.step()
        waits.append(loaded - start)
        works.append(now(device) - loaded)
        seen += ids.tolist()
    del batches  # stops the iterator's worker processes now, not at some later garbage collection
    return statistics.mean(waits[2:]), statistics.mean(works[2:]), seen  # two steps warm up


# --8<-- [end:measure]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="worker processes per rank for the second run")
    args = p.parse_args()
    if args.workers < 1:
        p.error("--workers must be at least 1")
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(0)  # the same weights on every rank
    net = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1)).to(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    sampler = DistributedSampler(SlowReads(), shuffle=True, seed=0)
    rows, seen = [], []
    for workers in (0, args.workers):
        loader = DataLoader(
            SlowReads(), batch_size=BATCH, sampler=sampler, num_workers=workers, pin_memory=device.type == "cuda",
            # not forked from this process, whose gloo threads may hold a lock that the copy keeps: see the
            # convert page; from a clean process, started once
            multiprocessing_context="forkserver" if workers else None, persistent_workers=workers > 0,
        )  # fmt: skip
        wait, work, ids = timed_epoch(model, loader, device)
        rows.append((workers, wait, work))
        seen.append(ids)

    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# rank 0 of {dist.get_world_size()}, {machine}; times vary by machine and load")
    log(f"{'num_workers':>11} {'waiting for data ms':>19} {'compute and sync ms':>19}")
    for workers, wait, work in rows:
        log(f"{workers:>11} {wait * 1e3:>19.1f} {work * 1e3:>19.1f}")

    # --8<-- [start:self_check]
    # What holds on any machine: workers change when a batch is read, not which samples it holds.
    same = seen[0] == seen[1]
    log(f"the same samples in the same order with 0 and {args.workers} workers: {same}")
    assert same, "the workers changed the data"
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
