"""Exercise solution: which rows of each parameter FSDP2 leaves on each rank, when they do not divide evenly.

    torchrun --standalone --nproc_per_node=2 examples/sharded/exercise01_uneven_shards.py

Rank 0 prints each parameter's rows on every rank, and checks that the shards put back together
are the whole parameter.
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(16, 5), nn.Tanh(), nn.Linear(5, 3))  # 5 and 3 rows: not even


def release_dtensor_caches() -> None:
    """Let destroy_process_group free the process group on gloo. torch 2.13's DTensor keeps every
    DeviceMesh it has used in caches, and a mesh holds its groups; gloo cannot stop the threads of a
    group that is still held, and they race the interpreter's exit, which can abort it (the known torch
    issue on the data-parallelism page). On torch 2.13, without this, gloo threads outlived the group in
    every example that calls it, and with any one of the four caches left alone, in most of them; torch
    clears the first in its own tests for the same reason (https://github.com/pytorch/pytorch/pull/172504).
    torch 2.14.1 keeps all four, each still holding meshes. nccl stops its threads at destroy and needs
    none of this. These caches are torch internals: each is
    cleared only where this torch has it."""
    if dist.get_backend() != "gloo":
        return
    from torch.distributed.tensor import _collective_utils, _redistribute, debug

    for clear in (
        getattr(debug, "_clear_sharding_prop_cache", None),
        getattr(_collective_utils.MeshTopoInfo.build_from_mesh, "cache_clear", None),
        getattr(_redistribute, "clear_redistribute_planner_cache", None),
        getattr(getattr(_redistribute, "_gen_transform_infos", None), "cache_clear", None),
    ):
        if clear is not None:
            clear()
    gc.collect()  # what the work built can sit in reference cycles that hold the group (FSDP's modules do)


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def train_and_check(args: argparse.Namespace, device: torch.device) -> None:
    n = dist.get_world_size()
    whole = {name: p.detach().clone() for name, p in make_model().named_parameters()}
    model = make_model().to(device)
    fully_shard(model, mesh=init_device_mesh(device.type, (n,)))

    # --8<-- [start:shards]
    mine = {name: p.to_local().detach().cpu() for name, p in model.named_parameters()}  # my rows only
    every = [None] * n
    dist.all_gather_object(every, mine)
    for name, full in whole.items():
        rows = [shards[name].shape[0] for shards in every]
        log(f"{name:>8} {tuple(full.shape)!s:>8}: rows on each rank {rows}")
        # dim 0 is cut as torch.chunk cuts it: ceil(rows / n) each, the last ranks get what is left
        assert rows == [len(c) for c in full.chunk(n)] + [0] * (n - len(full.chunk(n)))
        assert torch.equal(torch.cat([shards[name] for shards in every]), full)  # nothing lost or repeated
    # --8<-- [end:shards]
    log("self-check passed")


def run(args: argparse.Namespace, device: torch.device) -> None:
    train_and_check(args, device)  # what it built (models, meshes, DTensors) is freed when it returns
    release_dtensor_caches()  # so that the setup's destroy_process_group can free the group


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
