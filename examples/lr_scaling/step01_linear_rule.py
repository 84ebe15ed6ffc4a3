"""The linear scaling rule: when the global batch grows k-fold, multiply the learning rate by k (with
a warmup, in Goyal et al.'s recipe).

    torchrun --standalone --nproc_per_node=2 examples/lr_scaling/step01_linear_rule.py

Rank 0 prints the loss on the whole dataset after each epoch, for a small batch and for larger
batches with the same learning rate, with the scaled one (warmed up, and not), and with the scaled
one far past where the rule holds. `--save PATH` also writes the curves as JSON, for the page's figure.
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
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

SAMPLES, EPOCHS, WARMUP_EPOCHS = 4096, 12, 2
BASE_BATCH, BASE_LR = 32, 0.01
# name: (global batch, learning rate, warmup epochs)
RUNS = {
    "batch 32, lr 0.01": (32, 0.01, 0),
    "batch 256, lr 0.01 (not scaled)": (256, 0.01, 0),
    "batch 256, lr 0.08 (scaled, warmup)": (256, 0.08, WARMUP_EPOCHS),
    "batch 256, lr 0.08 (scaled, no warmup)": (256, 0.08, 0),
    "batch 4096, lr 1.28 (scaled, warmup)": (4096, 1.28, WARMUP_EPOCHS),
}
DIVERGED = 1.0  # a loss above this (the data's variance is about 0.3) counts as diverged


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 16, generator=g)
    y = torch.sin(x @ torch.randn(16, 1, generator=g) / 2) + 0.05 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank and in every run
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))


def train(device, x, y, global_batch: int, lr: float, warmup_epochs: int) -> list[float]:
    """DDP training; the loss on the whole dataset after each epoch (stops early if it diverges)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    model = DDP(make_model().to(device))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    # --8<-- [start:warmup]
    warmup_steps = warmup_epochs * SAMPLES // global_batch
    # Linear warmup: the learning rate climbs from lr/warmup_steps to lr, then stays.
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / max(1, warmup_steps)))
    # --8<-- [end:warmup]
    curve = []
    for epoch in range(EPOCHS):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch))  # the same on every rank
        for start in range(0, SAMPLES, global_batch):
            mine = order[start : start + global_batch].chunk(n)[rank]  # my shard of the global batch
            loss = nn.functional.mse_loss(model(x[mine].to(device)), y[mine].to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
        with torch.no_grad():
            curve.append(nn.functional.mse_loss(model.module(x.to(device)), y.to(device)).item())
        if not curve[-1] < DIVERGED:  # also catches nan
            break
    return curve


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", help="also write the curves and the machine to this JSON file")
    args = parser.parse_args()
    n = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if any(batch % n for batch, _, _ in RUNS.values()):
        usage_error(f"every global batch must divide among {n} ranks")
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    n = dist.get_world_size()
    x, y = make_data()
    curves = {name: train(device, x, y, *settings) for name, settings in RUNS.items()}

    shown = (1, 2, 4, 8, 12)
    log(f"loss on all {SAMPLES} samples after epoch:   " + "".join(f"{e:>8}" for e in shown))
    for name, curve in curves.items():
        cells = [f"{curve[e - 1]:>8.4f}" if e <= len(curve) and curve[e - 1] < DIVERGED else f"{'-':>8}" for e in shown]
        end = "" if curve[-1] < DIVERGED else f"  diverged in epoch {len(curve)}"
        log(f"{name:>38}   " + "".join(cells) + end)

    small, unscaled, scaled, cold, huge = (curves[name] for name in RUNS)
    # The same samples, 8 times fewer steps: at the small batch's learning rate, the large batch lags.
    assert unscaled[-1] > 3 * small[-1]
    # Scaled 8-fold and warmed up, it ends within 30% of the small batch's loss (the rule is only
    # approximate: it assumes the gradient barely changes over the k small steps it replaces).
    assert scaled[-1] <= 1.3 * small[-1]
    # Here the warmup does not decide the outcome: without it, the scaled run ends within 30% too.
    assert cold[-1] <= 1.3 * small[-1]
    # 128-fold, one step an epoch, the same rule diverges: past the rule's range.
    assert not huge[-1] < DIVERGED
    if args.save and dist.get_rank() == 0:
        machine = {
            "machine": platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "ranks": n,
            "date": datetime.date.today().isoformat(),
        }
        with open(args.save, "w") as f:
            json.dump({"machine": machine, "runs": RUNS, "curves": curves}, f, indent=2)
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
