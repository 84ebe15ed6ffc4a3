"""Checkpoint every T seconds, as "every 10 minutes" works on a real job: rank 0's clock decides, a
broadcast on a gloo group tells every rank, and all of them save at the same step.

    torchrun --standalone --nproc_per_node=2 examples/fault_tolerance/step05_checkpoint_on_time.py

Rank 0 checks that every rank saved at the same steps, then resumes a fresh model from the newest
checkpoint and checks that it ends bit for bit where the uninterrupted run ended.
"""

import argparse
import os
import sys
import tempfile
import time
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

STEPS = 40
STEP_S = 0.02  # a sleep in each step, standing in for a real step's minutes of compute
WIDTH = 32


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def batch(step: int, device: torch.device) -> torch.Tensor:
    # The data depends only on the step and the rank, so a resumed run sees what the first run saw.
    g = torch.Generator().manual_seed(1000 * step + dist.get_rank())
    return torch.randn(8, WIDTH, generator=g).to(device)


def train(model, opt, first: int, last: int, device, every: float | None, path: str, clock=None) -> list[int]:
    """Steps first..last-1; with `every`, checkpoint whenever rank 0 says T seconds have passed; it
    says so on `clock`, a gloo group."""
    saved = []
    # --8<-- [start:decide]
    last_save = time.monotonic()  # a schedule on the CPU's clock: it times no GPU work, so no synchronize
    for step in range(first, last):
        model(batch(step, device)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(STEP_S)
        if every is None:
            continue
        # Each rank's clock started at a different moment, and steps end at different moments on
        # different ranks: deciding locally, ranks would save at different steps. Rank 0 decides.
        # The decision is a CPU tensor on a gloo group, even under nccl: a CUDA tensor read with
        # .item() would wait for the GPU to finish the step, every step, and the CPU could no longer
        # queue the next step's kernels while the GPU runs this one.
        due = torch.tensor([time.monotonic() - last_save >= every], dtype=torch.uint8)  # on the CPU, for gloo
        dist.broadcast(due, src=0, group=clock)
        if due.item():
            save_atomically({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step + 1}, path)
            saved.append(step + 1)
            last_save = time.monotonic()
    # --8<-- [end:decide]
    return saved


# --8<-- [start:atomic_save]
def save_atomically(state: dict, path: str, group: dist.ProcessGroup | None = None) -> None:
    """Rank 0 of `group` writes a temporary file beside `path`, flushes it to disk, then renames it over
    `path`: a crash leaves the old checkpoint or the new one, never half of one. Every rank waits for it."""
    if dist.get_rank(group) == 0:
        folder = os.path.dirname(os.path.abspath(path))
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".checkpoint-", delete=False) as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the new name does
        os.replace(f.name, path)  # atomic on POSIX: readers see the old file or the new one
        fd = os.open(folder, os.O_RDONLY)  # and make the rename itself durable
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    dist.barrier(group)  # nobody reads or trains past a checkpoint that is not on disk yet


# --8<-- [end:atomic_save]


def fresh(device):
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH)).to(device))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


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
    parser.add_argument("--every", type=float, default=0.2, help="seconds between checkpoints (default: 0.2)")
    parser.add_argument("--ckpt-dir", default="checkpoints", help="folder for checkpoint.pt (default: checkpoints)")
    args = parser.parse_args()
    if not args.every > 0 or args.every >= STEPS * STEP_S:
        usage_error(f"--every must be above 0 and below the run's {STEPS * STEP_S:g} s")
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    os.makedirs(args.ckpt_dir, exist_ok=True)
    path = os.path.join(args.ckpt_dir, "checkpoint.pt")

    clock = dist.new_group(backend="gloo", timeout=timedelta(seconds=TIMEOUT_S))  # rank 0's decisions, on the CPU
    model, opt = fresh(device)
    saved = train(model, opt, 0, STEPS, device, args.every, path, clock)

    # --8<-- [start:resume]
    state = torch.load(path, map_location=device, weights_only=True)  # tensors and plain data only
    resumed, resumed_opt = fresh(device)
    resumed.module.load_state_dict(state["model"])
    resumed_opt.load_state_dict(state["opt"])
    train(resumed, resumed_opt, state["step"], STEPS, device, None, path)
    # --8<-- [end:resume]

    # --8<-- [start:self_check]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, saved)
    assert all(s == saved for s in everyone), f"ranks checkpointed at different steps: {everyone}"
    assert saved, "no checkpoint was written"
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(p, q), "the resumed run ended elsewhere"  # bitwise: same ops, same order
    # Which steps depends on this machine's speed, so only what holds everywhere is printed.
    log(f"checkpointed every {args.every:g} s by rank 0's clock: every rank saved at the same steps")
    log(f"resumed from the newest checkpoint to step {STEPS}: the weights equal the uninterrupted run's, bit for bit")
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
