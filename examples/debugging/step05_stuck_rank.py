"""A hang from one rank: at step 3, rank 1 blocks in its data loading, and rank 0 waits in the
gradient all_reduce until the process group's 60 s timeout. With --monitored, a monitored_barrier
names the missing rank after 10 s; with --exit-early, rank 1 leaves instead, and rank 0 fails at once.
Fix: --fixed gives the read a deadline and a retry, as a read from a network file system needs.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step05_stuck_rank.py --fixed
    torchrun --standalone --nproc_per_node=2 examples/debugging/step05_stuck_rank.py --monitored

Only --fixed ends well. Rank 1 prints its pid when it gets stuck, for `py-spy dump --pid PID`.
"""

import argparse
import os
import sys
import threading
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

STEPS, STUCK_AT = 6, 3


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def load_batch(
    step: int, rank: int, stuck: threading.Event, deadline_s: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    if rank == 1 and step == STUCK_AT:
        print(f"[rank 1] stuck in load_batch at step {step}; pid {os.getpid()}", flush=True)
        # --8<-- [start:deadline]
        # A read that does not return: a hung file system, a dead data server. With a deadline, it
        # gives up and tries again (here the second try succeeds); without one, it waits forever.
        if not stuck.wait(timeout=deadline_s):
            print(f"[rank 1] no data after {deadline_s} s; reading again", flush=True)
        # --8<-- [end:deadline]
    g = torch.Generator().manual_seed(step * 100 + rank)
    x = torch.randn(8, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--monitored", action="store_true", help="a monitored_barrier before each step's all_reduce")
    p.add_argument("--exit-early", action="store_true", help="rank 1 returns at step 3 instead of blocking")
    p.add_argument("--fixed", action="store_true", help="a 2 s deadline on the read, and a retry")
    args = p.parse_args()
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stuck = threading.Event()  # never set
    # monitored_barrier runs on gloo only: on GPUs it needs a gloo group beside the nccl one.
    monitor = dist.new_group(backend="gloo") if args.monitored else None

    for step in range(STEPS):
        if args.exit_early and rank == 1 and step == STUCK_AT:
            print(f"[rank 1] returning at step {step}, before the others", flush=True)
            return  # an early return: a caught exception, a `break` on one rank only
        x, y = load_batch(step, rank, stuck, 2.0 if args.fixed else None)
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        # --8<-- [start:monitored]
        if args.monitored:  # every rank checks in with rank 0, which names any that does not
            dist.monitored_barrier(group=monitor, timeout=timedelta(seconds=10))
        # --8<-- [end:monitored]
        start = time.monotonic()  # wall-clock time on the CPU until the error surfaces, not GPU work
        try:
            for param in model.parameters():
                dist.all_reduce(param.grad)
                param.grad /= world
        except RuntimeError:
            print(f"[rank {rank}] all_reduce failed after {time.monotonic() - start:.1f} s", flush=True)
            raise
        opt.step()
        opt.zero_grad()
        print(f"[rank {rank}] step {step} done", flush=True)

    # --8<-- [start:self_check]
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    assert torch.equal(mine, rank0), "the ranks' weights differ"
    log(f"all {STEPS} steps done on every rank, with the same weights")
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
