"""Hybrid sharded data parallelism (HSDP) with FSDP2: shard inside a node, replicate across nodes.

    torchrun --standalone --nproc_per_node=4 examples/sharded/step02_hsdp.py

The 4 ranks form a 2 x 2 mesh: 2 "nodes" of 2 ranks. Rank 0 prints the mesh, the share of each
parameter every rank holds, and how far the trained model is from one process trained on every batch.
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
NPROC_PER_NODE = 4
TIMEOUT_S = 60

# Ranks per node: each node shards the model among its ranks, and the nodes hold replicas. On a real
# cluster this is the node's GPU count (torchrun's LOCAL_WORLD_SIZE); here 4 ranks on one machine play
# 2 nodes of 2.
RANKS_PER_NODE = 2
WIDTH = 256  # divisible by 2, so the shards are exact
STEPS = 20
GLOBAL_BATCH = 64


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    return nn.Sequential(nn.Linear(32, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 8))


def batches(device):
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 32, generator=g)
        yield x.to(device), x[:, :8].sin().to(device)


def train(model, opt, device, rank, world_size):
    for x, y in batches(device):
        mine = slice(rank * GLOBAL_BATCH // world_size, (rank + 1) * GLOBAL_BATCH // world_size)
        loss = nn.functional.mse_loss(model(x[mine]), y[mine])
        opt.zero_grad()
        loss.backward()
        opt.step()


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


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
    if n % RANKS_PER_NODE:
        raise SystemExit(
            f"error: {n} ranks do not fill nodes of {RANKS_PER_NODE}; launch a multiple of {RANKS_PER_NODE}"
        )
    # --8<-- [start:hsdp]
    # Dimension 0 replicates (across nodes), dimension 1 shards (inside a node): ranks 0 and 1 share
    # a replica, and so do ranks 2 and 3; ranks 0 and 2 hold the same shard.
    mesh = init_device_mesh(device.type, (n // RANKS_PER_NODE, RANKS_PER_NODE), mesh_dim_names=("replicate", "shard"))
    model = make_model().to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)  # a 2-D mesh makes it HSDP: all-gathers stay inside the node
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, opt, device, dist.get_rank(), n)
    # --8<-- [end:hsdp]

    reference = make_model().to(device)  # one process, every rank's batch at once
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-3)
    train(reference, ref_opt, device, 0, 1)

    log(f"mesh {mesh.mesh.tolist()}: a row is a node sharding one copy; a column holds one shard")
    diff = 0.0
    for p, q in zip(model.parameters(), reference.parameters()):
        local = p.to_local()
        assert local.numel() * RANKS_PER_NODE == q.numel(), "each rank holds 1/RANKS_PER_NODE of a parameter"
        copies = [torch.empty_like(local) for _ in range(n)]
        dist.all_gather(copies, local.contiguous())
        for r in range(n):  # the same shard on every node, bit for bit: the replicas agree
            assert torch.equal(copies[r], copies[r % RANKS_PER_NODE]), f"ranks {r} and {r % RANKS_PER_NODE} differ"
        whole = p.full_tensor()
        diff = max(diff, (whole - q).abs().max().item())
        # float32 defaults (rtol 1.3e-6, atol 1e-5): the mean gradient, summed in another order and in
        # two steps (a reduce-scatter inside the node, an all_reduce across), then the same Adam steps.
        torch.testing.assert_close(whole, q)
    log(f"each rank holds 1/{RANKS_PER_NODE} of every parameter; the {n // RANKS_PER_NODE} replicas are equal")
    log(f"max |HSDP - one process| = {diff:.0e}")
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
