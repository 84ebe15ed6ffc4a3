"""Which GPU is mine? torchrun tells each process in its environment: LOCAL_RANK, its number on this
machine. The old launcher, `python -m torch.distributed.launch`, passed it as an argument instead,
`--local-rank=N`, which a script whose parser has no such flag refuses.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step10_local_rank.py
    python -m torch.distributed.launch --nproc_per_node=2 examples/debugging/step10_local_rank.py

The first runs it: rank 0 prints what each rank read from its environment, and the self-check passes.
The second fails in argparse, before any work: `error: unrecognized arguments: --local-rank=0`.
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


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # No --local-rank here: torchrun passes the local rank in the environment only. A script that must
    # also run under the old launcher accepts the flag and ignores it (the debugging guide shows how).
    args = p.parse_args()
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    # --8<-- [start:environment]
    local_rank = int(os.environ["LOCAL_RANK"])  # this process's number on its machine: which GPU is its own
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this machine
    node = int(os.environ["GROUP_RANK"])  # this machine's number among the job's machines
    rank, world = dist.get_rank(), dist.get_world_size()  # across every machine: RANK and WORLD_SIZE
    # --8<-- [end:environment]
    mine = {"rank": rank, "node": node, "local_rank": local_rank, "local_world": local_world}
    mine |= {"device": str(device), "arguments": sys.argv[1:]}
    found = [None] * world
    dist.all_gather_object(found, mine)
    for f in found:
        log(
            f"[rank {f['rank']}] LOCAL_RANK={f['local_rank']} LOCAL_WORLD_SIZE={f['local_world']} node {f['node']}, "
            f"device {f['device']}, arguments after the script: {' '.join(f['arguments']) or 'none'}"
        )

    # --8<-- [start:self_check]
    assert [f["rank"] for f in found] == list(range(world)) and rank == int(os.environ["RANK"])
    assert len({(f["node"], f["local_rank"]) for f in found}) == world, "two processes share a local rank"
    assert all(0 <= f["local_rank"] < f["local_world"] for f in found), found
    if all(f["local_world"] == world for f in found):  # one machine: the local rank is the rank
        assert all(f["rank"] == f["local_rank"] for f in found), found
        log("one machine: every rank's LOCAL_RANK is its rank")
    if device.type == "cuda":  # each process on the GPU its local rank names
        assert device.index == local_rank, (device, local_rank)
    assert all(f["arguments"] == [] for f in found), "torchrun passed the script arguments of its own"
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
