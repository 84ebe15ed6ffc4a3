"""Synchronous training against local SGD: all_reduce the gradients every step, or let every rank
train alone and average the models every few steps.

    torchrun --standalone --nproc_per_node=2 examples/sync_strategies/step01_local_sgd.py

Rank 0 prints, for DDP and for model averaging every 4, 16 and 64 steps, how many all_reduce calls
and bytes each rank made and the loss after each epoch. `--save PATH` also writes the curves as
JSON, for the page's figure.
"""

import argparse
import datetime
import json
import os
import platform
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

SAMPLES, EPOCHS, GLOBAL_BATCH, LR = 4096, 6, 64, 0.02
PERIODS = (1, 4, 16, 64)  # 1: DDP, gradients all_reduced every step; k: models averaged every k steps


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 16, generator=g)
    y = torch.sin(x @ torch.randn(16, 1, generator=g) / 2) + 0.05 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))


def count_then_allreduce(counts: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    counts["calls"] += 1
    counts["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    return allreduce_hook(None, bucket)


def train(device, x, y, period: int) -> tuple[list[float], dict]:
    """Train with DDP (period 1) or local SGD averaging every `period` steps; return the loss after
    each epoch, averaged over the ranks' models, and the all_reduce calls and bytes of this rank."""
    rank, n = dist.get_rank(), dist.get_world_size()
    module = make_model().to(device)
    counts = {"calls": 0, "bytes": 0}
    if period == 1:
        model = DDP(module)
        model.register_comm_hook(counts, count_then_allreduce)
    else:
        model = module
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    # --8<-- [start:local_sgd]
    averager = PeriodicModelAverager(period=period) if period > 1 else None
    curve = []
    for epoch in range(EPOCHS):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch))
        for start in range(0, SAMPLES, GLOBAL_BATCH):
            mine = order[start : start + GLOBAL_BATCH].chunk(n)[rank]  # my shard of the global batch
            loss = nn.functional.mse_loss(model(x[mine].to(device)), y[mine].to(device))
            opt.zero_grad()
            loss.backward()  # DDP: all_reduce the gradients; local SGD: nothing leaves this rank
            opt.step()
            if averager:
                before = module[0].weight.detach().clone()
                averager.average_parameters(model.parameters())  # every `period` steps: one all_reduce
                if not torch.equal(before, module[0].weight):  # the models were averaged
                    counts["calls"] += 1
                    counts["bytes"] += sum(p.numel() * p.element_size() for p in module.parameters())
        # --8<-- [end:local_sgd]
        with torch.no_grad():
            loss = nn.functional.mse_loss(module(x.to(device)), y.to(device)).reshape(1)
        dist.all_reduce(loss)  # the mean over the ranks' models (the same ones, after an average)
        curve.append(loss.item() / n)
    return curve, counts


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", help="also write the curves and the machine to this JSON file")
    args = parser.parse_args()
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    x, y = make_data()
    results = {period: train(device, x, y, period) for period in PERIODS}
    steps = EPOCHS * SAMPLES // GLOBAL_BATCH

    log(f"{'':>22} {'all_reduce calls':>16} {'bytes':>9} {'loss, epoch 1':>14} {'epoch 3':>8} {'epoch 6':>8}")
    for period, (curve, counts) in results.items():
        name = "DDP, every step" if period == 1 else f"average every {period}"
        log(
            f"{name:>22} {counts['calls']:>16} {counts['bytes']:>9} {curve[0]:>14.4f} {curve[2]:>8.4f} {curve[5]:>8.4f}"
        )

    sync_curve, sync_counts = results[1]
    assert sync_counts["calls"] == steps  # one bucket: one all_reduce a step
    for period, (curve, counts) in results.items():
        assert counts["calls"] == steps // period  # the averagings, detected as changed weights
        assert curve[-1] < curve[0] / 5  # every run learns
        # Averaging less often drifts further from synchronous training, but ends within 20% of it here.
        assert curve[-1] <= 1.2 * sync_curve[-1]
    assert results[16][0][2] > sync_curve[2]  # mid-training, the rarely averaged models lag
    if args.save and dist.get_rank() == 0:
        machine = {
            "machine": platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "ranks": dist.get_world_size(),
            "date": datetime.date.today().isoformat(),
        }
        curves = {("DDP, every step" if p == 1 else f"average every {p} steps"): c for p, (c, _) in results.items()}
        with open(args.save, "w") as f:
            json.dump({"machine": machine, "curves": curves}, f, indent=2)
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
