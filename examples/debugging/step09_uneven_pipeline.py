"""An uneven pipeline: 8 blocks split 6:2 over two stages, so stage 0 holds 3 times the parameters and
keeps 3 times the activations for backward; it runs out of memory first and sets the pace. Count
each stage's bytes and the heavy stage names itself. Fix: `--balanced` stages (4:4).

    torchrun --standalone --nproc_per_node=2 examples/debugging/step09_uneven_pipeline.py

Rank 0 prints a line per stage: blocks, parameter bytes, activation bytes kept, and the stage's own
compute time. The bytes are the same on any machine; the times are not.
"""

import argparse
import datetime
import os
import platform
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

WIDTH, BLOCKS, SAMPLES, STEPS = 512, 8, 64, 3


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def now(device: torch.device) -> float:
    """The clock, once `device` has done the work queued on it: CUDA runs asynchronously, and a clock read
    right after a GPU step would time the queueing, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # the same weights on both ranks and in the reference
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(BLOCKS)])


# --8<-- [start:measure]
def kept_bytes(stage: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The stage's forward, and the bytes of activations it keeps for backward (not its weights)."""
    kept, weights = 0, {p.untyped_storage().data_ptr() for p in stage.parameters()}

    def keep(t: torch.Tensor) -> torch.Tensor:
        nonlocal kept
        if t.untyped_storage().data_ptr() not in weights:
            kept += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        y = stage(x)
    return y, kept


# --8<-- [end:measure]


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank = dist.get_rank()
    split = BLOCKS // 2 if args.balanced else BLOCKS * 3 // 4  # stage 0 takes the first `split` blocks
    model = make_model().to(device)
    stage = model[:split] if rank == 0 else model[split:]
    x = torch.randn(SAMPLES, WIDTH, generator=torch.Generator().manual_seed(0)).to(device)
    for _ in range(STEPS):  # the last step's numbers count; the ones before warm up
        stage.zero_grad()
        computing = 0.0  # this stage's own forward and backward, not its waits for the other
        if rank == 0:  # forward, send the activations on, receive their gradient, backward
            start = now(device)
            y, kept = kept_bytes(stage, x)
            computing += now(device) - start
            dist.send(y.detach(), dst=1)
            grad = torch.empty_like(y)
            dist.recv(grad, src=1)
            start = now(device)
            y.backward(grad)
        else:
            h = torch.empty(SAMPLES, WIDTH, device=device)
            dist.recv(h, src=0)
            h.requires_grad_()
            start = now(device)
            y, kept = kept_bytes(stage, h)
            y.square().mean().backward()
        computing += now(device) - start
        if rank == 1:
            dist.send(h.grad, dst=0)
    params = sum(p.numel() * p.element_size() for p in stage.parameters())
    rows = [None, None]
    dist.all_gather_object(rows, (len(stage), params, kept, computing))

    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; times vary by machine and load")
    log(f"{'stage':>5} {'blocks':>6} {'parameters':>13} {'activations kept':>16} {'compute ms':>10}")
    for r, (blocks, p, a, s) in enumerate(rows):
        log(f"{r:>5} {blocks:>6} {p / 2**20:>9.2f} MiB {a / 2**20:>12.2f} MiB {s * 1e3:>10.1f}")

    # What holds on any machine: the parameters follow the blocks exactly, the activations kept per
    # block are the same on both stages (the last also keeps the loss's input), and the pipeline's
    # gradients are the one-process model's.
    (b0, p0, a0, _), (b1, p1, a1, _) = rows
    assert p0 * b1 == p1 * b0, f"parameter bytes do not follow the blocks: {rows}"
    assert abs(a0 / b0 - a1 / b1) <= SAMPLES * WIDTH * 4, f"activations per block differ: {rows}"
    reference = make_model().to(device)
    reference(x).square().mean().backward()
    mine = reference[:split] if rank == 0 else reference[split:]
    for got, want in zip(stage.parameters(), mine.parameters()):
        torch.testing.assert_close(got.grad, want.grad)  # default float32 tolerances: the same operations
    heavy, light = sorted((0, 1), key=lambda r: -rows[r][1])
    log(
        f"heaviest: stage {heavy}, {rows[heavy][1] / rows[light][1]:.1f}x the other's parameters and "
        f"{rows[heavy][2] / rows[light][2]:.1f}x its activations"
    )
    log("self-check passed")


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--balanced", action="store_true", help="give both stages the same number of blocks")
    args = p.parse_args()
    if int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE)) != NPROC_PER_NODE:  # two stages, one per rank
        usage_error(f"two stages need exactly {NPROC_PER_NODE} processes")
    return args


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
