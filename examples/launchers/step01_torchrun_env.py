"""What torchrun tells each process: the environment variables a distributed script starts from.

    torchrun --standalone --nproc_per_node=2 examples/launchers/step01_torchrun_env.py

Rank 0 prints one row of coordinates per process and the values every process shares, then checks
RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK. Run it as two "nodes" on one machine (see the
page) and GROUP_RANK and LOCAL_RANK part ways from RANK.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

# --8<-- [start:variables]
PER_PROCESS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")
SHARED = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "OMP_NUM_THREADS",
)
# --8<-- [end:variables]


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    mine = {name: os.environ.get(name) for name in PER_PROCESS + SHARED}
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)  # index r holds rank r's environment

    log("  ".join(f"{name:>16}" for name in PER_PROCESS))
    for env in every:
        log("  ".join(f"{env[name]:>16}" for name in PER_PROCESS))
    for name in SHARED:
        values = {env[name] for env in every}
        # The port and run id are chosen afresh by --standalone: say whether they agree, not what they are.
        shown = (
            "(not shown: it can change between launches)"
            if name in ("MASTER_PORT", "TORCHELASTIC_RUN_ID")
            else values.pop()
        )
        log(f"{name} = {shown}; the same on every rank: {len({env[name] for env in every}) == 1}")

    # --8<-- [start:self_check]
    ranks = [int(env["RANK"]) for env in every]
    assert ranks == list(range(dist.get_world_size())), ranks  # all_gather_object orders by rank
    for env in every:
        assert int(env["WORLD_SIZE"]) == dist.get_world_size()
        node, local, per_node = int(env["GROUP_RANK"]), int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
        assert int(env["RANK"]) == node * per_node + local, env
    for name in SHARED:
        assert len({env[name] for env in every}) == 1, f"ranks disagree on {name}"
    nodes = len({env["GROUP_RANK"] for env in every})
    log(f"{dist.get_world_size()} processes on {nodes} node(s): RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK")
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
