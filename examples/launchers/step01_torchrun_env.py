"""What torchrun tells each process: the environment variables a distributed script starts from.

    torchrun --standalone --nproc_per_node=2 examples/launchers/step01_torchrun_env.py

Rank 0 prints one row of coordinates per process and the values every process shares, then checks
RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK. Run it as two "nodes" on one machine (see the
page) and GROUP_RANK and LOCAL_RANK part ways from RANK.
"""

import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

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


def run(device: torch.device) -> None:
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
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node=2 {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        torch.cuda.set_device(device)
    # A rank that stops answering fails the others after 60 s, not after gloo's default 30 minutes.
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    try:
        run(device)  # the work, in a function: its models are garbage once it returns
    finally:
        gc.collect()  # free models caught in reference cycles now: freed at exit, they can abort it
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Done: leave without Python's shutdown. torch can keep the group's worker threads alive past
    # destroy_process_group, and one that frees a tensor while the interpreter shuts down aborts it.
    sys.stdout.flush()
    os._exit(0)
# --8<-- [end:setup]
