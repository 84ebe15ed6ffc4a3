"""Mistake: training without checkpoints. A rank that dies takes the job back to step 0, however
far it had come. Fix: `--ckpt-every 10`, a checkpoint every 10 steps, and a restart that resumes from it.

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=1 examples/fault_tolerance/step06_no_checkpoint.py

Each rank prints its pid; `kill -9` one of them from a second terminal (add `--step-seconds 1` to have
time) and torchrun restarts both ranks. Rank 0 prints the step each attempt starts at.
"""

import argparse
import gc
import os
import sys
import tempfile
import time
import traceback
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
WIDTH = 32


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def fresh(device):
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH)).to(device))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(model, opt, step: int, device) -> None:
    g = torch.Generator().manual_seed(1000 * step + dist.get_rank())  # data set by step and rank
    model(torch.randn(8, WIDTH, generator=g).to(device)).square().mean().backward()
    opt.step()
    opt.zero_grad()


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
    parser.add_argument("--ckpt-every", type=int, default=0, help="steps between checkpoints (default: 0, never)")
    parser.add_argument("--ckpt-dir", default="checkpoints", help="folder for checkpoint.pt (default: checkpoints)")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep after each step (default: 0)")
    args = parser.parse_args()
    if args.ckpt_every < 0 or not 0 <= args.step_seconds <= 60:
        usage_error("--ckpt-every must be 0 or more and --step-seconds in 0..60")
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # The process to kill, to try a failure by hand; on stderr, beside torchrun's own reports.
    print(f"[rank {dist.get_rank()}] pid {os.getpid()}", file=sys.stderr, flush=True)
    try:
        model, first = train(args, device, attempt)
    except BaseException as e:
        # A lost peer fails the survivor's step. The traceback would keep the DDP model alive past the
        # group's teardown, and DDP's gloo thread would then abort the exit: free it first.
        traceback.clear_frames(e.__traceback__)
        gc.collect()
        raise
    check(model, first, device)


def train(args: argparse.Namespace, device: torch.device, attempt: int) -> tuple[nn.Module, int]:
    """The 40 steps, from the newest checkpoint if there is one; the model, and the step it started at."""
    path = os.path.join(args.ckpt_dir, "checkpoint.pt")
    if args.ckpt_every:
        os.makedirs(args.ckpt_dir, exist_ok=True)  # a folder of the reader's stays as it is

    # --8<-- [start:resume]
    model, opt = fresh(device)
    first = 0
    if args.ckpt_every and os.path.exists(path):  # a job without checkpoints has nothing to resume from
        state = torch.load(path, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first = state["step"]
    log(f"attempt {attempt}: starting at step {first} of {STEPS} ({'newest checkpoint' if first else 'no checkpoint'})")
    for step in range(first, STEPS):
        train_step(model, opt, step, device)
        if args.ckpt_every and (step + 1) % args.ckpt_every == 0:
            save_atomically({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step + 1}, path)
        time.sleep(args.step_seconds)
    # --8<-- [end:resume]
    return model, first


def check(model: nn.Module, first: int, device: torch.device) -> None:
    """The final weights against an uninterrupted run's."""
    # --8<-- [start:self_check]
    log(f"this attempt trained steps {first} to {STEPS - 1}: {STEPS - first} of the run's {STEPS}")
    reference, ref_opt = fresh(device)  # the same run, uninterrupted
    for step in range(STEPS):
        train_step(reference, ref_opt, step, device)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p, q), "the restarted run ended elsewhere than an uninterrupted one"
    log("the final weights equal an uninterrupted run's, bit for bit")
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
