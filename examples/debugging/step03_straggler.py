"""One slow rank slows them all: rank 1's shard holds 3 times the samples of rank 0's, so rank 1
computes longer, keeps more activations, and rank 0 waits for it in every all_reduce. Time each
rank's computation and its wait, and the straggler names itself. Fix: `--balanced` shards.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step03_straggler.py

Rank 0 prints a line per rank: samples a step, computation and all_reduce times, and the bytes of
activations the forward kept for backward. The times depend on the machine; the bytes do not.
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

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH, STEPS, SAMPLES = 512, 12, 512  # SAMPLES a step, over all ranks


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def shard_sizes(world: int, balanced: bool) -> list[int]:
    if balanced:
        return [SAMPLES // world] * world
    weights = [1 + 2 * (r % 2) for r in range(world)]  # the odd ranks get 3 times the even ones' share
    return [SAMPLES * w // sum(weights) for w in weights]


def now(device: torch.device) -> float:
    """The clock, once `device` has done the work queued on it: CUDA runs asynchronously, and a clock read
    right after a GPU step would time the queueing, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


# --8<-- [start:measure]
def timed_step(model: nn.Module, x: torch.Tensor) -> tuple[float, float, int]:
    """One step: seconds computing, seconds in the all_reduce, bytes kept for backward."""
    kept, weights = 0, {p.untyped_storage().data_ptr() for p in model.parameters()}

    def keep(t: torch.Tensor) -> torch.Tensor:
        nonlocal kept
        if t.untyped_storage().data_ptr() not in weights:  # activations, not the weights themselves
            kept += t.numel() * t.element_size()
        return t

    start = now(x.device)
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):  # count what backward will need
        loss = model(x).square().mean()
    loss.backward()
    computed = now(x.device)
    for p in model.parameters():  # a rank that finished early waits here for the slowest
        dist.all_reduce(p.grad)
    return computed - start, now(x.device) - computed, kept


# --8<-- [end:measure]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--balanced", action="store_true", help="give every rank the same number of samples")
    args = p.parse_args()
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = shard_sizes(world, args.balanced)[rank]
    torch.manual_seed(0)  # the same weights on every rank
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU()).to(device)
    x = torch.randn(mine, WIDTH, generator=torch.Generator().manual_seed(rank)).to(device)
    times = [timed_step(model, x) for _ in range(STEPS)][2:]  # the first two warm up
    row = (mine, statistics.median(t[0] for t in times), statistics.median(t[1] for t in times), times[-1][2])
    rows = [None] * world
    dist.all_gather_object(rows, row)

    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; times vary by machine and load")
    log(f"{'rank':>4} {'samples':>7} {'compute ms':>10} {'all_reduce ms':>13} {'activations kept':>16}")
    for r, (n, compute, wait, kept) in enumerate(rows):
        log(f"{r:>4} {n:>7} {compute * 1e3:>10.1f} {wait * 1e3:>13.1f} {kept / 2**20:>13.2f} MiB")
    slowest = max(range(world), key=lambda r: rows[r][1])
    log(f"slowest: rank {slowest}, computing {rows[slowest][1] / min(r[1] for r in rows):.1f}x as long as the fastest")

    # --8<-- [start:self_check]
    # What holds on any machine: activation memory grows with the samples a rank holds, exactly.
    per_sample = {kept / n for n, _, _, kept in rows}
    assert len(per_sample) == 1, f"activations are not proportional to samples: {rows}"
    log(f"activations per sample are the same on every rank: {per_sample.pop() / 1024:.0f} KiB")
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
